"""The OpenRLHF agent executor: harness_gym environments as multi-turn RL episodes.

OpenRLHF (``--train.agent_func_path``) creates ``AgentExecutor()`` inside each vLLM rollout actor and
awaits ``execute(prompt, label, sampling_params, max_length, hf_tokenizer, llm_engine)`` once per
sample. Here:

- the dataset row's ``label`` names the task and the harness (see :mod:`trainers.dataset`);
  :class:`HarnessAgentInstance` (an ``AgentInstanceBase``) resets a harness_gym environment on it and
  builds the tool-aware prompt, since OpenRLHF has no native tool calling;
- every environment call runs in a worker thread, never on the actor's event loop;
- the token stream is built by :class:`trainers.turns.ChatTurns`: policy tokens exactly as generated,
  everything else (tool output, hooks, workflow prompts, summaries, skills, the template's
  separators) in masked feedback spans;
- the environment's reward is summed over turns and lands on the last action token.

Context compression (factor C, levels 1 and 2) rewrites the prompt, so an episode is no longer one
append-only token stream. The executor splits it into *segments*: a new segment starts whenever the
environment reports ``context_reset``, from the rewritten context tokenized afresh. Each segment is a
context the policy really saw. OpenRLHF trains one sequence per sample, so one segment is returned —
the last by default (it holds the finishing action; ``segment: first`` returns the opening one) — and
the other segments' policy tokens are left out of the loss, never attached to a context they were not
generated in. ``extra_logs`` reports how many segments there were and the share of policy tokens
trained.
"""

from __future__ import annotations

import asyncio
import copy
import os
import socket
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from openrlhf.utils.agent import AgentExecutorBase, AgentInstanceBase

from harness_gym.env import HarnessEnv, make_env
from harness_gym.metrics import tool_calls_by_format
from harness_gym.prompting import text_messages
from harness_gym.records import ResultsFile
from harness_gym.tool_formats import format_for_model
from trainers.executor_settings import ExecutorSettings, RolloutError, RolloutRequest, resolve_harness, suite_tasks
from trainers.turns import ChatTurns

# --------------------------------------------------------------------------- the environment side


