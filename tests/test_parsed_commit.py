"""R2E-Gym's ``parsed_commit_content`` -> the gold patch (tasks/parsed_commit.py), against what git
itself writes and applies for a real tiny repository, and the R2E loader's reference solution."""

import json
import shutil
import subprocess

import pytest
from conftest import r2e_parsed_commit as parsed_commit

from harness_gym.cli import main
from harness_gym.tasks import load_tasks
from harness_gym.tasks.mutation import mutation_audit
from harness_gym.tasks.parsed_commit import ParsedCommitError, gold_patch, is_test_path

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


CALC = "".join(f"def f{i}(x):\n    return x + {i}\n\n\n" for i in range(12))


@pytest.fixture(scope="module")
def commit(tmp_path_factory):
    """A repository with a base and a fix commit: a Python file changed in two places (two hunks),
    one added, one deleted, one without a newline at its end (last in the diff), a binary ``.py``,
    a test file and a README."""
    repo = tmp_path_factory.mktemp("repo")
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "config", "user.name", "t")
    files = {
        "pkg/calc.py": CALC,
        "pkg/old.py": "def gone():\n    return 1\n",
        "pkg/frozen.py": "\0\1\2",
        "tests/test_calc.py": "def test_f0():\n    assert True\n",
        "README.md": "# calc\n",
        "util.py": "def tail():\n    return 1",
    }
    for path, text in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    (repo / "pkg/calc.py").write_text(CALC.replace("x + 1\n", "x - 1\n").replace("x + 10\n", "x * 10\n"))
    (repo / "pkg/old.py").unlink()
    (repo / "pkg/new.py").write_text("def fresh():\n    return 2\n")
    (repo / "pkg/frozen.py").write_text("\0\3")
    (repo / "tests/test_calc.py").write_text("def test_f0():\n    assert False\n")
    (repo / "README.md").write_text("# calc, fixed\n")
    (repo / "util.py").write_text("def tail():\n    return 2")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "fix")
    return repo


PYTHON = ["pkg/calc.py", "pkg/new.py", "pkg/old.py", "util.py"]


def test_the_gold_patch_is_what_git_diff_writes_for_the_non_test_python_files(commit):
    diff = git(commit, "diff", "HEAD~1", "HEAD")
    parsed = parsed_commit(diff)
    last = parsed["file_diffs"][-1]["hunks"][-1]["line_group"]["all_lines"]
    assert parsed["file_diffs"][-1]["header"]["file"]["path"] == "util.py"
    assert last[-2:] == [{"content": "No newline at end of file", "type": "note"}, {"content": "", "type": "context"}]
    gold = gold_patch(json.dumps(parsed))
    assert gold.patch == git(commit, "diff", "HEAD~1", "HEAD", "--", *PYTHON)
    assert gold.patch.count("\n@@ -") + gold.patch.startswith("@@") >= 5  # calc.py has two hunks
    assert sorted(gold.skipped) == [
        "README.md (not Python)",
        "pkg/frozen.py (binary)",
        "tests/test_calc.py (test file)",
    ]


def test_the_gold_patch_applies_to_the_base_and_gives_the_fixed_files(commit, tmp_path):
    gold = gold_patch(parsed_commit(git(commit, "diff", "HEAD~1", "HEAD")))
    base = tmp_path / "base"
    git(commit, "worktree", "add", "-q", "--detach", str(base), "HEAD~1")
    (tmp_path / "gold.patch").write_text(gold.patch)
    git(base, "apply", str(tmp_path / "gold.patch"))
    for path in PYTHON:
        fixed = subprocess.run(["git", "-C", str(commit), "show", f"HEAD:{path}"], capture_output=True, text=True)
        if fixed.returncode:  # deleted by the fix
            assert not (base / path).exists()
        else:
            assert (base / path).read_text() == fixed.stdout, path
    assert (base / "tests/test_calc.py").read_text().endswith("assert True\n")  # the tests are not the fix's
    assert (base / "README.md").read_text() == "# calc\n"


