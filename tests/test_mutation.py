"""The mutation audit (tasks/mutation.py): mutants of reference solutions graded by the tasks' own
graders in the sandbox. A weak suite is flagged with its surviving mutant; every built-in task
kills every mutant of its operators (the full check is slow; a sample runs by default)."""

import json
import shutil
import subprocess
import sys
import textwrap
from collections import Counter
from dataclasses import replace

import pytest
import yaml
from conftest import r2e_parsed_commit, requires_bwrap

from harness_gym.tasks import load_tasks
from harness_gym.tasks.base import TaskError
from harness_gym.tasks.builtin import builtin_root, load_task_dir
from harness_gym.tasks.mutants import (
    MutantPool,
    changed_function_ranges,
    code_mutants,
    load_operators,
    mutant_pool,
    output_perturbations,
)
from harness_gym.tasks.mutation import mutation_audit

OPERATORS = load_operators()

CLAMP = '''\
def clamp(value, low, high):
    """value limited to [low, high]."""
    if value < low:
        return low
    if value > high:
        return low
    return value


def double(x):
    return x * 2
'''


def added_lines(diff):
    return [line[1:].strip() for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]


def test_code_mutants_stay_in_the_changed_function_and_skip_docstrings_and_messages():
    fixed = CLAMP.replace("        return low\n    return value", "        return high\n    return value")
    assert changed_function_ranges(CLAMP, fixed) == [(1, 7)]
    pool = MutantPool()
    code_mutants("calc.py", CLAMP, fixed, OPERATORS["code"], pool)
    operators = {m.operator for m in pool.mutants}
    assert {"wrong comparison", "dropped statement", "early return", "swapped arguments"} <= operators
    assert all(m.line <= 7 for m in pool.mutants)  # double() was not changed: not mutated
    assert not [m for m in pool.mutants if "limited" in "".join(added_lines(m.diff))]  # docstring
    assert ["if value <= low:"] in [added_lines(m.diff) for m in pool.mutants]
    raising = 'def f(x):\n    if x < 0:\n        raise ValueError(f"bad {x}")\n    return x\n'
    pool = MutantPool()
    code_mutants("f.py", None, raising, OPERATORS["code"], pool)
    assert pool.mutants and all("bad {x}" in m.files["f.py"] or "raise" not in m.files["f.py"] for m in pool.mutants)


def test_invalid_and_duplicate_mutants_are_discarded_and_counted():
    source = "def f(items):\n    for item in items:\n        if item:\n            break\n    return 0\n"
    pool = mutant_pool({}, {"f.py": source}, OPERATORS)
    digests = [m.digest for m in pool.mutants]
    assert len(digests) == len(set(digests))
    for mutant in pool.mutants:
        compile(mutant.files["f.py"], "f.py", "exec")
        assert mutant.files["f.py"] != source
    assert pool.identical >= 1  # `0` doubled is `0`


def test_output_perturbations():
    text = "3 beta\n12 alpha\n"
    found = {(op, out) for op, _, out in output_perturbations(text, OPERATORS["output"])}
    assert ("truncated", "3 beta\n") in found and ("reordered", "12 alpha\n3 beta\n") in found
    assert ("off-by-one number", "3 beta\n13 alpha\n") in found and ("off-by-one number", "2 beta\n12 alpha\n") in found
    document = '{\n  "a": [1, 2],\n  "b": 3\n}\n'
    perturbed = [(op, out) for op, _, out in output_perturbations(document, OPERATORS["output"])]
    assert ("reordered", '{\n  "a": [\n    2,\n    1\n  ],\n  "b": 3\n}\n') in perturbed
    assert not [out for op, out in perturbed if op == "reordered" and out.startswith('{\n  "b"')]
    assert ("empty section", json.dumps({"a": [], "b": 3}, indent=2) + "\n") in perturbed
    markdown = "# Title\n\n## Usage\nrun it\n\n## Notes\nnone\n"
    sections = [out for op, _, out in output_perturbations(markdown, OPERATORS["output"]) if op == "empty section"]
    assert "# Title\n\n## Usage\n## Notes\nnone\n" in sections


