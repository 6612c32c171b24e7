"""A fault-injection soak: environments stepping from thread pools that grow and shrink, owners
killed with -9, sandboxes OOM-killed, full workspaces, graders that hang; then every episode must be
recorded exactly once and nothing may be left on the host.

    python benchmarks/soak.py [--minutes 30] [--environments 64] [--owners 4] [--out benchmarks/results/soak.json]

The supervisor starts ``--owners`` owner processes (each a harness-gym process of its own, sharing
``--environments`` between them) and, every ``--kill-every`` seconds, kills one with SIGKILL and
starts a replacement. Each owner runs rounds: a ``ThreadPoolExecutor`` of a random size (1 up to its
share) resets its environments, a new pool of another size steps them with random commands and
finishes the episode, and each pool is shut down after its round (its threads exit: a sandbox tied
to a thread would die). An episode draws one fault: none, a command that exhausts its memory limit
(the sandbox's memory cgroup or RLIMIT_AS kills it), a command that fills the workspace tmpfs, or a
task whose grader hangs past its timeout. Owners append ``start`` and ``end`` records (passed,
failed or errored) to a journal per process; the supervisor records an episode in flight in a
killed owner as errored.

At the end: every started episode has exactly one outcome; after the crash-recovery pass that the
next start runs, no registry log of an owner, no uid lease still naming an owner's generation, no
cgroup, workspace, control, payload or grader folder any owner registered, and nothing but the
shared caches in the run's temporary folder is left. Prints its figures and writes them as JSON.
Needs bubblewrap (as root for uid leases, cgroups and tmpfs workspaces).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FAULTS = ("none", "oom", "tmpfs_full", "hanging_grader")
COMMANDS = ("ls -la", "echo hello > out.txt && cat out.txt", "seq 1 2000 | tail -1", "cat a.txt", "true", "pwd")
SHARED_CACHES = ("harness-gym-tools-", "harness-gym-bin-", "harness-gym-grader-init-", "harness-gym-layer-")


# ----------------------------------------------------------------------------- owner process


# small limits, so that the faults are cheap: a memory cgroup of 256 MiB, a 64 MiB workspace tmpfs
SANDBOX_OPTIONS = {"memory_mb": 256, "workspace_size_mb": 64, "command_timeout_s": 30.0}
# four processes of ~230 MiB each (under RLIMIT_AS) exceed the 256 MiB cgroup together: an OOM kill.
# Each prints SURVIVED after its allocation (spelled in halves: bash's "Killed" line quotes the
# command), so fewer than four is the evidence that the kill fired.
SURVIVED = "SURVIVED"
OOM = (
    'for i in 1 2 3 4; do python3 -c \'b = b"x" * (200 << 20); import time; time.sleep(3); '
    f'print("{SURVIVED[:4]}" + "{SURVIVED[4:]}")\' & done; wait'
)
FILL = "head -c 200000000 /dev/zero > fill.bin; df -h . | tail -1; rm -f fill.bin"
FULL = "No space left on device"  # what the filled tmpfs makes head say: the fault fired


def _make_task_files(root: Path) -> None:
    """The tasks' files, made once by the supervisor (owners share its layers)."""
    (root / "files").mkdir()
    (root / "files" / "a.txt").write_text("alpha\n")
    (root / "grader").mkdir()
    (root / "grader" / "grade.py").write_text("import random\nprint(random.choice([0.0, 1.0]))\n")


def _tasks(root: Path) -> dict[str, Any]:
    """The soak's two tasks: one graded at once, one whose grader hangs past its timeout."""
    from harness_gym.tasks.base import Task

    files, graders = root / "files", (root / "grader",)
    return {
        "quick": Task(id="soak-quick", instruction="Soak.", workspace_dir=files, grader_files=graders),
        "hanging": Task(
            id="soak-hanging",
            instruction="Soak.",
            workspace_dir=files,
            grader_files=graders,
            grade_command="sleep 600",
            grader_timeout_s=2.0,
        ),
    }


def _fired(fault: str, output: str) -> bool:
    """Whether the fault command's output shows the fault took effect (a soak whose faults never
    fire tests nothing, so the run fails then)."""
    if fault == "oom":
        return output.count(SURVIVED) < 4
    return FULL in output


