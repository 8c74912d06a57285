#!/usr/bin/env bash
# DeepSpeed ZeRO-2 and ZeRO-3 on one GPU, beside ZeRO-1 in the same call (run on the GPU machine, from the
# repository root; wheels in .whl/). Until this script, step_ops priced ZeRO-2's bookkeeping as ZeRO-1's (measured)
# and ZeRO-3's partition machinery was never measured on a GPU; predict gave ZeRO-3 a faster step than ZeRO-1.
#   1. runs: `llmperf run --instrument 10` of the testbed GPT (examples/cpu-testbed/train_gpt.py, bf16, plain
#      engine: --no-pipeline-parallel) at ZeRO-1/2/3 in three shapes: 12 x 2048 seq 2048 micro-batch 4 (c01 of
#      measurements/*-2026-11-26), the same with micro-batch 2 and 4 micro-batches (c07: the accumulation path;
#      ZeRO-2/3 only: ZeRO-1's c07 is in measurements/*-2026-11-26), and
#      16 x 2560 seq 4096 micro-batch 1 (c05). Each run dir is read by benchmarks/bench_gpu_steps.py: step time,
#      allocated and reserved peak memory per step;
#   2. kernels: benchmarks/kernel_breakdown.py tables of ZeRO-2 and ZeRO-3 (12 x 2048, micro-batch 4), read by
#      benchmarks/deepspeed_step_cost.py against plain_bf16 of measurements/h200-sxm-141gb-2026-11-27/kernels;
#   3. diag: where ZeRO-3's extra time goes: kernel tables of ZeRO-3 with 4 micro-batches, with every parameter
#      persistent (stage3_param_persistence_threshold 1e12: no fetch or release), ZeRO-2 with 4 micro-batches, and a
#      cProfile of the host (KB_CPROFILE) for ZeRO-3 with 1 and 4 micro-batches;
#   4. tests: the GPU-marked hook tests.
# Results in $OUT/results.tgz, log in $OUT/log.txt.  Usage: bash benchmarks/measure_gpu_zero23.sh [PARTS]
# (PARTS: comma list of runs,kernels,diag,tests; default all)
set -u
PARTS=${1:-runs,kernels,diag,tests}
source benchmarks/gpu_prologue.sh
mkdir -p "$W/runs" "$W/kernels"
SHAPE_A="--num-layers 12 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048
 --micro-batch-size 4 --global-batch-size 4"
SHAPE_C="--num-layers 12 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048
 --micro-batch-size 2 --global-batch-size 8"
SHAPE_B="--num-layers 16 --hidden-size 2560 --num-attention-heads 20 --seq-length 4096 --max-position-embeddings 4096
 --micro-batch-size 1 --global-batch-size 1"
COMMON="--vocab-size 50304 --train-iters 16 --bf16 --no-pipeline-parallel"

if [[ $PARTS == *runs* ]]; then
  run() {  # run ID STAGE SHAPE: one instrumented training run, its own log and exit code
    echo "== run $1: ZeRO-$2 =="
    timeout 100 python3 -m llmperf_hook run --hardware h200-sxm-141gb --instrument 10 --run-dir "$W/runs/$1" -- \
      deepspeed --num_gpus 1 $T/train_gpt.py --deepspeed_config $T/ds_zero$2.json $3 $COMMON > "$W/runs/$1.log" 2>&1
    echo "run $1 exit $?"; grep -E "step_time_s|Error|error" "$W/runs/$1.log" | tail -3; pack
  }
  for z in 1 2 3; do run "z${z}a" $z "$SHAPE_A"; done
  for z in 2 3; do run "z${z}c" $z "$SHAPE_C"; done
  for z in 2 3; do run "z${z}b" $z "$SHAPE_B"; done
fi

kb() {  # kb NAME CONFIG SHAPE [cprofile]: one kernel table (and a cProfile of the host with a 4th argument)
  echo "== kernels $1 =="
  KB_CPROFILE=${4:+$W/kernels/$1.cprofile.txt} timeout 90 python3 benchmarks/kernel_breakdown.py \
    "$W/kernels/$1.txt" --deepspeed_config "$2" $3 --vocab-size 50304 --bf16 > "$W/kernels/$1.log" 2>&1
  echo "exit $?"; grep -E "^# wall|Error" "$W/kernels/$1.log" | head -3; pack
}

if [[ $PARTS == *kernels* ]]; then
  for z in 2 3; do kb "ds_bf16_zero$z" "$T/ds_zero$z.json" "$SHAPE_A"; done
fi

if [[ $PARTS == *diag* ]]; then  # where ZeRO-3's extra time goes: accumulation, and with every parameter persistent
  printf '{"zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 1000000000000}, "gradient_clipping": 1.0,
 "steps_per_print": 1000000}\n' > "$W/ds_zero3_persist.json"
  kb ds_bf16_zero3_accum4 $T/ds_zero3.json "$SHAPE_C" cprofile
  kb ds_bf16_zero3_persist "$W/ds_zero3_persist.json" "$SHAPE_A"
  kb ds_bf16_zero3_persist_accum4 "$W/ds_zero3_persist.json" "$SHAPE_C"
  kb ds_bf16_zero2_accum4 $T/ds_zero2.json "$SHAPE_C"
  kb ds_bf16_zero3_cprofile $T/ds_zero3.json "$SHAPE_A" cprofile
fi

if [[ $PARTS == *tests* ]]; then
  echo "== gpu tests =="
  timeout 150 python3 -m pytest -q -p no:cacheprovider tests/instrument/test_megatron_hook.py \
    tests/instrument/test_gpu_step_costs.py > "$W/gpu_tests.txt" 2>&1; echo "pytest exit $?"; tail -4 "$W/gpu_tests.txt"
  pack
fi
echo "== done =="; date -u
