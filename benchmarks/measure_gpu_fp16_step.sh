#!/usr/bin/env bash
# Measure on one GPU (run on the GPU machine, from the repository root), in this order:
#   1. kernels: every kernel of 3 profiled steps of the testbed GPT (12 x 2048, seq 2048, micro-batch 4, vocab 50,304)
#      by benchmarks/kernel_breakdown.py, as DeepSpeed fp16 ZeRO-0 with FP16_Optimizer (--as-fused-adam: what
#      Megatron-DeepSpeed's FusedAdam gets), fp16 ZeRO-0 with FP16_UnfusedOptimizer (a torch optimizer), fp16 ZeRO-1,
#      bf16 ZeRO-0 (BF16_Optimizer) and plain torch bf16: what DeepSpeed's fp16 step costs beyond plain torch, beside
#      the bf16 step already measured on an H100 (measurements/h100-sxm5-80gb-2026-11-26/kernels/);
#   2. pinned: host memory that torch's CUDA caching host allocator takes for pinned buffers of given sizes
#      (pin_memory=True and Tensor.pin_memory(), as DeepSpeed's offload buffers are made);
#   3. hook: the megatron-core hook tests (`gpu` marked one included), one instrumented DeepSpeed run
#      (as benchmarks/check_gpu_hook.sh) and the hook's overhead (benchmarks/measure_gpu_hook_overhead.py), to see
#      that the hook as it is now still records CUDA-event steps, within its 1 % budget.
# Results in $OUT/results.tgz (re-packed after each part) and the log in $OUT/log.txt. Wheels come in .whl/.
# Usage: bash benchmarks/measure_gpu_fp16_step.sh [PARTS]   (PARTS: comma list of kernels,pinned,hook; default all)
# Runs: H200 2026-11-27 (measurements/h200-sxm-141gb-2026-11-27/): all parts, then `hook` after the hook's
# per-step changes of that session.
set -u
PARTS=${1:-kernels,pinned,hook}
OUT=${OUT:-/tmp/llmperf-gpu-out}; mkdir -p "$OUT"
W=/tmp/llmperf-gpu; rm -rf "$W"; mkdir -p "$W/kernels"
exec > >(tee -a "$OUT/log.txt") 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH LLMPERF_HOME=$W/home PYTHONUNBUFFERED=1
pack() { tar czf "$OUT/results.tgz.tmp" -C "$W" . && mv "$OUT/results.tgz.tmp" "$OUT/results.tgz"; }
T=examples/cpu-testbed
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv; nproc
  python3 -c "import torch, deepspeed; print('torch', torch.__version__, 'cuda', torch.version.cuda,
'deepspeed', deepspeed.__version__, 'gpu', torch.cuda.get_device_name())"
} > "$W/environment.txt" 2>&1
cat "$W/environment.txt"; pack

if [[ $PARTS == *kernels* ]]; then
  ds() {  # ds NAME STAGE PRECISION: a ds_config like Megatron-DeepSpeed's (dynamic loss scale from 2^12)
    local prec=$3
    [ "$prec" = fp16 ] && prec='"fp16": {"enabled": true, "loss_scale": 0, "initial_scale_power": 12,
      "loss_scale_window": 500, "hysteresis": 2, "min_loss_scale": 1}' || prec='"bf16": {"enabled": true}'
    printf '{"zero_optimization": {"stage": %s}, "gradient_clipping": 1.0, "steps_per_print": 1000000, %s}\n' \
      "$2" "$prec" > "$W/$1.json"
  }
  ds fp16_zero0 0 fp16; ds fp16_zero1 1 fp16; ds bf16_zero0 0 bf16
  M="--num-layers 12 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048
 --vocab-size 50304 --micro-batch-size 4"
  kb() {  # kb NAME ARGS...: one kernel table
    echo "== kernels $1 =="; local name=$1; shift
    timeout 90 python3 benchmarks/kernel_breakdown.py "$W/kernels/$name.txt" "$@" > "$W/kernels/$name.log" 2>&1
    echo "exit $?"; grep -E "^# wall|OVERFLOW|Error" "$W/kernels/$name.log" | head -5; pack
  }
  kb ds_fp16_zero0_fused --as-fused-adam --deepspeed_config "$W/fp16_zero0.json" $M
  kb ds_fp16_zero0_unfused --deepspeed_config "$W/fp16_zero0.json" $M
  kb ds_fp16_zero1 --deepspeed_config "$W/fp16_zero1.json" $M
  kb ds_bf16_zero0 --deepspeed_config "$W/bf16_zero0.json" $M --bf16
  kb plain_bf16 $M --bf16
fi

if [[ $PARTS == *pinned* ]]; then
  echo "== pinned =="
  timeout 60 python3 - > "$W/pinned.txt" 2>&1 <<'PY'
import torch

def rss():  # resident and locked host memory of this process, bytes
    f = dict(l.split(":", 1) for l in open("/proc/self/status"))
    return {k: int(f[k].split()[0]) * 1024 for k in ("VmRSS", "VmLck", "VmPin") if k in f}

torch.cuda.init()
print("torch", torch.__version__, "base", rss())
keep = []
for mib in (1, 3, 96, 100, 600, 1025, 1536, 3000):
    n = mib << 20
    before = rss()
    keep.append(torch.empty(n, dtype=torch.uint8, pin_memory=True))
    keep[-1].fill_(1)
    a = rss()
    keep.append(torch.ones(n, dtype=torch.uint8).pin_memory())
    b = rss()
    stats = torch.cuda.host_memory_stats() if hasattr(torch.cuda, "host_memory_stats") else {}
    print(f"size_mib {mib} empty_pin rss_delta_mib {(a['VmRSS'] - before['VmRSS']) / 2**20:.1f} "
          f"tensor.pin_memory rss_delta_mib {(b['VmRSS'] - a['VmRSS']) / 2**20:.1f} (incl. the pageable source) "
          f"host_alloc {({k: v for k, v in stats.items() if 'segment' in k or 'reserved' in k or 'allocated' in k})}")
PY
  echo "exit $?"; cat "$W/pinned.txt" | cut -c1-400; pack
fi

if [[ $PARTS == *hook* ]]; then
  echo "== hook =="
  timeout 150 python3 -m pytest -q -p no:cacheprovider tests/instrument/test_megatron_hook.py \
    tests/instrument/test_gpu_step_costs.py > "$W/gpu_tests.txt" 2>&1; echo "pytest exit $?"; tail -4 "$W/gpu_tests.txt"
  timeout 100 python3 -m llmperf_hook run --hardware h200-sxm-141gb --instrument 6 --run-dir "$W/r1" -- deepspeed \
    --num_gpus 1 $T/train_gpt.py --deepspeed_config $T/ds_zero1.json --num-layers 12 --hidden-size 1024 \
    --num-attention-heads 16 --seq-length 1024 --max-position-embeddings 1024 --micro-batch-size 8 \
    --global-batch-size 8 --vocab-size 50304 --train-iters 16 --bf16 > "$W/r1.log" 2>&1; echo "run exit $?"
  grep -E "step_time_s" "$W/r1.log" | tail -3; grep -iE "predicted|refine|hook" "$W/r1.log" | tail -6; pack
  timeout 100 python3 benchmarks/measure_gpu_hook_overhead.py "$W/hook_overhead.json" > "$W/hook_overhead.log" 2>&1
  echo "hook overhead exit $?"; tail -c 1500 "$W/hook_overhead.log"; pack
fi
echo "== done =="; date -u
