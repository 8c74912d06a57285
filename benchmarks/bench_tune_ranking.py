"""Ranking quality of `llmperf tune` on measured runs: does the tuner's first choice run fastest in reality?

    OMP_NUM_THREADS=1 python benchmarks/bench_tune_ranking.py [CSV] [--verbose] [--cells] [--host-cells]
                                                              [--misses [--noise PCT]] [--resolution]
                                                              [--measured-only] [--layer-ops]
                                                              [--classify [--noise PCT]] [--miss-parts]

Rows of ../shared/validation/dev.csv that share a model (name AND shape: layers, hidden, heads, sequence),
GPU count and global batch form a group: the same job run with different layouts (e.g. vTrain's single-node
sweeps, S24). Each row becomes its launch command and cluster with the validation engineer's mapping
(`llmperf_hook.validate`: the same one `llmperf validate` uses) and is resolved into a TrainingConfig; the
group's configurations are then ranked by the tuner's own search (`tune.search.search_candidates` over exactly
those candidates: layout rules, memory filter with `llmperf tune`'s default margin for the framework (configs/search/),
full predictions). Reported per group and overall, for groups with at least two distinct measured configurations
(issue 7's rule, nothing looser):
- top-1 within 5 %: the measured time of the tuner's first choice <= 1.05 x the group's measured best
  (target: >= 90 % of groups); a group where the tuner rejects every measured configuration is a miss;
- top-1 exact: the first choice is the measured fastest;
- Spearman rank correlation of predicted vs measured step time (all rows of the group, computed in numpy).

`--host-cells` prints, per (hidden, TP, micro-batch) of the single-stage S24 rows, the per-layer and per-micro-batch
slopes of the step time (least squares t = n (a L + b) + c over layers L and micro-batches n), measured and
predicted, then what a larger TP adds per layer at equal per-rank work (ranking_diagnostics.equal_work_steps: only
the in-layer all-reduces and their host calls differ), and reads the host cost per op unit off the host-bound cells (hidden 1024, micro-batch 1-2, TP 1-4):
the unit that makes their mean predicted per-layer slope the measured one (the configs/clusters A100 presets'
`host_overhead_per_op_us`; predict/host_issue.py).

After the headline (over all rows, issue 7's figure) it prints the measured cells that contradict the work order by more
than 5 % (a cell with more work on every op measuring cheaper per layer, not so predicted: no cost model that grows
with work prices both within the ranking's tolerance; work_order.py, the rule bench_validation.py flags its rows by;
ranking_consistency.flagged_cells) and the top-1 count again without their rows.

`--misses` prints, per missed group, the measured best and the choice with the signed error of each and the
runner-up's measured gap, the per-layer cost of the cells of each miss's best and choice and the single part of the
step time that flips it (ranking_attribution.miss_attribution), the per-step cost per parameter, measured and
predicted (ranking_attribution.step_cost_per_param); then oracles that re-rank every group with part of the prediction taken from the
measurements: each part of the bilinear split t = a n L + b n + c L + d of a family of rows (same source,
hidden, TP, PP, micro-batch, DP; n micro-batches, L layers: per layer and micro-batch, per micro-batch outside
the layers, per step), each (hidden, TP, micro-batch) cell priced at its measured times, and the composed rows'
data-parallel all-reduce priced as vTrain composed it (ranking_attribution.composition_oracle: above 1 GiB of
gradients without the ring's 2(n-1)/n, which a real all-reduce pays) (benchmarks/ranking_attribution.py). They say
which error decides the misses, not what to fit. `--noise PCT`
adds the figure with every row within PCT % of a group's fastest counted as its best (S24 itself has no
run-to-run spread to read a noise from: its rows are composed, `bench_validation.py --audit-s24`).

`--classify` prints each miss's measured best and choice side by side (layout, DP), the measured and the predicted
gap and its class: noise (a measured gap within `--noise PCT`), outlier cell (the best's or the choice's cell is at
odds with its neighbours: it contradicts the work order, or measures above what the smaller and larger micro-batches
of its family allow), systematic (a deciding term two or more misses share) or single (benchmarks/ranking_classes.py).

`--miss-parts` prints the S24 misses left without the flagged cells' rows (the second figure), each with the knobs in
which best and choice differ, both rows' signed errors and predicted parts (compute, recompute, exposed host issue, TP
all-reduces, bubble, optimizer, DP all-reduce), a count by knob and by error direction, and what each equal-work TP
step of unflagged cells adds per in-layer TP call beyond the model (benchmarks/ranking_miss_parts.py).

`--measured-only` ranks the groups again without the rows that were composed, not run
(ranking_diagnostics.is_composed: S24's rows with data parallelism are its DP = 1 rows plus vTrain's table
all-reduce), so the figure says how the tuner ranks real runs; the issue's figure above stays the one over all rows.

`--layer-ops` prints one dense layer of each deciding S24 cell op by op, predicted against the A100 operator sample of
the same per-rank shape, and how the ops compose into the layer's cost (GPU busy, host units, the queued passes):
benchmarks/ranking_layer_ops.py.

`--resolution` prints what the measurements can resolve (ranking_diagnostics.report_resolution): S24's rows are
composed from one per-layer cost per (hidden, TP, micro-batch) cell (the per-micro-batch slope is linear in the
layer count to a microsecond and the same for every pp and DP), so its 120 groups rest on 24 per-layer numbers;
the cells whose larger micro-batch measures cheaper; a perfect model's count under a per-cell error; and the
per-layer costs closest to the measured ones that any model growing with work (a larger micro-batch or hidden size
never cheaper, a larger TP at equal per-rank work never cheaper and dearer by at most its all-reduces and their host
calls on the cluster's own NCCL fit) could predict, with the count the rows reach at them
(ranking_consistency.consistent_layer_costs): how far the measurements are from anything such a model can give.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ranking_consistency import TP_CALLS_PER_LAYER, report_consistency, report_flagged
from ranking_attribution import report_misses, report_step_cost
from ranking_classes import report_classes
from ranking_layer_ops import is_deciding_row, report_layer_ops
from ranking_miss_parts import report_miss_parts
from ranking_diagnostics import WITHIN, RowPoint, equal_work_steps, is_composed, report_resolution

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DEV_CSV = ROOT.parent / "shared" / "validation" / "dev.csv"
A100_OP_SAMPLES = ROOT.parent / "shared" / "data" / "op-samples" / "Perlmutter" / "operator"


@dataclass
class GroupResult:
    key: str
    source: str
    num_configs: int
    top1_within: bool
    top1_exact: bool
    spearman: float | None
    chosen: str
    note: str = ""
    ratio_to_best: float = float("inf")
    """Measured time of the tuner's choice / the group's measured best."""
    is_predicted_best: bool = True
    """The tuner's choice is the fastest fitting row by direct full prediction (checks the bounded search)."""
    row_errors: tuple = ()
    """(cell, signed relative error of the predicted step time) per row; cell = (hidden, tp, micro-batch)."""
    points: tuple = ()
    """One RowPoint per row of the group (what --misses re-ranks)."""
    breakdowns: tuple = ()
    """The predicted StepEstimate.breakdown (part -> seconds) of each row, aligned with points (--miss-parts)."""