def _episode(env: Any, fault: str, rng: random.Random) -> tuple[str, bool | None]:
    """Step one reset environment to its end: its outcome (passed, failed or errored) and, for an
    injected oom or tmpfs_full, whether it fired."""
    bash = next(t.name for t in env.tool_interface.tools.values() if t.implementation == "bash")
    commands = [rng.choice(COMMANDS) for _ in range(rng.randint(1, 4))]
    injected = {"oom": OOM, "tmpfs_full": FILL}.get(fault)
    if injected:
        commands.append(injected)
    fired = None
    for command in commands:
        call = {"name": bash, "arguments": {"command": command}}
        observation, _, terminated, truncated, _ = env.step(f"<tool_call>{json.dumps(call)}</tool_call>")
        if command is injected:
            fired = _fired(fault, str(observation["messages"][-1].get("content", "")))
        if terminated or truncated:
            return "errored", fired
    finish = {"name": env.tool_interface.finish_name, "arguments": {}}
    _, reward, _, _, info = env.step(f"<tool_call>{json.dumps(finish)}</tool_call>")
    if info.get("grader_error"):
        return "errored", fired
    return ("passed" if reward >= 1.0 else "failed"), fired


def owner(journal: Path, count: int, seed: int, stop: Path, task_root: Path) -> None:
    """An owner process: ``count`` environments in rounds from thread pools of changing size."""
    from harness_gym import HarnessEnv

    tasks = _tasks(task_root)
    rng = random.Random(seed)
    lock = threading.Lock()
    handle = open(journal, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 (for the process's life)

    def record(**entry: Any) -> None:
        with lock:
            handle.write(json.dumps(entry) + "\n")

    envs = {
        name: [
            HarnessEnv("S0T0O0C0W0", tasks=[task], max_steps=20, sandbox_options=SANDBOX_OPTIONS) for _ in range(count)
        ]
        for name, task in tasks.items()
    }
    serial = 0
    while not stop.exists():
        plan = []
        for index in range(count):
            fault = rng.choice(FAULTS)
            env = envs["hanging" if fault == "hanging_grader" else "quick"][index]
            serial += 1
            plan.append((f"{os.getpid()}-{serial}", env, fault, random.Random(rng.random())))
        with ThreadPoolExecutor(max_workers=rng.randint(1, count)) as pool:
            list(pool.map(lambda item: item[1].reset(seed=0), plan))

        def play(item: tuple[str, Any, str, random.Random]) -> None:
            episode, env, fault, episode_rng = item
            record(kind="start", episode=episode, fault=fault)
            fired = None
            try:
                outcome, fired = _episode(env, fault, episode_rng)
            except Exception as exc:  # an error is an outcome, recorded like the others
                outcome, fault = "errored", f"{fault}: {type(exc).__name__}: {exc}"
            record(kind="end", episode=episode, outcome=outcome, fault=fault, fired=fired, at=time.time())

        with ThreadPoolExecutor(max_workers=rng.randint(1, count)) as pool:
            list(pool.map(play, plan))
        from harness_gym.sandboxes import isolation

        while isolation._acquire_failures:  # a uid whose last holder's leftovers could not be reclaimed
            print(f"acquire: {isolation._acquire_failures.pop()}", file=sys.stderr, flush=True)
    for group in envs.values():
        for env in group:
            env.close()
    handle.close()


# ----------------------------------------------------------------------------- supervisor


def _registry_entries(pid: int) -> dict[str, set[str]]:
    from harness_gym.sandboxes import isolation

    found: dict[str, set[str]] = {}
    for log in (isolation.state_dir() / "owners").glob(f"{pid}-*.log"):
        try:
            text = log.read_text("utf-8", "surrogateescape")
        except OSError:
            continue
        for line in text.splitlines():
            if line.startswith("+") and " " in line:
                kind, _, value = line[1:].partition(" ")
                found.setdefault(kind, set()).add(value)
    return found


def _leftovers(seen: dict[str, set[str]], owners: list[int], tmpdir: Path) -> list[str]:
    """What the owners registered (or put in the run's folder) that is still on the host."""
    from harness_gym.sandboxes import isolation

    left = []
    for pid in owners:
        left += [f"registry log {log}" for log in (isolation.state_dir() / "owners").glob(f"{pid}-*.log")]
    for kind in ("dir", "cgroup"):
        left += [f"{kind} {value}" for value in sorted(seen.get(kind, ())) if os.path.lexists(value)]
    for token in sorted(seen.get("uid", ())):
        number, _, generation = token.partition(":")
        lock = isolation.lock_dir() / f"{number}.lock"
        try:
            data = json.loads(lock.read_text() or "{}")
        except (OSError, ValueError):
            continue
        if generation and data.get("generation") == generation:
            left.append(f"uid lease {token} (its lock file still names the owner's generation)")
    left += [f"file {p}" for p in sorted(tmpdir.iterdir()) if not p.name.startswith(SHARED_CACHES)]
    return left


def _start_owner(
    args: argparse.Namespace, tmpdir: Path, journal: Path, share: int, seed: int
) -> subprocess.Popen[bytes]:
    environment = {
        **os.environ,
        "TMPDIR": str(tmpdir),
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    command = [sys.executable, str(Path(__file__).resolve()), "--owner", str(journal), "--share", str(share)]
    command += [
        "--seed",
        str(seed),
        "--stop",
        str(tmpdir.parent / f"{tmpdir.name}.stop"),
        "--task-root",
        str(tmpdir.parent / f"{tmpdir.name}.tasks"),
    ]
    return subprocess.Popen(command, env=environment, stdout=subprocess.DEVNULL, stderr=open(f"{journal}.stderr", "wb"))


def _private_host_state(args: argparse.Namespace) -> None:
    """A state folder and a uid range of the soak's own (``--shared-state`` keeps the host's): on a
    host shared with other harness-gym processes, their crash-recovery pass would reclaim the soak's
    killed owners (an older release skips uids outside its pool and drops the log), and the soak's
    figures would be theirs."""
    if args.shared_state:
        return
    from harness_gym.sandboxes import isolation

    os.environ[isolation.STATE_DIR_VARIABLE] = tempfile.mkdtemp(prefix="hg-soak-state-")
    os.environ.setdefault(isolation.UID_BASE_VARIABLE, "3000000")  # far from the default pool
    os.environ.setdefault(isolation.UID_COUNT_VARIABLE, str(isolation.DEFAULT_UID_COUNT))


def soak(args: argparse.Namespace) -> dict[str, Any]:
    from harness_gym.sandboxes import isolation

    _private_host_state(args)
    tmpdir = Path(tempfile.mkdtemp(prefix="hg-soak-", dir="/tmp"))
    os.chmod(tmpdir, 0o755)  # sandbox uids reach it: every folder of the run lands here
    journals = Path(tempfile.mkdtemp(prefix="hg-soak-journals-"))
    (tmpdir.parent / f"{tmpdir.name}.tasks").mkdir()
    _make_task_files(tmpdir.parent / f"{tmpdir.name}.tasks")
    stop = tmpdir.parent / f"{tmpdir.name}.stop"
    rng = random.Random(args.seed)
    share = max(1, args.environments // args.owners)
    owners: dict[int, tuple[subprocess.Popen[bytes], Path]] = {}
    all_pids: list[int] = []
    killed: list[int] = []
    seen: dict[str, set[str]] = {}
    lessee: dict[str, int] = {}  # uid token -> the owner whose registry listed it
    serial = 0

    def spawn() -> None:
        nonlocal serial
        serial += 1
        journal = journals / f"owner-{serial}.jsonl"
        proc = _start_owner(args, tmpdir, journal, share, rng.randrange(1 << 30))
        owners[proc.pid] = (proc, journal)
        all_pids.append(proc.pid)

    for _ in range(args.owners):
        spawn()
    started = time.monotonic()
    deadline = started + args.minutes * 60
    next_kill = started + args.kill_every
    while time.monotonic() < deadline:
        time.sleep(0.5)
        for pid, (proc, _) in list(owners.items()):
            for kind, values in _registry_entries(pid).items():
                seen.setdefault(kind, set()).update(values)
                if kind == "uid":
                    lessee.update(dict.fromkeys(values, pid))
            if proc.poll() is not None:  # an owner that died by itself: reported, replaced
                del owners[pid]
                spawn()
        if time.monotonic() >= next_kill and owners:
            victim = rng.choice(sorted(owners))
            for kind, values in _registry_entries(victim).items():
                seen.setdefault(kind, set()).update(values)
                if kind == "uid":
                    lessee.update(dict.fromkeys(values, victim))
            os.kill(victim, signal.SIGKILL)
            owners.pop(victim)[0].wait()
            killed.append(victim)
            spawn()
            next_kill = time.monotonic() + args.kill_every
    stop.touch()
    for pid, (proc, _) in owners.items():
        try:
            proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            os.kill(pid, signal.SIGKILL)
            proc.wait()
            killed.append(pid)
    elapsed = time.monotonic() - started
    reclaimed = isolation.reclaim_dead_owners()  # what the next start runs
    starts: dict[str, str] = {}
    ends: Counter[str] = Counter()
    outcomes: Counter[str] = Counter()
    by_fault: dict[str, Counter[str]] = {}
    for journal in sorted(journals.glob("owner-*.jsonl")):
        for line in journal.read_text().splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue  # a line torn by the kill
            if entry["kind"] == "start":
                starts[entry["episode"]] = entry["fault"]
            else:
                ends[entry["episode"]] += 1
                outcomes[entry["outcome"]] += 1
                fault = entry["fault"].partition(":")[0]
                by_fault.setdefault(fault, Counter())[entry["outcome"]] += 1
                if entry.get("fired") is not None:
                    by_fault[fault]["fired" if entry["fired"] else "did_not_fire"] += 1
    killed_owners = {str(pid) for pid in killed}
    in_flight = [e for e in starts if ends[e] == 0 and e.partition("-")[0] in killed_owners]
    missing = [e for e in starts if ends[e] == 0 and e.partition("-")[0] not in killed_owners]
    duplicated = [e for e, n in ends.items() if n > 1]
    outcomes["errored"] += len(in_flight)  # the supervisor's record of an episode its owner took with it
    by_fault.setdefault("owner_killed", Counter())["errored"] += len(in_flight)
    left = _leftovers(seen, all_pids, tmpdir)
    left = [
        f"{line} (owner {lessee[token]}{', killed' if lessee[token] in killed else ''})"
        if (token := line.split(" ")[2] if line.startswith("uid lease ") else "") in lessee
        else line
        for line in left
    ]
    errors = []
    for journal in sorted(journals.glob("owner-*.jsonl.stderr")):
        text = journal.read_text(errors="replace").strip()
        if "Traceback" in text or "acquire:" in text:
            errors.append(text[-600:])
    unfired = [f for f in ("oom", "tmpfs_full") if not by_fault.get(f, Counter())["fired"]]
    result = {
        "minutes": round(elapsed / 60, 2),
        "environments": share * args.owners,
        "owners_started": len(all_pids),
        "owners_killed": len(killed),
        "episodes": len(starts),
        "episodes_per_minute": round(len(starts) / (elapsed / 60), 1) if elapsed else 0.0,
        "outcomes": dict(outcomes),
        "by_fault": {fault: dict(counts) for fault, counts in sorted(by_fault.items())},
        "recorded_exactly_once": not missing and not duplicated,
        "missing": missing[:20],
        "duplicated": duplicated[:20],
        "reclaimed_after_the_run": len(reclaimed),
        "left_behind": left[:50],
        "owner_tracebacks": errors[:5],
        "faults_that_never_fired": unfired,
        "passed": not missing and not duplicated and not left and not errors and not unfired,
    }
    import shutil

    if not args.shared_state:
        shutil.rmtree(isolation.state_dir(), ignore_errors=True)
    shutil.rmtree(tmpdir, ignore_errors=True)
    shutil.rmtree(tmpdir.parent / f"{tmpdir.name}.tasks", ignore_errors=True)
    stop.unlink(missing_ok=True)
    shutil.rmtree(journals, ignore_errors=True)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=30.0, help="how long to soak (default 30)")
    parser.add_argument("--environments", type=int, default=64, help="environments in all (default 64)")
    parser.add_argument("--owners", type=int, default=4, help="owner processes sharing them (default 4)")
    parser.add_argument("--kill-every", type=float, default=60.0, help="seconds between kill -9 of an owner")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--shared-state", action="store_true", help="use the host's state folder and uid pool, not the soak's own"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "soak.json")
    parser.add_argument("--owner", type=Path, help=argparse.SUPPRESS)  # the owner process's journal
    parser.add_argument("--share", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--stop", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--task-root", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.owner is not None:
        owner(args.owner, args.share, args.seed, args.stop, args.task_root)
        return 0
    for name in ("minutes", "kill_every"):
        if not getattr(args, name) > 0:
            parser.error(f"--{name.replace('_', '-')} must be positive")
    if args.environments < 1 or args.owners < 1:
        parser.error("--environments and --owners must be at least 1")
    result = soak(args)
    print(json.dumps(result, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if result["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
