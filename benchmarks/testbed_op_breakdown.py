"""Where a CPU testbed configuration's predicted step goes, op class by op class, beside a real run's operators.

    python benchmarks/testbed_op_breakdown.py INDEX [--home DIR] [--run-dir RUN]
    python benchmarks/testbed_op_breakdown.py --record RECORD [--home DIR]

INDEX is a configuration of testbed_configs.CONFIGS. The prediction is this tree's, from --home's profile (the
benchmark's home by default): per (op class, phase) the step's seconds, split into the terms that price them on a
CPU (predict/cpu_framework.op_cost_parts: the operators at compute_scale, per issued op unit, per byte; Adam and
DeepSpeed's engine; gloo's transport CPU; the collectives as the comm model prices them). `llmperf predict --format
json` gives the step's components only, not this.

With --run-dir, the run directory of `llmperf run --instrument N --stop-after M --profile-ops K` of the same
command (as testbed_runs.py launches it, M >= N + K): each op its rank 0 recorded (instrument/op_profile.py: the
op's CPU time and its children's under torch.profiler, its backward the autograd nodes of the same sequence
numbers), beside the predicted op of the same class, phase and dims. Time outside the mapped ops (views, the
autograd engine, DeepSpeed's hooks and copies) is not in them: the run's step time less their sum. The profiler
adds some microseconds per event, so small ops read high.

With --record, a record of bench_cpu_testbed.py (testbed_record.py; nothing is run): every configuration's
predicted step by term beside the median of its recorded runs' step wall time and CPU time (the slowest rank's,
per step), and which part the CPU time leaves: CPU / (prediction less the collectives, which are the ranks' wait,
not CPU), the ranks' mean CPU / (that, less the priced wait for the slowest rank, "jit": predict/rank_jitter.py),
and the forward+backward's ratio (the ranks' mean) if the step's own terms (Adam, DeepSpeed's engine, gloo's
transport threads) were right. Grouped by ranks: a term missing from multi-rank jobs shows as their ratio above the one-rank
configurations' (session 22's quiet record: x1.07-1.31 at 2 ranks against x0.97-1.10 at 1, /work/notes/h191.md).
The record's CPU time is the slowest rank's per step; beside it the ranks' mean per step (rank_mean_cpu_s): on
that record the 2-rank geometric mean is x1.170 by the slowest rank and x1.101 by the mean (1 rank: x1.063), so
most of the excess is the ranks' step-to-step jitter the slowest rank picks up (/work/notes/r83.md).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any, Iterator

from testbed_configs import CLUSTER, CONFIGS, TestbedConfig
from testbed_record import load_record, reference_runs

Key = tuple[str, str]
"""(op class, phase)."""
OpKey = tuple[str, str, tuple[tuple[str, int], ...]]
"""(op class, phase, sorted dims)."""


def op_key(op_class: str, phase: str, dims: dict) -> OpKey:
    return op_class, phase, tuple(sorted((str(k), int(v)) for k, v in dims.items()))


def step_ops(cfg: TestbedConfig, work: Path) -> Iterator[tuple[Any, int, dict[str, float]]]:
    """(op, times per step, its op_cost_parts) for every op of the configuration's rank-0 graph on cluster CLUSTER;
    LLMPERF_HOME must name the home before this runs."""
    from llmperf_hook.api import resolve_command
    from llmperf_hook.graph.build import build_graph
    from llmperf_hook.predict import fitted
    from llmperf_hook.predict.cpu_framework import (find_cpu_framework_cost, op_cost_parts, ranks_on_machine,
                                                    synchronised_ranks)
    from llmperf_hook.predict.dispatch import find_operator_profile, op_id, predict_ops

    ds_json = work / "ds.json"
    ds_json.parent.mkdir(parents=True, exist_ok=True)
    ds_json.write_text(json.dumps(cfg.ds_config()))
    _, config, cluster, _ = resolve_command(cfg.argv(ds_json, 29500), os.environ, cluster=CLUSTER)
    graph = build_graph(config, cluster)
    ops = graph.all_ops()
    cost = find_cpu_framework_cost(cluster.gpu.name, config.precision)
    if cost is None:
        raise SystemExit(f"{CLUSTER}: no CPU framework cost for {config.precision} in this home's profile")
    seconds, _ = predict_ops(ops, cluster, find_operator_profile(cluster, config.precision),
                             fitted.find_comm_model(cluster.name))
    ranks, synced = ranks_on_machine(ops), synchronised_ranks(ops)
    stage = graph.stages[0]
    for block in (b for chunk in stage.chunks for b in chunk.blocks):
        for op in (*block.fwd, *block.bwd):
            yield op, block.count * graph.num_microbatches, op_cost_parts(op, seconds[op_id(op)], cost, ranks, synced)
    for op in stage.step_ops:
        yield op, 1, op_cost_parts(op, seconds[op_id(op)], cost, ranks, synced)


def by_class(rows: Iterator[tuple[Any, int, dict[str, float]]]) -> dict[Key, dict[str, float]]:
    """Seconds per step of each (op class, phase), per term, and its op count per step ("count")."""
    out: dict[Key, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for op, n, parts in rows:
        entry = out[(op.op_class, op.phase)]
        entry["count"] += n
        for term, s in parts.items():
            entry[term] += n * s
    return {k: dict(v) for k, v in out.items()}


def recorded_ops(run_dir: Path) -> dict[OpKey, tuple[float, float]]:
    """{op: (median seconds, occurrences per profiled step)} of rank 0's op records (kind "op")."""
    out = {}
    for line in (run_dir / "rank0.jsonl").read_text().splitlines():
        rec = json.loads(line) if line.strip() else {}
        if rec.get("kind") == "op":
            out[op_key(rec["op_class"], rec["phase"], rec["dims"])] = (
                float(rec["seconds"]), rec["count"] / max(1, int(rec.get("profile_steps") or 1)))
    return out


