"""Gemini CLI's own masking of old tool results (``masked_results`` in its file, proxy/masking.py): a
request whose history carries exactly what the CLI's ``ToolOutputMaskingService`` makes of a result
recorded earlier is not tampering, and the mask is recorded; every other rewrite still is. The masks
are made by the service's own code, cut from the installed bundle and run by its Node
(tests/data/external/gemini_masking.mjs), so the rule is checked against the CLI, not against a copy."""

from __future__ import annotations

import copy
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import cli_solution, require_cli, requires_bwrap
from test_external_proxy import post, recording

from harness_gym.external.catalog import ExternalCliError, load_cli, validate_cli
from harness_gym.external.policies import PolicyReply, ScriptedPolicy
from harness_gym.external.proxy import ModelProxy
from harness_gym.external.proxy.masking import ToolOutputMasking
from harness_gym.external.runner import canonical_transcript, run_external_episode
from harness_gym.tasks import load_tasks

DRIVER = Path(__file__).parent / "data" / "external" / "gemini_masking.mjs"
SPEC = load_cli("external:gemini-cli")
TURNS = 11  # ~10,000 tokens of tool output each: masking starts once ~80,000 are in the history


def _output(i: int) -> tuple[str, dict[str, Any]]:
    """Call ``i``'s tool and its response: shell output with sections and many lines, a file read with
    non-ASCII characters, and plain shell text without sections; calls 4-6 (masked in the first pass)
    where JavaScript and Python differ: an astral character cut in two by each end of the preview,
    sections after \\r and U+2028 and spaces only JavaScript's trim removes (or only Python's strip),
    an exit code and an error the output does not state."""
    lines = "\n".join(f"{i}:{j} " + "y" * 36 for j in range(1000))
    if i == 4:  # the pretty JSON starts with 15 units: the pair sits on units 249-250, and on -250
        return "read_file", {"output": "a" * 234 + "😀" + "x" * 39_000 + "😀" + "b" * 246}
    if i == 5:
        text = (
            f"\x1c\ufeff<untrusted_context>\n{lines}\r\nOutput: \u3000tail\x1c\u2028Exit Code: 5\n</untrusted_context>"
        )
        return "run_shell_command", {"output": text}
    if i == 6:
        return "run_shell_command", {
            "output": f"Output: {lines}\nProcess Group PGID: 46",
            "exitCode": 7,
            "error": "boom",
        }
    if i % 3 == 1:
        text = f"file {i} " + "é😀" * 3 + "x" * 39_000 + "ü😀" * 200
        return "read_file", {"output": text}
    if i % 3 == 2:
        return "run_shell_command", {"output": f"<untrusted_context>\n{lines}\n</untrusted_context>"}
    body = f"<untrusted_context>\nOutput: {lines}\nError: (none)\nExit Code: 3\nProcess Group PGID: 4{i}\n</untrusted_context>"
    return "run_shell_command", {"output": body, "exitCode": 3}


def _call(i: int) -> tuple[str, dict[str, Any]]:
    tool = _output(i)[0]
    return tool, {"command": f"step {i}"} if tool == "run_shell_command" else {"file_path": f"f{i}.txt"}


def _policy() -> ScriptedPolicy:
    replies = []
    for i in range(TURNS + 6):
        tool, arguments = _call(i)
        call = {"id": f"reply_{i}", "name": tool, "arguments": json.dumps(arguments)}
        replies.append(PolicyReply(tool_calls=[call], finish_reason="tool_calls"))
    return ScriptedPolicy(replies, final="done")


def _model(i: int) -> dict[str, Any]:
    tool, arguments = _call(i)
    return {
        "role": "model",
        "parts": [{"functionCall": {"id": f"{tool}_17961865{i:05d}_0", "args": arguments, "name": tool}}],
    }


def _result(i: int) -> dict[str, Any]:
    tool, response = _output(i)
    return {
        "role": "user",
        "parts": [{"functionResponse": {"id": f"{tool}_17961865{i:05d}_0", "name": tool, "response": response}}],
    }


