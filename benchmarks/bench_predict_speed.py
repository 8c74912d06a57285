"""Speed of the predict path (prints its figures).

1. `llmperf predict` of GPT-3 175B on 1,024 A100 (TP 8, PP 16, DP 8, 192 micro-batches): whole process wall
   time and CPU time, medians of 10 runs (target < 0.5 s), and whether torch got imported (must not); the child's
   CPU split into interpreter start-up, imports (cli, commands.predict, api) and the command's own run.
   Bytecode as an installed llmperf has it: the children (of 1 and 2) compile into a temporary
   PYTHONPYCACHEPREFIX once (an uncounted first run of 1), whatever PYTHONDONTWRITEBYTECODE says. Without that,
   each module edited since its .pyc was written (or every module of a `git archive` copy) is compiled again in
   every run: ~0.2-0.3 s of CPU of a process that costs ~0.45 s, and the spread of the figures taken so (H193).
2. `llmperf predict --batch FILE --format json` over 400 varied commands: commands per CPU second of the whole
   process, imports included (target >= 200). The 400 lines repeat 24 configurations (as a sweep file repeats its
   shapes); the batch reuses a repeated configuration's graph (graph/build.GraphMemo). The same figure for 400
   commands that are all distinct (each its own global batch) shows the cost without that reuse.
3. `api.predict_config` alone: median milliseconds per call for the GPT-3 case (what `tune` pays per candidate).
Run with one thread: OMP_NUM_THREADS=1 python benchmarks/bench_predict_speed.py
`--against TREE [--runs N]`: only figure 1's CPU and wall, of this tree and TREE (another checkout or a `git archive`
of a commit), from interleaved runs with warm bytecode for both.
The machine's load average is printed before and after: wall times of a shared machine stretch with load (CPU
seconds of the child much less), so compare figures taken at the same load, or alternate the two trees' runs.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GPT3 = ("torchrun --nnodes 128 --nproc-per-node 8 pretrain_gpt.py --num-layers 96 --hidden-size 12288 "
        "--num-attention-heads 96 --seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 1 "
        "--global-batch-size 1536 --tensor-model-parallel-size 8 --pipeline-model-parallel-size 16 "
        "--sequence-parallel --recompute-granularity selective --use-distributed-optimizer --bf16 --vocab-size 51200")
PROBE = ("import sys, time\nstart_s = time.process_time()\nsys.argv = ['llmperf'] + sys.argv[1:]\n"
         "from llmperf_hook.cli import main\nimport llmperf_hook.commands.predict, llmperf_hook.api\n"
         "imports_s = time.process_time() - start_s\n"
         "try:\n    main()\nfinally:\n    sys.stderr.write('TORCH=%s\\nCPU_SPLIT=%r %r\\nFROM=%s\\n' % ('torch' in "
         "sys.modules, start_s, imports_s, sys.modules['llmperf_hook'].__file__))\n")
"""Runs `llmperf ARGS` in the child and reports on stderr whether torch got imported, the CPU seconds spent
before its first line (interpreter and site start-up) and on importing the predict path's main modules, and which
llmperf_hook it ran."""


def _child_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


WHOLE_PROCESS_RUNS = 10


def child_env(pycache: str) -> dict[str, str]:
    """The children's environment: one thread, bytecode written to (and read from) `pycache`, as an installed
    llmperf reads its .pyc files, whatever PYTHONDONTWRITEBYTECODE says."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**env, "OMP_NUM_THREADS": "1", "PYTHONPYCACHEPREFIX": pycache}


ROOT = Path(__file__).resolve().parents[1]
"""This tree: the children run in it, so `-c PROBE` imports its llmperf_hook (sys.path[0] is the working folder)."""


