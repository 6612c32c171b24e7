"""Mechanism-level skills (HarnessAdapt-RL): a teacher contrasts two trajectories of one task and
writes when a repair strategy applies and why it works, without anything specific to the task's
repository. Skills are shown during training only (messages with ``source: skill``).

The screen rejects a skill that names a repository path or file, a code symbol found in the task's
repository, contains a code block or diff text, or runs over 120 words; the teacher gets up to
3 regenerations, each told what was wrong.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness_gym.agents import EpisodeResult
from harness_gym.llm_client import ChatClient, LLMError
from harness_gym.tasks import Task

MAX_WORDS = 120
MAX_ATTEMPTS = 4  # the first try and 3 regenerations
_PATH = re.compile(
    r"(?<![\w.])(?:[\w.-]+/)+[\w.-]+|\b[\w-]+\.(?:py|pyi|js|ts|tsx|jsx|java|go|rs|rb|c|h|cc|cpp|hpp|cs|php|"
    r"json|ya?ml|toml|ini|cfg|md|rst|txt|csv|sh|sql|html|css|lock)\b"
)
_DIFF = re.compile(r"^(?:diff --git |\+\+\+ |--- |@@ )|^[+-]\s*\S.*$", re.MULTILINE)
_CODE_FENCE = re.compile(r"```|^(?: {4}|\t)\S", re.MULTILINE)
_IDENTIFIER = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]*\b")
_CODE_LIKE = re.compile(r"\b[A-Za-z_]\w*\([^)]*\)|\b[a-z]\w*\.[a-z_]\w*\b|`[^`]+`")
_TEXT_SUFFIXES = {
    ".py",
    ".js",
    ".ts",
    ".java",
    ".go",
    ".rs",
    ".rb",
    ".c",
    ".h",
    ".cpp",
    ".json",
    ".yaml",
    ".yml",
    ".toml",
    ".ini",
    ".cfg",
    ".md",
    ".txt",
    ".csv",
    ".sh",
    ".sql",
}
_COMMON = {
    "test",
    "tests",
    "self",
    "none",
    "true",
    "false",
    "return",
    "class",
    "def",
    "import",
    "from",
    "error",
    "value",
    "values",
    "data",
    "file",
    "files",
    "list",
    "dict",
    "string",
    "number",
    "count",
    "index",
    "result",
}


@dataclass(frozen=True)
class Vocabulary:
    """What a skill must not mention: the repository's file names and code symbols."""

    file_names: frozenset[str]
    symbols: frozenset[str]


def repository_vocabulary(task: Task) -> Vocabulary:
    """File names (with and without extension) and identifiers defined or used in the task's workspace."""
    names: set[str] = set()
    symbols: set[str] = set()
    root = task.workspace_dir
    if root is not None and Path(root).is_dir():
        for path in Path(root).rglob("*"):
            if not path.is_file():
                continue
            names.update({path.name.lower(), path.stem.lower()})
            if path.suffix in _TEXT_SUFFIXES and path.stat().st_size < 512_000:
                text = path.read_text(encoding="utf-8", errors="replace")
                for word in _IDENTIFIER.findall(text):
                    if ("_" in word.strip("_") or re.search(r"[a-z][A-Z]", word)) or re.search(
                        rf"\b(?:def|class)\s+{re.escape(word)}\b", text
                    ):
                        symbols.add(word.lower())
    return Vocabulary(frozenset(n for n in names if len(n) > 2), frozenset(s for s in symbols if s not in _COMMON))


