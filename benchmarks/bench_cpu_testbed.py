"""Predicted vs measured step time of real DeepSpeed jobs on this machine's CPUs, before and after refinement.

    python benchmarks/bench_cpu_testbed.py [--home DIR] [--profile-budget 4] [--steps 26] [--repeats 5] [--calibrate 1,9]
    python benchmarks/bench_cpu_testbed.py --replay HOME/records/testbed-<time>.json

1. A CPU profile from `llmperf profile --device cpu --name cpu-testbed` (fp32 and bf16; reused when present in
   --home and usable by this llmperf, else refitted: the samples stay in the store). The profile carries the
   framework cost measured on this machine (profile/cpu_framework.py: per issued op, per byte, in-step operator
   scale, Adam per tensor, DeepSpeed engine per ZeRO stage, concurrent ranks); the cluster file's
   host_overhead_per_op_us is its per-op figure. A dtype the file lacks (bf16 on an AVX2-only EPYC: no reading ends
   in any box) is scored on the operator profile alone, said per dtype and in the score (--remeasure-framework-cost
   tries it again). And, with `llmperf profile --comm` under torchrun (2 ranks, gloo), the comm model of the cluster
   `cpu-testbed`, described by a cluster file written to --home/clusters/cpu-testbed.yaml (2 "GPUs" = 2 ranks of
   one thread each on this machine; gpu = the measured cpu-testbed hardware file).
2. Twelve testbed configurations (layers, hidden, sequence, micro-batch, ZeRO 0-3, 1-2 ranks, fp32/bf16), each
   launched for real with `deepspeed` (DS_ACCELERATOR=cpu, gloo, one thread per rank) through
   `llmperf run --instrument N --stop-after N`: the measured step time is the median of the timed steps of the
   slowest rank, as the hook recorded them (24 of the 26 steps; 8 of 10 before session 8, when the 8-step median's
   own sampling error, 0.012-0.065 in log by bootstrap over each run's steps, was ~40 % of the run-to-run
   variance). A run whose wall time exceeds its ranks' CPU time by more than
   QUIET_WALL_PER_CPU (other programs held the cores) is run again (--tries; the least contended run is kept,
   chosen on wall / CPU time alone, and flagged CONTENDED when none was quiet). These measurement runs refine
   into a throwaway store (--home/measure), so they never calibrate what is evaluated. With --repeats P (default
   5) the twelve are measured in P passes whose order is rotated (testbed_record.py: pass p starts at
   configuration p x 12 / P), and each configuration is scored on the median of its runs' medians: one
   configuration moves x1.06 (median) and up to x1.37 between runs minutes apart (session 11), which a mean of two
   passes scores. The spread (max / min) and load of each configuration's runs are printed beside its error, and
   the runs split into what a whole pass shared (the machine's state over minutes) and what a run had alone.
3. Before refinement: `llmperf_hook.api.predict_command` for each configuration on cluster cpu-testbed with an
   empty store (--home/eval); MAPE over the twelve.
4. Refinement: ONE configuration (--calibrate, index; several indices are each evaluated on the same measurements,
   each in a fresh evaluation store) is run through `llmperf run --instrument N` with the eval store in the
   middle pass, in its place of the rotation (its automatic `refine` fits the (hardware, cluster, framework)
   calibration; a run whose ranks waited for a core, wall > QUIET_WALL_PER_CPU x CPU time, is calibrated from its
   CPU time as a noisier reading, refine/contention.py; one try); its reference is the median of its OTHER runs,
   measured in the same rotation minutes before and after it; then every configuration is predicted again. The calibration knows what it saw (refine/shrinkage.py): the
   instrumented configuration gets its own ratio, the eleven others the shared part shrunk by empirical Bayes.
   The instrumented configuration's error is printed two ways: against its measurement runs of step 2 (the
   median of the passes, independent of the calibration run: THE TARGET USES THIS ONE) and against the
   calibration run's own steps (what the user sees in `llmperf refine`'s "predicted after"). The gap between
   them is this machine's run-to-run drift, which no calibration can remove. MAPE on the eleven others, beside
   what the one-run ratio applied in full to every configuration (refine before shrinkage) and session 7's
   shrinkage (10 % cross-cluster prior, op-level sd_config: k = 0.50) would have made of them.
   Each run's figures, and what was learnt from them session by session, are in
   benchmarks/results/cpu_testbed_history.md.
Machine load (1-minute load average) is recorded per run and printed; medians everywhere.
5. Every run's raw step times (each rank's wall and CPU time per step), load and the predictions saved at launch go
   to a JSON record (--record, default HOME/records/); `--replay FILE` scores a record again with this tree's
   refine, nothing run: every run of every configuration taken in turn as the one calibration run (12 x P
   choices), the distribution of the instrumented configuration's error and of the others' MAPE, and how often
   the others got worse than before refinement (testbed_replay.py). With `--repredict` the record's twelve are
   predicted again by this tree from --home's profile first (e.g. a copy with a re-measured framework cost; HOME
   gets a scratch store, eval-repredict), so a model change is scored on the recorded runs.

Diagnostics: --spread-check R (run-to-run spread as launched and with DeepSpeed's --bind_cores_to_rank),
--drift-check R (the reference workload's and the speed probe's readings against the step times:
instrument/reference_speed.py, speed_probe.py; --drift-summary FILE prints a saved check's summaries again),
--rescore LOG... (re-score saved outputs with the current priors), --parts RECORD... (wall, CPU and the ranks' wait
for each other, what moves between runs, whether the reference readings track it). Their findings are in the
history file.

The parts, each in the module named after what it produces: testbed_configs.py (the twelve configurations and the
limits), testbed_setup.py (profile, comm model, cluster file, homes), testbed_runs.py (the instrumented runs, the
rotation, the predictions and the record's header), testbed_record.py (the raw record and its passes),
testbed_report.py (the scores), testbed_replay.py (every choice of calibration run), testbed_checks.py (the
drift and spread checks), testbed_rescore.py (printed outputs scored again), testbed_parts.py (the recorded runs'
parts and spreads), testbed_jitter.py (a --replay's last lines: the record's rank jitter against the profile's).
"""