def _predict_process(env: dict[str, str], tree: Path) -> tuple[float, float, str]:
    """(wall s, CPU s, stderr) of one `llmperf predict` process of the GPT-3 case run in `tree`."""
    start, cpu0 = time.perf_counter(), _child_cpu_s()
    out = subprocess.run([sys.executable, "-c", PROBE, "predict", "--cluster", "dgx-a100", "--format", "json", "--",
                          *GPT3.split()], capture_output=True, text=True, env=env, cwd=tree, check=True)
    ran = [ln for ln in out.stderr.splitlines() if ln.startswith("FROM=")][-1][len("FROM="):]
    if not Path(ran).resolve().is_relative_to(tree):  # a tree without llmperf_hook/ runs the installed one
        raise SystemExit(f"{tree} holds no llmperf_hook package: its run imported {ran}")
    return time.perf_counter() - start, _child_cpu_s() - cpu0, out.stderr


def whole_process_s(env: dict[str, str], runs: int = WHOLE_PROCESS_RUNS
                    ) -> tuple[float, float, bool, tuple[float, float]]:
    """(median wall s, median CPU s of the child, torch imported?, (median start-up CPU s, median import CPU s)) of
    a whole `llmperf predict` process, after one uncounted run that writes the bytecode."""
    _predict_process(env, ROOT)
    walls, cpus, splits, torch_loaded = [], [], [], False
    for _ in range(runs):
        wall, cpu, stderr = _predict_process(env, ROOT)
        walls.append(wall)
        cpus.append(cpu)
        torch_loaded |= "TORCH=True" in stderr
        split = [ln for ln in stderr.splitlines() if ln.startswith("CPU_SPLIT=")][-1]
        splits.append(tuple(float(v) for v in split[len("CPU_SPLIT="):].split()))
    startup, imports = (statistics.median(part) for part in zip(*splits))
    return statistics.median(walls), statistics.median(cpus), torch_loaded, (startup, imports)


def interleaved_s(env: dict[str, str], trees: list[Path], runs: int) -> list[tuple[float, float]]:
    """(median wall s, median CPU s) of each tree's `llmperf predict` process, the trees' runs alternating (their
    order reversed every other round) so that both see the same load; one uncounted run each writes the bytecode."""
    for tree in trees:
        _predict_process(env, tree)
    times: dict[Path, list[tuple[float, float]]] = {tree: [] for tree in trees}
    for run in range(runs):
        for tree in trees if run % 2 == 0 else trees[::-1]:
            times[tree].append(_predict_process(env, tree)[:2])
    return [(statistics.median(w for w, _ in times[t]), statistics.median(c for _, c in times[t])) for t in trees]


