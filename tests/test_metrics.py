import pytest

from harness_gym.evolution import accept
from harness_gym.metrics import (
    Outcome,
    bootstrap_ci,
    group_outcome_shares,
    paired_bootstrap,
    pass_rate,
    trainable_rate,
)


def group(task, rewards, truncated=()):
    return [Outcome(task, r, i in truncated) for i, r in enumerate(rewards)]


def test_trainable_rate_needs_contrast_and_excludes_truncation():
    outcomes = (
        group("a", [1, 0, 1, 0])  # mixed: 4 trainable
        + group("b", [1, 1, 1, 1])  # all pass: 0
        + group("c", [0, 0, 0, 0])  # all fail: 0
        + group("d", [1, 0, 0, 0], {0})
    )  # the only success is truncated: 0
    assert trainable_rate(outcomes) == 4 / 16
    assert pass_rate(outcomes) == 7 / 16
    mixed_with_truncation = group("e", [1, 0, 0, 1], {3})  # 3 untruncated, both outcomes: 3 of 4
    assert trainable_rate(mixed_with_truncation) == 3 / 4
    assert group_outcome_shares(outcomes) == {"all_pass": 0.25, "all_fail": 0.5, "mixed": 0.25, "all_truncated": 0.0}


def test_pass_threshold():
    outcomes = [Outcome("a", 0.5), Outcome("a", 1.0)]
    assert pass_rate(outcomes) == 0.5 and pass_rate(outcomes, threshold=0.5) == 1.0


def test_the_papers_rejected_example():
    """A hook that raised pass rate 2.7 points but cut trainable rate 7.0 points is rejected."""
    current = group_set(pass_=0.50, trainable=0.40)
    candidate = group_set(pass_=0.527, trainable=0.33)
    decision = accept(current, candidate)
    assert decision.candidate["pass_rate"] > decision.current["pass_rate"]
    assert decision.candidate["trainable_rate"] < decision.current["trainable_rate"]
    assert not decision.accepted and "trainable rate dropped" in decision.reason


def group_set(pass_, trainable, tasks=1000):
    """Outcomes whose pass and trainable rates are (close to) the given values, 4 rollouts per task."""
    outcomes = []
    trainable_tasks = round(trainable * tasks)
    # mixed groups pass 2 of 4; fill the rest of the pass budget with all-pass groups
    passes = round(pass_ * tasks * 4) - 2 * trainable_tasks
    all_pass = max(passes // 4, 0)
    for index in range(tasks):
        if index < trainable_tasks:
            rewards = [1, 1, 0, 0]
        elif index < trainable_tasks + all_pass:
            rewards = [1, 1, 1, 1]
        else:
            rewards = [0, 0, 0, 0]
        outcomes += group(f"t{index}", rewards)
    return outcomes


def test_group_set_helper_hits_its_targets():
    outcomes = group_set(0.527, 0.33)
    assert abs(pass_rate(outcomes) - 0.527) < 0.002 and abs(trainable_rate(outcomes) - 0.33) < 0.002


@pytest.mark.parametrize(
    "pass_, trainable, accepted",
    [
        (0.52, 0.40, True),  # pass up, trainable equal
        (0.50, 0.45, True),  # trainable up, pass equal
        (0.55, 0.45, True),  # both up
        (0.50, 0.40, False),  # no change
        (0.49, 0.50, False),  # pass down buys trainable: rejected
    ],
)
def test_paper_rule(pass_, trainable, accepted):
    assert accept(group_set(0.50, 0.40), group_set(pass_, trainable)).accepted is accepted


def test_bootstrap_mode_wants_evidence():
    current = group_set(0.50, 0.40, tasks=100)
    small_gain = group_set(0.51, 0.40, tasks=100)  # one more all-pass task in 100
    big_gain = group_set(0.75, 0.40, tasks=100)
    assert accept(current, small_gain).accepted  # the paper's rule takes any rise
    weak = accept(current, small_gain, mode="bootstrap", resamples=500)
    assert not weak.accepted and "no rise is established" in weak.reason
    strong = accept(current, big_gain, mode="bootstrap", resamples=500)
    assert strong.accepted and strong.intervals["pass_rate"][1] > 0
    with pytest.raises(ValueError):
        accept(current, big_gain, mode="vibes")


def test_bootstrap_intervals():
    interval = bootstrap_ci([0, 1] * 50, seed=1)
    assert interval.estimate == 0.5 and 0.35 < interval.low < 0.5 < interval.high < 0.65
    a = group_set(0.5, 0.4, tasks=50)
    diff = paired_bootstrap(a, a, pass_rate, resamples=200)
    assert diff.estimate == diff.low == diff.high == 0.0
    with pytest.raises(ValueError, match="share no task"):
        paired_bootstrap(group("a", [1]), group("b", [1]), pass_rate)
