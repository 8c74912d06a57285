#!/usr/bin/env bash
# Third GPU measurement (run on the GPU machine, from the repository root), after measure_gpu.sh's two:
#   1. Megatron-Core GPT training steps on one GPU (benchmarks/measure_megatron_core.py: megatron-core's local
#      layer spec, DDP, Float16 optimizer, full recompute or none, micro-batch 1-8 at a fixed global batch), the
#      host-bound regime of vTrain's single-node sweeps, for `llmperf predict` of the matching Megatron-LM command;
#   2. the step-timing hook's overhead on a GPU job (benchmarks/measure_gpu_hook_overhead.py);
#   3. an independent set of operator samples (`llmperf profile --device cuda --for` a Llama-3-8B-like job the
#      shipped profile was not sampled for), to score the shipped profile on shapes it never saw.
# Everything lands in $OUT/results.tgz (re-packed after each step) and the log in $OUT/log.txt. Wheels for what
# the machine lacks (deepspeed, lightgbm, megatron-core, ...) come in .whl/.
#   4. (step "kernels") torch.profiler kernel tables of four Megatron-Core configurations.
# Usage: bash benchmarks/measure_gpu_extra.sh NAME PROFILE_MINUTES [STEPS]   (STEPS: any of mcore,kernels,hook,profile)
# Runs: H100 SXM5 2026-11-26 (NAME h100-sxm5-80gb, 1.5; then STEPS mcore,hook; then kernels).
set -u
NAME=${1:-h100-sxm5-80gb}; BUDGET=${2:-1.5}; STEPS=${3:-mcore,hook,profile}
OUT=${OUT:-/tmp/llmperf-gpu-out}; mkdir -p "$OUT"
W=/tmp/llmperf-gpu; rm -rf "$W"; mkdir -p "$W"
exec > >(tee -a "$OUT/log.txt") 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH LLMPERF_HOME=$W/home PYTHONUNBUFFERED=1
pack() { tar czf "$OUT/results.tgz.tmp" -C "$W" . && mv "$OUT/results.tgz.tmp" "$OUT/results.tgz"; }

{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv; nproc
  python3 -c "import torch, megatron.core, lightgbm; print('torch', torch.__version__, 'cuda', torch.version.cuda,
'megatron-core', megatron.core.__version__, 'lightgbm', lightgbm.__version__, 'gpu', torch.cuda.get_device_name())"
} > "$W/environment.txt" 2>&1
cat "$W/environment.txt"; pack

if [[ $STEPS == *mcore* ]]; then
  echo "== megatron-core steps =="
  timeout 210 python3 benchmarks/measure_megatron_core.py "$W/megatron_core.jsonl" 2> "$W/megatron_core.err"
  echo "megatron-core exit $?"; grep -v Warning "$W/megatron_core.err" | tail -c 1500; pack
fi
if [[ $STEPS == *kernels* ]]; then
  echo "== megatron-core kernel tables (torch.profiler) of four configurations =="
  timeout 150 python3 benchmarks/measure_megatron_core.py "$W/megatron_core_kernels.jsonl" --kernels "$W/kernels" \
    --only l12h1024-m4 l4h4096-m2 l24h2048-m2-norc l2h512-m1 2> "$W/megatron_core_kernels.err"
  echo "kernels exit $?"; grep -v Warning "$W/megatron_core_kernels.err" | tail -c 1500; pack
fi
if [[ $STEPS == *hook* ]]; then
  echo "== hook overhead on the GPU =="
  timeout 100 python3 benchmarks/measure_gpu_hook_overhead.py "$W/hook_overhead.json" 2> "$W/hook_overhead.err"
  echo "hook overhead exit $?"; tail -c 1500 "$W/hook_overhead.err"; pack
fi
if [[ $STEPS == *profile* ]]; then
  echo "== independent operator samples: a Llama-3-8B-like job (GQA 32/8, SwiGLU 14336, seq 8192, TP2 SP) =="
  JOB="torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336
   --num-attention-heads 32 --group-query-attention --num-query-groups 8 --seq-length 8192
   --max-position-embeddings 8192 --micro-batch-size 1 --global-batch-size 128 --tensor-model-parallel-size 2
   --sequence-parallel --bf16 --swiglu --normalization RMSNorm --position-embedding-type rope
   --untie-embeddings-and-output-weights --disable-bias-linear --tokenizer-type NullTokenizer --vocab-size 128256"
  timeout 150 python3 -m llmperf_hook profile --device cuda --dtype bf16 --budget "$BUDGET" --name "$NAME" \
    --for -- $JOB 2> "$W/profile.err"; echo "profile exit $?"; tail -c 1500 "$W/profile.err"; pack
fi
echo "== done $(date -u) =="
pack
