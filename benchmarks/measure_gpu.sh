#!/usr/bin/env bash
# Measure one GPU for real (run on the GPU machine, from the repository root):
#   1. `llmperf profile --device cuda --dtype bf16`: sampled operator timings (for S04-style Megatron shapes
#      first, then for the testbed's, then a space-filling design and adaptive rounds), stored in SQLite;
#   2. single-GPU DeepSpeed (ZeRO-0/1, bf16, SDPA flash attention) and plain-torch training steps of the
#      testbed GPT (examples/cpu-testbed/train_gpt.py) through `llmperf run --instrument`, two of them with an
#      operator-profiler window (--profile-ops).
# Everything lands in $OUT/results.tgz (re-packed after each step, so a timeout keeps what was measured) and
# the log in $OUT/log.txt. Wheels for what the machine lacks (deepspeed, lightgbm, ...) come in .whl/.
#   3. with RUN_GPU_TESTS=1, the megatron-core hook tests, its `gpu`-marked one included (CUDA), log in $OUT/gpu_tests.txt.
# FOR_A (optional) replaces the job that profile A samples first (default: S04's GPT-70B run).
# Usage: bash benchmarks/measure_gpu.sh NAME PROFILE_MINUTES_A PROFILE_MINUTES_B
# Runs: H100 SXM5 2026-11-26 (NAME h100-sxm5-80gb, 2 1); H200 SXM 2026-11-26 (NAME h200-sxm-141gb, 1.5 0.5, FOR_A =
# a Llama-3-70B-like GQA job, RUN_GPU_TESTS=1).
set -u
NAME=${1:-h100-sxm5-80gb}; BUDGET_A=${2:-2}; BUDGET_B=${3:-1}
OUT=${OUT:-/tmp/llmperf-gpu-out}; mkdir -p "$OUT"
W=/tmp/llmperf-gpu; rm -rf "$W"; mkdir -p "$W/runs"
exec > >(tee -a "$OUT/log.txt") 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH LLMPERF_HOME=$W/home PYTHONUNBUFFERED=1
pack() { tar czf "$OUT/results.tgz.tmp" -C "$W" . && mv "$OUT/results.tgz.tmp" "$OUT/results.tgz"; }
T=examples/cpu-testbed

{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv; nproc
  python3 -c "import torch, deepspeed, lightgbm, sklearn; print('torch', torch.__version__, 'cuda', torch.version.cuda,
'cudnn', torch.backends.cudnn.version(), 'deepspeed', deepspeed.__version__, 'lightgbm', lightgbm.__version__,
'sklearn', sklearn.__version__, 'gpu', torch.cuda.get_device_name(), torch.cuda.get_device_properties(0))"
} > "$W/environment.txt" 2>&1
cat "$W/environment.txt"; pack

echo "== profile A: ${FOR_A:+FOR_A job}${FOR_A:-Megatron GPT-70B shapes (S04 row 35: TP8 PP2 SP, seq 4096)} =="
S04="${FOR_A:-torchrun --nnodes 96 --nproc-per-node 8 pretrain_gpt.py --num-layers 84 --hidden-size 8192
 --num-attention-heads 64 --ffn-hidden-size 32768 --seq-length 4096 --max-position-embeddings 4096
 --micro-batch-size 1 --global-batch-size 384 --tensor-model-parallel-size 8 --pipeline-model-parallel-size 2
 --sequence-parallel --use-distributed-optimizer --bf16 --tokenizer-type NullTokenizer --vocab-size 131072}"
timeout 200 python3 -m llmperf_hook profile --device cuda --dtype bf16 --budget "$BUDGET_A" --name "$NAME" \
  --for -- $S04 2> "$W/profile_a.err"; echo "profile A exit $?"; tail -c 2000 "$W/profile_a.err"; pack

SHAPE="--num-layers 12 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048
 --micro-batch-size 4 --global-batch-size 4 --vocab-size 50304 --train-iters 12 --bf16"
echo "== profile B: testbed shapes =="
timeout 120 python3 -m llmperf_hook profile --device cuda --dtype bf16 --budget "$BUDGET_B" --name "$NAME" \
  --for -- deepspeed --num_gpus 1 $T/train_gpt.py --deepspeed_config $T/ds_zero1.json $SHAPE 2> "$W/profile_b.err"
echo "profile B exit $?"; tail -c 2000 "$W/profile_b.err"; pack

run() {  # run ID PROFILE_OPS LAUNCHER... : one instrumented training run, its own log and exit code
  local id=$1 ops=$2; shift 2
  local extra=(); [ "$ops" -gt 0 ] && extra=(--profile-ops "$ops")
  echo "== run $id: $* =="
  timeout 100 python3 -m llmperf_hook run --hardware "$NAME" --instrument 10 "${extra[@]}" --run-dir "$W/runs/$id" \
    -- "$@" > "$W/runs/$id.log" 2>&1
  echo "run $id exit $?"; grep -E "step_time_s|done:|Error|error" "$W/runs/$id.log" | tail -4; pack
}
DS="deepspeed --num_gpus 1 $T/train_gpt.py"
COMMON="--vocab-size 50304 --train-iters 16 --bf16"
run c01 2 $DS --deepspeed_config $T/ds_zero1.json --num-layers 12 --hidden-size 2048 --num-attention-heads 16 \
  --seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 4 --global-batch-size 4 $COMMON
run c02 0 $DS --deepspeed_config $T/ds_zero1.json --num-layers 12 --hidden-size 1024 --num-attention-heads 16 \
  --seq-length 1024 --max-position-embeddings 1024 --micro-batch-size 8 --global-batch-size 8 $COMMON
run c03 0 $DS --deepspeed_config $T/ds_zero0.json --num-layers 8 --hidden-size 4096 --num-attention-heads 32 \
  --seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 2 --global-batch-size 2 $COMMON
run c04 0 $DS --deepspeed_config $T/ds_zero0.json --num-layers 24 --hidden-size 1536 --num-attention-heads 16 \
  --seq-length 1024 --max-position-embeddings 1024 --micro-batch-size 8 --global-batch-size 8 $COMMON
run c05 0 $DS --deepspeed_config $T/ds_zero1.json --num-layers 16 --hidden-size 2560 --num-attention-heads 20 \
  --seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 1 $COMMON
run c06 2 $DS --deepspeed_config $T/ds_zero1.json --num-layers 4 --hidden-size 6144 --num-attention-heads 48 \
  --seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 2 --global-batch-size 2 $COMMON
run c07 0 $DS --deepspeed_config $T/ds_zero1.json --num-layers 12 --hidden-size 2048 --num-attention-heads 16 \
  --seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 2 --global-batch-size 8 $COMMON
run c08 0 python3 $T/train_gpt.py --num-layers 12 --hidden-size 2048 --num-attention-heads 16 \
  --seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 4 --global-batch-size 4 $COMMON
if [ "${RUN_GPU_TESTS:-0}" = 1 ]; then
  echo "== gpu tests =="
  timeout 150 python3 -m pytest -q -p no:cacheprovider tests/instrument/test_megatron_hook.py > "$OUT/gpu_tests.txt" 2>&1
  echo "gpu tests exit $?"; tail -5 "$OUT/gpu_tests.txt"
fi
echo "== done $(date -u) =="
pack