def rankdata(x: np.ndarray) -> np.ndarray:
    """Average ranks (ties share the mean rank), as scipy.stats.rankdata(method='average')."""
    order = np.argsort(x, kind="stable")
    ranks = np.empty(len(x), dtype=float)
    ranks[order] = np.arange(1, len(x) + 1)
    for value in np.unique(x):
        tie = x == value
        ranks[tie] = ranks[tie].mean()
    return ranks


def spearman(a: np.ndarray, b: np.ndarray) -> float | None:
    ra, rb = rankdata(a), rankdata(b)
    if len(a) < 3 or ra.std() == 0 or rb.std() == 0:
        return None
    return float(np.corrcoef(ra, rb)[0, 1])


def group_key(run) -> tuple:
    return (run.model, run.num_layers, run.hidden_size, run.num_attention_heads, run.seq_length,
            run.num_gpus, run.global_batch_size, run.gpu_type, run.framework)


def load_groups(csv_path: Path):
    from llmperf_hook.validate.runs_csv import build_measured_runs, read_runs_csv

    groups: dict[tuple, list] = defaultdict(list)
    for run in build_measured_runs(read_runs_csv(csv_path)):
        groups[group_key(run)].append(run)
    return groups


def resolve_rows(runs, presets, work: Path):
    """(run, TrainingConfig, cluster spec) per row; rows the mapping or the parser rejects are skipped."""
    from llmperf_hook import api
    from llmperf_hook.errors import LlmperfError
    from llmperf_hook.frameworks.resolve import resolve_job
    from llmperf_hook.validate.runner import plan_run

    out = []
    for run in runs:
        try:
            plan, choice = plan_run(run, presets, work)
            _, cfg = resolve_job(list(plan.argv), {})
            out.append((run, cfg, api.load_cluster(choice.cluster)))
        except LlmperfError:
            continue
    return out