class HarnessAgentInstance(AgentInstanceBase):
    """One episode of a harness_gym environment behind OpenRLHF's ``reset``/``step`` contract.

    ``reset`` returns the tool-aware prompt (``observation``); ``step`` returns ``rewards`` (a tensor),
    ``scores``, ``environment_feedback`` (the masked text to append), ``done`` and ``extra_logs``, plus
    ``context_reset`` and, after a reset, the rewritten ``observation``. Environment work runs in
    ``pool`` (a thread pool), so the caller's event loop never blocks.
    """

    def __init__(
        self, turns: ChatTurns, settings: ExecutorSettings | None = None, pool: ThreadPoolExecutor | None = None
    ) -> None:
        self.turns = turns
        self.settings = settings or ExecutorSettings.from_env()
        self.pool = pool
        self.env: HarnessEnv | None = None
        self.request: RolloutRequest | None = None
        self.tools: list[dict[str, Any]] = []
        self.seen = 0  # messages of the environment's context already in the token stream
        self.stats = {"parse_errors": 0, "tool_errors": 0, "context_resets": 0, "hooks_fired": 0}
        self.calls_by_format: dict[str, dict[str, int]] = {}  # tool-call validity per format, for the log
        self.last_info: dict[str, Any] = {}

    async def _call(self, function: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.pool, function, *args)

    @property
    def tool_call_format(self) -> str:
        """The settings' text format; ``auto``: the policy tokenizer's family."""
        return format_for_model(self.turns.tokenizer, self.settings.tool_call_format)

    def _text_messages(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[dict[str, str]]:
        return text_messages(messages, tools, self.tool_call_format)

    async def reset(self, states: dict, **kwargs: Any) -> dict:
        self.request = RolloutRequest.from_label(states["label"])
        self.env, observation = await self._call(self._open)
        self.tools = observation["tools"]
        self.seen = len(observation["messages"])
        messages = self._text_messages(observation["messages"], self.tools)
        return {"observation": self.turns.render(messages, add_generation_prompt=True), "messages": messages}

    def _open(self) -> tuple[HarnessEnv, dict[str, Any]]:
        request = self.request
        assert request is not None
        tasks = suite_tasks(request.suite)
        if request.task_id not in tasks:
            raise RolloutError(f"suite {request.suite!r} has no task {request.task_id!r}")
        harness = resolve_harness(request.harness)
        native = harness.spec.get("tool_call_format") == "openai"  # no native tool calling here: text calls instead
        env = make_env(
            harness,
            [tasks[request.task_id]],
            sandbox=self.settings.sandbox,
            max_steps=self.settings.max_steps,
            resample_names=self.settings.resample_names,
            include_skills=self.settings.include_skills,
            tool_call_format=self.tool_call_format if native else None,
        )
        try:
            observation, _ = env.reset(seed=request.seed, options={"task_id": request.task_id})
        except BaseException:
            env.close()
            raise
        return env, observation

    async def step(self, states: dict, **kwargs: Any) -> dict:
        import torch  # heavy; present in OpenRLHF's workers, not needed to plan rollouts

        assert self.env is not None, "reset() first"
        observation, reward, terminated, truncated, info = await self._call(self.env.step, states["action_text"])
        self._count(info)
        done = terminated or truncated
        result: dict[str, Any] = {
            "rewards": torch.tensor(float(reward)),
            "scores": torch.tensor(float(reward)),
            "done": done,
            "context_reset": bool(info.get("context_reset")),
            "environment_feedback": "",
            "extra_logs": self.extra_logs(reward, truncated),
        }
        if done:
            return result
        messages = observation["messages"]
        if result["context_reset"]:
            fresh = self._text_messages(messages, self.tools)
            result["messages"] = fresh
            result["observation"] = self.turns.render(fresh, add_generation_prompt=True)
        else:
            if len(messages) <= self.seen or messages[self.seen]["role"] != "assistant":
                raise RolloutError(
                    f"the environment rewrote its context without reporting context_reset (task "
                    f"{self.request.task_id if self.request else '?'}); the token stream would not match it"
                )
            result["messages"] = self._text_messages(messages[self.seen + 1 :], [])
            result["environment_feedback"] = self.turns.feedback_text(states["action_token_ids"], result["messages"])
        self.seen = len(messages)
        return result

    async def truncate(self, reason: str) -> dict:
        """End the episode early (the token budget ran out) and grade what is there."""
        import torch  # heavy; present in OpenRLHF's workers, not needed to plan rollouts

        assert self.env is not None
        reward, info = await self._call(self.env.truncate, reason)
        self.last_info = info
        return {"rewards": torch.tensor(float(reward)), "scores": torch.tensor(float(reward)), "done": True,
                "extra_logs": self.extra_logs(reward, True)}  # fmt: skip

    def _count(self, info: Mapping[str, Any]) -> None:
        self.last_info = dict(info)
        for fmt, counts in tool_calls_by_format([info]).items():
            entry = self.calls_by_format.setdefault(fmt, {"calls": 0, "parse_errors": 0})
            entry["calls"] += counts["calls"]
            entry["parse_errors"] += counts["parse_errors"]
        self.stats["parse_errors"] += len(info.get("parse_errors") or [])
        self.stats["tool_errors"] += len(info.get("tool_errors") or [])
        self.stats["hooks_fired"] += len(info.get("hooks_fired") or [])
        self.stats["context_resets"] += bool(info.get("context_reset"))

    def extra_logs(self, reward: float, truncated: bool) -> dict[str, float]:
        """Numbers only: OpenRLHF turns every value into a tensor and averages it over the batch."""
        assert self.request is not None and self.env is not None
        return {
            "pass": float(reward >= self.settings.pass_threshold),
            "env_reward": float(reward),
            "parse_errors": float(self.stats["parse_errors"]),
            "tool_errors": float(self.stats["tool_errors"]),
            "hooks_fired": float(self.stats["hooks_fired"]),
            "steps": float(self.env.steps),
            "episode_truncated": float(truncated),
            "context_resets": float(self.stats["context_resets"]),
            "harness_index": float(self.request.harness_index),
        }

    async def close(self) -> None:
        if self.env is not None:
            await self._call(self.env.close)
            self.env = None


# --------------------------------------------------------------------------- the token side


@dataclass
class Segment:
    """One context the policy saw: its tokens, the action spans in them, and their log-probs."""

    tokens: list[int]
    action_ranges: list[tuple[int, int]] = field(default_factory=list)
    log_probs: list[float] | None = None

    @property
    def policy_tokens(self) -> int:
        return sum(end - start for start, end in self.action_ranges)

    def append(self, ids: list[int], log_probs: list[float] | None, *, policy: bool) -> None:
        if policy:
            self.action_ranges.append((len(self.tokens), len(self.tokens) + len(ids)))
        self.tokens += ids
        if self.log_probs is not None:
            self.log_probs += log_probs if (policy and log_probs is not None) else [0.0] * len(ids)


def actor_log_path(rollout_log: Path) -> Path:
    """This actor's own rollout log beside ``rollout_log`` (``rollouts.<host>-<pid>.jsonl``): actors
    on several nodes never append to one file over shared storage; ``trainers.metrics`` merges them."""
    return rollout_log.with_name(f"{rollout_log.stem}.{socket.gethostname()}-{os.getpid()}{rollout_log.suffix}")


class HarnessAgentExecutor(AgentExecutorBase):
    """OpenRLHF's ``AgentExecutor`` for harness_gym (see the module doc)."""

    def __init__(self, settings: ExecutorSettings | None = None) -> None:
        self.settings = settings or ExecutorSettings.from_env()
        self.pool = ThreadPoolExecutor(max_workers=self.settings.env_workers, thread_name_prefix="harness-env")
        self.log: ResultsFile | None = None
        if self.settings.rollout_log:  # one JSON line per finished episode, for the training metrics
            path = actor_log_path(Path(self.settings.rollout_log))
            path.parent.mkdir(parents=True, exist_ok=True)
            self.log = ResultsFile(path)
        self._turns: dict[tuple[str, str, int], ChatTurns] = {}

    def turns_for(self, tokenizer: Any) -> ChatTurns:
        """One ``ChatTurns`` per tokenizer. Ray sends a fresh copy of the tokenizer with every
        request, so the key is what defines it, not the object's identity."""
        key = (
            type(tokenizer).__name__,
            str(getattr(tokenizer, "name_or_path", "")),
            hash(str(tokenizer.chat_template)),
        )
        if key not in self._turns:
            self._turns[key] = ChatTurns(tokenizer)
        return self._turns[key]

    async def execute(
        self, prompt: Any, label: Any, sampling_params: Any, max_length: int, hf_tokenizer: Any, llm_engine: Any,
        images: Any = None,
    ) -> dict[str, Any]:  # fmt: skip
        if images:
            raise RolloutError("harness-gym rollouts are text-only; the dataset row carries images")
        turns = self.turns_for(hf_tokenizer)
        instance = HarnessAgentInstance(turns, self.settings, self.pool)
        started = time.monotonic()
        try:
            return await self._run(instance, turns, llm_engine, prompt, label, sampling_params, max_length, started)
        finally:
            await instance.close()

    async def _run(
        self, instance: HarnessAgentInstance, turns: ChatTurns, llm_engine: Any, prompt: Any, label: Any,
        sampling_params: Any, max_length: int, started: float,
    ) -> dict[str, Any]:  # fmt: skip
        want_logprobs = getattr(sampling_params, "logprobs", None) is not None
        turn_cap = getattr(sampling_params, "max_tokens", None)
        reset = await instance.reset({"observation": prompt, "label": label})
        segments = [self._first_segment(turns.prompt_ids(reset["messages"]), want_logprobs, max_length, instance)]
        reward, score, turn_truncated = 0.0, 0.0, False
        while True:
            segment = segments[-1]  # always leaves room: nothing is appended that would fill it
            budget = max_length - len(segment.tokens)
            params = copy.deepcopy(sampling_params)
            params.max_tokens = min(budget, turn_cap) if turn_cap else budget
            output = (await llm_engine.generate(segment.tokens, params)).outputs[0]
            action_ids = list(output.token_ids)
            turn_truncated = output.finish_reason == "length"
            log_probs = (
                [entry[token].logprob for token, entry in zip(action_ids, output.logprobs, strict=True)]
                if want_logprobs and output.logprobs is not None
                else None
            )
            segment.append(action_ids, log_probs, policy=True)
            states = {
                "observation_text": "",
                "action_text": turns.action_text(action_ids),
                "action_token_ids": action_ids,
                "label": label,
                "sampling_params": sampling_params,
            }
            result = await instance.step(states)
            reward += result["rewards"].item()
            score, extra_logs = result["scores"].item(), result["extra_logs"]
            if result["done"]:
                break
            fresh = result["context_reset"]  # a rewritten context starts a new segment
            tokens = turns.prompt_ids(result["messages"]) if fresh else turns.encode(result["environment_feedback"])
            if (0 if fresh else len(segment.tokens)) + len(tokens) >= max_length:
                result = await instance.truncate(f"token budget of {max_length} exhausted")
                reward += result["rewards"].item()
                score, extra_logs = result["scores"].item(), result["extra_logs"]
                break
            if fresh:
                segments.append(Segment(tokens, [], [0.0] * len(tokens) if want_logprobs else None))
            else:
                segment.append(tokens, None, policy=False)

        chosen = segments[-1] if self.settings.segment == "last" else segments[0]
        generated = sum(s.policy_tokens for s in segments)
        extra_logs = dict(extra_logs)
        extra_logs.update(
            segments=float(len(segments)),
            trained_policy_token_share=chosen.policy_tokens / generated if generated else 1.0,
        )
        if self.log is not None:
            self._record(instance, reward, extra_logs, segments, chosen, time.monotonic() - started)
        return {
            "prompt": prompt,
            "label": label,
            "images": None,
            "mm_train_inputs": None,
            "reward": reward,
            "scores": score,
            "observation_tokens": chosen.tokens,
            "action_ranges": chosen.action_ranges,
            "rollout_log_probs": chosen.log_probs,
            "truncated": turn_truncated or bool(extra_logs.get("episode_truncated")),
            "extra_logs": extra_logs,
        }

    @staticmethod
    def _first_segment(
        tokens: list[int], want_logprobs: bool, max_length: int, instance: HarnessAgentInstance
    ) -> Segment:
        if len(tokens) >= max_length:
            request = instance.request
            raise RolloutError(
                f"the prompt of task {request.task_id if request else '?'} under {request.harness_name if request else '?'}"
                f" is {len(tokens)} tokens, not below --data.max_len {max_length}; raise max_len or shorten the task"
            )
        return Segment(list(tokens), [], [0.0] * len(tokens) if want_logprobs else None)

    def _record(
        self, instance: HarnessAgentInstance, reward: float, extra_logs: Mapping[str, float], segments: list[Segment],
        chosen: Segment, seconds: float,
    ) -> None:  # fmt: skip
        request = instance.request
        assert request is not None and self.log is not None
        info = instance.last_info
        self.log.append({
            "task_id": request.task_id, "suite": request.suite, "harness": request.harness_name,
            "harness_index": request.harness_index, "step": request.step, "slot": request.slot,
            "seed": request.seed, "reward": reward, "passed": bool(extra_logs.get("pass")),
            "truncated": bool(extra_logs.get("episode_truncated")), "steps": int(extra_logs.get("steps", 0)),
            "parse_errors": int(extra_logs.get("parse_errors", 0)), "tool_errors": int(extra_logs.get("tool_errors", 0)),
            "context_resets": int(extra_logs.get("context_resets", 0)), "segments": len(segments),
            "tool_calls_by_format": instance.calls_by_format,
            "tokens": len(chosen.tokens), "policy_tokens": chosen.policy_tokens,
            "reason": info.get("truncation_reason") or info.get("terminated_reason"),
            "spec_hash": info.get("spec_hash"), "seconds": round(seconds, 3), "time": time.time(),
            "grader_error": info.get("grader_error"),  # a failed grader: reward 0, counted as an error
        })  # fmt: skip
