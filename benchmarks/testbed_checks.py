"""The CPU testbed's diagnostics (benchmarks/bench_cpu_testbed.py --drift-check / --spread-check): does the
reference workload track the step-time drift, and how far runs of one configuration spread as launched and
with each rank bound to its own core."""

from __future__ import annotations

import math
import shutil
import statistics
from dataclasses import replace
from pathlib import Path

from testbed_configs import CONFIGS
from testbed_runs import instrumented_run, reference_now


def drift_check(home: Path, work: Path, indices: list[int], repeats: int, steps: int) -> None:
    """Does the reference track the testbed's step-time drift? The same configurations run `repeats` times,
    interleaved, the reference timed right before and after each run (with the uncounted DRAM copy); per
    configuration the Pearson correlation of log(step CPU time) with log(reference), for the counted reading
    and each part, and the run-to-run spread of the step CPU time raw and normalised (x reference of the first
    run / reference now)."""
    shutil.rmtree(work, ignore_errors=True)  # a reused run directory would hold an earlier job's records
    rows: dict[int, list[dict]] = {i: [] for i in indices}
    print(f"\n[drift check] configurations {indices}, {repeats} runs each, interleaved; reference before and after")
    for r in range(repeats):
        for i in indices:
            before = reference_now("before-run", True)
            m = instrumented_run(CONFIGS[i], home, work / f"d{i}-{r}", steps, 29600 + i)
            after = reference_now("after-run", True)
            parts = {k: (before["parts_s"][k] + after["parts_s"][k]) / 2 for k in before["parts_s"]}
            row = {**m, "ref": (before["cpu_s"] + after["cpu_s"]) / 2, **parts,
                   "change": abs(after["cpu_s"] - before["cpu_s"]) / before["cpu_s"]}
            rows[i].append(row)
            print(f"  run {r} config {i:2d}: step CPU {m['cpu_s'] * 1e3:7.2f} ms wall {m['measured_s'] * 1e3:7.2f} ms; "
                  f"reference {before['cpu_s'] * 1e3:.2f} -> {after['cpu_s'] * 1e3:.2f} ms (hook "
                  f"{(m['hook_reference_s'] or 0) * 1e3:.2f}; gemm {parts['gemm_s'] * 1e3:.2f}, sweep "
                  f"{parts['sweep_s'] * 1e3:.2f}, dispatch {parts['dispatch_s'] * 1e3:.2f}, DRAM copy (not counted) "
                  f"{parts['dram_sweep_s'] * 1e3:.2f}); load {m['load_before']:.2f}", flush=True)
    for i, data in rows.items():
        print_drift_summary(i, data)


def print_drift_summary(i: int, data: list[dict]) -> None:
    import math

    cpu = [math.log(d["cpu_s"]) for d in data]
    corr = {k: pearson(cpu, [math.log(d[k]) for d in data])
            for k in ("ref", "gemm_s", "sweep_s", "dispatch_s", "dram_sweep_s")}
    corr["contention (wall / CPU)"] = pearson(cpu, [math.log(d["measured_s"] / d["cpu_s"]) for d in data])
    hook = [d for d in data if d.get("hook_reference_s")]
    if len(hook) > 2:
        corr["hook reading"] = pearson([math.log(d["cpu_s"]) for d in hook], [math.log(d["hook_reference_s"]) for d in hook])
    ref = [math.log(d["ref"]) for d in data]
    norm = [c - x + ref[0] for c, x in zip(cpu, ref)]
    print(f"  config {i} ({CONFIGS[i].label()}), {len(data)} runs: corr(log step CPU, log x) for x = "
          + ", ".join(f"{k} {v:+.2f}" for k, v in corr.items())
          + f"; step CPU max/min raw {math.exp(max(cpu) - min(cpu)):.3f}, normalised {math.exp(max(norm) - min(norm)):.3f};"
          f" stdev of log raw {statistics.pstdev(cpu):.3f}, normalised {statistics.pstdev(norm):.3f}; reference "
          f"max/min {math.exp(max(ref) - min(ref)):.3f}, median change before->after {statistics.median(d['change'] for d in data):.1%}")


SHORT_TIMED_STEPS = 8
"""--spread-check scores each run also on its first 8 timed steps: what the earlier default --steps 10 timed."""


def spread_check(home: Path, work: Path, indices: list[int], rounds: int, steps: int) -> None:
    """The run-to-run spread of a configuration's measured step time as launched and with each rank bound to its
    own core (DeepSpeed --bind_cores_to_rank: numactl -C per local rank, OMP_NUM_THREADS = cores per rank), in
    `rounds` interleaved rounds (the order alternating); each run scored on its median over all timed steps and
    over the first SHORT_TIMED_STEPS, and the median of 2 and of 3 consecutive runs."""
    shutil.rmtree(work, ignore_errors=True)
    rows: dict[tuple[int, bool], list[dict]] = {(i, b): [] for i in indices for b in (False, True)}
    print(f"\n[spread check] configurations {indices}, {rounds} rounds, as launched and bound; {steps} steps per run")
    for r in range(rounds):
        for i in indices:
            for bind in ((False, True) if r % 2 == 0 else (True, False)):
                cfg = replace(CONFIGS[i], bind=bind)
                m = instrumented_run(cfg, home, work / f"s{i}-{int(bind)}-{r}", steps, 29600 + i + 20 * bind)
                rows[(i, bind)].append(m)
                print(f"  round {r} {cfg.label():40s} {m['measured_s'] * 1e3:8.2f} ms (first {SHORT_TIMED_STEPS}: "
                      f"{statistics.median(m['step_times_s'][:SHORT_TIMED_STEPS]) * 1e3:8.2f}) wall/CPU "
                      f"{m['measured_s'] / m['cpu_s']:.2f} load {m['load_before']:.2f}", flush=True)
    for (i, bind), runs in rows.items():
        label = replace(CONFIGS[i], bind=bind).label()
        full = [m["measured_s"] for m in runs]
        short = [statistics.median(m["step_times_s"][:SHORT_TIMED_STEPS]) for m in runs]
        pairs = [statistics.median(full[j:j + 2]) for j in range(0, len(full) - 1, 2)]
        triples = [statistics.median(full[j:j + 3]) for j in range(0, len(full) - 2, 3)]
        print(f"  {label:40s} sd of log step time: all timed steps {log_sd(full):.3f} (max/min x{max(full) / min(full):.3f}), "
              f"first {SHORT_TIMED_STEPS} {log_sd(short):.3f}, median of 2 runs {log_sd(pairs):.3f}, of 3 runs "
              f"{log_sd(triples):.3f}; median {statistics.median(full) * 1e3:.2f} ms")


def log_sd(values: list[float]) -> float:
    return statistics.stdev(math.log(v) for v in values) if len(values) > 1 else float("nan")


def pearson(x: list[float], y: list[float]) -> float:
    mx, my = statistics.mean(x), statistics.mean(y)
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y))
    sxx, syy = sum((a - mx) ** 2 for a in x), sum((b - my) ** 2 for b in y)
    return sxy / (sxx * syy) ** 0.5 if sxx > 0 and syy > 0 else float("nan")
