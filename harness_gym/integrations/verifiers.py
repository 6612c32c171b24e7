"""verifiers (v1 API, 0.4): a harness-gym ``Taskset`` and ``Env``.

The taskset yields one task per (task, seed) with the harness's opening context; the environment
steps harness-gym host-side as the run's user, like verifiers' own TextArena env: each assistant
reply is one environment step (tools described in the system prompt, calls parsed from the reply,
so the whole reply reaches the W plan gate), and what the harness answered comes back as the next
user turn. The player is verifiers' tool-less ``null`` chat program in the subprocess runtime, run by
:class:`HarnessPlayer` with this interpreter: verifiers would fetch ``uv`` and resolve the program's
dependencies from the network at first use, which fails offline (the episode errored with an empty
reward); the ``verifiers`` extra installs those dependencies, so nothing is downloaded. verifiers
only appends, so C1/C2 harnesses are refused.

    vf-eval harness-gym-verifiers --env.taskset.harness S1T2O0C0W1 ...
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any, ClassVar

from pydantic import Field

from harness_gym.chat import chat_messages
from harness_gym.env import HarnessEnv
from harness_gym.export import rollout_seed
from harness_gym.integrations.base import check_harness, make_env

try:
    import verifiers.v1 as vf
except ImportError as exc:  # pragma: no cover - the extra is missing
    raise ImportError('the verifiers adapter needs verifiers: pip install "harness-gym[verifiers]"') from exc

from harness_gym.integrations.verifiers_player import PLAYER_ID, HarnessPlayer

__all__ = ["HarnessPlayer", "HarnessTaskset", "HarnessVerifiersEnv"]


class HarnessTasksetConfig(vf.TasksetConfig):
    harness: str = "S0T0O0C0W0"
    """Configuration id, preset or spec file."""
    suite: str = "builtin:train"
    task_ids: list[str] = Field(default_factory=list)
    """Only these tasks (default: the whole suite)."""
    seeds: int = 1
    """Episodes (seeds) per task."""
    tool_format: str = "hermes"
    resample_names: bool = False


class HarnessData(vf.TaskData):
    info: dict
    """harness, suite, task_id and seed: what the env resets on."""


class HarnessTask(vf.Task[HarnessData, vf.State, vf.TaskConfig]):
    pass


class HarnessTaskset(vf.Taskset[HarnessTask, HarnessTasksetConfig]):
    def load(self) -> Iterator[HarnessTask]:
        config = self.config
        env = make_env(config.harness, config.suite, resample_names=config.resample_names)
        try:
            check_harness("verifiers", env.harness_spec, resample_names=config.resample_names)
            ids = config.task_ids or [t.id for t in env.tasks]
            for task_id in ids:
                for repeat in range(config.seeds):
                    seed = rollout_seed(0, repeat, task_id, 0)
                    observation, _ = env.reset(seed=seed, options={"task_id": task_id})
                    messages = chat_messages(observation["messages"], observation["tools"], config.tool_format)
                    system = messages[0]["content"] if messages and messages[0]["role"] == "system" else None
                    yield HarnessTask(
                        HarnessData(
                            id=f"{task_id}#{seed}", name=f"{config.harness}/{task_id}", system_prompt=system,
                            prompt=[m for m in messages if m["role"] != "system"],
                            info={"harness": config.harness, "suite": config.suite, "task_id": task_id, "seed": seed,
                                  "tool_format": config.tool_format, "resample_names": config.resample_names},
                        ),
                        config.task,
                    )  # fmt: skip
        finally:
            env.close()


class HarnessEnvConfig(vf.EnvConfig):
    player: vf.AgentConfig = vf.AgentConfig(harness={"id": PLAYER_ID}, runtime=vf.SubprocessConfig())


class HarnessVerifiersEnv(vf.Env[HarnessEnvConfig]):
    live: ClassVar[dict[str, HarnessEnv]] = {}
    """Episodes in progress by task id (for inspection, e.g. a scripted test policy)."""

    async def run(self, task: Any, agents: Any) -> None:
        info = task.data.info
        env = make_env(info["harness"], info["suite"], resample_names=info["resample_names"])
        self.live[str(task.data.id)] = env
        try:
            observation, _ = await env.areset(seed=info["seed"], options={"task_id": info["task_id"]})
            opening = chat_messages(observation["messages"], observation["tools"], info["tool_format"])
            if [m["content"] for m in opening if m["role"] != "system"] != [m.content for m in task.data.prompt]:
                raise ValueError(f"task {task.data.id}: its prompt is not this episode's opening; reload the taskset")
            reward, outcome = 0.0, "the player stopped before finishing"
            async with agents.player.interaction(task) as interaction:
                segment = await interaction.turn()
                while not segment.terminated:
                    _, reward, terminated, truncated, step_info = await env.astep(segment.last_reply)
                    if terminated or truncated:
                        outcome = str(step_info.get("truncation_reason") or step_info.get("terminated_reason"))
                        break
                    answer = chat_messages(step_info["new_messages"], (), info["tool_format"])
                    segment = await interaction.turn(answer)
            if not env.done:  # graded as the workspace stands, never dropped
                reward, _ = await asyncio.to_thread(env.truncate, outcome)
            trace = interaction.trace
            trace.record_reward("harness_reward", float(reward), 1.0)
            trace.info["outcome"] = outcome
        finally:
            self.live.pop(str(task.data.id), None)
            await asyncio.to_thread(env.close)
