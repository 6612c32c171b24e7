import pytest

from harness_gym import load_tasks
from harness_gym.agents import EpisodeResult
from harness_gym.llm_client import ChatClient
from harness_gym.skills import SkillTeacher, contrast_pair, repository_vocabulary, screen_skill

TASK = next(t for t in load_tasks("builtin") if t.id == "repair-word-frequency")
VOCABULARY = repository_vocabulary(TASK)
GOOD = (
    "When a function returns one item fewer than requested, suspect an off-by-one in a slice bound: "
    "compare the bound with the requested count before changing anything else, because the rest of the "
    "logic usually works and only the boundary is wrong."
)


def test_vocabulary_holds_the_repositorys_names():
    assert {"top_words", "count_words"} <= VOCABULARY.symbols
    assert {"counter.py", "counter"} <= VOCABULARY.file_names


def test_a_mechanism_level_skill_passes():
    assert screen_skill(GOOD, VOCABULARY) == []


@pytest.mark.parametrize(
    "skill, problem",
    [
        ("Open textstats/counter.py and fix the slice.", "names a path or file"),
        ("The bug is in top_words: its slice drops one element.", "names code symbols of the repository"),
        ("Apply:\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-return ranked[: n - 1]\n+return ranked[:n]", "contains diff text"),
        ("Use this:\n```\nranked[:n]\n```", "contains a code block"),
        (" ".join(["word"] * 121), "too long: 121 words"),
        ("Check the counter module first.", "names files of the repository"),
    ],
)
def test_the_screen_rejects_leaks(skill, problem):
    assert any(problem in p for p in screen_skill(skill, VOCABULARY))


def result(reward):
    return EpisodeResult(TASK.id, None, reward, 3, True, False)


def test_contrast_pair_prefers_a_success_and_a_failure():
    pair = contrast_pair([result(1.0), result(1.0), result(0.0)])
    assert [r.reward for r in pair] == [1.0, 0.0]
    assert [r.reward for r in contrast_pair([result(0.0), result(0.5)])] == [0.5, 0.0]
    assert contrast_pair([result(1.0)]) is None


def test_teacher_regenerates_until_the_skill_is_clean(chat_server):
    chat_server["replies"] += ["Fix top_words in textstats/counter.py.", GOOD]
    teacher = SkillTeacher(ChatClient(chat_server["url"], "teacher", retries=0))
    written = teacher.write(TASK, (result(1.0), result(0.0)))
    assert written.skill == GOOD and written.attempts == 2
    assert any("names a path" in p for p in written.rejected[0][1])
    retry = chat_server["requests"][1]["body"]["messages"]
    assert retry[-1]["content"].startswith("Rejected: ") and retry[-2]["role"] == "assistant"


def test_teacher_gives_up_after_three_regenerations(chat_server):
    chat_server["replies"] += ["top_words is wrong."] * 4
    written = SkillTeacher(ChatClient(chat_server["url"], "teacher", retries=0)).write(TASK, (result(1.0), result(0.0)))
    assert written.skill is None and written.attempts == 4 and len(written.rejected) == 4
