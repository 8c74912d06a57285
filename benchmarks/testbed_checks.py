"""The CPU testbed's diagnostics (benchmarks/bench_cpu_testbed.py --drift-check / --spread-check): does the
reference workload track the step-time drift, and how far runs of one configuration spread as launched and
with each rank bound to its own core."""

from __future__ import annotations

import json
import math
import os
import shutil
import statistics
import time
from dataclasses import replace
from pathlib import Path

from testbed_configs import CONFIGS
from testbed_runs import instrumented_run, reference_now


def drift_check(home: Path, work: Path, indices: list[int], repeats: int, steps: int) -> None:
    """Does the reference, or the speed probe, track the testbed's step-time drift? The same configurations run
    `repeats` times, interleaved; around each run the reference (with the uncounted DRAM copy) and the speed probe
    of the configuration's own shapes in fp32 and bf16 (instrument/speed_probe.py) are timed in this process,
    and each rank's hook reads both after its last recorded step (LLMPERF_SPEED_PROBE). Per configuration the
    Pearson correlation of log(step CPU time) and log(step wall time) with the log of each reading, and the
    run-to-run spread of the step time raw and normalised by each (x reading of the first run / reading now).
    The rows go to HOME/records/drift-<UTC time>.json after every run."""
    from llmperf_hook.instrument.speed_probe import PROBE_ENV, ProbeSpec, measure_probe

    shutil.rmtree(work, ignore_errors=True)  # a reused run directory would hold an earlier job's records
    rows: dict[int, list[dict]] = {i: [] for i in indices}
    path = home.parent / "records" / f"drift-{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    print(f"\n[drift check] configurations {indices}, {repeats} runs each, interleaved; reference and probe before "
          "and after, and in the job")
    for r in range(repeats):
        for i in indices:
            cfg = CONFIGS[i]
            spec = ProbeSpec(cfg.hidden, cfg.heads, cfg.seq, cfg.mbs)
            before, probe0 = reference_now("before-run", True), measure_probe(spec).probe_s
            m = instrumented_run(cfg, home, work / f"d{i}-{r}", steps, 29600 + i, {PROBE_ENV: spec.text()})
            after, probe1 = reference_now("after-run", True), measure_probe(spec).probe_s
            parts = {k: (before["parts_s"][k] + after["parts_s"][k]) / 2 for k in before["parts_s"]}
            probes = {f"probe_{d}": (probe0[d] + probe1[d]) / 2 for d in probe0}
            hook = {f"hook_probe_{d}": v for d, v in m["hook_probe_s"].items()}
            row = {**{k: v for k, v in m.items() if k not in ("rank_steps", "prediction", "refine")},
                   "ref": (before["cpu_s"] + after["cpu_s"]) / 2, **parts, **probes, **hook,
                   "change": abs(after["cpu_s"] - before["cpu_s"]) / before["cpu_s"], "run": r, "config": i}
            rows[i].append(row)
            save_rows(path, rows)  # kept if cut short
            print(f"  run {r} config {i:2d}: step CPU {m['cpu_s'] * 1e3:7.2f} ms wall {m['measured_s'] * 1e3:7.2f} ms; "
                  f"reference {before['cpu_s'] * 1e3:.2f} -> {after['cpu_s'] * 1e3:.2f} ms (hook "
                  f"{(m['hook_reference_s'] or 0) * 1e3:.2f}); probe fp32 {probe0['fp32'] * 1e3:.2f} -> "
                  f"{probe1['fp32'] * 1e3:.2f} ms (hook {hook.get('hook_probe_fp32', 0) * 1e3:.2f}), bf16 "
                  f"{probe0['bf16'] * 1e3:.2f} -> {probe1['bf16'] * 1e3:.2f} ms (hook "
                  f"{hook.get('hook_probe_bf16', 0) * 1e3:.2f}); load {m['load_before']:.2f}", flush=True)
    print(f"  rows saved to {path}")
    for i, data in rows.items():
        print_drift_summary(i, data)


def save_rows(path: Path, rows: dict[int, list[dict]]) -> None:
    """The drift check's rows so far, replaced whole (a check killed while writing keeps the previous file)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps({str(k): v for k, v in rows.items()}, indent=1))
    os.replace(tmp, path)


def report_drift_file(path: Path) -> None:
    """The summaries of a drift check's saved rows (HOME/records/drift-*.json; a check cut short keeps its runs)."""
    for i, data in json.loads(path.read_text()).items():
        if data:
            print_drift_summary(int(i), data)


DRIFT_READINGS = ("ref", "gemm_s", "sweep_s", "dispatch_s", "dram_sweep_s", "hook_reference_s", "probe_fp32",
                  "probe_bf16", "hook_probe_fp32", "hook_probe_bf16")
"""The readings --drift-check compares with the step time: the reference (this process; its parts; the hook's),
the speed probe per dtype (this process; the hook's, median over ranks)."""


def drift_tracking(data: list[dict], reading: str, step_key: str = "cpu_s") -> dict[str, float] | None:
    """Over the runs that have `reading`: the correlation of log step time with log reading, and the stdev of log
    step time raw and normalised by the reading (None with fewer than 3 such runs)."""
    pairs = [(math.log(d[step_key]), math.log(d[reading])) for d in data if d.get(reading) and d.get(step_key)]
    if len(pairs) < 3:
        return None
    step, x = [p[0] for p in pairs], [p[1] for p in pairs]
    norm = [s - v for s, v in pairs]
    return {"runs": len(pairs), "corr": pearson(step, x), "sd_raw": statistics.pstdev(step),
            "sd_normalised": statistics.pstdev(norm), "reading_max_min": math.exp(max(x) - min(x))}


def print_drift_summary(i: int, data: list[dict]) -> None:
    cpu = [math.log(d["cpu_s"]) for d in data]
    wall = [math.log(d["measured_s"]) for d in data]
    print(f"  config {i} ({CONFIGS[i].label()}), {len(data)} runs: step CPU max/min {math.exp(max(cpu) - min(cpu)):.3f},"
          f" wall max/min {math.exp(max(wall) - min(wall)):.3f}; corr(log step CPU, log wall/CPU) "
          f"{pearson(cpu, [w - c for w, c in zip(wall, cpu)]):+.2f}; reference median change before->after "
          f"{statistics.median(d['change'] for d in data):.1%}")
    for key in DRIFT_READINGS:
        by = {s: drift_tracking(data, key, s) for s in ("cpu_s", "measured_s")}
        if by["cpu_s"] is None:
            continue
        print(f"    {key:17s} ({by['cpu_s']['runs']} runs, reading max/min {by['cpu_s']['reading_max_min']:.3f}): "
              + "; ".join(f"{'CPU' if s == 'cpu_s' else 'wall'} corr {t['corr']:+.2f}, sd of log raw {t['sd_raw']:.3f}"
                          f" -> normalised {t['sd_normalised']:.3f}" for s, t in by.items() if t))


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
