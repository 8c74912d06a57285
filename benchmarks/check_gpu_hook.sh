set -u
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD PATH=/tmp/site/bin:$PATH LLMPERF_HOME=/tmp/lh PYTHONUNBUFFERED=1
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/instrument/test_megatron_hook.py tests/instrument/test_gpu_step_costs.py 2>&1 | tail -4
T=examples/cpu-testbed
timeout 120 python3 -m llmperf_hook run --hardware h100-sxm5-80gb --instrument 6 --run-dir /tmp/r1 -- deepspeed --num_gpus 1 $T/train_gpt.py --deepspeed_config $T/ds_zero1.json --num-layers 12 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 --max-position-embeddings 1024 --micro-batch-size 8 --global-batch-size 8 --vocab-size 50304 --train-iters 16 --bf16 > /tmp/r1.log 2>&1; echo "run exit $?"
grep -E "step_time_s" /tmp/r1.log | tail -5; grep -iE "predicted|measured|refine" /tmp/r1.log | tail -6
python3 -c "
import json,glob
for f in glob.glob('/tmp/r1/**/rank*.jsonl', recursive=True):
    for l in open(f):
        r=json.loads(l)
        if r['kind']=='step': print(r['step'], r['timer'], round(r['wall_time_s']*1e3,2), r['gpu_peak_allocated_bytes'])
"
mkdir -p $OUT/r1 && cp -r /tmp/r1/. $OUT/r1/ && cp /tmp/r1.log $OUT/
