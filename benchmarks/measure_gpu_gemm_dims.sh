#!/usr/bin/env bash
# Which dimension's alignment costs a GEMM (part gemm_dims of benchmarks/measure_gpu_alignment.py): Megatron's linear
# forward, dgrad and wgrad at (m, k, n) = GEMM_BASES with one dimension at a time set to base - 0/8/4/2/1 (aligned to
# the base, 8, 4, 2, 1 elements), fp16 and bf16. The 2026-11-27 call (measurements/h200-sxm-141gb-2026-11-27-c) varied
# only the LM head's width n. Run on the GPU machine from the repository root:
#   run(command="bash benchmarks/measure_gpu_gemm_dims.sh [PARTS]", timeout_s=200)
# PARTS (default gemm_dims): a comma list of measure_gpu_alignment.py's parts, e.g. gemm_dims,lm_head to check on
# another GPU both the dimension rule and the LM-head widths (~9 + ~17 s of timings).
# ~9 s of timings by --estimate, ~1 min with start-up; the part stops adding shapes at 60 s and the run is killed at
# 150 s. Results: $OUT/results.tgz (gemm_dims/: each part's CSV, alignment_meta.json, report.txt) and $OUT/log.txt.
set -u
PARTS=${1:-gemm_dims}
source benchmarks/gpu_prologue.sh
D="$W/gemm_dims"; mkdir -p "$D"
echo "== $PARTS ($(date -u)) =="
timeout 150 python3 benchmarks/measure_gpu_alignment.py --device cuda --parts "$PARTS" --out "$D" --budget-s 60 \
  > "$D/run.txt" 2> "$D/run.err"
echo "$PARTS exit $?"; grep -v Warning "$D/run.err" | tail -c 1500; pack
python3 benchmarks/measure_gpu_alignment.py --report "$D" > "$D/report.txt" 2>&1
sed -n '/^per-FLOP slowdown/,$p' "$D/report.txt"
echo "== done $(date -u) =="
pack
