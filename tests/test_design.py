import itertools
from collections import Counter

import pytest

from harness_gym.design import (
    TRAINING_SET,
    build_schedule,
    check_orthogonal_array,
    heldout_set,
    is_orthogonal_array,
    locality_aware_assignment,
    random_assignment,
    random_training_set,
    repeat_assignment,
    training_set,
    translated_heldout,
)
from harness_gym.space import HarnessConfig, all_configs, hamming

PAPER = {
    HarnessConfig.parse(d)
    for d in "00000 01111 02222 10011 11122 12200 20102 21210 22021 00221 01002 02110 10120 11201 12012 20212 21020 22101".split()
}


def test_training_set_is_the_papers_18_and_strength_2():
    assert set(TRAINING_SET) == PAPER
    assert len(TRAINING_SET) == 18
    report = check_orthogonal_array(TRAINING_SET, strength=2)
    assert report.ok, report.violations
    assert report.index == 2
    assert not is_orthogonal_array(TRAINING_SET, strength=3)


def test_checker_finds_violations():
    broken = [list(row) for row in TRAINING_SET]
    broken[0][4] = 1  # 00000 -> 00001: W level counts and pairs go out of balance
    report = check_orthogonal_array(broken, strength=2, levels=[3] * 5)
    assert not report.ok
    assert any("columns (0, 4)" in v for v in report.violations)
    assert is_orthogonal_array([[0], [1], [2]], strength=1)
    assert not is_orthogonal_array([[0], [0], [2]], strength=1)
    full = list(itertools.product(range(2), repeat=3))
    assert is_orthogonal_array(full, strength=3)
    with pytest.raises(ValueError):
        check_orthogonal_array([[0, 1], [0]], strength=1)
    with pytest.raises(ValueError):
        check_orthogonal_array([[0, 1]], strength=3)


def test_heldout_set_is_disjoint_balanced_and_pair_balanced():
    held = heldout_set()
    assert len(held) == len(set(held)) == 18
    assert set(held).isdisjoint(TRAINING_SET)
    assert check_orthogonal_array(held, strength=2).ok
    for column in range(5):
        assert Counter(c[column] for c in held) == {0: 6, 1: 6, 2: 6}
    # the documented construction reproduces it, and it is the most distant translation
    assert translated_heldout(TRAINING_SET) == held
    distances = [min(hamming(h, t) for t in TRAINING_SET) for h in held]
    assert min(distances) >= 1 and sum(distances) == 33


def test_locality_assignment_anchor_plus_nearest():
    tasks = [f"task{i}" for i in range(200)]
    assignment = locality_aware_assignment(tasks, TRAINING_SET, k=3, seed=7)
    anchors = Counter()
    for configs in assignment.values():
        anchor, *rest = configs
        anchors[anchor] += 1
        assert len(set(configs)) == 3 and set(configs) <= set(TRAINING_SET)
        others = sorted(hamming(anchor, c) for c in TRAINING_SET if c != anchor)
        assert sorted(hamming(anchor, c) for c in rest) == others[:2]
    assert len(anchors) == 18  # anchors spread over the whole training set
    assert assignment == locality_aware_assignment(tasks, TRAINING_SET, k=3, seed=7)
    assert assignment != locality_aware_assignment(tasks, TRAINING_SET, k=3, seed=8)


def test_tie_break_is_seeded():
    # every training configuration's nearest neighbours lie at distance 2, with ties
    picks = {locality_aware_assignment(["t"] * 1, TRAINING_SET, k=2, seed=s)["t"] for s in range(60)}
    by_anchor: dict[HarnessConfig, set[HarnessConfig]] = {}
    for anchor, neighbour in picks:
        assert hamming(anchor, neighbour) == 2
        by_anchor.setdefault(anchor, set()).add(neighbour)
    assert any(len(v) > 1 for v in by_anchor.values()), "ties should be broken differently under different seeds"


def test_schedule_puts_a_tasks_k_configs_in_consecutive_steps():
    tasks = [f"t{i}" for i in range(10)]
    steps = build_schedule(tasks, tasks_per_step=4, k=2, seed=0)
    assert len(steps) == 6  # 3 batches (4, 4, 2 tasks) x K=2
    seen: dict[str, list[int]] = {}
    for index, step in enumerate(steps):
        for a in step:
            assert a.step == index
            seen.setdefault(a.task, []).append(index)
    assignment = locality_aware_assignment(tasks, TRAINING_SET, k=2, seed=0)
    for task, indices in seen.items():
        assert indices == [indices[0], indices[0] + 1]
        assert tuple(a.config for s in steps for a in s if a.task == task) == assignment[task]
    with pytest.raises(ValueError, match="unique"):
        build_schedule(["a", "a"], tasks_per_step=2)
    with pytest.raises(ValueError, match="unknown assignment"):
        build_schedule(tasks, tasks_per_step=2, assignment="nope")


def test_ablation_baselines():
    r18 = random_training_set(18, seed=3)
    assert len(set(r18)) == 18 and r18 == random_training_set(18, seed=3) and r18 != random_training_set(18, seed=4)
    assert training_set("all243") == tuple(all_configs())
    assert training_set("base") == (HarnessConfig(0, 0, 0, 0, 0),)
    assert training_set("oa18") == TRAINING_SET
    with pytest.raises(ValueError, match="unknown training set"):
        training_set("nope")
    tasks = [f"t{i}" for i in range(50)]
    for configs in repeat_assignment(tasks, TRAINING_SET, k=2, seed=1).values():
        assert configs[0] == configs[1]
    random = random_assignment(tasks, TRAINING_SET, k=2, seed=1)
    far = [hamming(*c) for c in random.values()]
    assert max(far) > 2  # unlike locality-aware pairs, random pairs are often far apart
    steps = build_schedule(tasks, 16, configs=training_set("all243"), k=2, assignment="locality", seed=0)
    assert all(hamming(steps[0][i].config, steps[1][i].config) == 1 for i in range(16))
