#!/usr/bin/env bash
# Hold-out single-GPU training steps on a lent GPU machine (run from the repository root; wheels in .whl/): eight
# testbed configurations that no earlier measurement (measurements/*/runs: the c01-c08 and z1a-z3c shapes) and no
# fitted constant has seen, to score the step model on configurations it was not developed on. Each is one
# `llmperf run --instrument 10` of examples/cpu-testbed/train_gpt.py (DeepSpeed ZeRO-0..3 bf16, fp16 and fp32, with
# and without accumulation, and plain torch), read by benchmarks/bench_gpu_steps.py. Then the GPU-marked hook tests
# and a short `llmperf profile --device cuda` (the sampler's CUDA path as the code is now). Part `kernels`: every
# kernel of three profiled steps (benchmarks/kernel_breakdown.py) of the runs the step model missed most (h02,
# h04, h05, h06) and of h01 (predicted within 0.1 %) as a control.
# Results in $OUT/results.tgz (re-packed after each run), log in $OUT/log.txt.
#   Usage: bash benchmarks/measure_gpu_holdout.sh [PARTS]   (PARTS: comma list of runs,tests,profile,kernels;
#   default runs,tests,profile)
set -u
PARTS=${1:-runs,tests,profile}
source benchmarks/gpu_prologue.sh
HW=$(python3 -c "import torch; n=torch.cuda.get_device_name(); print('h200-sxm-141gb' if 'H200' in n else 'h100-sxm5-80gb')")
echo "hardware preset: $HW"
mkdir -p "$W/runs"
printf '{"zero_optimization": {"stage": 1}, "fp16": {"enabled": true, "initial_scale_power": 12},
 "gradient_clipping": 1.0, "steps_per_print": 1000000}\n' > "$W/ds_zero1_fp16.json"
V="--vocab-size 50304 --train-iters 16"
shape() {  # shape LAYERS HIDDEN HEADS SEQ MBS GBS: the testbed's Megatron-style shape flags
  echo "--num-layers $1 --hidden-size $2 --num-attention-heads $3 --seq-length $4 --max-position-embeddings $4" \
       "--micro-batch-size $5 --global-batch-size $6"
}
run() {  # run ID ARGS...: one instrumented training run, its own log and exit code
  local id=$1; shift
  echo "== run $id: $* =="
  timeout 120 python3 -m llmperf_hook run --hardware "$HW" --instrument 10 --run-dir "$W/runs/$id" -- "$@" \
    > "$W/runs/$id.log" 2>&1
  echo "run $id exit $? $(date -u +%T)"; grep -E "step_time_s|Error|error|predicted|measured" "$W/runs/$id.log" | tail -4; pack
}
DS="deepspeed --num_gpus 1 $T/train_gpt.py --no-pipeline-parallel"
if [[ $PARTS == *runs* ]]; then
  run h01 $DS --deepspeed_config $T/ds_zero0.json $(shape 16 3072 24 1024 4 4) $V --bf16
  run h02 $DS --deepspeed_config $T/ds_zero1.json $(shape 24 2048 16 4096 2 2) $V --bf16
  run h03 $DS --deepspeed_config $T/ds_zero2.json $(shape 8 4096 32 1024 8 16) $V --bf16
  run h04 $DS --deepspeed_config $T/ds_zero3.json $(shape 20 2560 20 2048 2 2) $V --bf16
  run h05 $DS --deepspeed_config $T/ds_zero1.json $(shape 32 1024 8 2048 8 8) --ffn-hidden-size 2816 \
      --vocab-size 32000 --train-iters 16 --bf16
  run h06 python3 $T/train_gpt.py $(shape 6 5120 40 2048 2 2) --ffn-hidden-size 13824 $V --bf16
  run h07 $DS --deepspeed_config "$W/ds_zero1_fp16.json" $(shape 10 2304 18 2048 4 4) $V
  run h08 $DS --deepspeed_config $T/ds_zero0.json $(shape 6 1024 16 1024 8 8) $V
fi
if [[ $PARTS == *tests* ]]; then
  echo "== GPU-marked tests =="
  timeout 150 python3 -m pytest -q -p no:cacheprovider -m gpu tests/instrument > "$W/gpu_tests.txt" 2>&1
  echo "pytest exit $?"; tail -3 "$W/gpu_tests.txt"; pack
fi
if [[ $PARTS == *profile* ]]; then
  echo "== profile --device cuda =="
  timeout 90 python3 -m llmperf_hook profile --device cuda --dtype bf16 --budget 0.5 --ops gemm,layernorm,attention \
    --name gpu-check > "$W/profile.txt" 2>&1
  echo "profile exit $?"; tail -8 "$W/profile.txt"; pack
fi
if [[ $PARTS == *trace* ]]; then TRACE=1; fi
if [[ $PARTS == *kernels* ]]; then
  mkdir -p "$W/kernels"
  kb() {  # kb ID ARGS...: the kernel table of one configuration (and with TRACE=1 one step's Chrome trace)
    local id=$1; shift
    [[ -z ${IDS:-} || ,$IDS, == *,$id,* ]] || return 0  # IDS=h05,h04: only those
    echo "== kernels $id =="
    KB_TRACE=${TRACE:+$W/kernels/$id.trace.json.gz} timeout 90 python3 benchmarks/kernel_breakdown.py "$W/kernels/$id.txt" "$@" > "$W/kernels/$id.log" 2>&1
    echo "exit $? $(date -u +%T)"; grep -E "^# wall|Error" "$W/kernels/$id.log" | head -3; pack
  }
  kb h05 --deepspeed_config $T/ds_zero1.json $(shape 32 1024 8 2048 8 8) --ffn-hidden-size 2816 --vocab-size 32000 --bf16
  kb h04 --deepspeed_config $T/ds_zero3.json $(shape 20 2560 20 2048 2 2) --vocab-size 50304 --bf16
  kb h06 $(shape 6 5120 40 2048 2 2) --ffn-hidden-size 13824 --vocab-size 50304 --bf16
  kb h02 --deepspeed_config $T/ds_zero1.json $(shape 24 2048 16 4096 2 2) --vocab-size 50304 --bf16
  kb h01 --deepspeed_config $T/ds_zero0.json $(shape 16 3072 24 1024 4 4) --vocab-size 50304 --bf16
fi
date -u
