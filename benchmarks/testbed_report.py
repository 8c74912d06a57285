"""The CPU testbed's scores (benchmarks/bench_cpu_testbed.py, steps 3-5): the twelve against the median of their
measurement runs, each calibration run's effect, what earlier calibration rules would have made of it, and the
replay of every choice of calibration run (testbed_replay.py)."""

from __future__ import annotations

import math
import os
import statistics
from typing import Sequence

from testbed_checks import pearson
from testbed_configs import QUIET_WALL_PER_CPU, TARGETS, TestbedConfig
from testbed_record import mape, pass_effects, pct, reference_runs


def runs_text(m: dict) -> str:
    """'5 runs x1.062, load 1.21 (max 1.40)': how many runs a configuration's median took, their spread (max /
    min) and the load they ran at, printed beside its error."""
    loads = m.get("pass_loads") or [m["load_before"]]
    return (f"{len(m.get('pass_times_s', [0]))} runs x{m.get('pass_spread', 1.0):.3f}, load {statistics.median(loads):.2f}"
            f" (max {max(loads):.2f}){' CONTENDED' if m.get('contended') else ''}")


def print_measured(configs: Sequence[TestbedConfig], measured: list[dict], before: list[float]) -> None:
    """The twelve before refinement, each with the spread and load of its runs."""
    print("\n  #  configuration                      measured   before (err)        its runs: spread, load")
    for i, cfg in enumerate(configs):
        print(f" {i:2d}  {cfg.label():34s} {measured[i]['measured_s'] * 1e3:8.2f}  {before[i] * 1e3:8.2f} "
              f"({pct(before[i], measured[i]['measured_s']):+6.1f} %)  {runs_text(measured[i])}")
    print(f"MAPE before refinement ({len(configs)} configs): "
          f"{mape([pct(p, m['measured_s']) for p, m in zip(before, measured)]):.1f} % "
          f"(target <= {TARGETS['before']:.0f} %)")


def print_missing_framework_cost(record: dict, configs: Sequence[TestbedConfig]) -> None:
    """The caveat of a score whose profile lacked a dtype's framework cost (testbed_setup.missing_dtype_caveats)."""
    for dtype in record.get("framework_cost_missing") or ():
        which = [str(i) for i, cfg in enumerate(configs) if cfg.dtype == dtype]
        if which:
            print(f"CAVEAT: configurations {', '.join(which)} ({dtype}) were predicted without the framework cost, "
                  f"which the profile lacks for {dtype}: their errors are the operator profile's alone")


def report_record(record: dict, configs: Sequence[TestbedConfig]) -> None:
    """Every score of a record (a fresh run's or --replay's): the twelve against their reference runs, each real
    calibration run of the rotation, and the replay of every choice of instrumented run (testbed_replay.py)."""
    from testbed_parts import target_resolution
    from testbed_replay import report_replay

    before = [c["predicted_s"] for c in record["configs"]]
    measured = [median_pass(reference_runs(record, i)) for i in range(len(configs))]
    effects = pass_effects(record)
    print(f"\n[score] {effects['runs']} measurement runs in {effects['passes']} rotated passes: run-to-run log sd "
          f"{effects['sd_run']:.3f}, of which a whole pass shared sd {effects['sd_pass']:.3f} (the machine's state over "
          f"minutes) and each run alone {effects['sd_residual']:.3f}")
    typical, within = target_resolution([record], max(record.get("passes", 2) - 1, 1))
    print(f"  at this spread a perfect prediction of a configuration scores against the median of its measurement "
          f"runs (the instrumented one's): median |error| {typical:.1%}, within 3 % in {within:.0%} of draws "
          f"(testbed_parts.target_resolution)")
    print_measured(configs, measured, before)
    print_missing_framework_cost(record, configs)
    for k, cal in sorted((int(k), v) for k, v in record.get("calibrations", {}).items()):
        run = next(r for r in record["runs"] if r["config"] == k and r.get("calibration"))
        print(f"\n[refine] configuration {k} ({configs[k].label()}) instrumented in pass {run['pass'] + 1} into "
              f"{run['store']} (the real `llmperf run --instrument` and its automatic refine, code {record.get('commit', '?')})")
        print("  " + run["refine"].replace("\n", "\n  "))
        report(configs, measured, before, cal["after_s"], k, record["ref_profile_s"])
        report_instrumented(measured[k], run, before[k], cal["after_s"][k], k)
        report_full_scale(measured, before, run, k, record["priors"]["sd_config_op"])
    report_replay(record, measured, before)


