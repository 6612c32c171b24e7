"""harness-gym bench: harness selection, the runner (threads, processes, Ray), resume after a
kill, the report recomputed independently, compare, trajectories and the viewer."""

import functools
import json
import os
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest
from conftest import requires_bwrap

from harness_gym import TRAINING_SET, heldout_set
from harness_gym.agents import as_agent, run_episode
from harness_gym.agents.factory import make_agent, python_agent, python_target
from harness_gym.bench import (
    BenchRunner,
    compare_results,
    load_records,
    plan_episodes,
    read_trajectory,
    render_html,
    render_text,
    resolve_harnesses,
    summarize,
    write_report,
)
from harness_gym.bench.report import cluster_bootstrap
from harness_gym.bench.runner import BenchAborted, ManifestMismatch
from harness_gym.cli import main
from harness_gym.env import HarnessEnv
from harness_gym.space import FACTORS, HarnessConfig
from harness_gym.tasks import load_tasks


def test_resolve_harnesses():
    quick = resolve_harnesses("quick")
    assert [h.klass for h in quick] == ["training", "training", "heldout", "out_of_space"]
    assert len(resolve_harnesses("training,heldout")) == 36
    assert [h.env_id for h in resolve_harnesses("heldout:2")] == [c.env_id for c in list(heldout_set())[:2]]
    presets = {h.env_id: h.klass for h in resolve_harnesses("presets")}
    assert presets["HarnessAdapt-H1"] == "preset" and presets["Harness-OpenClawStyle"] == "out_of_space"
    assert resolve_harnesses("S2T2O2C2W2")[0].klass == "in_space"
    assert len(resolve_harnesses("base,S0T0O0C0W0,training")) == 18  # no duplicates
    with pytest.raises(ValueError, match="expected the form"):
        resolve_harnesses("S9")
    with pytest.raises(ValueError, match="does not exist"):
        resolve_harnesses("missing.yaml")


def test_plan_pairs_seeds_across_harnesses():
    tasks = load_tasks("builtin:eval")
    plan = plan_episodes(resolve_harnesses("base,heldout:1"), tasks, runs=3, seed=5)
    assert len(plan) == 2 * len(tasks) * 3
    by_key = defaultdict(set)
    for episode in plan:
        by_key[(episode.task_id, episode.run)].add(episode.seed)
    assert all(len(seeds) == 1 for seeds in by_key.values())
    assert len({p.key for p in plan}) == len(plan)


@requires_bwrap
def test_reference_agent_scores_one_everywhere_and_the_report_says_so(tmp_path):
    """The eval tasks through the bench runner in a training, a held-out and every preset harness
    (every built-in task in every preset: tests/test_presets.py; on a covering set of
    configurations: tests/test_reference.py, in all 243 there with -m slow)."""
    factory = functools.partial(make_agent, "reference")
    harnesses = resolve_harnesses("base,heldout:1,presets")
    runner = BenchRunner(
        factory, harnesses, "builtin:eval", runs=1, out_dir=tmp_path, workers=2, progress=False, save_trajectories=False
    )
    records = load_records(runner.run())
    assert len(records) == len(harnesses) * len(load_tasks("builtin:eval"))
    assert all(r["reward"] == 1.0 and r["error"] is None for r in records)
    summary = summarize(records, resamples=200)
    assert set(summary["classes"]) == {"training", "heldout", "preset", "out_of_space"}
    assert all(c["pass_at_1"] == 1.0 for c in summary["classes"].values())
    assert summary["overall"]["tool_call_validity"] == 1.0


def synthetic_records(seed=0):
    """Records over training and held-out configs with reward depending on the T factor."""
    rng = np.random.default_rng(seed)
    records = []
    configs = [(c, "training") for c in TRAINING_SET] + [(c, "heldout") for c in heldout_set()]
    for config, klass in configs:
        for task in range(5):
            for run in range(3):
                chance = 0.8 - 0.3 * config.t
                passed = bool(rng.random() < chance)
                records.append(
                    {
                        "episode_id": f"{config.env_id}|t{task}|{run}",
                        "harness": config.env_id,
                        "class": klass,
                        "config": config.code,
                        "task_id": f"t{task}",
                        "run": run,
                        "reward": float(passed),
                        "passed": passed,
                        "steps": 4,
                        "tool_calls": 4,
                        "valid_tool_calls": 3,
                        "parse_errors": 1,
                        "tokens": {"prompt": 100, "completion": 10},
                        "error": None,
                    }
                )
    records.append(
        {
            "episode_id": "x|t0|0",
            "harness": "x",
            "class": "custom",
            "task_id": "t0",
            "run": 0,
            "reward": 0.0,
            "passed": False,
            "error": "RuntimeError: boom",
        }
    )
    return records