def rank_group(key: tuple, rows) -> GroupResult | None:
    """The tuner's search over exactly the group's measured configurations."""
    from llmperf_hook import api
    from llmperf_hook.frameworks.validation import validate_config
    from llmperf_hook.tune.candidate import candidate_of
    from llmperf_hook.tune.candidates import candidates_from_list
    from llmperf_hook.tune.search import search_candidates

    measured: dict = defaultdict(list)
    for run, cfg, _ in rows:
        measured[candidate_of(cfg)].append(run.iteration_time_s)
    if len(measured) < 2:
        return None
    base_cfg, spec = rows[0][1], rows[0][2]
    cands = tuple(measured)
    margin = tune_margin(base_cfg)
    res = search_candidates(base_cfg, spec, candidates_from_list(cands), top_k=1, margin=margin,
                            predict=api.predict_config, validate=validate_config)
    meas = {c: statistics.median(v) for c, v in measured.items()}
    best = min(meas.values())
    estimates = [api.predict_config(cfg, s) for _, cfg, s in rows]
    predicted = np.array([float(e.step_time_s) for e in estimates])
    fitting = [(float(e.step_time_s), candidate_of(cfg)) for e, (_, cfg, _) in zip(estimates, rows)
               if _fits(e, margin)]
    corr = spearman(predicted, np.array([r.iteration_time_s for r, _, _ in rows]))
    label = f"{key[0]} L{key[1]} h{key[2]} {key[5]} GPUs gbs {key[6]}"
    source = "/".join(sorted({r.source_id for r, _, _ in rows}))
    errors = tuple(((cfg.model.hidden_size, cfg.parallel.tp, cfg.batch.micro_batch_size),
                    (p - r.iteration_time_s) / r.iteration_time_s) for p, (r, cfg, _) in zip(predicted, rows))
    points = tuple(_row_point(r, cfg, e, margin) for r, cfg, e in zip((r for r, _, _ in rows), (c for _, c, _ in rows), estimates))
    breakdowns = tuple(dict(e.breakdown) for e in estimates)
    if not res.top:
        return GroupResult(label, source, len(cands), False, False, corr, "-", "tuner found no fitting configuration",
                           row_errors=errors, points=points, breakdowns=breakdowns)
    chosen = res.top[0].candidate
    direct_best = min(fitting, key=lambda t: t[0])[0] if fitting else None
    return GroupResult(label, source, len(cands), meas[chosen] <= (1 + WITHIN) * best, meas[chosen] == best, corr,
                       f"{chosen.describe()} ({meas[chosen] / best:.3f}x best)",
                       ratio_to_best=meas[chosen] / best, is_predicted_best=direct_best is not None and res.top[0].step_time_s <= direct_best * (1 + 1e-9),
                       row_errors=errors, points=points, breakdowns=breakdowns)


def tune_margin(cfg) -> float:
    """The memory margin `llmperf tune` applies to this job without --search (the framework's configs/search file)."""
    from llmperf_hook.tune.search_space import load_search_space

    return load_search_space(None, cfg.framework).memory_margin


def _fits(estimate, margin: float) -> bool:
    """The tuner's fit rule: predicted peak <= (1 - margin) x GPU capacity (tune/search.py)."""
    return estimate.memory.peak_bytes_per_gpu <= (1 - margin) * estimate.memory.capacity_bytes


