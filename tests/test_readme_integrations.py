"""The README's integration examples run as printed (each block is read from README.md, so the text
and the test cannot drift), and the pieces they rest on: the exported model's tool-capable template,
checked with TRL's own ``supports_tool_calling``; finalizers instead of ``__del__``."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import readme_block, requires_bwrap

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
trl = pytest.importorskip("trl")


def run_python(code: str, cwd: Path, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env["TRL_EXPERIMENTAL_SILENCE"] = "1"
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def test_the_packaged_tool_template_is_the_one_trl_knows_and_renders_as_the_environment(tokenizer):
    import copy

    from trl.chat_template_utils import qwen2_5_chat_template

    from harness_gym.model_export import renders_tool_conversations, tool_template_for
    from harness_gym.tool_formats import text_messages

    assert not renders_tool_conversations(tokenizer)  # SmolLM2's own: TRL refuses it
    assert not trl.supports_tool_calling(tokenizer)
    template = tool_template_for(tokenizer)
    assert template == qwen2_5_chat_template  # byte for byte, so TRL parses replies and trains with it
    exported = copy.deepcopy(tokenizer)
    exported.chat_template = template
    assert renders_tool_conversations(exported) and trl.supports_tool_calling(exported)
    assert tool_template_for(exported) is None  # a template that renders tools is kept
    tools = [{"type": "function", "function": {"name": "run", "description": "Run a command.", "parameters": {
        "type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}}]  # fmt: skip
    messages = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "List the files."},
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "run", "arguments": {"command": "ls"}}}]},
        {"role": "tool", "name": "run", "content": "a.txt"},
    ]  # fmt: skip
    native = exported.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True)
    as_environment = tokenizer.apply_chat_template(
        text_messages(messages, tools, "hermes"), tokenize=False, add_generation_prompt=True
    )
    assert native == as_environment


def test_readme_vllm_cpu_command_is_the_one_export_model_prints():
    from harness_gym.model_export import vllm_cpu_command

    command = vllm_cpu_command("exported-models/SmolLM2-135M-Instruct")
    assert "VLLM_CPU_KVCACHE_SPACE=" in command and command in README


@requires_bwrap
def test_trl_environments_close_by_finalizer_without_teardown_tracebacks(tmp_path):
    code = (
        "from harness_gym.export import prompt_rows\n"
        "from harness_gym.integrations.trl import environment_factory\n"
        "rows = prompt_rows('builtin:train', 'S1T1O1C0W0', task_limit=1)\n"
        "kept = environment_factory('S1T1O1C0W0', tasks='builtin:train')()\n"
        "kept.reset(**rows[0])\n"
        "dropped = environment_factory('S1T1O1C0W0', tasks='builtin:train')()\n"
        "dropped.reset(**rows[0])\n"
        "env = dropped._env\n"
        "del dropped\n"
        "import gc; gc.collect()\n"
        "assert env.sandbox is None, 'a collected instance closes its sandboxes'\n"
    )
    done = run_python(code, tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr


@requires_bwrap
@pytest.mark.slow
def test_readme_trl_grpo_on_the_exported_folder_runs_as_printed(tmp_path):
    """``harness-gym export-model`` then the README's GRPOTrainer block, unchanged, in a fresh process."""
    export = subprocess.run(
        [sys.executable, "-m", "harness_gym.cli", "export-model", "--out", "exported-models/SmolLM2-135M-Instruct"],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    if export.returncode != 0 and "does not exist" in export.stderr:
        pytest.skip("the packaged SmolLM2 model is not present")
    assert export.returncode == 0, export.stderr
    check = run_python(
        "from transformers import AutoTokenizer\nfrom trl import supports_tool_calling\n"
        "print(supports_tool_calling(AutoTokenizer.from_pretrained('exported-models/SmolLM2-135M-Instruct')))",
        tmp_path,
    )
    assert check.stdout.strip() == "True", check.stderr
    done = run_python(readme_block("trl-grpo"), tmp_path)
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.strip().splitlines()[-1] == "1"
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr[-4000:]