def batch_lines(n: int, distinct: bool = False) -> list[str]:
    """`n` commands cycling through 24 configurations (2 models x TP 1/2/4/8 x PP 1/2 x micro-batch 1/2/3); with
    `distinct`, each cycle has its own global batch (8, 9, 10, ... micro-batches per data-parallel rank), so no two
    commands are the same."""
    lines = []
    for i in range(n):
        layers, hidden, heads = (24, 2048, 16) if i % 2 else (32, 4096, 32)
        tp, pp = (1, 2, 4, 8)[i % 4], (1, 2)[(i // 4) % 2]
        dp = 8 // tp * 4 // pp
        mbs = 1 + i % 3
        accumulation = 8 + i // 24 if distinct else 8
        lines.append(f"torchrun --nnodes 4 --nproc-per-node 8 pretrain_gpt.py --num-layers {layers} --hidden-size "
                     f"{hidden} --num-attention-heads {heads} --seq-length 2048 --max-position-embeddings 2048 "
                     f"--micro-batch-size {mbs} --global-batch-size {mbs * dp * accumulation} "
                     f"--tensor-model-parallel-size {tp} --pipeline-model-parallel-size {pp} --bf16 --vocab-size 50257 "
                     "--use-distributed-optimizer")
    return lines


def batch_rate(env: dict[str, str], n: int = 400, distinct: bool = False) -> tuple[float, float]:
    """(commands per wall second, commands per CPU second of the child) of `llmperf predict --batch` over
    batch_lines(n, distinct)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "commands.txt"
        path.write_text("\n".join(batch_lines(n, distinct)) + "\n")
        start, cpu0 = time.perf_counter(), _child_cpu_s()
        out = subprocess.run([sys.executable, "-m", "llmperf_hook", "predict", "--cluster", "dgx-h100", "--batch",
                              str(path), "--format", "json"], capture_output=True, text=True, env=env, cwd=ROOT,
                             check=True)
        elapsed, cpu = time.perf_counter() - start, _child_cpu_s() - cpu0
    rows = out.stdout.splitlines()
    assert len(rows) == n and not any('"error"' in r for r in rows), out.stdout[:500]
    return n / elapsed, n / cpu


def predict_config_ms(runs: int = 20) -> float:
    from llmperf_hook.api import load_cluster, predict_config
    from llmperf_hook.graph.sample_configs import gpt3_175b

    cluster = load_cluster("dgx-a100")
    cfg = gpt3_175b(tp=8, pp=16, dp=8, global_batch_size=1536, sequence_parallel=True, recompute="selective",
                    optimizer_kw=dict(distributed_optimizer=True))
    predict_config(cfg, cluster)
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        predict_config(cfg, cluster)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def compare(against: Path, runs: int) -> None:
    """Print this tree's and `against`'s figures of the GPT-3 process from interleaved runs (e.g. a `git archive` of
    the session's base commit: `git archive BASE | tar -x -C /tmp/base`)."""
    with tempfile.TemporaryDirectory() as pycache:
        figures = interleaved_s(child_env(pycache), [ROOT, against], runs)
    for tree, (wall, cpu) in zip((ROOT, against), figures):
        print(f"{tree}: {cpu:.3f} s CPU, {wall:.3f} s wall (medians of {runs}, interleaved)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", type=Path, help="another tree: compare the GPT-3 process's CPU with it only")
    parser.add_argument("--runs", type=int, default=15, help="runs of each tree with --against (default 15)")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error(f"--runs must be a whole number of at least 1, found {args.runs}")
    if args.against is not None and not (args.against / "llmperf_hook" / "__init__.py").is_file():
        parser.error(f"--against {args.against} holds no llmperf_hook package (its runs would import the installed "
                     f"one): pass a checkout or `git archive COMMIT | tar -x -C DIR` of this repository")
    print(f"machine load average (1 min) {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores: wall times of a shared "
          f"machine stretch with load; CPU seconds of the child do not")
    if args.against is not None:
        compare(args.against.resolve(), args.runs)
        print(f"machine load average (1 min) at the end {os.getloadavg()[0]:.2f}")
        return
    with tempfile.TemporaryDirectory() as pycache:
        env = child_env(pycache)
        wall, cpu, torch_loaded, (startup, imports) = whole_process_s(env)
        rate, cpu_rate = batch_rate(env)
        distinct_rate, distinct_cpu_rate = batch_rate(env, distinct=True)
    print(f"llmperf predict GPT-3 175B on 1,024 GPUs: {wall:.3f} s wall, {cpu:.3f} s CPU, whole process (median of "
          f"{WHOLE_PROCESS_RUNS}; target < 0.5 s); torch imported: {torch_loaded}")
    print(f"  of its CPU: {startup:.3f} s interpreter start-up, {imports:.3f} s importing cli, commands.predict and "
          f"api (numpy, yaml, click with them), the rest ({cpu - startup - imports:.3f} s) the command itself with "
          f"the modules it imports on the way")
    print(f"llmperf predict --batch (400 commands of 24 configurations, json): {rate:.0f} commands/s wall, "
          f"{cpu_rate:.0f} per CPU second of the whole process (target >= 200)")
    print(f"  400 distinct commands (no configuration repeated): {distinct_rate:.0f} commands/s wall, "
          f"{distinct_cpu_rate:.0f} per CPU second")
    print(f"api.predict_config GPT-3 175B, 1,024 GPUs: {predict_config_ms():.1f} ms per call (median of 20)")
    print(f"machine load average (1 min) at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