def print_classes(classes: dict[Key, dict[str, float]]) -> None:
    terms = sorted({t for v in classes.values() for t in v if t != "count"})
    print(f"  {'op class / phase':26s} {'ops':>5s} {'ms':>8s}  " + "  ".join(f"{t:>9s}" for t in terms))
    for (cls, phase), v in sorted(classes.items(), key=lambda kv: -sum(s for t, s in kv[1].items() if t != "count")):
        total = sum(s for t, s in v.items() if t != "count")
        print(f"  {cls + ' / ' + phase:26s} {int(v['count']):5d} {total * 1e3:8.3f}  "
              + "  ".join(f"{v.get(t, 0.0) * 1e3:9.3f}" for t in terms))
    sums = [sum(v.get(t, 0.0) for v in classes.values()) for t in terms]
    print(f"  {'sum':26s} {'':5s} {sum(sums) * 1e3:8.3f}  " + "  ".join(f"{s * 1e3:9.3f}" for s in sums))


def print_against_run(rows: list[tuple[Any, int, dict[str, float]]], recorded: dict[OpKey, tuple[float, float]]) -> None:
    """Each recorded op beside the predicted op of the same class, phase and dims (per occurrence). The optimizer's
    record is torch's Optimizer.step alone: its "adam" part is compared (DeepSpeed's engine work is outside it)."""
    predicted: dict[OpKey, tuple[float, int, str]] = {}
    for op, n, parts in rows:
        key = op_key(op.op_class, op.phase, dict(op.dims))
        seconds = parts.get("adam", 0.0) if op.op_class == "optimizer" else sum(parts.values())
        _, count, name = predicted.get(key, (seconds, 0, op.name))
        predicted[key] = (seconds, count + n, name)
    print(f"\n  {'op (class, phase, dims)':62s} {'predicted':>9s} {'recorded':>9s} {'ratio':>6s}  per step: predicted / recorded")
    matched = [0.0, 0.0]
    for key in sorted(set(predicted) | set(recorded), key=str):
        p_s, p_n, name = predicted.get(key, (0.0, 0, "-"))
        r_s, r_n = recorded.get(key, (0.0, 0.0))
        ratio = f"{r_s / p_s:6.2f}" if p_s and r_s else "     -"
        label = f"{key[0]} {key[1]} {dict(key[2])}"[:62]
        print(f"  {label:62s} {p_s * 1e3:9.3f} {r_s * 1e3:9.3f} {ratio}  {p_n:3d} / {r_n:4.1f}  {name}")
        if p_s and r_s:
            matched[0] += p_n * p_s
            matched[1] += p_n * r_s
    print(f"  ops in both, per step: predicted {matched[0] * 1e3:.2f} ms, recorded {matched[1] * 1e3:.2f} ms")


