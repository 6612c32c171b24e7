"""Valid tool calls of real CLIs are counted from the proxy's records, not assumed (issue 26).

Replays each CLI's recorded answers (``tests/data/external/rejections/``, refreshed by
``record_rejections.py``) to four scripted calls: an unknown tool, arguments the shell tool's schema
rejects, arguments that are not JSON, and a valid shell call. No CLI runs here.
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from harness_gym.external.catalog import ExternalCliError, load_cli, shipped_clis, validate_cli
from harness_gym.external.policies import PolicyReply, PolicyRequest
from harness_gym.external.proxy.recording import ProxyRecord, forged_calls
from harness_gym.external.validity import check_call, count_valid_calls

REJECTIONS = Path(__file__).parent / "data" / "external" / "rejections"
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import external_bench  # noqa: E402


def _records(name: str, *, permissive: bool = False) -> list[ProxyRecord]:
    """The recorded episode as proxy records; ``permissive``: every tool the script called is offered
    with an empty schema, so only the CLI's own answer can mark a call invalid."""
    data = json.loads((REJECTIONS / f"{name}.json").read_text(encoding="utf-8"))
    records = []
    for raw in data["records"]:
        request = copy.deepcopy(raw["policy_request"])
        if permissive:
            request["tools"] = [
                {"type": "function", "function": {"name": n, "parameters": {}}}
                for n in {t["function"]["name"] for t in request["tools"]} | {"NoSuchTool"}
            ]
        records.append(
            ProxyRecord(
                raw["dialect"],
                "/",
                None,
                "",
                raw["status"],
                policy_request=PolicyRequest(**request),
                policy_reply=PolicyReply(**raw["policy_reply"]),
                side=raw["side"],
            )
        )
    return records


def _reasons(counts: dict[str, Any]) -> dict[str, str]:
    return {c["id"]: c["reason"] for c in counts["invalid_calls"]}


@pytest.mark.parametrize("name", sorted(p.stem for p in REJECTIONS.glob("*.json")))
def test_only_the_valid_call_is_counted_valid(name: str) -> None:
    counts = count_valid_calls(load_cli(name), _records(name))
    reasons = _reasons(counts)
    made = {c["id"] for r in _records(name) if r.policy_reply for c in r.policy_reply.tool_calls}
    assert counts["tool_calls"] == len(made) >= 3  # the CLI may die on the malformed call (OpenClaw)
    assert counts["valid_tool_calls"] == int("call_ok" in made)
    assert "call_ok" not in reasons
    assert "unknown tool 'NoSuchTool'" in reasons["call_u"]
    assert "schema" in reasons["call_s"] or "refused" in reasons["call_s"]
    assert counts["parse_errors"] == 1 and "not JSON" in reasons["call_j"]
    assert counts["tool_errors"] == len(made) - 1 - counts["valid_tool_calls"]


@pytest.mark.parametrize("name", sorted(p.stem for p in REJECTIONS.glob("*.json")))
def test_the_clis_own_refusal_marks_a_call_invalid(name: str) -> None:
    """With every tool offered and no schema to check, the CLI's recorded answer alone (its file's
    ``rejected_call_results``) marks the unknown-tool and the wrong-arguments calls invalid."""
    counts = count_valid_calls(load_cli(name), _records(name, permissive=True))
    reasons = _reasons(counts)
    assert "refused it" in reasons["call_u"], reasons
    assert "refused it" in reasons["call_s"], reasons
    assert "call_ok" not in reasons


def test_every_shipped_cli_has_recorded_refusals() -> None:
    assert sorted(p.stem for p in REJECTIONS.glob("*.json")) == sorted(shipped_clis())
    assert all(cli.data.get("rejected_call_results") for cli in shipped_clis().values())


def test_check_call_against_the_offered_schema() -> None:
    offered = {"Bash": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}
    assert check_call({"name": "Bash", "arguments": '{"command": "ls"}'}, offered) is None
    assert check_call({"name": "Bash", "arguments": '{"command": 5}'}, offered)[0] == "tool"
    assert check_call({"name": "Bash", "arguments": "[1]"}, offered)[0] == "parse"
    assert check_call({"name": "bash", "arguments": '{"command": "ls"}'}, offered)[0] == "tool"
    # a CLI's broken schema is not held against the policy
    assert check_call({"name": "X", "arguments": "{}"}, {"X": {"type": "no-such-type"}}) is None


