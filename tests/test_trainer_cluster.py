"""Multi-node hygiene of the trainer: the doctor on every Ray node before training (a real local Ray
cluster), the shared-output check, per-actor rollout logs merged by the metrics command, and no
script that stops a Ray cluster it did not start."""

import json
import os
import re
from pathlib import Path

import pytest
from conftest import requires_bwrap

from trainers.launch_plan import RecipeError, check_nodes, refuse_unready
from trainers.metrics import main as metrics_main
from trainers.metrics import rollout_files

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@requires_bwrap
def test_doctor_runs_on_every_node_and_refuses_a_node_that_cannot_sandbox(local_ray, tmp_path):
    results = check_nodes(tmp_path / "out", workers=1)
    assert len(results) == len([n for n in local_ray.nodes() if n["Alive"]])
    checks = {c["name"]: c for c in next(iter(results.values()))}
    assert checks["sandbox"]["status"] == "ok" and checks["output folder shared"]["status"] == "ok"
    refuse_unready(results)  # this node can sandbox: no error
    assert not list((tmp_path / "out").glob(".harness-gym-shared-*"))  # the probe is removed
    # a node whose bubblewrap cannot make a user namespace (as where the kernel forbids it)
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "bwrap").write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    (fake / "bwrap").chmod(0o755)
    broken = check_nodes(tmp_path / "out", runtime_env={"env_vars": {"PATH": f"{fake}:{os.environ['PATH']}"}})
    with pytest.raises(RecipeError, match="user namespaces: bwrap cannot create a user namespace"):
        refuse_unready(broken)


def test_unshared_output_folder_is_refused():
    results = {"node-b": [{"name": "output folder shared", "status": "fail", "detail": "/x is NOT the driver's"}]}
    with pytest.raises(RecipeError, match="node-b: output folder shared"):
        refuse_unready(results)


def test_metrics_merge_the_per_actor_logs(tmp_path, capsys):
    log = tmp_path / "rollouts.jsonl"
    for actor, reward in (("nodeA-11", 1), ("nodeB-12", 0)):
        record = {"step": 0, "slot": 0, "task_id": "t", "harness": "S0T0O0C0W0", "reward": reward, "steps": 1}
        (tmp_path / f"rollouts.{actor}.jsonl").write_text(json.dumps(record) + "\n")
    assert [p.name for p in rollout_files(log)] == ["rollouts.nodeA-11.jsonl", "rollouts.nodeB-12.jsonl"]
    out = tmp_path / "m.json"
    assert metrics_main([str(log), "--out", str(out)]) == 0
    assert json.loads(out.read_text())["overall"]["rollouts"] == 2


def test_no_script_stops_a_ray_cluster_it_did_not_start():
    for script in (REPO / "trainers").glob("*.sh"):
        text = script.read_text()
        for match in re.finditer(r"^[^#\n]*ray stop[^\n]*$", text, re.MULTILINE):
            before = text[: match.start()]
            # the only allowed stop is the EXIT trap set right after this script's own `ray start`
            assert "trap" in match.group(0) and before.rstrip().endswith(
                "ray start --head --num-gpus=1 --disable-usage-stats >/dev/null"
            ), f"{script.name}: {match.group(0).strip()}"