STEP_TERMS = ("adam", "engine", "transport")
"""op_cost_parts' terms paid once per step; "operators", "issue", "traffic" and "engine_microbatches" (ZeRO-2/3's
engine work in each further micro-batch) are the micro-batches' forward+backward, "comm" the collectives (the ranks'
wait on a CPU: gloo blocks the calling thread), "jitter" the wait for the slowest rank (E[max] - mean)."""


def step_terms_ms(rows: Iterator[tuple[Any, int, dict[str, float]]]) -> dict[str, float]:
    """Milliseconds per step of each op_cost_parts term over the configuration's ops."""
    out: dict[str, float] = defaultdict(float)
    for _, n, parts in rows:
        for term, s in parts.items():
            out[term] += n * s * 1e3
    return dict(out)


def rank_mean_cpu_s(run: dict) -> float | None:
    """Median over a run's timed steps of the ranks' mean CPU seconds in that step (testbed_record.rank_steps), or
    None where the run has no per-rank CPU times. The record's cpu_s is the median of the slowest rank's per step
    (refine/run_records.summarize_job): above any one rank's where the ranks' step times jitter apart."""
    steps: dict[int, list[float]] = defaultdict(list)
    for rank_steps in (run.get("rank_steps") or {}).values():
        for step, _, cpu_s, warmup in rank_steps:
            if cpu_s is not None and not warmup:
                steps[step].append(cpu_s)
    ranks = len(run.get("rank_steps") or {})
    means = [sum(v) / ranks for v in steps.values() if len(v) == ranks]
    return statistics.median(means) if means else None


def against_runs(terms_ms: dict[str, float], runs: list[dict]) -> dict[str, float]:
    """The predicted terms beside the median over `runs` (a record's runs of one configuration) of the measured step
    wall time and the slowest rank's CPU time per step (testbed_record.py: measured_s, cpu_s), in ms; and the ranks'
    mean CPU time per step (rank_mean_cpu_s; the slowest rank's where a run lacks the ranks' steps). The slowest
    rank's CPU is compared with the prediction's E[max] (jitter in), the ranks' mean with one rank's mean (out)."""
    predicted = sum(terms_ms.values())
    comm, jitter = terms_ms.get("comm", 0.0), terms_ms.get("jitter", 0.0)
    step = sum(terms_ms.get(t, 0.0) for t in STEP_TERMS)
    cpu = statistics.median(r["cpu_s"] for r in runs) * 1e3
    mean = statistics.median(rank_mean_cpu_s(r) or r["cpu_s"] for r in runs) * 1e3
    wall = statistics.median(r["measured_s"] for r in runs) * 1e3
    fwd_bwd = predicted - comm - jitter - step
    return {"predicted": predicted, "comm": comm, "jitter": jitter, "step_terms": step, "fwd_bwd": fwd_bwd,
            "cpu": cpu, "cpu_rank_mean": mean, "wall": wall, "cpu_per_non_comm": cpu / (predicted - comm),
            "rank_mean_per_non_comm": mean / (predicted - comm - jitter),
            "fwd_bwd_if_step_right": (mean - step) / fwd_bwd}


def by_ranks(rows: list[tuple[int, dict[str, float]]], key: str) -> dict[int, float]:
    """{ranks: geometric mean of `key` over the configurations with that many ranks}."""
    groups: dict[int, list[float]] = defaultdict(list)
    for ranks, row in rows:
        groups[ranks].append(math.log(row[key]))
    return {r: math.exp(sum(v) / len(v)) for r, v in sorted(groups.items())}