def test_a_bad_refusal_pattern_is_a_clear_error() -> None:
    data = dict(load_cli("claude-code-bare").data, rejected_call_results=["(unclosed"])
    with pytest.raises(ExternalCliError, match=r"rejected_call_results\[0\].*not a regular expression"):
        validate_cli(data)


def _bench_record(harness: str, **fields: Any) -> dict[str, Any]:
    base = {
        "harness": harness,
        "role": "model",
        "agent": "openai",
        "passed": False,
        "outcome": "failed",
        "steps": 3,
        "tool_calls": 2,
        "valid_tool_calls": 1,
        "tokens": {"prompt": 1000, "completion": 60},
    }
    return {**base, **fields}


def test_fidelity_table_reports_counted_valid_calls_turns_tokens_and_errors() -> None:
    records = [
        _bench_record("external:claude-code"),
        _bench_record("external:claude-code", outcome="error", error_kind="policy", tool_calls=0, valid_tool_calls=0),
        _bench_record("Harness-ClaudeCodeStyle", passed=True, outcome="passed", valid_tool_calls=2),
    ]
    table = external_bench.tables(
        external_bench.summarize(records), {"external:claude-code": "Harness-ClaudeCodeStyle"}
    )
    rows = {line.split("|")[1].strip(): line for line in table.splitlines() if line.startswith("| `")}
    fidelity = [line for line in table.splitlines() if "valid" in line and "attempts" in line]
    assert fidelity, table
    cli_rows = [line for line in table.splitlines() if line.startswith("| `external:claude-code` | openai")]
    assert cli_rows and "1 / 2 (50%)" in cli_rows[0] and "policy 1" in cli_rows[0], table
    preset = [line for line in table.splitlines() if line.startswith("| `Harness-ClaudeCodeStyle` | openai")]
    assert preset and "2 / 2 (100%)" in preset[0] and "1,000 / 60" in preset[0], table
    assert rows


def test_fidelity_plot_is_written(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    records = [_bench_record("external:claude-code"), _bench_record("Harness-ClaudeCodeStyle")]
    out = tmp_path / "plot.png"
    external_bench.plot(external_bench.summarize(records), {"external:claude-code": "Harness-ClaudeCodeStyle"}, out)
    assert out.read_bytes()[:4] == b"\x89PNG"


def test_a_call_written_in_text_that_the_backend_did_not_parse_is_an_attempt() -> None:
    """SmolLM2 behind vLLM writes hermes calls vLLM's parser may not take (bad JSON): the CLI sees
    text, but the model attempted a call; counted as an attempt and a parse error, as the engine does."""
    tools = [{"type": "function", "function": {"name": "Bash", "parameters": {"type": "object"}}}]
    texts = ['<tool_call>{"name": "Bash", "arguments": {"command": "ls"</tool_call>', "I will sort the file."]
    records = [
        ProxyRecord(
            "anthropic",
            "/v1/messages",
            None,
            "",
            200,
            policy_request=PolicyRequest(model="m", messages=[{"role": "user", "content": "go"}], tools=tools),
            policy_reply=PolicyReply(content=text),
        )
        for text in texts
    ]
    counts = count_valid_calls(load_cli("claude-code-bare"), records)
    assert (counts["tool_calls"], counts["valid_tool_calls"], counts["parse_errors"]) == (1, 0, 1)
    assert "hermes call in the reply's text" in counts["invalid_calls"][0]["reason"]


@pytest.mark.parametrize("name", ["gemini-cli", "opencode"])
def test_a_models_invalid_call_is_not_taken_for_a_forged_one(name: str) -> None:
    """What the CLIs send back for the recorded invalid calls is not tampering: Gemini CLI echoes a
    malformed call's arguments as the ``{}`` it was sent (its wire has no call ids, so calls match by
    name and arguments), and opencode renames an unknown tool's call to its own ``invalid`` tool
    (``refused_calls_renamed_to``). Both made a model's bad call a ``tampering`` error."""
    cli = load_cli(name)
    renamed = tuple(cli.data.get("refused_calls_renamed_to") or ())
    records = _records(name)
    turns = [r for r in records if not r.side and r.policy_reply is not None]
    for index, record in enumerate(turns[1:], start=1):
        replies = [r.policy_reply for r in turns[:index]]
        assert forged_calls(record.policy_request.messages, replies, renamed) == [], index
    if renamed:  # without the CLI's data the renamed call looks forged
        assert any(forged_calls(r.policy_request.messages, [t.policy_reply for t in turns], ()) for r in turns[1:])