def screen_skill(text: str, vocabulary: Vocabulary | None = None) -> list[str]:
    """Every reason the skill is not mechanism-level; empty when it passes."""
    problems: list[str] = []
    words = text.split()
    if len(words) > MAX_WORDS:
        problems.append(f"too long: {len(words)} words (at most {MAX_WORDS})")
    if not words:
        problems.append("empty")
    if _CODE_FENCE.search(text):
        problems.append("contains a code block")
    diff_lines = _DIFF.findall(text)
    if diff_lines:
        problems.append(f"contains diff text ({diff_lines[0].strip()[:40]!r})")
    paths = _PATH.findall(text)
    if paths:
        problems.append(f"names a path or file ({paths[0]!r})")
    code = _CODE_LIKE.findall(text)
    if code:
        problems.append(f"contains code ({code[0][:40]!r})")
    if vocabulary is not None:
        tokens = {w.lower() for w in _IDENTIFIER.findall(text)}
        leaked_symbols = sorted(tokens & vocabulary.symbols)
        if leaked_symbols:
            problems.append(f"names code symbols of the repository ({', '.join(leaked_symbols[:3])})")
        leaked_files = sorted(t for t in tokens & vocabulary.file_names if t not in _COMMON)
        if leaked_files:
            problems.append(f"names files of the repository ({', '.join(leaked_files[:3])})")
    return problems


def contrast_pair(
    results: Sequence[EpisodeResult], threshold: float = 1.0
) -> tuple[EpisodeResult, EpisodeResult] | None:
    """Two trajectories of one task: a success and a failure if there are both, else the best two."""
    if len(results) < 2:
        return None
    ranked = sorted(results, key=lambda r: -r.reward)
    success = next((r for r in ranked if r.reward >= threshold), None)
    failure = next((r for r in reversed(ranked) if r.reward < threshold), None)
    if success is not None and failure is not None:
        return success, failure
    return ranked[0], ranked[1]


SKILL_PROMPT = """You write one reusable skill for a software agent by contrasting two attempts at the same task.
Say when the strategy applies (the situation, in general terms) and why it works (the mechanism).
Do not mention repository paths, file names, function or class names, code, or diffs: the skill
must help on other repositories. At most 120 words, plain prose, no lists of code. Reply with the skill only."""


@dataclass
class SkillResult:
    skill: str | None
    attempts: int
    rejected: list[tuple[str, list[str]]] = field(default_factory=list)


class SkillTeacher:
    """Writes a screened skill from a contrast pair, regenerating up to 3 times on a violation."""

    def __init__(self, client: ChatClient, max_attempts: int = MAX_ATTEMPTS, temperature: float = 0.7) -> None:
        self.client = client
        self.max_attempts = max_attempts
        self.temperature = temperature

    def write(self, task: Task, pair: tuple[EpisodeResult, EpisodeResult]) -> SkillResult:
        vocabulary = repository_vocabulary(task)
        first, second = pair
        user = (
            f"Task:\n{task.instruction[:1500]}\n\nAttempt A (reward {first.reward}):\n{first.render(3000)}"
            f"\n\nAttempt B (reward {second.reward}):\n{second.render(3000)}"
        )
        messages = [{"role": "system", "content": SKILL_PROMPT}, {"role": "user", "content": user}]
        result = SkillResult(None, 0)
        for _ in range(self.max_attempts):
            result.attempts += 1
            try:
                text = self.client.complete(messages, temperature=self.temperature).strip()
            except LLMError as exc:
                result.rejected.append(("", [f"teacher failed: {exc}"]))
                continue
            problems = screen_skill(text, vocabulary)
            if not problems:
                result.skill = text
                return result
            result.rejected.append((text, problems))
            messages += [
                {"role": "assistant", "content": text},
                {"role": "user", "content": "Rejected: " + "; ".join(problems) + ". Write it again without these."},
            ]
        return result


def skills_from_rollouts(
    teacher: SkillTeacher, tasks: Iterable[Task], results: Sequence[EpisodeResult], limit: int = 8
) -> list[str]:
    """Screened skills from the contrast pairs of up to ``limit`` tasks (mixed groups first)."""
    by_task: dict[str, list[EpisodeResult]] = {}
    for result in results:
        by_task.setdefault(result.task_id, []).append(result)
    tasks_by_id = {t.id: t for t in tasks}
    mixed_first = sorted(by_task, key=lambda t: len({r.reward >= 1.0 for r in by_task[t]}) != 2)
    skills: list[str] = []
    for task_id in mixed_first:
        pair = contrast_pair(by_task[task_id])
        if pair is None or task_id not in tasks_by_id:
            continue
        written = teacher.write(tasks_by_id[task_id], pair)
        if written.skill:
            skills.append(written.skill)
        if len(skills) >= limit:
            break
    return skills