def _body(contents: list[dict[str, Any]]) -> dict[str, Any]:
    """A request of the recorded shape (the CLI's own system prompt and tools) with these contents."""
    first = recording("gemini-cli")["records"][0]["request"]
    return {**first, "contents": [first["contents"][0], *contents]}


def _mask(history: list[dict[str, Any]], temp: Path) -> list[dict[str, Any]]:
    """The CLI's history after its own ToolOutputMaskingService.mask (the bundle's code, its Node)."""
    install = require_cli("gemini-cli")
    node = install / "node/node_modules/node/bin/node"
    bundle = install / "node_modules/@google/gemini-cli/bundle"
    payload = {"history": history, "tempDir": str(temp / ".gemini/tmp/workspace"), "sessionId": "4f0c-9a"}
    done = subprocess.run(
        [str(node), str(DRIVER), str(bundle)], input=json.dumps(payload), capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)["history"]


@pytest.fixture
def proxy(tmp_path: Path) -> Iterator[ModelProxy]:
    with ModelProxy(tmp_path / "proxy" / "model.sock") as server:
        yield server


def _rollout(proxy: ModelProxy):
    masking = ToolOutputMasking.from_data(SPEC.data["masked_results"])
    return proxy.open_rollout(_policy(), masking=masking)


def _send(proxy: ModelProxy, channel: Any, contents: list[dict[str, Any]]) -> None:
    path = recording("gemini-cli")["records"][0]["path"]
    status, text, _ = post(proxy, path, _body(contents), channel.secret)
    assert status == 200, text


def _honest(proxy: ModelProxy, channel: Any, turns: int) -> list[dict[str, Any]]:
    """``turns`` agent turns, each resending the history with the newest result: the history sent last."""
    contents: list[dict[str, Any]] = []
    for i in range(turns):
        _send(proxy, channel, contents)
        contents += [_model(i), _result(i)]
    return contents