def test_a_bad_operator_table_is_named(tmp_path):
    bad = tmp_path / "ops.yaml"
    data = yaml.safe_load((builtin_root().parent / "mutation_operators.yaml").read_text())
    data["code"]["binary_swaps"]["Add"] = ["Plus"]
    bad.write_text(yaml.safe_dump(data))
    with pytest.raises(TaskError, match=r"binary_swaps.*Plus"):
        load_operators(str(bad))


# ------------------------------------------------------------------------- in the real sandbox


def clamp_task(root, hidden_tests, name="weak-clamp"):
    """A repair task in the built-in format, graded by the built-in hidden-test runner (copied)."""
    folder = root / name
    (folder / "workspace").mkdir(parents=True)
    (folder / "workspace" / "calc.py").write_text(CLAMP)
    (folder / "grader").mkdir()
    for shared in ("run_hidden_tests.py", "evaluate_calls.py", "verdict.py"):
        shutil.copy2(builtin_root() / "_shared" / shared, folder / "grader" / shared)
    steps = [{"call": call, "equals": equals} for call, equals in hidden_tests]
    (folder / "grader" / "hidden_tests.json").write_text(
        json.dumps({"setup": "from calc import clamp", "tests": {"test_clamp": steps}})
    )
    (folder / "task.yaml").write_text(
        textwrap.dedent(
            f"""\
            id: {name}
            split: train
            instruction: clamp() in /workspace/calc.py returns low above the range. Fix it.
            grade_command: python3 -I {{grader}}/run_hidden_tests.py
            signed_verdict: true
            solution:
            - tool: file_editor
              arguments: {{command: str_replace, path: calc.py, old_str: "        return low\\n    return value",
                new_str: "        return high\\n    return value"}}
            """
        )
    )
    return load_task_dir(folder)


@requires_bwrap
def test_a_weak_suite_is_flagged_with_its_surviving_mutant(tmp_path):
    weak = clamp_task(tmp_path / "suite", [("clamp(15, 0, 10)", "10")])
    strong = clamp_task(
        tmp_path / "strong",
        [(f"clamp({v}, 0, 10)", str(e)) for v, e in ((15, 10), (-5, 0), (5, 5), (0, 0), (10, 10), (11, 10))],
        name="strong-clamp",
    )
    report = mutation_audit([weak, strong], None, workers=2)
    weak_result, strong_result = report.tasks
    assert weak_result.error is None and weak_result.valid > 10 and not weak_result.errors
    dropped = [s for s in weak_result.survivors if added_lines(s.diff) == ["pass"] and "-        return low" in s.diff]
    assert dropped, report.table()  # below the range nothing is checked: dropping `return low` is paid
    assert weak_result.score is not None and weak_result.score < 1.0
    # the strong suite kills it; what survives there is `<`/`>` turned `<=`/`>=`: the same function
    assert not [s for s in strong_result.survivors if s.mutant == dropped[0].mutant]
    assert {s.operator for s in strong_result.survivors} == {"wrong comparison"}, report.table()
    assert report.survivor_share == 1.0


@requires_bwrap
def test_the_audit_command_writes_survivors_and_resumes(tmp_path):
    clamp_task(tmp_path / "suite", [("clamp(15, 0, 10)", "10")])
    out, markdown, results = tmp_path / "m.json", tmp_path / "m.md", tmp_path / "results.jsonl"
    command = [
        sys.executable, "-m", "harness_gym.cli", "tasks", "audit", f"generated:{tmp_path / 'suite'}",
        "--mutants", "8", "--workers", "2", "--json", str(out), "--markdown", str(markdown), "--results", str(results),
    ]  # fmt: skip
    run = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert run.returncode == 1, run.stdout + run.stderr  # survivors: exit status 1
    data = json.loads(out.read_text())
    entry = data["per_task"]["weak-clamp"]
    assert entry["valid"] == 8 and entry["survived"] >= 1 and data["tasks_with_survivors"] == 1
    assert all(s["diff"].startswith("--- a/calc.py") for s in entry["survivors"])
    assert "SURVIVED weak-clamp" in run.stdout and "```diff" in markdown.read_text()
    graded = results.read_text().splitlines()
    assert len(graded) == 8
    again = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert again.returncode == 1 and results.read_text().splitlines() == graded  # nothing graded twice
    assert json.loads(out.read_text())["per_task"]["weak-clamp"] == entry