def median_pass(runs: list[dict]) -> dict:
    """The passes of one configuration as one measurement: the median step time, CPU time and load (two passes:
    their means), the machine-speed readings of the middle run, CONTENDED when any pass was, the passes' spread."""
    ordered = sorted(runs, key=lambda m: m["measured_s"])
    times = [m["measured_s"] for m in ordered]
    cpu = [m["cpu_s"] for m in ordered if m.get("cpu_s")]
    return {**ordered[(len(ordered) - 1) // 2], "measured_s": statistics.median(times),
            "cpu_s": statistics.median(cpu) if cpu else None,
            "load_before": statistics.median(m["load_before"] for m in ordered),
            "contended": any(m["contended"] for m in ordered), "pass_times_s": times, "pass_spread": times[-1] / times[0],
            "pass_loads": [m["load_before"] for m in ordered]}


def report_instrumented(m: dict, cal: dict, before: float, after: float, k: int) -> None:
    """The instrumented configuration scored against its measurement (the target) and its calibration run."""
    spread = ", ".join(f"{t * 1e3:.2f}" for t in m["pass_times_s"])
    print(f"\ninstrumented config {k}: measurement passes {spread} ms (median {m['measured_s'] * 1e3:.2f}); its "
          f"calibration run {cal['measured_s'] * 1e3:.2f} ms ({pct(cal['measured_s'], m['measured_s']):+.1f} % from the "
          f"median: this machine's run-to-run drift)")
    print(f"  after refinement {after * 1e3:.2f} ms: {pct(after, m['measured_s']):+.1f} % against the measurement runs "
          f"(the target's figure), {pct(after, cal['measured_s']):+.1f} % against the calibration run's own steps "
          f"(what `llmperf refine` shows the user); before: {pct(before, m['measured_s']):+.1f} % / "
          f"{pct(before, cal['measured_s']):+.1f} %")


def report_full_scale(measured: list[dict], before: list[float], cal: dict, k: int, sd_op: float) -> None:
    """What earlier calibrations would have made of the same runs, beside the shrunk one: the one run's ratio
    applied in full to every configuration (sessions before 7), and session 7's shrinkage (the cross-cluster
    shared-bias prior SD_SHARED_PRIOR with the profile's op-level held-out error `sd_op` as sd_config)."""
    from llmperf_hook.refine.shrinkage import SD_RUN_PRIOR, SD_SHARED_PRIOR

    scale = cal["measured_s"] / before[k]
    full = [pct(p * scale, m["measured_s"]) for i, (p, m) in enumerate(zip(before, measured)) if i != k]
    k_old = SD_SHARED_PRIOR ** 2 / (SD_SHARED_PRIOR ** 2 + sd_op ** 2 + SD_RUN_PRIOR ** 2)
    old = [pct(p * scale ** k_old, m["measured_s"]) for i, (p, m) in enumerate(zip(before, measured)) if i != k]
    print(f"for comparison, the one-run ratio x{scale:.3f} applied in full to every configuration (refine before "
          f"shrinkage): MAPE of the other {len(full)} {mape(full):.1f} %; with session 7's shrinkage (shared-bias "
          f"prior {SD_SHARED_PRIOR:.0%} across clusters, op-level sd_config {sd_op:.1%}: k = {k_old:.2f}): "
          f"{mape(old):.1f} %")


def report(configs: Sequence[TestbedConfig], measured: list[dict], before: list[float], after: list[float], k: int,
           ref_profile: float) -> None:
    meas = [m["measured_s"] for m in measured]
    err_before = [pct(p, x) for p, x in zip(before, meas)]
    err_after = [pct(p, x) for p, x in zip(after, meas)]
    others = [e for i, e in enumerate(err_after) if i != k]
    print("\n  #  configuration                      measured   before (err)        after (err)        its runs: "
          "spread, load")
    for i, cfg in enumerate(configs):
        mark = " *" if i == k else "  "
        print(f" {i:2d}{mark}{cfg.label():34s} {meas[i] * 1e3:8.2f}  {before[i] * 1e3:8.2f} ({err_before[i]:+6.1f} %)"
              f"  {after[i] * 1e3:8.2f} ({err_after[i]:+6.1f} %)  {runs_text(measured[i])}")
    print(f"\nMAPE before refinement ({len(configs)} configs): {mape(err_before):.1f} %  "
          f"(target <= {TARGETS['before']:.0f} %)")
    print(f"after instrumenting config {k}: its error {abs(err_after[k]):.1f} %  "
          f"(target <= {TARGETS['instrumented']:.0f} %); MAPE of the other {len(others)}: {mape(others):.1f} %  "
          f"(target <= {TARGETS['others']:.0f} %; {mape([e for i, e in enumerate(err_before) if i != k]):.1f} % "
          f"before refinement)")
    ratios = [m["ref_now_s"] / ref_profile for m in measured]
    changes = [abs(m["ref_after_s"] - m["ref_before_s"]) / m["ref_before_s"] for m in measured]
    print(f"machine speed (reference workload, instrument/reference_speed.py): x{min(ratios):.3f}-x{max(ratios):.3f} "
          f"of the profile's over the measurements (median x{statistics.median(ratios):.3f}; >1 = slower); before -> "
          f"after a run: median {statistics.median(changes):.1%}, max {max(changes):.1%}; correlation of the "
          f"prediction error (before) with it: {pearson([math.log(r) for r in ratios], [math.log1p(e / 100) for e in err_before]):+.2f}")
    norm = [m["measured_s"] * ref_profile / m["ref_now_s"] for m in measured]  # measured x speed now / at profile
    n_before, n_after = [pct(p, x) for p, x in zip(before, norm)], [pct(p, x) for p, x in zip(after, norm)]
    print(f"diagnostic only (the reference does not reliably track the drift, see --drift-check): against measured x "
          f"reference at profile / reference now, MAPE before {mape(n_before):.1f} %, instrumented config "
          f"{abs(n_after[k]):.1f} %, other {len(others)} {mape([e for i, e in enumerate(n_after) if i != k]):.1f} %")
    spreads = [m.get("pass_spread", 1.0) for m in measured]
    if len(measured[0].get("pass_times_s", ())) > 1:
        print(f"run-to-run drift between the measurement passes (max / min per configuration): median "
              f"x{statistics.median(spreads):.3f}, max x{max(spreads):.3f} (config {spreads.index(max(spreads))})")
    loads = [m["load_before"] for m in measured]
    print(f"machine load during the measurements: median {statistics.median(loads):.2f}, max {max(loads):.2f} "
          f"(1-minute load average, {os.cpu_count()} cores)")
    quiet = [i for i, m in enumerate(measured) if not m.get("contended")]
    print(f"configurations measured without contention (wall / CPU within {QUIET_WALL_PER_CPU}): {len(quiet)} of "
          f"{len(measured)}" + (f"; MAPE on them before {mape([err_before[i] for i in quiet]):.1f} %, after (not "
                                 f"instrumented) {mape([err_after[i] for i in quiet if i != k] or [0.0]):.1f} %"
                                 if quiet else ""))
    single = [(i, m["cpu_s"]) for i, (cfg, m) in enumerate(zip(configs, measured)) if cfg.ranks == 1 and m.get("cpu_s")]
    if single:
        cpu_err = [pct(before[i], c) for i, c in single]
        print(f"diagnostic, load-independent: MAPE of the uncalibrated prediction against per-step CPU time of the "
              f"{len(single)} one-rank configurations: {mape(cpu_err):.1f} % ({', '.join(f'{e:+.0f}' for e in cpu_err)})")
    every = [(i, m["cpu_s"]) for i, m in enumerate(measured) if m.get("cpu_s")]
    if every:
        cpu_err = [pct(before[i], c) for i, c in every]
        print(f"diagnostic: MAPE of the uncalibrated prediction against the per-step CPU time of the slowest rank, "
              f"all {len(every)} configurations (what a rank costs when it never waits for a core): "
              f"{mape(cpu_err):.1f} % ({', '.join(f'{e:+.0f}' for e in cpu_err)})")
    waits = [m["measured_s"] / m["cpu_s"] for m in measured if m.get("cpu_s")]
    print(f"wall / CPU time per step (1.0 = each rank had its core and never waited): median "
          f"{statistics.median(waits):.2f}, range {min(waits):.2f}-{max(waits):.2f}")