def _row_point(run, cfg, estimate, margin: float) -> RowPoint:
    from llmperf_hook.graph.params import layer_params
    from llmperf_hook.tune.candidate import candidate_of

    h, tp, pp, mbs = cfg.model.hidden_size, cfg.parallel.tp, cfg.parallel.pp, cfg.batch.micro_batch_size
    return RowPoint(candidate_of(cfg).describe(), (h, tp, mbs), (run.source_id, h, tp, pp, mbs, cfg.parallel.dp),
                    cfg.model.num_layers, cfg.batch.num_microbatches, run.iteration_time_s,
                    float(estimate.step_time_s),
                    _fits(estimate, margin), layer_params(cfg, moe=False), cfg.model.seq_length,
                    float(estimate.breakdown.get("comm_dp_grad", 0.0)), composed_dp_s(run))


@functools.lru_cache(maxsize=1)
def _vtrain_lut() -> dict:
    from bench_validation import VTRAIN_LUT_CSV, read_allreduce_lut

    return read_allreduce_lut(VTRAIN_LUT_CSV) if VTRAIN_LUT_CSV.is_file() else {}


def composed_dp_s(run) -> float | None:
    """The all-reduce vTrain added to a composed single-stage row's DP = 1 row (RowPoint.composed_dp_s)."""
    import bench_validation

    lut = _vtrain_lut() if is_composed(run.source_id, run.dp) and run.pp == 1 else {}
    if run.dp not in lut:
        return None
    nbytes = bench_validation.vtrain_gradient_bytes(run)
    if nbytes > 2**30:
        return nbytes / (lut[run.dp][-1][2] * 2**30)
    return bench_validation.lut_ring_s(lut[run.dp], nbytes)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("csv", nargs="?", default=str(DEV_CSV))
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--cells", action="store_true",
                    help="also print the mean signed step-time error per (hidden, TP, micro-batch) over the ranked rows")
    ap.add_argument("--host-cells", action="store_true",
                    help="also print per-layer / per-micro-batch slopes of the single-stage S24 cells and the host unit")
    ap.add_argument("--misses", action="store_true",
                    help="also print each miss's deciding rows and the oracles (which part / cell flips the misses)")
    ap.add_argument("--resolution", action="store_true",
                    help="also print how many independent measurements the groups rest on and a perfect model's "
                         "count under a per-cell measurement error")
    ap.add_argument("--measured-only", action="store_true",
                    help="also rank the groups without the rows that were composed, not run (S24 with DP > 1)")
    ap.add_argument("--layer-ops", action="store_true",
                    help="also print one layer of each deciding S24 cell op by op against the A100 operator samples")
    ap.add_argument("--classify", action="store_true",
                    help="also print each miss's pair, measured and predicted gap and class (noise, outlier cell, "
                         "systematic, single)")
    ap.add_argument("--miss-parts", action="store_true",
                    help="also print the S24 misses without the flagged cells: knobs, errors, predicted parts of both "
                         "rows and the excess per TP call of the equal-work TP steps")
    ap.add_argument("--noise", type=float, default=0.0, metavar="PCT",
                    help="with --misses: also count rows within PCT %% of a group's fastest as its best; with "
                         "--classify: the run-to-run spread a miss must exceed not to be noise")
    args = ap.parse_args()
    from llmperf_hook.resources import configs_dir
    from llmperf_hook.validate.cluster_choice import read_cluster_presets

    started = time.perf_counter()
    presets = read_cluster_presets(configs_dir() / "clusters")
    results = rank_groups(Path(args.csv), presets)
    report(results, time.perf_counter() - started, args.verbose)
    report_flagged(results)
    if args.measured_only:
        print("\nwithout the composed rows (S24 with DP > 1: its DP = 1 row + vTrain's table all-reduce):")
        started = time.perf_counter()
        report(rank_groups(Path(args.csv), presets, keep=lambda run: not is_composed(run.source_id, run.dp)),
               time.perf_counter() - started, verbose=False)
    if args.cells:
        report_cells(results)
    if args.misses:
        report_misses(results, args.noise / 100)
        report_step_cost(results)
    if args.classify:
        report_classes(results, args.noise / 100)
    if args.miss_parts:
        report_miss_parts(results)
    if args.resolution:
        report_resolution(results)
        report_consistency(results, tp_step_cap(results))
    if args.host_cells:
        with tempfile.TemporaryDirectory(prefix="llmperf-tune-rank-") as tmp:
            report_host_cells(Path(args.csv), presets, Path(tmp))
    if args.layer_ops:
        with tempfile.TemporaryDirectory(prefix="llmperf-tune-rank-") as tmp:
            runs = [r for rs in load_groups(Path(args.csv)).values() for r in rs if is_deciding_row(r)]
            report_layer_ops(resolve_rows(runs, presets, Path(tmp)), A100_OP_SAMPLES)