from __future__ import annotations

import argparse
import os
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Sequence

from testbed_checks import drift_check, report_drift_file, spread_check
from testbed_configs import CLUSTER, CONFIGS, TARGETS, TestbedConfig
from testbed_jitter import jitter_lines
from testbed_parts import report_parts
from testbed_record import load_record, save_record
from testbed_report import report_record
from testbed_rescore import read_log, record_from_log, rescore
from testbed_runs import measure_rotation, new_record, predict_all, predict_all_detail
from testbed_setup import (ensure_profiles, missing_dtypes, print_framework_cost, print_profile_reference,
                           refresh_framework_cost, shared_home, write_cluster)


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--home", type=Path, default=Path.home() / ".cache" / "llmperf-cpu-testbed")
    ap.add_argument("--profile-budget", type=float, default=4.0, help="minutes per dtype when a profile is missing")
    ap.add_argument("--steps", type=int, default=26,
                    help="steps per instrumented run (the first 2 are warm-up; 24 timed: module docstring, drift)")
    ap.add_argument("--calibrate", type=index_list, default=[1], metavar="LIST",
                    help="index of the configuration to instrument; several (1,9) are each evaluated on the same "
                         "measurements, each in a fresh evaluation store")
    ap.add_argument("--tries", type=int, default=3, help="runs per configuration while its ranks wait for a core")
    ap.add_argument("--repeats", type=int, default=5,
                    help="measurement passes over the twelve, the order rotated per pass (testbed_record.py); each "
                         "configuration is scored on the median of its runs (the instrumented one's without its "
                         "calibration run, which takes its place in the middle pass)")
    ap.add_argument("--drift-check", type=int, default=0, metavar="R",
                    help="only check whether the reference tracks the step-time drift: R interleaved runs of "
                         "--drift-configs, no prediction")
    ap.add_argument("--drift-configs", type=index_list, default=[0, 1], metavar="LIST",
                    help="configuration indices (of CONFIGS) that --drift-check / --spread-check run again and again")
    ap.add_argument("--drift-summary", type=Path, metavar="FILE",
                    help="only print the summaries of a --drift-check's saved rows (HOME/records/drift-*.json)")
    ap.add_argument("--spread-check", type=int, default=0, metavar="R",
                    help="only measure the run-to-run spread: R rounds of --drift-configs, each launched as is and "
                         "with --bind_cores_to_rank (order alternating), scored on all timed steps and on the first 8")
    ap.add_argument("--rescore", nargs="+", type=Path, metavar="LOG",
                    help="only re-score the calibrations printed in earlier outputs of this benchmark with the "
                         "current shrinkage priors (nothing is run or refitted)")
    ap.add_argument("--replay", type=Path, metavar="FILE",
                    help="only score a record an earlier run saved (every raw step time, testbed_record.py) with the "
                         "current refine code: nothing is run")
    ap.add_argument("--repredict", action="store_true",
                    help="with --replay / --parts: the record's predictions made again by this tree with --home's "
                         "profile (e.g. a copy with a re-measured framework cost) before scoring; the runs as recorded")
    ap.add_argument("--parts", nargs="+", type=Path, metavar="FILE",
                    help="only print where the recorded runs' time goes and what moves between runs (wall, CPU, the "
                         "ranks' wait for each other, reference readings: testbed_parts.py); nothing is run")
    ap.add_argument("--replay-log", type=Path, metavar="LOG",
                    help="--replay of a printed output of this benchmark from before records (its measurement lines "
                         "and calibration runs; no step times), with this home's profile for the priors")
    ap.add_argument("--record", type=Path, metavar="FILE",
                    help="where to save the run's raw record (default HOME/records/testbed-<UTC time>.json)")
    cost = ap.add_mutually_exclusive_group()
    cost.add_argument("--keep-framework-cost", action="store_true",
                      help="never re-measure the profile's framework cost (refresh_framework_cost)")
    cost.add_argument("--remeasure-framework-cost", action="store_true",
                      help="re-measure the profile's framework cost, every dtype the configurations train in, and "
                           "stop when the machine is too busy or a dtype is still missing (without it a missing "
                           "dtype is scored without its framework terms, with a caveat)")
    ap.add_argument("--configs", type=index_list, metavar="LIST",
                    help="only these configurations (indices of CONFIGS; --calibrate then counts within them): a "
                         "functional check of the benchmark's path, not its measurement")
    ap.add_argument("--bind-cores", action="store_true",
                    help="launch every configuration with DeepSpeed's --bind_cores_to_rank (needs numactl)")
    args = ap.parse_args()
    measuring = not (args.replay or args.rescore or args.replay_log or args.drift_check or args.spread_check
                     or args.parts or args.drift_summary)
    if measuring and args.repeats < 2:  # was an IndexError after every run had been made
        ap.error(f"--repeats {args.repeats}: the instrumented configuration is scored on its measurement runs of "
                 "the other passes (its calibration run takes its place in the middle one), so it needs 2 or more")
    for option, indices in (("--configs", args.configs or ()), ("--drift-configs", args.drift_configs)):
        if not all(0 <= i < len(CONFIGS) for i in indices):  # was an IndexError after the profiling
            ap.error(f"{option} {','.join(map(str, indices))}: indices of CONFIGS, 0 to {len(CONFIGS) - 1}")
    if measuring and not all(0 <= k < len(args.configs or CONFIGS) for k in args.calibrate):
        ap.error(f"--calibrate {','.join(map(str, args.calibrate))}: indices of the {len(args.configs or CONFIGS)} "
                 "configurations measured (within --configs when given)")
    return args


