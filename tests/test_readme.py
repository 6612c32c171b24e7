"""The README's Python examples run as written."""

import re
from pathlib import Path

import pytest
from conftest import requires_bwrap

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.DOTALL)


def test_readme_has_examples_and_both_commands():
    text = README.read_text(encoding="utf-8")
    assert len(BLOCKS) >= 3
    ci = (README.parent / ".ci/run").read_text(encoding="utf-8").strip().splitlines()[-1]
    assert ci in text, "the README must show the exact test command that .ci/run runs"
    assert "harness-gym check" in text


@requires_bwrap
@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example(index, capsys):
    exec(compile(BLOCKS[index], f"README.md example {index}", "exec"), {})
