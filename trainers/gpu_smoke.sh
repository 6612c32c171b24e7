#!/usr/bin/env bash
# GPU smoke test of the trainer: a few real OpenRLHF GRPO steps on one GPU with a small model.
#
#   MODEL=/path/to/Qwen2.5-0.5B-Instruct bash trainers/gpu_smoke.sh
#
# Needs a CUDA machine with `pip install -e ".[train]" "openrlhf[vllm]==0.11.2"` and bubblewrap.
# It starts a local Ray head (unless one runs), trains 2 steps of the Harness Scaling GRPO recipe shrunk to one GPU
# (2 tasks x 2 rollouts per step, 4K tokens), then checks that the executor logged rollouts and
# prints the training metrics. Everything goes to ${OUT:-runs/gpu-smoke}.
set -euo pipefail
cd "$(dirname "$0")/.."
: "${MODEL:?set MODEL to a local chat model folder (or a hub id the machine can download)}"
OUT="${OUT:-runs/gpu-smoke}"
rm -rf "$OUT"
# a cluster that is already running is used and left running; only one started here is stopped
if ray status >/dev/null 2>&1; then
  echo "using the Ray cluster already running on this node (it is not stopped afterwards)"
else
  ray start --head --num-gpus=1 --disable-usage-stats >/dev/null
  trap 'ray stop --force >/dev/null 2>&1 || true' EXIT
fi

python -m trainers.launch harness-scaling-grpo --output-dir "$OUT" \
  --set model="$MODEL" \
  --set ray.address=http://127.0.0.1:8265 \
  --set dataset.suite=builtin:train --set dataset.tasks_per_step=2 --set dataset.max_steps=2 \
  --set eval_dataset=null \
  --set executor.max_steps=4 --set executor.env_workers=8 \
  --set openrlhf.actor.num_gpus_per_node=1 --set openrlhf.ref.num_gpus_per_node=1 \
  --set openrlhf.vllm.num_engines=1 --set openrlhf.vllm.tensor_parallel_size=1 \
  --set openrlhf.vllm.gpu_memory_utilization=0.5 --set openrlhf.ds.zero_stage=2 \
  --set openrlhf.rollout.batch_size=2 --set openrlhf.rollout.n_samples_per_prompt=2 \
  --set openrlhf.train.batch_size=4 --set openrlhf.rollout.micro_batch_size=2 \
  --set openrlhf.data.max_len=4096 --set openrlhf.rollout.max_new_tokens=256 \
  --set openrlhf.eval.steps=-1 --set openrlhf.ckpt.save_steps=-1

ls "$OUT"/rollouts.*.jsonl >/dev/null 2>&1 || { echo "smoke test failed: no rollouts were logged" >&2; exit 1; }
python -m trainers.metrics "$OUT/rollouts.jsonl" --out "$OUT/metrics.json"
echo "GPU smoke test passed: $(cat "$OUT"/rollouts.*.jsonl | wc -l) rollouts, metrics in $OUT/metrics.json"