def index_list(text: str) -> list[int]:
    """`0,3,5` -> [0, 3, 5]; argparse turns the error into a usage error (exit 2) that names the option."""
    try:
        indices = [int(i) for i in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: a comma-separated list of configuration indices, e.g. "
                                         "0,3") from None
    if len(set(indices)) != len(indices):
        raise argparse.ArgumentTypeError(f"{text}: an index is repeated (each configuration is measured once per "
                                         "pass)")
    return indices


def repredicted(record: dict, home: Path) -> dict:
    """`record` with each configuration's prediction, breakdown and resolved configuration made again by this
    tree from `home`'s profiles (in a scratch store, HOME/eval-repredict); its runs and priors as recorded."""
    eval_home = shared_home(home, "eval-repredict")
    detail = predict_all_detail(record_configs(record), eval_home, home / "work-repredict")
    configs = [{**c, **d} for c, d in zip(record["configs"], detail)]
    return {**record, "configs": configs, "repredicted_from": str(home),
            "framework_cost_missing": missing_dtypes(home / "profiles" / CLUSTER / "framework_overhead.json")}


def record_configs(record: dict) -> list[TestbedConfig]:
    """The configurations a record measured, launched bound to cores when it was (--bind-cores; a record from
    before "bind_cores" was saved says so by its labels)."""
    bind = record.get("bind_cores", any(c.get("label", "").endswith(" bound") for c in record.get("configs", ())))
    return [replace(CONFIGS[i], bind=bool(bind)) for i in record.get("config_indices") or range(len(CONFIGS))]


