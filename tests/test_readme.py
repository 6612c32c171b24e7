"""The README's Python examples run as written and print what the README shows.

An example that prints is followed by a ```text block with its output; ``...`` in that block stands
for any text (a path, a timing, a digest that differs by machine)."""

import re
from pathlib import Path

import pytest
from conftest import requires_bwrap

README = Path(__file__).resolve().parent.parent / "README.md"
TEXT = README.read_text(encoding="utf-8")
# a python block, and the text block right after it (blank lines between at most)
EXAMPLES = re.findall(r"```python\n(.*?)```[ \t]*\n(?:[ \t]*\n)*(?:```text\n(.*?)```)?", TEXT, re.DOTALL)


def matches(expected: str, printed: str) -> bool:
    """Whether ``printed`` is ``expected``, line ends aside, where ``...`` stands for any text."""
    normal = "\n".join(line.rstrip() for line in printed.strip().splitlines())
    pattern = ".*?".join(re.escape(part) for part in expected.strip().split("..."))
    return re.fullmatch(pattern, normal, re.DOTALL) is not None


def test_readme_has_examples_and_both_commands():
    assert len(EXAMPLES) >= 3
    ci = (README.parent / ".ci/run").read_text(encoding="utf-8").strip().splitlines()[-1]
    assert ci in TEXT, "the README must show the exact test command that .ci/run runs"
    assert "harness-gym check" in TEXT


def test_every_example_that_prints_shows_its_output():
    missing = [code.splitlines()[0] for code, output in EXAMPLES if "print(" in code and not output.strip()]
    assert missing == [], "examples that print need a ```text block with the output after them"


def test_the_comparison_can_fail():
    assert matches("a ... c", "a b b c\n")
    assert matches("x\ny", "x  \ny\n")
    assert not matches("a ... c", "a b d")
    assert not matches("1.0", "0.0")


@requires_bwrap
@pytest.mark.parametrize("index", range(len(EXAMPLES)))
def test_readme_example(index, capsys):
    code, expected = EXAMPLES[index]
    exec(compile(code, f"README.md example {index}", "exec"), {})
    printed = capsys.readouterr().out
    if expected.strip():
        assert matches(expected, printed), f"README example {index} printed:\n{printed}\nthe README shows:\n{expected}"


def test_every_relative_link_and_image_is_a_tracked_file():
    """A link or plot the README shows must be in the repository: ``benchmarks/results/`` is
    ignored by git, so a figure written there and never force-added is a broken image on a clean clone."""
    import subprocess

    root = README.parent
    tracked = set(
        subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True).stdout.split()
    )
    targets = {
        m.split("#")[0] for m in re.findall(r"\]\(([^)\s]+)\)", TEXT) if "://" not in m and not m.startswith("#")
    }
    assert targets, "the README links no file: the pattern is wrong"
    missing = sorted(
        t for t in targets if t not in tracked and not any(p.startswith(t.rstrip("/") + "/") for p in tracked)
    )
    assert not missing, f"README links files that are not tracked by git: {missing}"
