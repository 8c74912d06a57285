#!/usr/bin/env bash
# Two alignment questions in one device call (benchmarks/measure_gpu_alignment.py's docstring: what is timed, what
# each outcome means): lm_head (vTrain's unpadded vocab 50257 // TP against Megatron's padded 50304 // TP, h133)
# and attention (head dims 140 / 150 against 144 / 152 / 128, h131). Run on the GPU machine from the repository root:
#   run(command="bash benchmarks/measure_gpu_alignment.sh", timeout_s=300)
# No wheels are needed (torch, numpy and pyyaml are on the image; .whl/ is installed if present). Time: ~17 s + ~33 s
# of timings by --estimate, ~1-1.5 min with start-up; each part stops adding shapes at 75 s and the whole run is
# killed at 190 s, so it ends within ~3.5 min with what it measured. Results: $OUT/results.tgz (alignment/
# lm_head.csv, attention.csv, alignment_meta.json, report.txt), the log and the slowdown table in $OUT/log.txt.
# Read it back here with: python benchmarks/measure_gpu_alignment.py --report DIR
set -u
source benchmarks/gpu_prologue.sh
D="$W/alignment"; mkdir -p "$D"
echo "== alignment: lm_head + attention ($(date -u)) =="
timeout 190 python3 benchmarks/measure_gpu_alignment.py --device cuda --out "$D" --budget-s 75 > "$D/run.txt" \
  2> "$D/run.err"
echo "alignment exit $?"; grep -v Warning "$D/run.err" | tail -c 1500; pack
python3 benchmarks/measure_gpu_alignment.py --report "$D" > "$D/report.txt" 2>&1
sed -n '/^per-FLOP slowdown/,$p' "$D/report.txt"
echo "== done $(date -u) =="
pack
