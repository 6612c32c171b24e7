import json

from conftest import requires_bwrap

from harness_gym.cli import main
from harness_gym.tasks import load_tasks


def test_configs_and_neighbours(capsys):
    assert main(["configs", "--set", "training"]) == 0
    assert len(capsys.readouterr().out.split()) == 18
    assert main(["configs", "--neighbours", "S0T0O0C0W0"]) == 0
    assert len(capsys.readouterr().out.split()) == 10
    assert main(["configs", "--set", "training,S0T0O0C0W0,heldout"]) == 0
    assert len(capsys.readouterr().out.split()) == 36


def test_schedule_json_lines(capsys):
    assert main(["schedule", "--tasks", "5", "--tasks-per-step", "2", "--k", "2"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 10 and max(r["step"] for r in rows) == 5


def test_bad_input_is_a_clear_error(capsys):
    assert main(["configs", "--set", "S9"]) == 2
    assert "expected the form" in capsys.readouterr().err


@requires_bwrap
def test_check_runs_the_reference_agent(tmp_path, capsys):
    out = tmp_path / "check.jsonl"
    assert main(["check", "--configs", "S2T2O2C2W2", "--tasks", "builtin:eval", "--out", str(out)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == len(load_tasks("builtin:eval")) and all(r["reward"] == 1.0 for r in rows)
    assert "failures: 0" in capsys.readouterr().out


def _cli_options(parser, path):
    """(command path, option, help) for every argument of every (sub)command."""
    import argparse

    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _cli_options(sub, [*path, name])
        elif not isinstance(action, argparse._HelpAction):
            yield " ".join(path), (action.option_strings or [action.dest])[0], action.help or ""


def test_every_cli_option_has_help_text_and_its_suite_examples_load():
    import re

    from harness_gym.cli import build_parser
    from harness_gym.tasks import load_tasks

    options = list(_cli_options(build_parser(), ["harness-gym"]))
    assert len(options) > 80
    assert [f"{c} {o}" for c, o, h in options if not h.strip()] == []
    for suite in {s for _, _, h in options for s in re.findall(r"\bbuiltin:\w+", h)}:
        assert load_tasks(suite), f"a help text suggests {suite}, which does not load"
