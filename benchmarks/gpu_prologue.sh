# Sourced by the GPU measurement scripts (run on the lent GPU machine, from the repository root, with the wheels the
# machine lacks in .whl/): the work folder $W, the log $OUT/log.txt, the wheels installed under /tmp/site, $T (the
# testbed), `pack` (re-packs $W into $OUT/results.tgz, so a timeout keeps what was measured) and the environment
# written to $W/environment.txt. Scripts written before 2026-11-27's session carry their own copy of these lines, as
# they ran.
OUT=${OUT:-/tmp/llmperf-gpu-out}; mkdir -p "$OUT"
W=/tmp/llmperf-gpu; rm -rf "$W"; mkdir -p "$W"
exec > >(tee -a "$OUT/log.txt") 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH LLMPERF_HOME=$W/home PYTHONUNBUFFERED=1
pack() { tar czf "$OUT/results.tgz.tmp" -C "$W" . && mv "$OUT/results.tgz.tmp" "$OUT/results.tgz"; }
T=examples/cpu-testbed
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv; nproc
  python3 - <<'PY'
import importlib
for name in ("torch", "deepspeed", "lightgbm", "sklearn", "megatron.core"):
    try:
        print(name, importlib.import_module(name).__version__)
    except Exception as exc:  # a missing library is a fact of the environment, not a failure
        print(name, "not importable:", type(exc).__name__)
import torch
print("cuda", torch.version.cuda, "gpu", torch.cuda.get_device_name() if torch.cuda.is_available() else None)
PY
} > "$W/environment.txt" 2>&1
cat "$W/environment.txt"; pack