@pytest.fixture(scope="module")
def masked_history(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """The CLI's history after TURNS results, masked by the CLI's code (the newest result then pending)."""
    contents = [c for i in range(TURNS) for c in (_model(i), _result(i))]
    return _mask([*contents, _model(TURNS)], tmp_path_factory.mktemp("gemini-home"))


def _texts(contents: list[dict[str, Any]]) -> list[str]:
    return [
        p["functionResponse"]["response"].get("output", "")
        for c in contents
        for p in c["parts"]
        if "functionResponse" in p
    ]


def test_a_genuine_mask_by_the_cli_is_accepted_recorded_and_the_transcript_keeps_the_full_result(
    proxy: ModelProxy, masked_history: list[dict[str, Any]], tmp_path: Path
) -> None:
    masked = [i for i, t in enumerate(_texts(masked_history)) if t.startswith("<tool_output_masked>")]
    assert masked == list(range(len(masked))) and len(masked) >= 3, "the CLI masks the oldest results"
    channel = _rollout(proxy)
    _honest(proxy, channel, TURNS + 1)
    _send(proxy, channel, [*masked_history, _result(TURNS)])
    later = [*masked_history, _result(TURNS), _model(TURNS + 1), _result(TURNS + 1)]
    _send(proxy, channel, later)  # the masks are resent unchanged on every later turn
    assert channel.tampered is None, channel.tampered
    assert sorted(channel.masked) == [f"reply_{i}" for i in masked]
    record = channel.records[TURNS + 1]
    assert [m["call_id"] for m in record.masked] == [f"reply_{i}" for i in masked]
    assert record.to_json()["masked_results"][0]["path"].endswith(".txt")
    assert channel.records[-1].masked == []  # recorded once, where the CLI first sent it
    for i in range(TURNS + 2, TURNS + 5):  # 30,000 more tokens of output: a later pass masks more
        _send(proxy, channel, later)
        later += [_model(i), _result(i)]
    again = _mask([*later, _model(TURNS + 5)], tmp_path)
    newly = [i for i, t in enumerate(_texts(again)) if t.startswith("<tool_output_masked>") and i not in masked]
    assert newly, "the CLI's next pass masks another result"
    _send(proxy, channel, [*again, _result(TURNS + 5)])
    assert channel.tampered is None, channel.tampered
    assert [m["call_id"] for m in channel.records[-1].masked] == [f"reply_{i}" for i in newly]
    transcript = canonical_transcript(SPEC, channel.records)
    results = [m["content"] for m in transcript if m["role"] == "tool"]
    full = [_output(i)[1] for i in range(TURNS + 1)]  # the first, full results (as the canonical text reads them)
    assert results[: TURNS + 1] == [r["output"] if len(r) == 1 else json.dumps(r) for r in full]


def _forged(proxy: ModelProxy, masked_history: list[dict[str, Any]], edit: Any) -> str | None:
    channel = _rollout(proxy)
    _honest(proxy, channel, TURNS + 2)  # the newest result too was sent in full before (a CLI's retry)
    contents = copy.deepcopy([*masked_history, _result(TURNS)])
    edit(contents)
    _send(proxy, channel, contents)
    return channel.tampered


def _output_of(contents: list[dict[str, Any]], i: int) -> dict[str, Any]:
    return contents[2 * i + 1]["parts"][0]["functionResponse"]["response"]


def _replace(old: str, new: str, i: int = 0) -> Any:
    def edit(contents: list[dict[str, Any]]) -> None:
        response = _output_of(contents, i)
        assert old in response["output"]
        response["output"] = response["output"].replace(old, new, 1)

    return edit


def _swap_preview(contents: list[dict[str, Any]]) -> None:
    """Call 0's masked text with call 3's preview (both shell results with sections), call 0's own file."""
    own, other = _output_of(contents, 0)["output"], _output_of(contents, 3)["output"]
    marker = "\n\nOutput too large. Full output available at: "
    _output_of(contents, 0)["output"] = other.rsplit(marker, 1)[0] + marker + own.rsplit(marker, 1)[1]


def _mask_newest(contents: list[dict[str, Any]]) -> None:
    """The newest result (sent in full by the last request) in the mask the CLI gives an old one."""
    newest = _output_of(contents, TURNS)["output"]
    template = _output_of(contents, 0)["output"]
    marker = "\n\nOutput too large. Full output available at: "
    path = template.rsplit(marker, 1)[1].replace(_result(0)["parts"][0]["functionResponse"]["id"].lower(), "x")
    _output_of(contents, TURNS)["output"] = "<tool_output_masked>\n" + newest[:50] + marker + path


@pytest.mark.parametrize(
    "edit",
    [
        _replace("0:1 y", "0:1 z"),  # a preview not cut from the original
        _swap_preview,  # the preview of another call's result
        _replace("Output too large.", "Output too Large."),  # the template, one byte altered
        _replace("<tool_output_masked>\n", "<tool_output_masked> \n"),
        _replace("/tool-outputs/", "/tool-output/"),  # a file path not of the CLI's shape
        _replace(".txt\n</tool", ".txt\nrm -rf /\n</tool"),
        _mask_newest,  # the CLI never masks its newest turn
    ],
    ids=[
        "preview-altered",
        "preview-of-another-call",
        "template-byte",
        "head-byte",
        "path-shape",
        "path-injected",
        "newest",
    ],
)
def test_a_forged_mask_is_tampering(proxy: ModelProxy, masked_history: list[dict[str, Any]], edit: Any) -> None:
    tampered = _forged(proxy, masked_history, edit)
    assert tampered and "different results" in tampered and "not the CLI's own masking" in tampered, tampered


def test_a_result_masked_again_differently_is_tampering(
    proxy: ModelProxy, masked_history: list[dict[str, Any]]
) -> None:
    """The CLI masks a result once and resends that mask: another file name later is not the CLI's."""
    channel = _rollout(proxy)
    _honest(proxy, channel, TURNS + 1)
    _send(proxy, channel, [*masked_history, _result(TURNS)])
    assert channel.tampered is None, channel.tampered
    again = copy.deepcopy([*masked_history, _result(TURNS)])
    _replace(".txt\n</tool", "0.txt\n</tool")(again)  # still of the CLI's shape: the random part is free
    _send(proxy, channel, again)
    assert channel.tampered and "masked again" in channel.tampered, channel.tampered


def test_a_mask_of_a_result_never_recorded_in_full_is_tampering(
    proxy: ModelProxy, masked_history: list[dict[str, Any]]
) -> None:
    """The agent's own request gives a real call's result masked before any request carried it."""
    channel = _rollout(proxy)
    _honest(proxy, channel, 1)  # the policy made call 0; no request carried its result yet
    _send(proxy, channel, masked_history[:2])
    assert channel.tampered and "already masked" in channel.tampered, channel.tampered


def test_a_genuine_mask_sent_too_early_is_tampering(proxy: ModelProxy, masked_history: list[dict[str, Any]]) -> None:
    """Call 0's exact mask, but with under 50,000 tokens of newer tool output: the CLI keeps it in full."""
    channel = _rollout(proxy)
    contents = _honest(proxy, channel, 4)
    contents[:2] = masked_history[:2]
    _send(proxy, channel, contents)
    assert channel.tampered and "newer tool output" in channel.tampered, channel.tampered


def test_without_the_rule_a_mask_stays_a_conflict(proxy: ModelProxy, masked_history: list[dict[str, Any]]) -> None:
    """Another CLI's channel (no masked_results) flags the CLI's genuine mask as before."""
    channel = proxy.open_rollout(_policy())
    _honest(proxy, channel, TURNS + 1)
    _send(proxy, channel, [*masked_history, _result(TURNS)])
    assert channel.tampered and "different results" in channel.tampered and "masking" not in channel.tampered


def test_a_cli_file_names_only_a_rule_the_proxy_implements() -> None:
    data = dict(SPEC.data)
    with pytest.raises(ExternalCliError, match="unknown masked_results rule"):
        validate_cli({**data, "masked_results": {**data["masked_results"], "rule": "gemini-cli-0.62.0-masking"}})
    with pytest.raises(ExternalCliError, match="reads Gemini's wire"):
        validate_cli({**data, "wire_api": "chat"})
    with pytest.raises(ExternalCliError, match=re.escape("0.61.0's bundle, not in @google/gemini-cli 0.62.0's")):
        validate_cli({**data, "package": {**data["package"], "version": "0.62.0"}})  # a pin bumped alone


@requires_bwrap
@pytest.mark.slow
def test_the_real_gemini_cli_masking_its_own_history_passes_untampered() -> None:
    """The real CLI in its sandbox, the scripted policy: 12 commands of ~35,000 characters of output
    each (~105,000 tokens by the CLI's estimate), then the task's reference solution. The CLI masks its
    oldest results on the way; the rollout passes (reward 1.0), not flagged, the masks recorded, and
    the transcript graders read has every result in full."""
    require_cli("gemini-cli")
    task = next(t for t in load_tasks("builtin") if t.id == "workspace-sort-unique")
    big = [f"seq {100_000 + 5_000 * i} {104_999 + 5_000 * i}" for i in range(12)]
    policy = cli_solution(task, "gemini-cli", first=big)
    episode = run_external_episode("external:gemini-cli", task, policy, max_turns=30, wall_s=600)
    record = episode.record
    assert record["outcome"] == "passed" and record["reward"] == 1.0, record["error"]
    masked = record["external"]["masked_results"]
    assert masked and all(m["tool"] == "run_shell_command" for m in masked), masked
    results = [m["content"] for m in episode.transcript if m["role"] == "tool"]
    assert sum(len(r) for r in results) // 4 > 80_000
    assert not any("<tool_output_masked>" in r for r in results)
    assert any(r["masked_results"] for r in episode.proxy_records)