def print_record(record_path: Path, home: Path) -> None:
    record = load_record(record_path, "--record")  # exit 2 for a file that is not one
    print(f"{record_path.name}: this tree's prediction ({home}) against the median of each configuration's runs, "
          f"ms per step (CPU: the slowest rank's per step; mean: the ranks' mean per step)\n  {'#':>2} "
          f"{'configuration':32s} {'pred':>6} {'comm':>5} {'jit':>4} {'step':>5} {'f+b':>6} | {'CPU':>6} {'mean':>6} "
          f"{'wall':>6}  CPU/(pred-comm)  mean/(pred-comm-jit)  f+b if step right (mean)")
    rows = []
    for index, label in ((c["index"], c["label"]) for c in record["configs"]):
        cfg = CONFIGS[index] if 0 <= index < len(CONFIGS) else None
        if cfg is None or cfg.label() != label:
            print(f"{record_path}: configuration {index} is {label!r} there, "
                  f"{cfg.label() if cfg else 'absent'!r} here: pass a record of this tree's CONFIGS", file=sys.stderr)
            raise SystemExit(2)
        runs = [r for r in reference_runs(record, index) if r.get("cpu_s")]  # calibration runs left out
        if not runs:
            print(f"  {index:2d} {label:32s} no run with a CPU time in this record")
            continue
        with tempfile.TemporaryDirectory(prefix="llmperf-breakdown-") as work:
            row = against_runs(step_terms_ms(step_ops(cfg, Path(work))), runs)
        rows.append((cfg.ranks, row))
        print(f"  {index:2d} {label:32s} {row['predicted']:6.1f} {row['comm']:5.1f} {row['jitter']:4.1f} "
              f"{row['step_terms']:5.1f} {row['fwd_bwd']:6.1f} | {row['cpu']:6.1f} {row['cpu_rank_mean']:6.1f} "
              f"{row['wall']:6.1f}  x{row['cpu_per_non_comm']:.3f}{'':9s}x{row['rank_mean_per_non_comm']:.3f}{'':14s}"
              f"x{row['fwd_bwd_if_step_right']:.3f}")
    for key, what in (("cpu_per_non_comm", "CPU / (prediction less collectives)"),
                      ("rank_mean_per_non_comm", "the ranks' mean CPU / (prediction less collectives and jitter)"),
                      ("fwd_bwd_if_step_right", "forward+backward (the ranks' mean) if the step terms are right")):
        means = by_ranks(rows, key)
        print(f"  {what}, geometric mean by ranks: " + ", ".join(f"{r} rank(s) x{m:.3f}" for r, m in means.items()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("index", type=int, nargs="?", choices=range(len(CONFIGS)), metavar="INDEX")
    ap.add_argument("--home", type=Path, default=Path.home() / ".cache" / "llmperf-cpu-testbed")
    ap.add_argument("--run-dir", type=Path, help="a --profile-ops run of the same configuration")
    ap.add_argument("--record", type=Path, help="a bench_cpu_testbed.py record: every configuration against its runs")
    args = ap.parse_args()
    if (args.index is None) == (args.record is None):
        ap.error("give a configuration INDEX or --record FILE")
    os.environ["LLMPERF_HOME"] = str(args.home.expanduser().resolve())
    if args.record:
        return print_record(args.record, args.home)
    cfg = CONFIGS[args.index]
    with tempfile.TemporaryDirectory(prefix="llmperf-breakdown-") as work:  # the command's ds_config file
        rows = list(step_ops(cfg, Path(work)))
    print(f"{args.index} {cfg.label()}: predicted per step, ms (rank 0; {args.home})")
    print_classes(by_class(iter(rows)))
    if args.run_dir:
        print_against_run(rows, recorded_ops(args.run_dir))


if __name__ == "__main__":
    sys.exit(main())