def main() -> None:
    args = parse_args()
    home = args.home.expanduser().resolve()
    if args.replay:
        record = load_record(args.replay)
        record = repredicted(record, home) if args.repredict else record
        report_record(record, record_configs(record))
        print("\n".join(jitter_lines(record, home)))  # testbed_jitter.py: the record's rank jitter vs the profile's
        return
    if args.drift_summary:
        report_drift_file(args.drift_summary)
        return
    if args.parts:
        records = [load_record(p) for p in args.parts]
        report_parts([repredicted(r, home) for r in records] if args.repredict else records,
                     [p.name for p in args.parts])
        return
    home.mkdir(parents=True, exist_ok=True)
    if args.rescore:
        rescore(home, args.rescore, CLUSTER, len(CONFIGS), TARGETS)
        return
    if args.replay_log:  # a printed output as a record: its configurations' breakdowns and priors from this home
        text, eval_home = read_log(args.replay_log), shared_home(home, "eval-replay")
        header = new_record(CONFIGS, eval_home, args, predict_all_detail(CONFIGS, eval_home, home / "work-replay"), 0.0)
        report_record(record_from_log(text, header), CONFIGS)
        return
    prepare_home(home, args)
    if args.drift_check:
        drift_check(shared_home(home, "drift"), home / "work-drift",
                    args.drift_configs, args.drift_check, args.steps)
    elif args.spread_check:
        spread_check(shared_home(home, "spread"), home / "work-spread", args.drift_configs, args.spread_check,
                     args.steps)
    else:
        measure_and_score(home, args, selected_configs(args))


def prepare_home(home: Path, args: argparse.Namespace) -> None:
    """Step 1: the profiles (refitted or re-measured when stale) and the cluster file."""
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; one thread per rank; home {home}")
    load_at_start = os.getloadavg()[0]
    ensure_profiles(home, args.profile_budget, load_at_start)
    if not args.keep_framework_cost:
        refresh_framework_cost(home, load_at_start, args.remeasure_framework_cost)
    write_cluster(home)


def selected_configs(args: argparse.Namespace) -> list[TestbedConfig]:
    """The configurations measured: all twelve, or --configs; launched bound to cores with --bind-cores."""
    configs = [replace(c, bind=True) for c in CONFIGS] if args.bind_cores else list(CONFIGS)
    return [configs[i] for i in args.configs] if args.configs else configs


def measure_and_score(home: Path, args: argparse.Namespace, configs: Sequence[TestbedConfig]) -> None:
    """Steps 2-5: predictions before, the rotated passes with the calibration runs, predictions after each
    calibration, the record saved, every score printed."""
    print_framework_cost(home)
    ref_profile = print_profile_reference(home)
    work = home / "work"
    shutil.rmtree(work, ignore_errors=True)
    eval_home = shared_home(home, "eval")
    record = new_record(configs, eval_home, args, predict_all_detail(configs, eval_home, work / "predict"), ref_profile)
    cal_homes = {k: shared_home(home, f"eval-c{k}") for k in args.calibrate}
    path = args.record or home / "records" / f"testbed-{record['created_utc']}.json"
    measure_rotation(configs, home, work, record, ref_profile, args, cal_homes, path)
    for k, cal_home in cal_homes.items():  # each calibration in its own store: predict all twelve again from it
        record["calibrations"][str(k)] = {"after_s": predict_all(configs, cal_home, work / f"predict-after{k}")}
    save_record(record, path)
    print(f"\nraw runs saved to {path} (replay: python benchmarks/bench_cpu_testbed.py --replay {path})")
    report_record(record, configs)


if __name__ == "__main__":
    main()