def corrupt(commit, change):
    parsed = parsed_commit(git(commit, "diff", "HEAD~1", "HEAD"))
    calc = next(d for d in parsed["file_diffs"] if d["header"]["file"]["path"] == "pkg/calc.py")
    change(parsed, calc)
    return parsed


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda p, c: c["hunks"][0]["line_group"]["all_lines"].pop(0),
            r"file_diffs\[\d\] \(pkg/calc.py\) hunk 0: its lines span 6 old / 6 new lines, its header says 7 / 7",
        ),
        (lambda p, c: c["hunks"][1]["line_group"]["all_lines"][0].update(type="moved"), r"hunk 1 line 0: unknown type"),
        (lambda p, c: c["hunks"][0]["line_group"]["all_lines"][0].update(content="a\nb"), r"one-line string"),
        (lambda p, c: c["hunks"][0]["descriptor"]["old_range"].update(start=-1), r"old_range.start"),
        (lambda p, c: c.update(plus_file=None), r"hunks but no ---/\+\+\+"),
        (lambda p, c: p.pop("file_diffs"), r"file_diffs is missing"),
    ],
)
def test_a_malformed_commit_is_named(commit, change, message):
    with pytest.raises(ParsedCommitError, match=message):
        gold_patch(corrupt(commit, change))


def test_test_files_follow_r2e_gyms_rule():
    assert [is_test_path(p) for p in ("a/tests/x.py", "a/test/x.py", "test_x.py", "a/b_test.py", "a/testing.py")] == [
        True, True, True, True, False,
    ]  # fmt: skip


def r2e_row(content, commit_hash="0123456789abcdef"):
    return {
        "repo_name": "calc", "docker_image": "calc:latest", "commit_hash": commit_hash,
        "problem_statement": "add() is wrong.", "prompt": "(the issue-writing prompt)",
        "execution_result_content": "(test code)", "parsed_commit_content": content,
        "expected_output_json": json.dumps({"test_add": "PASSED"}),
    }  # fmt: skip


def test_an_r2e_row_gets_its_gold_patch_as_reference_and_a_broken_one_none(commit, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("HARNESS_GYM_CACHE", str(tmp_path / "cache"))
    good = json.dumps(parsed_commit(git(commit, "diff", "HEAD~1", "HEAD")))
    rows = [r2e_row(good), r2e_row("{not json", "fedcba9876543210"), r2e_row(None, "aaaaaaaaaaaaaaaa")]
    (tmp_path / "r2e.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    fixed, broken, missing = load_tasks(f"r2e:{tmp_path / 'r2e.jsonl'}")
    (step,) = fixed.solution
    assert "git apply" in step["arguments"]["command"] and "x - 1" not in step["arguments"]["command"]  # base64
    assert fixed.metadata["gold_patch_skipped"] and "reference_error" not in fixed.metadata
    lines = gold_patch(good).patch.splitlines()
    changed = [line[1:].strip() for line in lines if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    assert len(changed) >= 6 and not [c for c in changed if c and c in fixed.instruction]  # never shown
    assert broken.solution == () and missing.solution == ()
    report = mutation_audit([broken, missing], None)  # no reference: reported, no sandbox started
    assert [t.error for t in report.tasks] == [
        "no reference solution (parsed_commit_content: not JSON (Expecting property name enclosed in double "
        "quotes at character 1))",
        "no reference solution (the row has no parsed_commit_content)",
    ]
    (tmp_path / "broken.jsonl").write_text(json.dumps(rows[1]) + "\n")
    assert main(["tasks", "audit", f"r2e:{tmp_path / 'broken.jsonl'}", "--mutants", "1"]) == 2
    assert "calc-fedcba987654: no reference solution (parsed_commit_content: not JSON" in capsys.readouterr().err
