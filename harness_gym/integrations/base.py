"""What every adapter shares: building the environment from a harness reference, and deciding per
harness factor whether a library can carry it faithfully (``SUPPORT``) or must refuse it.

A variant changes one component of the harness only. A library that cannot show that component to
the policy as the harness defines it would silently train a different harness, so the adapter
refuses it with :class:`UnsupportedHarness`, naming the factor and the reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from harness_gym.env import HarnessEnv
from harness_gym.env import make_env as build_env
from harness_gym.errors import HarnessSpecError
from harness_gym.rollout_requests import resolve_harness
from harness_gym.tasks import Task

LIBRARIES = ("trl", "verifiers", "skyrl", "gem")
# the aspects of a harness an adapter must carry; C and W split by level (levels 1-2 are the hard ones)
ASPECTS = ("S", "T", "T-resampled", "O", "C0", "C1/C2", "W0", "W1/W2", "hooks", "skills")

_APPEND_ONLY = "appends every message to one conversation and has no way to show a rewritten history"


@dataclass(frozen=True)
class Support:
    supported: bool
    how: str


def _yes(how: str) -> Support:
    return Support(True, how)


def _no(why: str) -> Support:
    return Support(False, why)


_COMMON = {
    "O": _yes("tool results are the harness's formatted observations"),
    "C0": _yes("full history: nothing is rewritten"),
    "W0": _yes("nothing to gate"),
}

SUPPORT: dict[str, dict[str, Support]] = {
    "trl": {
        **_COMMON,
        "S": _yes("the system prompt is the first message of the dataset prompt (`harness-gym export prompts`)"),
        "T": _yes("each harness tool (aliases, opaque names, distractors) is a method of a class built per harness"),
        "T-resampled": _no("TRL reads the tool names once, when the trainer is built"),
        "C1/C2": _no(f"TRL {_APPEND_ONLY}; train C1/C2 with the OpenRLHF executor (trainers/) or GEM"),
        "W1/W2": _yes(
            "`HarnessGRPOTrainer` hands each rollout's assistant text to the plan gate (plain `GRPOTrainer` "
            "passes only tool arguments and is refused)"
        ),
        "hooks": _yes("hook and workflow messages are appended to the tool result they follow"),
        "skills": _yes("skills are a message of the dataset prompt"),
    },
    "verifiers": {
        **_COMMON,
        "S": _yes("the task's system prompt"),
        "T": _yes("tools described in the system prompt, calls parsed from the reply"),
        "T-resampled": _yes("names drawn from each task's seed"),
        "C1/C2": _no(f"verifiers {_APPEND_ONLY}"),
        "W1/W2": _yes("the whole reply reaches the plan gate"),
        "hooks": _yes("hook messages are user turns"),
        "skills": _yes("skills are a user message of the prompt"),
    },
    "skyrl": {
        **_COMMON,
        "S": _yes("`init()` returns the harness's system message"),
        "T": _yes("tools described in the system prompt, calls parsed from the reply text"),
        "T-resampled": _yes("names drawn at every `init()`"),
        "C1/C2": _no(f"SkyRL-gym {_APPEND_ONLY} (`step()` returns only new observations)"),
        "W1/W2": _yes("the whole reply reaches the plan gate"),
        "hooks": _yes("hook messages are observations"),
        "skills": _yes("skills are a message of the initial prompt"),
    },
    "gem": {
        **_COMMON,
        "S": _yes("the system message heads the rendered observation"),
        "T": _yes("tools described in the system prompt, calls parsed from the action text"),
        "T-resampled": _yes("names drawn at every `reset()`"),
        "C1/C2": _yes(
            "the observation is the whole rendered context, so after a rewrite it is the new context "
            "(`observation='new'` for GEM's concatenating wrappers refuses C1/C2)"
        ),
        "W1/W2": _yes("the whole action reaches the plan gate"),
        "hooks": _yes("hook messages are part of the observation"),
        "skills": _yes("skills are a message of the observation"),
    },
}


class UnsupportedHarness(HarnessSpecError):
    """A library cannot carry this harness faithfully; the message names the factor and why."""


def harness_aspects(spec: Mapping[str, Any], *, resample_names: bool = False, include_skills: bool = True) -> list[str]:
    """The aspects of ``ASPECTS`` a harness spec uses."""
    aspects = ["S", "T", "O"]
    if resample_names and spec.get("tool_naming"):
        aspects.append("T-resampled")
    aspects.append("C1/C2" if spec["context"].get("strategy") == "summary" else "C0")
    aspects.append("W1/W2" if spec["workflow"].get("plan_required") else "W0")
    if spec.get("hooks"):
        aspects.append("hooks")
    if spec.get("skills") and include_skills:
        aspects.append("skills")
    return aspects


def _factor_name(spec: Mapping[str, Any], aspect: str) -> str:
    """``C1 (summary-last-5)`` for configurations of the space, the aspect and spec name otherwise."""
    config = spec.get("config")
    letter = aspect[0]
    if config and letter in "SCTOW" and aspect not in ("T-resampled",):
        level = config[config.index(letter) + 1]
        return f"factor {letter}{level}"
    return f"{aspect} of spec {spec.get('name', '?')}"


def check_harness(
    library: str,
    spec: Mapping[str, Any],
    *,
    resample_names: bool = False,
    include_skills: bool = True,
    refuse: Mapping[str, str] | None = None,
) -> None:
    """Raise :class:`UnsupportedHarness` when ``library`` cannot carry an aspect ``spec`` uses.
    ``refuse`` adds refusals of this adapter instance (aspect -> reason)."""
    table = SUPPORT[library]
    for aspect in harness_aspects(spec, resample_names=resample_names, include_skills=include_skills):
        reason = (refuse or {}).get(aspect)
        if reason is None and not table[aspect].supported:
            reason = table[aspect].how
        if reason is not None:
            raise UnsupportedHarness(
                f"{library} cannot run harness {spec.get('name', '?')}: {_factor_name(spec, aspect)} ({aspect}) "
                f"is refused because {reason}"
            )


def make_env(
    harness: str | Mapping[str, Any],
    tasks: str | Sequence[Task] | None = "builtin",
    **options: Any,
) -> HarnessEnv:
    """A :class:`HarnessEnv` for a harness reference (configuration id, preset, spec file or mapping)."""
    return build_env(resolve_harness(harness), tasks, **options)  # the one way to build one
