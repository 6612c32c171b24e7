"""`harness-gym doctor`: a table of what this machine allows, non-zero exit on what would break a run,
and `--clean` reclaiming what a dead process left."""

import json
import os
import tempfile
from pathlib import Path

from conftest import requires_bwrap

from harness_gym.cli import main
from harness_gym.sandboxes import isolation


@requires_bwrap
def test_doctor_reports_the_limits_that_hold(capsys):
    assert main(["doctor", "--json", "--docker", "skip", "--workers", "2"]) == 0
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)}
    assert checks["sandbox"]["status"] == "ok" and checks["bubblewrap"]["status"] == "ok"
    assert checks["limit: file_size"]["detail"].startswith("RLIMIT_FSIZE")
    version = isolation.cgroup_version()
    assert checks["cgroups"]["detail"].startswith({1: "v1", 2: "v2", 0: "none"}[version])
    for name in ("memory", "processes"):  # each limit is either held (how) or reported as not enforced (why)
        check = checks[f"limit: {name}"]
        assert check["status"] == "ok" or check["detail"].startswith("NOT ENFORCED")
    assert "2 workspaces" in checks["disk"]["detail"]
    assert main(["doctor", "--docker", "skip"]) == 0
    assert "limit: memory_per_process" in capsys.readouterr().out  # the table


def test_doctor_fails_where_a_run_would_break(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on PATH
    assert main(["doctor", "--json", "--docker", "skip"]) == 1
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)}
    assert checks["bubblewrap"]["status"] == "fail" and "apt-get install bubblewrap" in checks["bubblewrap"]["detail"]


def test_doctor_clean_reclaims_what_a_dead_process_left(capsys):
    left = Path(tempfile.mkdtemp(prefix="harness-gym-ws-"))
    (left / "file").write_text("x")
    dead_pid = 2**22 + 17  # above pid_max: never a live process
    log = isolation.state_dir() / "owners" / f"{dead_pid}-1.log"
    log.parent.mkdir(exist_ok=True)
    log.write_text(f"+dir {left}\n+dir /nonexistent/gone\n-dir /nonexistent/gone\n+dir {left}-torn")
    assert main(["doctor", "--json", "--docker", "skip"]) == 0
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)}
    assert checks["leftovers"]["status"] == "warn" and str(dead_pid) in checks["leftovers"]["detail"]
    assert main(["doctor", "--json", "--docker", "skip", "--clean"]) == 0
    checks = {c["name"]: c for c in json.loads(capsys.readouterr().out)}
    assert f"removed {left} (owner pid {dead_pid})" in checks["clean"]["detail"]
    assert not left.exists() and not log.exists()
    assert os.path.isdir(isolation.state_dir())


def test_doctor_sandboxes_checks_a_target_against_this_hosts_limits(monkeypatch, tmp_path, capsys):
    """``--sandboxes N``: how many concurrent environments the host's limits allow, which binds first."""
    import pytest

    from harness_gym import doctor

    monkeypatch.setenv("PATH", str(tmp_path))  # no sandbox is started: only the limits are read
    first = doctor.capacity(doctor.read_host_limits())[0]
    checks = {}
    for target in (max(1, first.environments // 4), first.environments * 4 + 1000):  # memory moves meanwhile
        main(["doctor", "--json", "--docker", "skip", "--sandboxes", str(target)])
        checks[target] = {c["name"]: c for c in json.loads(capsys.readouterr().out)}["capacity"]
    low, high = checks.values()
    assert low["status"] == "ok" and "binds first" in low["detail"], low
    assert high["status"] == "fail" and f"{first.name} allows" in high["detail"], high
    with pytest.raises(SystemExit):
        main(["doctor", "--sandboxes", "0"])