def test_report_numbers_recomputed_independently(tmp_path):
    records = synthetic_records()
    summary = summarize(records, resamples=300)
    scored = [r for r in records if r["error"] is None]
    assert summary["errors"] == 1 and summary["error_examples"] == ["RuntimeError: boom"]
    assert summary["harnesses"]["x"]["pass_at_1"] == 0.0 and summary["harnesses"]["x"]["error_rate"] == 1.0
    assert summary["overall"]["pass_at_1"] == pytest.approx(sum(r["passed"] for r in scored) / len(records))
    for env_id, row in summary["harnesses"].items():
        if env_id == "x":
            continue
        mine = [r["passed"] for r in scored if r["harness"] == env_id]
        assert row["pass_at_1"] == pytest.approx(sum(mine) / len(mine))
        assert row["ci95"][0] <= row["pass_at_1"] <= row["ci95"][1]
        assert row["tool_call_validity"] == pytest.approx(0.75) and row["parse_errors_per_step"] == pytest.approx(0.25)
    for klass in ("training", "heldout"):
        mine = [r["passed"] for r in scored if r["class"] == klass]
        assert summary["classes"][klass]["pass_at_1"] == pytest.approx(np.mean(mine))
    base = [r["passed"] for r in scored if r["harness"] == "Harness-S0T0O0C0W0"]
    heldout = [r["passed"] for r in scored if r["class"] == "heldout"]
    assert summary["specialisation_gap"]["gap"] == pytest.approx(np.mean(base) - np.mean(heldout))
    grand = np.mean([r["passed"] for r in scored])
    for index, factor in enumerate(FACTORS):
        for level in range(3):
            mine = [r["passed"] for r in scored if HarnessConfig.parse(r["config"])[index] == level]
            assert summary["main_effects"][factor][str(level)] == pytest.approx(np.mean(mine) - grand)
    assert summary["main_effects"]["T"]["0"] > 0 > summary["main_effects"]["T"]["2"]  # the planted effect
    cell = [
        r["passed"]
        for r in scored
        if HarnessConfig.parse(r["config"]).s == 1 and HarnessConfig.parse(r["config"]).t == 2
    ]
    assert summary["interactions"]["SxT"][1][2] == pytest.approx(np.mean(cell))
    paths = write_report(records, tmp_path, resamples=100)
    assert "| training |" in paths["markdown"].read_text() and json.loads(paths["json"].read_text())["scored"] == len(
        scored
    )
    assert "unknown 1" in paths["markdown"].read_text()  # errors by kind
    assert paths["classes"].stat().st_size > 1000 and paths["factor_effects"].stat().st_size > 1000


def test_compare_is_paired_per_class(tmp_path, capsys):
    a = [r for r in synthetic_records(1) if r["error"] is None]
    b = [dict(r, passed=True, reward=1.0) if r["class"] == "heldout" else r for r in a]
    b = [r for r in b if r["harness"] != "Harness-S0T0O0C0W0"]  # a pair dropped: 5 tasks of one harness
    result = compare_results(a, b, resamples=300)
    assert result["only_a"] == 5 and result["only_b"] == 0 and result["shared_units"] == 35 * 5
    for name, records in (("a", a), ("b", b)):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert main(["compare", str(tmp_path / "a.jsonl"), str(tmp_path / "b.jsonl")]) == 0
    assert "175 (harness, task) pairs matched; dropped 5 only in" in capsys.readouterr().out
    assert result["training"]["difference"] == 0.0 and result["training"]["ci95"] == [0.0, 0.0]
    held = [r["passed"] for r in a if r["class"] == "heldout"]
    assert result["heldout"]["difference"] == pytest.approx(1 - np.mean(held))
    assert result["heldout"]["ci95"][0] > 0


