"""Speed of `llmperf tune`: candidates evaluated per second and total tune time, one thread, medians.

    OMP_NUM_THREADS=1 python benchmarks/bench_tune.py [--repeats 5]

Targets (issue 7): >= 10,000 candidates/s on one core, and GPT-3 175B on 1,024 GPUs tuned in <= 5 s.
The exhaustive checks (Llama-3 8B; Mixtral-8x7B under the allgather default and alltoall, whose EP trends the
surrogate prices per dispatcher) compare the bounded search's top-5 with every candidate predicted in full.
"Candidates" are the distinct configurations of the search space (after merging duplicates); every one
is either rejected by a layout rule, bounded out (memory / step time) or predicted in full. Printed:
the in-process search time (resolve + generate + prune + full predictions of the survivors + the
baseline), the whole-process wall time of the CLI, and where the time goes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

GPT3_175B_1024 = [
    "torchrun", "--nnodes", "128", "--nproc-per-node", "8", "pretrain_gpt.py",
    "--num-layers", "96", "--hidden-size", "12288", "--num-attention-heads", "96",
    "--seq-length", "2048", "--max-position-embeddings", "2048", "--tokenizer-type", "GPT2BPETokenizer",
    "--micro-batch-size", "1", "--global-batch-size", "1536",
    "--tensor-model-parallel-size", "8", "--pipeline-model-parallel-size", "16",
    "--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1",
    "--bf16", "--use-flash-attn",
]
LLAMA3_8B_64 = [
    "torchrun", "--nnodes", "8", "--nproc-per-node", "8", "pretrain_gpt.py",
    "--num-layers", "32", "--hidden-size", "4096", "--ffn-hidden-size", "14336", "--num-attention-heads", "32",
    "--group-query-attention", "--num-query-groups", "8", "--swiglu", "--normalization", "RMSNorm",
    "--position-embedding-type", "rope", "--untie-embeddings-and-output-weights", "--disable-bias-linear",
    "--seq-length", "8192", "--max-position-embeddings", "8192", "--vocab-size", "128256",
    "--micro-batch-size", "1", "--global-batch-size", "512", "--tensor-model-parallel-size", "4", "--bf16",
]
MIXTRAL_8X7B_64 = [  # MoE: tune also searches expert parallelism (Megatron-LM)
    "torchrun", "--nnodes", "8", "--nproc-per-node", "8", "pretrain_gpt.py",
    "--num-layers", "32", "--hidden-size", "4096", "--ffn-hidden-size", "14336", "--num-attention-heads", "32",
    "--group-query-attention", "--num-query-groups", "8", "--swiglu", "--normalization", "RMSNorm",
    "--position-embedding-type", "rope", "--untie-embeddings-and-output-weights", "--disable-bias-linear",
    "--num-experts", "8", "--moe-router-topk", "2", "--moe-grouped-gemm", "--expert-model-parallel-size", "2",
    "--seq-length", "4096", "--max-position-embeddings", "32768", "--vocab-size", "32000",
    "--micro-batch-size", "1", "--global-batch-size", "256", "--pipeline-model-parallel-size", "4",
    "--use-distributed-optimizer", "--bf16",
]
MEGATRON_DEEPSPEED_13B_64 = [  # examples/deepspeed-zero3: ZeRO-3 at PP 1; tune searches ZeRO 0-3 (2/3 only at PP 1)
    "deepspeed", "--hostfile", str(ROOT / "examples" / "deepspeed-zero3" / "hostfile"), "--num_nodes", "8", "--num_gpus",
    "8", "pretrain_gpt.py", "--deepspeed", "--deepspeed_config",
    str(ROOT / "examples" / "deepspeed-zero3" / "ds_zero3.json"), "--zero-stage", "3", "--no-pipeline-parallel",
    "--num-layers", "40", "--hidden-size", "5120", "--num-attention-heads", "40", "--seq-length", "2048",
    "--max-position-embeddings", "2048", "--micro-batch-size", "2", "--global-batch-size", "256", "--bf16",
    "--checkpoint-activations", "--vocab-size", "50257",
]
MIXTRAL_ALLTOALL_64 = [*MIXTRAL_8X7B_64, "--moe-token-dispatcher-type", "alltoall"]
"""The same job with the alltoall dispatcher (Megatron's default, above, is allgather: priced differently)."""
WIDE_SPACE = {
    "micro_batch_size": [1, 2, 4, 8, 16, 32], "context_parallel": [1, 2, 4, 8], "max_virtual_pipeline": 12,
    "recompute_block_layers": [1, 2, 4, 8], "recompute": ["none", "selective", "full", "block"],
}


def tune_once(argv: list[str], cluster: str, space_overrides: dict | None,
              env: dict[str, str] | None = None) -> tuple[float, object, dict]:
    """One search as `llmperf tune` makes it, the checks explain makes at assemble time included (tune/assemble_rules.py,
    evaluated per distinct ZeRO stage, engine and SP: their cost is in the figures)."""
    from llmperf_hook import api
    from llmperf_hook.frameworks.resolve import resolve_job
    from llmperf_hook.frameworks.validation import validate_config
    from llmperf_hook.tune.assemble_rules import assemble_rule_masks
    from llmperf_hook.tune.candidates import generate_candidates
    from llmperf_hook.tune.ds_config_rewrite import ds_settings_at_stages
    from llmperf_hook.tune.search import search_candidates
    from llmperf_hook.tune.search_space import load_search_space, parse_search_space, read_search_file, default_search_file

    timings: dict[str, float] = {}
    t0, c0 = time.perf_counter(), time.process_time()
    job, cfg = resolve_job(argv, env or {})
    spec = api.load_cluster(cluster)
    raw = dict(read_search_file(default_search_file(cfg.framework)))
    raw.update(space_overrides or {})
    space = parse_search_space(raw, "bench")
    t1 = time.perf_counter()
    table = generate_candidates(cfg, space, spec.gpus_per_node)
    t2 = time.perf_counter()
    calls = {"n": 0, "s": 0.0}

    def predict(c, s):
        a = time.perf_counter()
        out = api.predict_config(c, s)
        calls["n"] += 1
        calls["s"] += time.perf_counter() - a
        return out

    rules = assemble_rule_masks(cfg, job, ds_settings_at_stages(argv, space.zero_stage, None, env or {}))
    res = search_candidates(cfg, spec, table, top_k=5, margin=space.memory_margin, predict=predict, validate=validate_config,
                            command_rules=rules)
    t3 = time.perf_counter()
    timings.update(resolve_s=t1 - t0, generate_s=t2 - t1, search_s=t3 - t2, predict_calls=calls["n"],
                   predict_s=calls["s"], cpu_s=time.process_time() - c0)
    return t3 - t0, res, timings


def bench(name: str, argv: list[str], cluster: str, space: dict | None, repeats: int,
          env: dict[str, str] | None = None) -> None:
    tune_once(argv, cluster, space, env)  # warm caches the way a second CLI call would not: report both below
    runs = [tune_once(argv, cluster, space, env) for _ in range(repeats)]
    total = statistics.median(r[0] for r in runs)
    res, timings = runs[0][1], runs[0][2]
    n = res.num_considered
    print(f"\n== {name} on {cluster} ({'wide space' if space else 'default space'})")
    print(f"candidates: {n:,} distinct ({res.num_generated:,} generated); invalid {res.num_invalid:,}, "
          f"OOM by memory model {res.num_oom_estimated:,}, OOM predicted {res.num_oom_predicted:,}, "
          f"slower by estimate {res.num_slower:,}, predicted in full {res.num_full_predictions:,}")
    for rule, count in res.invalid_by_rule.items():
        if rule.startswith("explain refuses"):
            print(f"  invalid as {rule}: {count:,}")
    cpu = statistics.median(r[2]["cpu_s"] for r in runs)  # this process's own CPU: what one core gives it under load
    print(f"tune time (median of {repeats}, in process): {total:.3f} s wall  ->  {n / total:,.0f} candidates/s; "
          f"{cpu:.3f} s CPU  ->  {n / cpu:,.0f} candidates per CPU second")
    print(f"  resolve {timings['resolve_s'] * 1e3:.1f} ms, generate {timings['generate_s'] * 1e3:.1f} ms, "
          f"search {timings['search_s'] * 1e3:.1f} ms of which {timings['predict_calls']} full predictions "
          f"{timings['predict_s'] * 1e3:.1f} ms ({timings['predict_s'] / max(timings['predict_calls'], 1) * 1e3:.2f} ms each)")
    for i, ev in enumerate(res.top[:3], 1):
        print(f"  #{i} {ev.candidate.describe():<40} {ev.step_time_s:8.3f} s  peak {ev.peak_bytes / 2**30:5.1f} GiB")
    if res.baseline:
        print(f"  user's {res.baseline.candidate.describe():<36} {res.baseline.step_time_s:8.3f} s")


def exhaustive_check(name: str, argv: list[str], cluster: str) -> None:
    """Same search with the bound switched off (every candidate the memory bound keeps is predicted in full)."""
    from llmperf_hook.tune import search

    saved = search.Z_BOUND, search.MAX_FULL_PREDICTIONS
    try:
        fast_s, fast, _ = tune_once(argv, cluster, None)
        search.Z_BOUND, search.MAX_FULL_PREDICTIONS = 1e6, 10**9
        full_s, full, _ = tune_once(argv, cluster, None)
    finally:
        search.Z_BOUND, search.MAX_FULL_PREDICTIONS = saved
    gap = fast.top[0].step_time_s / full.top[0].step_time_s - 1
    same = [e.candidate for e in fast.top] == [e.candidate for e in full.top]
    worst = max(a.step_time_s / b.step_time_s - 1 for a, b in zip(fast.top, full.top))
    print(f"\n== exhaustive check, {name} on {cluster}: bounded search {fast.num_full_predictions} full predictions "
          f"in {fast_s:.2f} s vs exhaustive {full.num_full_predictions} in {full_s:.1f} s; top-1 gap {gap:+.2%}; "
          f"top-{len(full.top)} identical: {same} (worst rank-by-rank step-time gap {worst:+.2%})")


def cli_wall(argv: list[str], cluster: str, repeats: int) -> None:
    """Whole-process wall time, and the process's own CPU time (user + system, from getrusage of the child): on a
    shared machine the wall time also counts the other processes' turns on the cores, the CPU time does not."""
    import resource

    cmd = [sys.executable, "-m", "llmperf_hook", "tune", "--cluster", cluster, "--format", "json", "--", *argv]
    walls, cpus = [], []
    for _ in range(repeats):
        t, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"})
        walls.append(time.perf_counter() - t)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        if out.returncode != 0:
            print(f"CLI failed ({out.returncode}): {out.stderr.strip()[:400]}")
            return
    print(f"\nwhole process `llmperf tune --format json` GPT-3 175B / 1,024 GPUs: median {statistics.median(walls):.2f} s wall, "
          f"{statistics.median(cpus):.2f} s CPU (target <= 5 s; includes Python start-up and imports; load average "
          f"{os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--exhaustive", action="store_true", help="also compare with an unbounded search (GPT-3: minutes)")
    ap.add_argument("--no-moe-exhaustive", action="store_true", help="skip the Mixtral exhaustive checks (minutes)")
    args = ap.parse_args()
    print(f"one thread (OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}), {os.cpu_count()} CPUs on this machine, "
          f"load average {os.getloadavg()[0]:.2f}")
    bench("GPT-3 175B, 1,024 GPUs", GPT3_175B_1024, "dgx-a100", None, args.repeats)
    bench("GPT-3 175B, 1,024 GPUs", GPT3_175B_1024, "dgx-a100", WIDE_SPACE, args.repeats)
    bench("Llama-3 8B, 64 GPUs", LLAMA3_8B_64, "dgx-h100", None, args.repeats)
    bench("Megatron-DeepSpeed 13B ZeRO-3, 64 GPUs", MEGATRON_DEEPSPEED_13B_64, "dgx-a100", None, args.repeats)
    # The job's own CUDA_DEVICE_MAX_CONNECTIONS=8: every --sequence-parallel row is one explain refuses (assemble
    # _check_mds_connections), so the search's assemble-time masks prune, not only evaluate.
    bench("Megatron-DeepSpeed 13B ZeRO-3, CUDA_DEVICE_MAX_CONNECTIONS=8, 64 GPUs", MEGATRON_DEEPSPEED_13B_64, "dgx-a100",
          None, args.repeats, env={"CUDA_DEVICE_MAX_CONNECTIONS": "8"})
    bench("Mixtral-8x7B (MoE, EP searched), 64 GPUs", MIXTRAL_8X7B_64, "dgx-h100", None, args.repeats)
    bench("Mixtral-8x7B alltoall dispatcher, 64 GPUs", MIXTRAL_ALLTOALL_64, "dgx-h100", None, args.repeats)
    cli_wall(GPT3_175B_1024, "dgx-a100", args.repeats)
    exhaustive_check("Llama-3 8B, 64 GPUs", LLAMA3_8B_64, "dgx-h100")
    if not args.no_moe_exhaustive:  # ~10,000 full predictions each: 1-2 minutes
        exhaustive_check("Mixtral-8x7B allgather (default), 64 GPUs", MIXTRAL_8X7B_64, "dgx-h100")
        exhaustive_check("Mixtral-8x7B alltoall, 64 GPUs", MIXTRAL_ALLTOALL_64, "dgx-h100")
    if args.exhaustive:
        exhaustive_check("GPT-3 175B, 1,024 GPUs", GPT3_175B_1024, "dgx-a100")


if __name__ == "__main__":
    main()