def tp_step_cap(results: list[GroupResult], cluster: str = "vtrain-a100", dtype_bytes: int = 2):
    """(source, hidden, TP, micro-batch) -> the most an equal-work step to this cell may add per layer and
    micro-batch (ranking_consistency.consistent_layer_costs): its TP_CALLS_PER_LAYER all-reduces of micro-batch x
    sequence x hidden x 2 bytes on the cluster's intra-node tier (the alpha-beta form of predict/alpha_beta.py:
    latency + 2 (n - 1) steps + the ring's 2 (n - 1) / n of the bytes at the bus bandwidth; vtrain-a100's numbers
    are the fit of vTrain's own NCCL table) plus one host call each (host_overhead_per_op_s). Only S24's cells (one
    node, fp16) get a cap, at the sequence length its rows share."""
    from llmperf_hook import api

    spec = api.load_cluster(cluster)
    tier = spec.intra_node
    seqs = {p.seq_length for r in results for p in r.points if p.family[0] == "S24"}

    def cap(cell):
        source, hidden, tp, mbs = cell
        if source != "S24" or len(seqs) != 1 or tp > spec.gpus_per_node:
            return None
        nbytes = mbs * next(iter(seqs)) * hidden * dtype_bytes
        ring = 2 * (tp - 1)
        allreduce_s = (tier.latency_s + ring * tier.latency_per_step_s
                       + ring / tp * nbytes / (tier.bandwidth_bytes_per_s * tier.bus_efficiency))
        return TP_CALLS_PER_LAYER * (allreduce_s + spec.host_overhead_per_op_s)
    return cap


def rank_groups(csv_path: Path, presets, keep=lambda run: True) -> list[GroupResult]:
    """rank_group over every group of the CSV, with only the rows `keep` accepts."""
    results: list[GroupResult] = []
    with tempfile.TemporaryDirectory(prefix="llmperf-tune-rank-") as tmp:
        for key, runs in load_groups(csv_path).items():
            r = rank_group(key, resolve_rows([run for run in runs if keep(run)], presets, Path(tmp)))
            if r is not None:
                results.append(r)
    return results


def report_cells(results: list[GroupResult]) -> None:
    """Layout-dependent error: a cell whose rows are all too fast (or too slow) is ranked out of place."""
    by_cell: dict = defaultdict(list)
    for r in results:
        for cell, err in r.row_errors:
            by_cell[cell].append(err)
    print("\nsigned step-time error per (hidden, TP, micro-batch) over the ranked rows:")
    for (h, tp, mbs), errs in sorted(by_cell.items()):
        print(f"  hidden {h:6d} TP {tp:2d} mbs {mbs:3d}: {len(errs):4d} rows  mean {100 * statistics.fmean(errs):+6.1f} %"
              f"  range {100 * min(errs):+6.1f} .. {100 * max(errs):+6.1f} %")


def _slopes(points: list[tuple[int, int, int, float]]) -> tuple[float, float] | None:
    """(per layer, per micro-batch outside the layers) of t = n (a L + b) + c_(L, dp), points (L, dp, n, t)."""
    by_run: dict = defaultdict(list)
    for layers, dp, n, t in points:
        by_run[(layers, dp)].append((n, t))
    slopes = [(layers, np.polyfit([n for n, _ in v], [t for _, t in v], 1)[0])
              for (layers, _), v in by_run.items() if len({n for n, _ in v}) >= 2]
    if len({layers for layers, _ in slopes}) < 2:
        return None
    a, b = np.polyfit([layers for layers, _ in slopes], [s for _, s in slopes], 1)
    return float(a), float(b)


