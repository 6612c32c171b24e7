"""An optional LLM judge for tasks graded (partly) by a rubric, over any OpenAI-compatible endpoint.

Configured by ``HARNESS_GYM_JUDGE_URL`` and ``HARNESS_GYM_JUDGE_MODEL`` (key from
``OPENAI_API_KEY``). Without a judge, the judged part is reported as skipped in the breakdown:
a ``hybrid`` task keeps its automated score, an ``llm_judge`` task gets 0 with a grader error
that says a judge is needed. Nothing is silently invented.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from harness_gym.llm_client import ChatClient, LLMError

if TYPE_CHECKING:
    from harness_gym.tasks.base import GradeResult, Task

JUDGE_PROMPT = """You grade an AI agent's work on a task against a rubric. Read the task, the rubric and
the transcript, then answer with one JSON object: {"score": <number between 0 and 1>, "rationale": "<one sentence>"}."""


def judge_client() -> ChatClient | None:
    url, model = os.environ.get("HARNESS_GYM_JUDGE_URL"), os.environ.get("HARNESS_GYM_JUDGE_MODEL")
    return ChatClient(url, model) if url and model else None


def judge_score(client: ChatClient, task: Task, transcript: Sequence[Mapping[str, Any]]) -> tuple[float, str]:
    rubric = (task.judge or {}).get("rubric", "")
    lines = [f"[{m.get('role')}] {str(m.get('content') or '')[:1500]}" for m in transcript if m.get("role") != "system"]
    user = f"Task:\n{task.instruction}\n\nRubric:\n{rubric}\n\nTranscript:\n" + "\n".join(lines)[-20000:]
    reply = client.complete(
        [{"role": "system", "content": JUDGE_PROMPT}, {"role": "user", "content": user}], temperature=0
    )
    match = re.search(r"\{.*\}", reply, re.DOTALL)
    if not match:
        raise LLMError(f"the judge's reply holds no JSON: {reply[:200]!r}")
    value = json.loads(match.group(0))
    score = float(value["score"])
    if not 0.0 <= score <= 1.0:
        raise LLMError(f"the judge's score {score} is outside [0, 1]")
    return score, str(value.get("rationale", ""))


def apply_judge(task: Task, graded: GradeResult, transcript: Sequence[Mapping[str, Any]]) -> GradeResult:
    """Combine the automated grade with the judge's: for ``hybrid`` the mean weighted by the task's
    ``weights`` (PinchBench's ``grading_weights``, default equal), for ``llm_judge`` the judge alone."""
    kind = (task.judge or {}).get("type", "hybrid")
    client = judge_client()
    breakdown = dict(graded.breakdown)
    if client is None:
        breakdown["llm_judge"] = "skipped: no judge configured (set HARNESS_GYM_JUDGE_URL and HARNESS_GYM_JUDGE_MODEL)"
        if kind == "llm_judge":
            return replace(
                graded,
                reward=0.0,
                breakdown=breakdown,
                error=f"task {task.id}: graded by an LLM judge, and none is configured",
            )
        return replace(graded, breakdown=breakdown)
    try:
        score, rationale = judge_score(client, task, transcript)
    except (LLMError, ValueError, KeyError, TypeError) as exc:
        breakdown["llm_judge"] = f"failed: {exc}"
        return replace(graded, breakdown=breakdown, error=graded.error or f"task {task.id}: the judge failed: {exc}")
    breakdown["llm_judge"] = score
    breakdown["llm_judge_rationale"] = rationale
    weights = (task.judge or {}).get("weights") or {"automated": 0.5, "llm_judge": 0.5}
    automated, judged = float(weights.get("automated", 0.5)), float(weights.get("llm_judge", 0.5))
    if kind == "llm_judge" or graded.error:
        reward = score
    else:
        reward = (graded.reward * automated + score * judged) / (automated + judged)
    return replace(graded, reward=reward, breakdown=breakdown)