def assert_all_killed(report):
    weak = {t.task_id: t.score for t in report.tasks if t.score != 1.0}
    assert not weak, report.table()


@requires_bwrap
@pytest.mark.parametrize("per_task", [1, pytest.param(3, marks=pytest.mark.slow)])
def test_every_builtin_task_kills_a_sample_of_its_mutants(per_task):
    """Every built-in task (both families, every grader) kills its sampled mutants: one each in the
    default suite, three each behind slow (and every mutant in the next test)."""
    tasks = load_tasks("builtin")
    assert len(tasks) == 40
    report = mutation_audit(tasks, per_task, seed=1, workers=2)
    assert len(report.tasks) == 40 and all(t.valid >= 1 for t in report.tasks), report.table()
    assert_all_killed(report)


@requires_bwrap
@pytest.mark.slow
def test_every_builtin_task_kills_every_mutant():
    report = mutation_audit(load_tasks("builtin"), None, workers=2)
    assert_all_killed(report)
    assert sum(t.valid for t in report.tasks) >= 900


@requires_bwrap
def test_generated_tasks_record_their_grader_strength_and_kill_their_mutants(tmp_path):
    from harness_gym.tasks.generator import generate

    assert len(generate(tmp_path / "g", count=4, seed=0)) == 4
    tasks = load_tasks(f"generated:{tmp_path / 'g'}")
    assert [t.metadata["mutation_score"] for t in tasks] == [1.0] * 4
    assert all(t.metadata["mutants_checked"] >= 1 for t in tasks)
    assert_all_killed(mutation_audit(tasks, 3, workers=2))


# ------------------------------------------------------------------- trainer dataset, bench report


def audit_file(path, scores):
    path.write_text(json.dumps({"per_task": {task: {"score": score} for task, score in scores.items()}}))
    return path


def test_the_dataset_drops_or_down_weights_weak_grader_tasks(tmp_path):
    from trainers import dataset as ds

    ids = [t.id for t in load_tasks("builtin:train")]
    weak, unknown, strong = ids[:2], ids[2], ids[3:]
    scores = audit_file(tmp_path / "audit.json", {**dict.fromkeys(weak, 0.5), unknown: None, strong[0]: 1.0})
    settings = {"kind": "harness", "suite": "builtin:train", "harness": "HarnessAdapt-H1", "repeats": 40}
    kept = Counter(labels(ds.build({**settings, "min_mutation_score": 1.0, "mutation_scores": str(scores)})))
    assert set(kept) == set(strong) and set(kept.values()) == {40}  # weak and unknown (no score): dropped
    recorded = Counter(labels(ds.build({**settings, "min_mutation_score": 1.0})))
    assert recorded == Counter(dict.fromkeys(ids, 40))  # no file: the built-ins' recorded audit, every one 1.0
    halved = Counter(labels(ds.build({**settings, "min_mutation_score": 1.0, "weak_task_weight": 0.5,
                                      "mutation_scores": str(scores)})))  # fmt: skip
    assert all(halved[t] == 40 for t in strong) and all(8 <= halved[t] <= 32 for t in [*weak, unknown])
    assert Counter(labels(ds.build(settings))) == Counter(dict.fromkeys(ids, 40))  # no setting: all
    out = tmp_path / "rows.jsonl"
    command = ["--suite", "builtin:train", "--out", str(out), "--kind", "harness", "--harness", "HarnessAdapt-H1"]
    assert ds.main([*command, "--min-mutation-score", "1", "--mutation-scores", str(scores)]) == 0
    assert json.loads((tmp_path / "rows.jsonl.manifest.json").read_text())["tasks"] == len(strong)
    (tmp_path / "bad.json").write_text("[]")
    assert ds.main([*command, "--min-mutation-score", "1", "--mutation-scores", str(tmp_path / "bad.json")]) == 2


def labels(rows):
    return [json.loads(r["label"])["task_id"] for r in rows]