def report_host_cells(csv_path: Path, presets, work: Path) -> None:
    from llmperf_hook import api

    cells: dict = defaultdict(list)
    unit_s = 0.0
    for runs in load_groups(csv_path).values():
        for run, cfg, spec in resolve_rows([r for r in runs if r.source_id == "S24" and r.pp == 1], presets, work):
            n = run.global_batch_size // (run.micro_batch_size * run.dp)
            pred = api.predict_config(cfg, spec).step_time_s
            cells[(run.hidden_size, run.tp, run.micro_batch_size)].append((run.num_layers, run.dp, n,
                                                                           run.iteration_time_s, pred))
            unit_s = spec.host_overhead_per_op_s
    print("\nS24 single-stage cells, ms per layer and micro-batch / per micro-batch outside the layers "
          "(measured / predicted):")
    host_bound = []
    layer_cost = {}
    for (h, tp, mbs), pts in sorted(cells.items()):
        meas, pred = (_slopes([(p[0], p[1], p[2], p[k]) for p in pts]) for k in (3, 4))
        if meas is None or pred is None:
            continue
        print(f"  hidden {h:5d} TP {tp} mbs {mbs}: layer {1e3 * meas[0]:5.2f} / {1e3 * pred[0]:5.2f}   "
              f"micro-batch {1e3 * meas[1]:6.2f} / {1e3 * pred[1]:6.2f}")
        layer_cost[(h, tp, mbs)] = (meas[0], pred[0])
        if h == 1024 and tp <= 4 and mbs <= 2:
            host_bound.append((meas[0], pred[0]))
    print("what a larger TP adds per layer and micro-batch at equal per-rank work (micro-batch / TP), ms "
          "(measured / predicted):")
    for h, work, tp0, tp1, measured_s, predicted_s in equal_work_steps(layer_cost):
        print(f"  hidden {h:5d} mbs/TP {str(work):>3}: TP {tp0} -> {tp1}  {1e3 * measured_s:+6.2f} / {1e3 * predicted_s:+6.2f}")
    if host_bound:
        implied = unit_s * sum(m for m, _ in host_bound) / sum(p for _, p in host_bound)
        print(f"host-bound cells (hidden 1024, TP 1-4, mbs 1-2): {len(host_bound)}; the preset's unit "
              f"{unit_s * 1e6:.1f} us predicts their mean per-layer slope with a unit of {implied * 1e6:.1f} us")


def report(results: list[GroupResult], elapsed_s: float, verbose: bool) -> None:
    n = len(results)
    if not n:
        print("no group with two or more distinct measured configurations")
        return
    within = sum(r.top1_within for r in results)
    exact = sum(r.top1_exact for r in results)
    corrs = [r.spearman for r in results if r.spearman is not None]
    for r in results if verbose else [r for r in results if not r.top1_within]:
        rho = f"{r.spearman:+.2f}" if r.spearman is not None else "  n/a"
        flag = "ok  " if r.top1_within else "MISS"
        print(f"{flag} {r.key:<58} {r.num_configs:3d} configs  rho {rho}  chose {r.chosen} {r.note}")
    print(f"\ngroups with >= 2 distinct measured configurations: {n} ({elapsed_s:.1f} s)")
    print(f"top-1 within {WITHIN:.0%} of the measured best: {within}/{n} = {within / n:.1%}  (target >= 90 %)")
    print(f"top-1 is the measured fastest:        {exact}/{n} = {exact / n:.1%}")
    within10 = sum(r.ratio_to_best <= 1.10 for r in results)
    ratios = [r.ratio_to_best for r in results if r.ratio_to_best != float("inf")]
    print(f"top-1 within 10 %: {within10}/{n} = {within10 / n:.1%}; measured time of the choice / best: "
          f"median {statistics.median(ratios):.3f}, worst {max(ratios):.3f}")
    print(f"search check: tuner's choice = fastest fitting row by direct prediction in "
          f"{sum(r.is_predicted_best for r in results)}/{n} groups")
    for src in sorted({r.source for r in results}):
        rs = [r for r in results if r.source == src]
        cs = [r.spearman for r in rs if r.spearman is not None]
        rho = f", median Spearman {statistics.median(cs):+.2f}" if cs else ""
        print(f"  {src:<8} {sum(r.top1_within for r in rs)}/{len(rs)} groups top-1 within {WITHIN:.0%}{rho}")
    if corrs:
        print(f"Spearman rank correlation predicted vs measured: median {statistics.median(corrs):+.3f}, "
              f"mean {statistics.fmean(corrs):+.3f} over {len(corrs)} groups with >= 3 rows")


if __name__ == "__main__":
    main()