@requires_bwrap
def test_resume_after_a_kill_loses_and_duplicates_nothing(tmp_path):
    out = tmp_path / "run"
    arguments = [
        "bench",
        "--agent",
        "reference",
        "--configs",
        "heldout:3",
        "--tasks",
        "builtin:eval",
        "--runs",
        "1",
        "--out",
        str(out),
        "--no-trajectories",
        "--calibration",
        "none",
    ]
    command = [sys.executable, "-m", "harness_gym.cli", *arguments, "--workers", "1"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    results = out / "results.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and (not results.exists() or len(results.read_text().splitlines()) < 10):
        time.sleep(0.1)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    before = results.read_text().splitlines()
    planned = 3 * len(load_tasks("builtin:eval"))  # enough that the kill lands mid-run
    assert 10 <= len(before) < planned
    with open(results, "a") as handle:
        handle.write('{"episode_id": "half-writ')  # as if killed in the middle of a write
    assert main(arguments) == 2  # refuses to overwrite without --resume
    assert main([*arguments, "--resume", "--workers", "2"]) == 0
    records = load_records(results)
    keys = [r["episode_id"] for r in records]
    assert len(keys) == len(set(keys)) == planned
    assert results.read_text().splitlines()[: len(before)] == before  # finished episodes kept as they were
    assert all(r["reward"] == 1.0 for r in records)


@requires_bwrap
def test_process_executor_and_trajectories(tmp_path):
    runner = BenchRunner(
        functools.partial(make_agent, "reference"),
        resolve_harnesses("S2T2O2C2W2"),
        "builtin:eval",
        runs=1,
        out_dir=tmp_path,
        workers=2,
        executor="process",
        progress=False,
        task_count=2,
    )
    records = load_records(runner.run())
    assert [r["reward"] for r in records] == [1.0, 1.0]
    trajectory = read_trajectory(records[0]["trajectory"])
    assert trajectory["episode"]["episode_id"] == records[0]["episode_id"]
    assert {m["source"] for m in trajectory["messages"]} >= {"system", "task", "policy", "tool", "workflow"}
    assert trajectory["steps"][-1]["terminated_reason"] == "finish tool called"
    text = render_text(trajectory, colour=False)
    assert "── policy (assistant)" in text and "reward 1.0" in text
    page = render_html(trajectory)
    assert page.startswith("<!doctype html>") and "class='msg policy'" in page
    html_path = tmp_path / "t.html"
    assert main(["view", records[0]["trajectory"], "--html", str(html_path)]) == 0 and html_path.exists()
    assert main(["report", str(tmp_path / "results.jsonl")]) == 0 and (tmp_path / "report.md").exists()


@requires_bwrap
def test_ray_executor(tmp_path):
    pytest.importorskip("ray")
    runner = BenchRunner(
        functools.partial(make_agent, "reference"),
        resolve_harnesses("HarnessAdapt-H1"),
        "builtin:eval",
        runs=1,
        out_dir=tmp_path,
        workers=2,
        executor="ray",
        progress=False,
        save_trajectories=False,
        task_count=2,
    )
    records = load_records(runner.run())
    import ray

    ray.shutdown()
    assert sorted(r["reward"] for r in records) == [1.0, 1.0]


@requires_bwrap
def test_callables_and_async_agents_and_errors_become_records(tmp_path):
    env = HarnessEnv(max_steps=2)

    def talk(messages, tools):
        return f"I see {len(messages)} messages and {len(tools)} tools."

    class AsyncAgent:
        async def act(self, observation):
            return '<tool_call>{"name": "finish", "arguments": {}}</tool_call>'

    result = run_episode(env, talk, seed=0)
    assert result.truncated and "I see 2 messages" in result.transcript[2]["content"]
    assert run_episode(env, AsyncAgent(), seed=0).terminated
    env.close()
    with pytest.raises(TypeError):
        as_agent(42)

    def broken(messages, tools):
        raise RuntimeError("agent crashed")

    runner = BenchRunner(
        lambda: broken, resolve_harnesses("base"), "builtin:eval", runs=1, out_dir=tmp_path, progress=False
    )
    with pytest.raises(BenchAborted, match=r"stopped early, \d+ episodes not run: (\d+) of \1 episodes errored"):
        runner.run()  # most episodes error: the run stops after 5 of 12 (and those in flight) and says why
    records = load_records(runner.results.path)
    assert 5 <= len(records) <= 7
    assert all(r["error"] == "RuntimeError: agent crashed" and r["error_kind"] == "agent" for r in records)
    assert all(r["reward"] == 0.0 and r["outcome"] == "error" for r in records)


def _record(task, passed, harness="Harness-S0T0O0C0W0", **extra):
    return {
        "episode_id": f"{harness}|{task}|0",
        "harness": harness,
        "class": "training",
        "config": "S0T0O0C0W0",
        "task_id": task,
        "run": 0,
        "reward": float(passed),
        "passed": passed,
        "steps": 2,
        "tool_calls": 2,
        "valid_tool_calls": 2,
        "no_call_steps": 0,
        "error": None,
        **extra,
    }


def test_errored_episodes_lower_pass_at_1_and_grader_errors_are_errors():
    records = [
        _record("t0", True),
        _record("t1", True),
        _record("t2", False, error="EpisodeFailure: boom", error_kind="env"),
        # the grader crashed after printing 1.0: an error, never a pass
        _record("t3", True, grader_error="grader exited with status 1"),
    ]
    summary = summarize(records, resamples=200)
    assert summary["overall"]["pass_at_1"] == 0.5  # 2 of 4, not 2 of 2 (errors left out) nor 3 of 4
    assert summary["errors"] == 2 and summary["error_rate"] == 0.5
    assert summary["errors_by_kind"] == {"env": 1, "grader": 1}
    row = summary["harnesses"]["Harness-S0T0O0C0W0"]
    assert row["pass_at_1"] == 0.5 and row["errors"] == 2 and summary["classes"]["training"]["error_rate"] == 0.5
    assert row["ci95"][0] < 0.5 < row["ci95"][1]  # tasks resampled: 4 clusters of one episode
    assert any("2 of 4 episodes errored (env 1, grader 1)" in w for w in summary["warnings"])
    # a resumed run re-runs errored episodes: the last record of an episode wins
    rerun = _record("t2", True)
    assert summarize([*records, rerun], resamples=50)["overall"]["pass_at_1"] == 0.75


def test_no_valid_tool_call_and_context_overflow_are_reported():
    records = [
        _record("t0", False, valid_tool_calls=0, tool_calls=0, no_call_steps=2),
        _record("t1", False, valid_tool_calls=0, tool_calls=0, no_call_steps=2, outcome="context_overflow"),
    ]
    summary = summarize(records, resamples=50)
    assert summary["context_overflows"] == 1 and summary["errors"] == 0
    assert summary["harnesses"]["Harness-S0T0O0C0W0"]["tool_call_rate"] == 0.0
    text = "\n".join(summary["warnings"])
    assert "no valid tool call in 2 episodes" in text and "context_overflow" in text


def test_python_agents_in_every_shape():
    from harness_gym.agents import NullAgent
    from harness_gym.agents.base import CallableAgent

    assert isinstance(make_agent("python:sample_agents:make_agent"), NullAgent)  # a plain function
    assert make_agent("python:sample_agents:SubmittingAgent").name == "submitting"  # a class
    assert isinstance(make_agent("python:sample_agents:policy"), CallableAgent)  # (messages, tools)
    assert make_agent("python:sample_agents:make_policy").function.__name__ == "policy"  # factory of one
    instance = NullAgent()
    assert python_agent(instance) is instance
    with pytest.raises(TypeError, match="returned None"):
        make_agent("python:sample_agents:make_nothing")
    with pytest.raises(ValueError, match="has no attribute 'missing'"):
        python_target("python:sample_agents:missing")


@requires_bwrap
def test_plain_function_python_agent_runs_in_the_bench(tmp_path, capsys):
    for name in ("make_agent", "SubmittingAgent", "policy"):
        out = tmp_path / name
        agent = ["--agent", f"python:sample_agents:{name}"]
        rest = ["--runs", "1", "--calibration", "none", "--no-trajectories", "--out", str(out)]
        code = main(["bench", *agent, "--configs", "base", "--task-count", "2", *rest])
        records = load_records(out / "results.jsonl")
        assert code == 0 and len(records) == 2 and all(r["error"] is None for r in records), records


def test_unbuildable_agents_exit_non_zero_before_any_episode(tmp_path, capsys):
    import socket

    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    cases = [
        (["--agent", "nonsense"], "unknown agent 'nonsense'"),
        (["--agent", "openai"], "needs --base-url and --model"),
        (["--agent", "openai", "--base-url", f"http://127.0.0.1:{closed}/v1", "--model", "m"], "did not answer"),
        (["--agent", "python:no_such_module:f"], "cannot import no_such_module"),
        (["--agent", "null", "--configs", "S9"], "expected the form"),
        (["--agent", "null", "--tasks", "nonsense"], "unknown task suite"),
    ]
    for arguments, reason in cases:
        out = tmp_path / "out"
        started = time.perf_counter()
        assert main(["bench", *arguments, "--out", str(out)]) == 2
        assert reason in capsys.readouterr().err
        assert not out.exists()  # nothing half-written blocks the corrected command
        assert time.perf_counter() - started < 10


@requires_bwrap
def test_manifest_resume_refusal_and_errored_folders_do_not_block(tmp_path, capsys):
    out = tmp_path / "run"
    base = ["bench", "--configs", "base", "--task-count", "1", "--runs", "1", "--no-trajectories", "--out", str(out)]
    # a broken agent: every episode errors, the run stops and exits non-zero with the reason
    assert main([*base, "--agent", "python:sample_agents:crash", "--calibration", "none"]) == 1
    assert "agent crashed" in capsys.readouterr().err
    # the corrected command is not blocked by the folder of errors
    assert main([*base, "--agent", "null"]) == 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["agent"] == "null" and manifest["harnesses"] == ["Harness-S0T0O0C0W0"]
    assert manifest["tasks"] == [load_tasks("builtin:eval")[0].id] and manifest["harness_gym_version"]
    assert (out / ".gitignore").read_text().strip().endswith("*")
    assert list(out.glob("results.errored-*.jsonl"))  # the errored records kept aside
    capsys.readouterr()
    assert main([*base, "--agent", "null"]) == 2  # finished results are not overwritten
    assert "--resume" in capsys.readouterr().err
    assert main([*base, "--agent", "null", "--resume"]) == 0  # same manifest: nothing left to do
    assert main([*base, "--runs", "2", "--agent", "reference", "--resume"]) == 2
    err = capsys.readouterr().err
    assert (
        "--resume refused" in err
        and "agent: recorded 'null', now 'reference'" in err
        and "runs: recorded 1, now 2" in err
    )
    runner = BenchRunner(lambda: None, resolve_harnesses("base"), "builtin:eval", out_dir=out, resume=True)
    with pytest.raises(ManifestMismatch, match="tasks: only in this command"):
        runner.prepare()


@requires_bwrap
def test_readme_main_command_report_has_calibration_rows(tmp_path, capsys):
    """The README's main command (its bench part), with a do-nothing agent in place of the model so
    it runs in seconds: the report holds the calibration rows, reference 100 and null 0."""
    import re
    import shlex

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    command = re.search(r"```bash\n(apt-get update[^\n]*harness-gym bench[^\n]*)\n```", readme).group(1)
    assert command.startswith("apt-get update")
    arguments = shlex.split(command.split("harness-gym ", 1)[1])
    model = "python:sample_agents:make_agent"
    assert main([*arguments, "--agent", model, "--no-trajectories", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    for text in (out, (tmp_path / "report.md").read_text()):
        assert re.search(r"\| reference \| \d+ \| 0 \| 100\.0 \|", text)
        assert re.search(r"\| null \| \d+ \| 0 \| 0\.0 \|", text)
        assert "tool-call rate" in text
    report = (tmp_path / "report.md").read_text()
    assert (
        "| harness | class | episodes | Pass@1 % | 95% CI | errors | reference % | null % | tool-call rate % |"
        in report
    )
    from harness_gym.bench.report import class_bars

    bars = class_bars(json.loads((tmp_path / "report.json").read_text()))  # what classes.png draws
    assert set(bars) == {"model", "reference", "null"}
    assert all(v == 1.0 for v in bars["reference"]) and all(v == 0.0 for v in bars["null"])
    assert (tmp_path / "classes.png").stat().st_size > 0


def test_help_shows_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for default in (
        "(default: hf)",
        "(default: quick)",
        "(default: 3)",
        "(default: bench-results)",
        "(default: reference,null)",
    ):
        assert default in text
    ignored = (Path(__file__).resolve().parent.parent / ".gitignore").read_text().split()
    assert "bench-results/" in ignored and "exported-models/" in ignored


def test_class_intervals_resample_configurations_as_well_as_tasks():
    # every task passes in the same 2 of 18 configurations: resampling tasks alone would give the
    # interval [1/9, 1/9], as if the configurations' share were known exactly
    records = [
        _record(f"t{t}", index < 2, harness=config.env_id, **{"class": "heldout"})
        for t in range(3)
        for index, config in enumerate(heldout_set())
    ]
    estimate, low, high = cluster_bootstrap(records, resamples=2000)
    assert estimate == pytest.approx(1 / 9)
    assert low == 0.0 and 0.2 < high < 0.4
    # within one harness it is the task-cluster bootstrap: tasks' means resampled
    single = [_record(f"t{t}", t % 2 == 0) for t in range(20)]
    estimate, low, high = cluster_bootstrap(single, resamples=4000)
    rng = np.random.default_rng(1)
    means = np.array([t % 2 == 0 for t in range(20)], dtype=float)[rng.integers(0, 20, (4000, 20))].mean(axis=1)
    assert estimate == 0.5
    assert abs(low - np.quantile(means, 0.025)) <= 0.05 and abs(high - np.quantile(means, 0.975)) <= 0.05


def test_ctrl_c_exits_130_with_the_resume_command_and_no_traceback(tmp_path):
    out = tmp_path / "run"
    arguments = ["bench", "--agent", "reference", "--configs", "heldout:3", "--tasks", "builtin:eval", "--runs", "1",
                 "--out", str(out), "--no-trajectories", "--calibration", "none", "--workers", "1"]  # fmt: skip
    process = subprocess.Popen(
        [sys.executable, "-m", "harness_gym.cli", *arguments],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    results = out / "results.jsonl"
    deadline = time.time() + 300  # generous: on a loaded machine the first episodes start slowly

    def done() -> int:
        return len(results.read_text().splitlines()) if results.exists() else 0

    while time.time() < deadline and done() < 2 and process.poll() is None:
        time.sleep(0.1)
    if done() < 2 or process.poll() is not None:  # Ctrl-C must land mid-run, else the test proves nothing
        process.kill()
        _, stderr = process.communicate(timeout=60)
        pytest.fail(
            f"the run was not mid-way when Ctrl-C was due ({done()} results, exit {process.returncode}): {stderr[-2000:]}"
        )
    os.killpg(process.pid, signal.SIGINT)  # what Ctrl-C sends the terminal's foreground group
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr[-3000:]
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr[-3000:]
    assert "--resume" in stderr and str(out) in stderr


def test_the_eta_counts_each_role_at_its_own_pace():
    from harness_gym.bench.runner import RoleEta

    eta = RoleEta(["model"] * 10 + ["reference"] * 200 + ["null"] * 200, workers=2)
    assert eta.remaining_s() is None and eta.text() == "-"
    for _ in range(2):
        eta.finished("model", 60.0)  # the first model episodes are slow (a model loads)
    assert eta.remaining_s() == 410 * 60.0 / 2 - 2 * 60.0 / 2  # unknown roles borrow the mean so far
    eta.finished("reference", 2.0)
    eta.finished("null", 1.0)
    assert eta.remaining_s() == (8 * 60.0 + 199 * 2.0 + 199 * 1.0) / 2  # not 406 episodes at ~30 s
    assert eta.text() == "08:58"