def episode(task, passed):
    return {
        "episode_id": f"H|{task}|0", "harness": "Harness-S0T0O0C0W0", "class": "training",
        "config": "S0T0O0C0W0", "task_id": task, "run": 0, "reward": float(passed), "passed": passed,
        "steps": 2, "tool_calls": 2, "valid_tool_calls": 2, "no_call_steps": 0, "error": None,
    }  # fmt: skip


def test_the_bench_report_shows_pass_at_1_on_strong_grader_tasks(tmp_path):
    from harness_gym.bench.report import render_markdown, summarize

    records = [episode("t0", True), episode("t1", False), episode("t2", True), episode("t3", True)]
    assert summarize(records, resamples=50)["strong_grader"] is None  # no score known: no figure
    scores = audit_file(tmp_path / "audit.json", {"t0": 1.0, "t1": 1.0, "t2": 0.5})
    summary = summarize(records, resamples=50, mutation_scores={"t0": 1.0, "t1": 1.0, "t2": 0.5})
    strong = summary["strong_grader"]
    assert (strong["tasks"], strong["weak_tasks"], strong["unknown_tasks"]) == (2, 1, 1)
    assert strong["pass_at_1"] == 0.5 and summary["overall"]["pass_at_1"] == 0.75
    assert "Pass@1 on strong-grader tasks" in render_markdown(summary) and "beside 75.0% overall" in render_markdown(
        summary
    )
    results = tmp_path / "results.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in records))
    run = subprocess.run(
        [sys.executable, "-m", "harness_gym.cli", "report", str(results), "--mutation-scores", str(scores)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    assert "Pass@1 on strong-grader tasks (mutation score 1; 2 tasks" in (tmp_path / "report.md").read_text()


def test_the_builtin_suites_recorded_audit_is_of_the_tasks_as_they_are(tmp_path):
    """tasks/builtin/_mutation_audit.json is a full audit of every built-in task as it is now (its
    audit digest); a built-in carries its score from there. After changing a task, its grader or
    the operators, rerun: harness-gym tasks audit builtin --mutants 0 --json
    harness_gym/tasks/builtin/_mutation_audit.json"""
    from harness_gym.tasks.builtin import MUTATION_AUDIT, with_recorded_scores
    from harness_gym.tasks.mutants import audit_digest

    path = builtin_root() / MUTATION_AUDIT
    data = json.loads(path.read_text())
    tasks = load_tasks("builtin")
    assert data["mutants_per_task"] is None and set(data["per_task"]) == {t.id for t in tasks}
    stale = [t.id for t in tasks if data["per_task"][t.id]["digest"] != audit_digest(t)]
    assert not stale, f"audited before their last change, rerun the audit (see this test's docstring): {stale}"
    assert {t.id: t.metadata.get("mutation_score") for t in tasks} == {t.id: 1.0 for t in tasks}
    assert sum(t.metadata["mutants_checked"] for t in tasks) >= 900
    raw = load_task_dir(builtin_root() / tasks[0].id)
    assert "mutation_score" not in raw.metadata and with_recorded_scores([raw], path)[0].metadata["mutation_score"] == 1
    changed = replace(raw, grade_command=raw.grade_command + " --lenient")
    assert "mutation_score" not in with_recorded_scores([changed], path)[0].metadata  # a changed grader: unknown
    sampled = tmp_path / "sampled.json"
    sampled.write_text(json.dumps({**data, "mutants_per_task": 3}))
    assert "mutation_score" not in with_recorded_scores([raw], sampled)[0].metadata  # a sample is no full audit


@requires_bwrap
def test_bench_records_carry_their_tasks_mutation_score_and_the_report_reads_them(tmp_path):
    from harness_gym.agents.factory import make_agent
    from harness_gym.bench import BenchRunner, load_records, resolve_harnesses
    from harness_gym.bench.report import render_markdown, summarize

    strong, other = load_tasks("builtin:eval")[:2]
    weak = replace(other, metadata={**other.metadata, "mutation_score": 0.5})
    unaudited = replace(other, id="unaudited", metadata={"family": "repository-repair"})
    runner = BenchRunner(
        lambda: make_agent("reference"), resolve_harnesses("base"), [strong, weak, unaudited], runs=1,
        out_dir=tmp_path, workers=2, progress=False, save_trajectories=False,
    )  # fmt: skip
    records = load_records(runner.run())
    assert {r["task_id"]: r["mutation_score"] for r in records} == {strong.id: 1.0, weak.id: 0.5, "unaudited": None}
    summary = summarize(records, resamples=50)["strong_grader"]  # the records' scores: no file needed
    assert (summary["tasks"], summary["weak_tasks"], summary["unknown_tasks"]) == (1, 1, 1)
    override = summarize(records, resamples=50, mutation_scores={weak.id: 1.0, strong.id: None})["strong_grader"]
    assert (override["tasks"], override["weak_tasks"], override["unknown_tasks"]) == (1, 0, 2)
    assert "(mutation score 1; 1 tasks, 1 weaker, 1 unknown)" in render_markdown(summarize(records, resamples=50))
    forged = [{**r, "mutation_score": True} for r in records]  # not a score: unknown, never strong
    assert summarize(forged, resamples=50)["strong_grader"] is None


# ------------------------------------------------------------------------ a SWE-format instance

GOLD_PATCH = (
    "--- a/calc.py\n+++ b/calc.py\n@@ -1,5 +1,5 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n \n \n"
    " def sub(a, b):\n"
)
WEAK_TEST_PATCH = (
    "--- a/tests/test_calc.py\n+++ b/tests/test_calc.py\n@@ -4,3 +4,7 @@\n \n def test_sub():\n"
    "     assert sub(5, 3) == 2\n+\n+\n+def test_add():\n+    assert add(2, 2) == 4\n"
)


def test_the_audit_of_a_swe_format_instance_runs_end_to_end_in_its_image(swe_image, tmp_path, monkeypatch):
    """The gold patch is the reference (replayed in the instance's container); mutants of the
    function it changed run the instance's FAIL_TO_PASS / PASS_TO_PASS tests there. Its one new
    test, add(2, 2) == 4, also passes for a * b: the survivor a policy could be paid for."""
    host, tag = swe_image
    monkeypatch.setenv("DOCKER_HOST", host)
    monkeypatch.setenv("HARNESS_GYM_CACHE", str(tmp_path / "cache"))
    rows = tmp_path / "swe.jsonl"
    row = {
        "repo": "demo/calc", "instance_id": "demo__calc-1", "base_commit": "abc", "patch": GOLD_PATCH,
        "test_patch": WEAK_TEST_PATCH, "problem_statement": "add() subtracts instead of adding.",
        "FAIL_TO_PASS": json.dumps(["tests/test_calc.py::test_add"]),
        "PASS_TO_PASS": json.dumps(["tests/test_calc.py::test_sub"]),
    }  # fmt: skip
    rows.write_text(json.dumps(row) + "\n")
    (task,) = load_tasks(f"swebench:{rows}#image={tag}")
    report = mutation_audit([task], None, workers=2)
    (entry,) = report.tasks
    assert entry.error is None and not entry.errors, report.table()
    assert entry.valid >= 4 and all(r.file == "calc.py" and r.line <= 2 for r in entry.results)  # add() only
    assert [added_lines(s.diff) for s in entry.survivors] == [["return a * b"]], report.table()
    assert entry.killed == entry.valid - 1


def test_the_audit_of_an_r2e_instance_rebuilds_its_gold_patch_and_runs_end_to_end(swe_image, tmp_path, monkeypatch):
    """An R2E-Gym row's reference is the gold commit in its parsed_commit_content (its test file
    left out), applied in the instance's container; mutants of add() run the hidden tests in
    /r2e_tests. Expecting test_add too kills every mutant; expecting test_sub only pays them all."""
    from harness_gym import HarnessEnv

    host, tag = swe_image
    monkeypatch.setenv("DOCKER_HOST", host)
    monkeypatch.setenv("HARNESS_GYM_CACHE", str(tmp_path / "cache"))
    commit = r2e_parsed_commit(
        "diff --git a/calc.py b/calc.py\n" + GOLD_PATCH + "diff --git a/tests/test_calc.py b/tests/test_calc.py\n"
        + WEAK_TEST_PATCH
    )  # fmt: skip
    assert [d["header"]["file"]["path"] for d in commit["file_diffs"]] == ["calc.py", "tests/test_calc.py"]

    def row(commit_hash, expected):
        return {
            "repo_name": "calc", "docker_image": tag, "commit_hash": commit_hash, "prompt": "(issue prompt)",
            "problem_statement": "add() subtracts instead of adding.", "execution_result_content": "(tests)",
            "parsed_commit_content": json.dumps(commit), "expected_output_json": json.dumps(expected),
        }  # fmt: skip

    rows = tmp_path / "r2e.jsonl"
    strong_row = row("5" * 40, {"test_add": "PASSED", "test_sub": "PASSED"})
    rows.write_text(json.dumps(strong_row) + "\n" + json.dumps(row("7" * 40, {"test_sub": "PASSED"})) + "\n")
    strong, weak = load_tasks(f"r2e:{rows}")
    assert strong.metadata["gold_patch_skipped"] == ["tests/test_calc.py (test file)"]
    env = HarnessEnv(tasks=[strong])
    observation, _ = env.reset(seed=0)
    env.close()
    assert "a + b" not in json.dumps(observation) and "a + b" not in strong.instruction  # the fix is never shown
    report = mutation_audit([strong, weak], None, workers=2)
    strong_result, weak_result = report.tasks
    assert strong_result.error is None and not strong_result.errors, report.table()  # the gold patch scored 1
    assert strong_result.valid >= 4 and all(r.file == "calc.py" and r.line <= 2 for r in strong_result.results)
    assert strong_result.score == 1.0, report.table()
    assert weak_result.error is None and weak_result.valid == strong_result.valid
    assert weak_result.killed == 0 and ["return a * b"] in [added_lines(s.diff) for s in weak_result.survivors]


# ------------------------------------------------------------- a ClawGym task's reference output

WS = "/root/.openclaw/workspace"


def clawgym_suite(root, check, task_id):
    """A ClawGym task (sum the numbers into total.txt) with a reference output and a grader ``check``."""
    task = root / "task_0000"
    (task / "input_files").mkdir(parents=True)
    (task / "input_files" / "numbers.txt").write_text("3\n4\n5\n")
    (task / "reference_output").mkdir()
    (task / "reference_output" / "total.txt").write_text("12\n")
    (task / "reward").mkdir()
    (task / "reward" / "check.py").write_text(
        f"import os\npath = '{WS}/total.txt'\n"
        "text = open(path).read().strip() if os.path.isfile(path) else ''\n"
        f"print(1.0 if {check} else 0.0)\n"
    )
    (task / "reward" / "reward.sh").write_text("python3 reward/check.py\n")
    entry = {
        "task_id": task_id, "user_query": f"Write the sum of numbers.txt to {WS}/total.txt.",
        "input_mount_dir": WS, "metadata": {"grading_type": "automated"},
    }  # fmt: skip
    (task / "data_entry.json").write_text(json.dumps(entry))
    return load_tasks(f"clawgym:{root}")


@requires_bwrap
def test_a_clawgym_reference_output_is_perturbed(tmp_path):
    (weak,) = clawgym_suite(tmp_path / "weak", "text.isdigit()", "weak-sum")
    (strong,) = clawgym_suite(tmp_path / "strong", "text == '12'", "strong-sum")
    assert weak.solution and "12" not in json.dumps(weak.solution)  # written from base64, never shown
    report = mutation_audit([weak, strong], None, world="host")  # the clawgym world need not be built here
    weak_result, strong_result = report.tasks
    assert weak_result.error is None and {s.operator for s in weak_result.survivors} == {"off-by-one number"}
    assert sorted("".join(added_lines(s.diff)) for s in weak_result.survivors) == ["11", "13"]
    assert strong_result.score == 1.0 and strong_result.valid == 3, report.table()  # empty, 11 or 13
    with pytest.raises(ValueError, match="weak-sum"):
        mutation_audit([weak, weak], 1)
