"""Accuracy against measured public runs: MAPE per source of ../shared/validation/dev.csv vs the issue's targets.

    python benchmarks/bench_validation.py [CSV]          # default: ../shared/validation/dev.csv
    python benchmarks/bench_validation.py --audit-s24 [CSV]   # also: how vTrain's S24 rows were composed, and
                                                              # which reading of its configs the rows support

Predicts every row through the same path as `llmperf validate` / `llmperf predict --batch` (shipped presets,
no per-row constants) and prints per source: rows, MAPE, bias (mean signed error), the target, and the
published reference where there is one; then overall MAPE and the wall time (one thread). Then the rows that
contradict the work order (work_order.py, the rule bench_tune_ranking.py flags its cells by: at pipeline 1 the smaller
micro-batch of one job, more work on every op over the same global batch, measuring more than 5 % cheaper than a
larger one, where the prediction is not) and each affected source's MAPE without them; the headline stays over all
rows.

`--audit-s24` adds what the S24 rows are made of (docs/model.md, round 5): (1) per configuration, the step
time is exactly linear in the number of micro-batches (residual of a least-squares line through 3-4 global
batch sizes, at the 6 significant digits the CSV keeps); (2) the step time of a data-parallel row minus the
same layout's DP=1 row (identical for every micro-batch size and count) against what NCCL's ring all-reduce of
the gradients takes in vTrain's own LUT (calibration/nccl_allreduce_a100_intranode_vtrain_lut_subsampled.csv)
and against bytes / bus bandwidth, the LUT lookup of vTrain's simulator (github.com/VIA-Research/vTrain
src/predictor.py compute_comm_time) for messages above the LUT's 1 GiB, which leaves out the ring factor
2(n-1)/n; (3) MAPE of the S24 rows with and without data parallelism; (4) the per-step part of the single-stage,
DP = 1 rows (the fixed term of (1)) against the rank's parameters over the layer counts: fixed = rate x parameters +
intercept. The intercept is zero to within 0.12 ms, and negative, in every (hidden, TP, micro-batch) family, and the
rate is 20-21 ps per parameter at hidden 2048 and at hidden 1024 TP 2 (~35 B at the A100's memory rate, an Adam
update; 26-38 ps at hidden 1024 TP 4 and 8): the rows hold no per-step framework time at all. A DeepSpeed fp16 step
as it runs (runtime/fp16/fused_optimizer.py: a host-synchronising overflow check per gradient tensor, the
loss-scale update, one copy kernel per tensor; engine.py allreduce_bucket's flatten and copy back) cannot cost
nothing beyond its bytes, so S24's per-step part prices the update's kernels, not the engine's step; it
cannot be evidence for or against what the DeepSpeed step costs per parameter beyond Adam.
(5) Two readings vTrain's own simulator makes of its validation configs (github.com/VIA-Research/vTrain
src/config.py, src/predictor.py), tested on the single-stage rows of S23 and S24: (a) with pipeline 1 it replaces the
micro-batch by global batch / DP (one micro-batch per step); the rows that differ only in micro-batch size
measure up to several times apart, so the runs accumulated micro-batches of the stated size, as we read them;
(b) `use_checkpoint: true` recomputes every pipeline stage but the last ("Last rank worker doesn't perform
recomputation"), so nothing at pipeline 1. Megatron-DeepSpeed's GPTModelPipe checkpoints every transformer layer
on every stage (megatron/model/gpt_model.py: activation_checkpoint_interval = checkpoint_num_layers; DeepSpeed
runtime/pipe/module.py forward, _is_checkpointable). The rows predicted without recompute (vTrain's reading) against
as read (full recompute on every stage): a much larger error says the runs recomputed, as the framework does.
"""

from __future__ import annotations

import csv
import os
import sys
import time
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import numpy as np

os.environ.setdefault("OMP_NUM_THREADS", "1")

from llmperf_hook.resources import configs_dir  # noqa: E402
from llmperf_hook.validate.runner import validate_runs  # noqa: E402
from llmperf_hook.validate.measured_run import MeasuredRun  # noqa: E402
from llmperf_hook.validate.runs_csv import build_measured_runs, read_runs_csv  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))  # work_order, shared with bench_tune_ranking.py
from work_order import CONTRADICTION, contradicts_work_order, fewest_accounting  # noqa: E402

DEFAULT_CSV = Path(__file__).resolve().parents[2] / "shared" / "validation" / "dev.csv"
VTRAIN_LUT_CSV = DEFAULT_CSV.parent / "calibration" / "nccl_allreduce_a100_intranode_vtrain_lut_subsampled.csv"

# Issue 5 "Done when" targets (MAPE, fraction) and the published figures quoted there.
TARGETS: dict[str, tuple[float, str]] = {
    "S03": (0.05, "best open analytic tool: 3.65 %"),
    "S23": (0.08, "vTrain (profiling simulator): 8.4 %"),
    "S24": (0.08, "vTrain (profiling simulator): 14.7 %"),
    "S01": (0.08, ""),
    "S02": (0.08, ""),
    "S04": (0.10, ""),
}


def _config_key(run: MeasuredRun) -> tuple[int, ...]:
    """Every column of an S24 row but the global batch: (layers, hidden, tp, pp, dp, micro-batch)."""
    return (run.num_layers, run.hidden_size, run.tp, run.pp, run.dp, run.micro_batch_size)


def linear_fits(runs: list[MeasuredRun]) -> dict[tuple[int, ...], tuple[float, float, float, int]]:
    """Per configuration with >= 2 micro-batch counts n: least squares t = fixed + n x per_microbatch,
    as (fixed_s, per_microbatch_s, largest |residual| s, number of distinct n)."""
    points: dict[tuple[int, ...], list[tuple[int, float]]] = defaultdict(list)
    for run in runs:
        n = run.global_batch_size // (run.micro_batch_size * run.dp)
        points[_config_key(run)].append((n, run.iteration_time_s))
    fits = {}
    for key, pts in points.items():
        if len({n for n, _ in pts}) < 2:
            continue
        a = np.array([[n, 1.0] for n, _ in pts])
        y = np.array([t for _, t in pts])
        coef = np.linalg.lstsq(a, y, rcond=None)[0]
        fits[key] = (float(coef[1]), float(coef[0]), float(np.abs(a @ coef - y).max()), len({n for n, _ in pts}))
    return fits


def read_allreduce_lut(path: Path) -> dict[int, list[tuple[float, float, float]]]:
    """vTrain's NCCL all-reduce LUT: per group size, (bytes, seconds, bus GB/s) ascending (out-of-place)."""
    lut: dict[int, list[tuple[float, float, float]]] = defaultdict(list)
    with path.open(newline="") as handle:
        for row in csv.DictReader(handle):
            lut[int(row["num_gpus"])].append((float(row["size_bytes"]), float(row["time_ns_out_of_place"]) * 1e-9,
                                              float(row["busbw_GBps_out_of_place"])))
    return {n: sorted(points) for n, points in lut.items()}


def lut_ring_s(points: list[tuple[float, float, float]], nbytes: float) -> float:
    """What NCCL's all-reduce of `nbytes` took in the LUT (interpolated; beyond 1 GiB at the largest size's rate)."""
    sizes = [p[0] for p in points]
    if nbytes >= sizes[-1]:
        return points[-1][1] * nbytes / sizes[-1]
    return float(np.interp(nbytes, sizes, [p[1] for p in points]))


def vtrain_gradient_bytes(run: MeasuredRun) -> int:
    """fp16 gradient bytes of one rank (pp 1) as vTrain's simulator lists the parameters (src/predictor.py
    model_params): word + position embedding, 12 tensors per layer (4 norms, QKV, projection, MLP up/down with
    biases), an untied logit layer."""
    h, tp, v = run.hidden_size, run.tp, run.vocab_size
    layer = 6 * h + 3 * h * (h // tp) + 3 * h // tp + h * (h // tp) + h * (4 * h // tp) + 4 * h // tp + 4 * h * (h // tp)
    return 2 * ((v // tp) * h + run.seq_length * h + run.num_layers * layer + (v // tp) * h)


def megatron_deepspeed_params(run: MeasuredRun) -> int:
    """Parameters of one rank (pp 1) of Megatron-DeepSpeed's GPT: vTrain's parameter list (vtrain_gradient_bytes)
    without its separate logit layer, which Megatron-DeepSpeed ties to the word embedding."""
    h, tp = run.hidden_size, run.tp
    return vtrain_gradient_bytes(run) // 2 - (run.vocab_size // tp) * h


def step_term_fits(runs: list[MeasuredRun], fits: dict) -> dict[tuple[int, int, int], tuple[float, float, int]]:
    """(hidden, TP, micro-batch) -> (seconds per parameter, intercept s, layer counts) of the per-step part of the
    single-stage DP = 1 rows: the fixed term of linear_fits against the rank's parameters (megatron_deepspeed_params)
    over the family's layer counts, least squares fixed = rate x parameters + intercept."""
    first = {_config_key(r): r for r in runs}
    points: dict[tuple[int, int, int], list[tuple[int, float]]] = defaultdict(list)
    for key, (fixed, *_rest) in fits.items():
        layers, hidden, tp, pp, dp, mbs = key
        if pp == 1 and dp == 1:
            points[(hidden, tp, mbs)].append((megatron_deepspeed_params(first[key]), fixed))
    out = {}
    for cell, pts in points.items():
        if len({p for p, _ in pts}) >= 2:
            a = np.array([[float(p), 1.0] for p, _ in pts])
            rate, intercept = np.linalg.lstsq(a, np.array([f for _, f in pts]), rcond=None)[0]
            out[cell] = (float(rate), float(intercept), len({p for p, _ in pts}))
    return out


def _audit_step_term(s24: list[MeasuredRun], fits: dict) -> None:
    terms = step_term_fits(s24, fits)
    print("  per-step part of the pp 1, DP 1 rows: fixed = rate x parameters + intercept, over the layer counts")
    print("  hidden tp mbs layers  ps/param  intercept ms")
    for (hidden, tp, mbs), (rate, intercept, count) in sorted(terms.items()):
        print(f"  {hidden:6d} {tp:2d} {mbs:3d} {count:6d} {rate * 1e12:9.1f} {intercept * 1e3:13.3f}")
    if terms:
        intercepts_ms = [intercept * 1e3 for _, intercept, _ in terms.values()]
        print(f"  intercepts {min(intercepts_ms):+.3f} .. {max(intercepts_ms):+.3f} ms: no per-step framework time "
              "(optimizer launches, overflow checks, loss scale) in these rows")


def audit_s24(runs: list[MeasuredRun], report: object, lut_path: Path) -> None:
    """Print how the S24 rows were composed (see the module docstring)."""
    s24 = [r for r in runs if r.source_id == "S24"]
    fits = linear_fits(s24)
    strict = [f for f in fits.values() if f[3] >= 3]
    print(f"\nS24 audit: {len(fits)} configurations with >= 2 global batch sizes; of the {len(strict)} with 3-4, "
          f"the largest residual of t = fixed + n x per-micro-batch is {max(f[2] for f in strict) * 1e6:.1f} us "
          "(the CSV keeps 6 significant digits)")
    if lut_path.exists():
        _audit_dp_increments(s24, fits, read_allreduce_lut(lut_path))
    _audit_step_term(s24, fits)
    dp_of = {r.row_id: r.dp for r in s24}
    for label, keep in (("DP = 1", lambda dp: dp == 1), ("DP > 1", lambda dp: dp > 1)):
        errors = [abs(r.signed_error) for r in report.rows  # type: ignore[attr-defined]
                  if r.row_id in dp_of and keep(dp_of[r.row_id]) and r.signed_error is not None]
        print(f"S24 rows with {label}: {len(errors)} rows, MAPE {np.mean(errors) * 100:.2f}%")


def _audit_dp_increments(s24: list[MeasuredRun], fits: dict, lut: dict) -> None:
    """Fixed part of a DP > 1 configuration minus the same layout's DP = 1 one, vs the LUT (pp 1 rows)."""
    first = {_config_key(r): r for r in s24}
    small, large = [], []
    print("  layers hidden tp dp mbs  grad MB   DP cost ms  LUT ring ms  bytes/busbw ms")
    for key, (fixed, *_rest) in sorted(fits.items()):
        layers, hidden, tp, pp, dp, mbs = key
        base = fits.get((layers, hidden, tp, pp, 1, mbs))
        if pp != 1 or dp == 1 or base is None or dp not in lut:
            continue
        nbytes = vtrain_gradient_bytes(first[key])
        extra_s, ring_s = fixed - base[0], lut_ring_s(lut[dp], nbytes)
        flat_s = nbytes / (lut[dp][-1][2] * 2**30)  # vTrain above 1 GiB: MiB / (busbw x 1024), no 2(n-1)/n
        (large if nbytes > 2**30 else small).append((extra_s, ring_s, flat_s))
        print(f"  {layers:6d} {hidden:6d} {tp:2d} {dp:2d} {mbs:3d} {nbytes / 2**20:8.0f} {extra_s * 1e3:11.3f}"
              f" {ring_s * 1e3:12.3f} {flat_s * 1e3:15.3f}")
    for label, rows in (("<= 1 GiB", small), ("> 1 GiB", large)):
        if rows:
            ring = np.mean([e / r for e, r, _ in rows])
            flat = np.mean([e / f for e, _, f in rows])
            print(f"  gradients {label}: DP cost / LUT ring time {ring:.3f}, / (bytes / busbw) {flat:.3f} "
                  f"({len(rows)} configurations)")


def work_order_contradictions(runs: list[MeasuredRun], predicted_s: dict[str, float]
                              ) -> list[tuple[MeasuredRun, MeasuredRun]]:
    """(smaller, larger micro-batch) pairs of single-stage rows of one source, job and layout (model, layers, hidden,
    sequence, GPUs, global batch, TP, DP, recompute, precision, GPU) that contradict the work order
    (work_order.contradicts_work_order; `predicted_s`: row id -> predicted step, rows without one are not judged).
    At pipeline 1 the smaller micro-batch runs the same ops over the same global batch in more launches of smaller
    tensors (and re-reads the weights per micro-batch), with no pipeline bubble to shrink: more work on every op."""
    jobs: dict[tuple, list[MeasuredRun]] = defaultdict(list)
    for r in runs:
        if r.pp == 1 and r.row_id in predicted_s:
            jobs[(r.source_id, r.model, r.num_layers, r.hidden_size, r.seq_length, r.num_gpus, r.global_batch_size,
                  r.tp, r.dp, r.recompute, r.precision, r.gpu_type)].append(r)
    return [(a, b) for rows in jobs.values() for a in rows for b in rows if a.micro_batch_size < b.micro_batch_size
            and contradicts_work_order(a.iteration_time_s, b.iteration_time_s, predicted_s[a.row_id],
                                       predicted_s[b.row_id])]


def contradicting_rows(pairs: list[tuple[MeasuredRun, MeasuredRun]]) -> set[str]:
    """Row ids of the fewest rows that account for every contradicting pair (work_order.fewest_accounting)."""
    return fewest_accounting([(a.row_id, b.row_id) for a, b in pairs], order=_id_order)


def _id_order(row_id: str) -> tuple[int, str]:
    return len(row_id), row_id  # numeric ids in numeric order


def report_contradictions(runs: list[MeasuredRun], report: object) -> None:
    """The work-order contradictions and each affected source's MAPE without their rows (the headline is above)."""
    predicted_s = {row.row_id: row.predicted_s for row in report.rows  # type: ignore[attr-defined]
                   if row.predicted_s is not None}
    pairs = work_order_contradictions(runs, predicted_s)
    print(f"rows that contradict the work order by more than {CONTRADICTION:.0%} (pipeline 1, same job and layout: the "
          f"smaller micro-batch, more work on every op over the same global batch, measured cheaper, not so "
          f"predicted): {len(pairs)} pairs")
    for a, b in pairs:
        print(f"  {a.source_id} rows {a.row_id} / {b.row_id}: {a.model} tp{a.tp} dp{a.dp} gbs{a.global_batch_size} mbs "
              f"{a.micro_batch_size} {a.iteration_time_s:.4g} s, mbs {b.micro_batch_size} {b.iteration_time_s:.4g} s "
              f"({b.iteration_time_s / a.iteration_time_s - 1:+.0%})")
    if not pairs:
        return
    flagged = contradicting_rows(pairs)
    print(f"  rows flagged: {', '.join(sorted(flagged, key=_id_order))}")
    for source in sorted({r.source_id for pair in pairs for r in pair}):
        scored = [row for row in report.rows  # type: ignore[attr-defined]
                  if row.source_id == source and row.signed_error is not None]
        kept = [abs(row.signed_error) for row in scored if row.row_id not in flagged]
        mape = f"{100 * np.mean(kept):.2f}%" if kept else "-"  # a source of one contradicting pair keeps no row
        print(f"  {source} without those rows: MAPE {mape} over {len(kept)} of {len(scored)} rows")


VTRAIN_SOURCES = ("S23", "S24")


def audit_vtrain_readings(runs: list[MeasuredRun], report: object) -> None:
    """Section (5) of the module docstring: vTrain's simulator readings of micro-batch and recompute at pipeline 1."""
    single = [r for r in runs if r.source_id in VTRAIN_SOURCES and r.pp == 1]
    by_batch: dict[tuple, list[float]] = defaultdict(list)
    for r in single:
        by_batch[(r.source_id, r.num_layers, r.hidden_size, r.tp, r.dp, r.global_batch_size)].append(r.iteration_time_s)
    ratios = [max(v) / min(v) for v in by_batch.values() if len(v) >= 2]
    if ratios:
        print(f"\nvTrain's readings, pipeline-1 rows: {len(ratios)} configurations measured at several micro-batch "
              f"sizes; slowest / fastest median {np.median(ratios):.2f}, max {max(ratios):.2f} (one micro-batch of "
              "global batch / DP, vTrain's simulator, would make them equal)")
    full = [r for r in single if r.recompute == "full"]
    variant = validate_runs([replace(r, recompute="none") for r in full], clusters_dir=configs_dir() / "clusters",
                            num_worst=0)
    as_read = {r.row_id: r.signed_error for r in report.rows}  # type: ignore[attr-defined]
    without = {r.row_id: r.signed_error for r in variant.rows}
    for source in VTRAIN_SOURCES:
        ids = [r.row_id for r in full if r.source_id == source]
        print(f"  {source} {len(ids)} pipeline-1 rows: full recompute (as read) {_mape_bias(as_read, ids)}; "
              f"no recompute (vTrain's simulator) {_mape_bias(without, ids)}")


def _mape_bias(errors: dict, ids: list) -> str:
    values = [errors[i] for i in ids if errors.get(i) is not None]
    if not values:
        return "-"
    return f"MAPE {100 * np.mean(np.abs(values)):.2f} %, bias {100 * np.mean(values):+.1f} %"


def main(argv: list[str]) -> int:
    audit = "--audit-s24" in argv
    argv = [a for a in argv if a != "--audit-s24"]
    csv_path = Path(argv[1]) if len(argv) > 1 else DEFAULT_CSV
    if not csv_path.exists():
        print(f"{csv_path} not found: pass the validation CSV as the first argument")
        return 2
    started = time.perf_counter()
    runs = build_measured_runs(read_runs_csv(csv_path))
    report = validate_runs(runs, clusters_dir=configs_dir() / "clusters", num_worst=3)
    wall_s = time.perf_counter() - started
    print(f"{'source':<7}{'rows':>6}{'failed':>8}{'MAPE':>9}{'bias':>9}{'target':>9}  verdict  reference")
    for s in report.sources:
        target, reference = TARGETS.get(s.source_id, (None, ""))
        mape = f"{s.mape * 100:.2f}%" if s.mape is not None else "-"
        bias = f"{s.bias * 100:+.1f}%" if s.bias is not None else "-"
        verdict = "-" if target is None or s.mape is None else ("PASS" if s.mape <= target else "MISS")
        target_text = f"{target * 100:.0f}%" if target is not None else "-"
        print(f"{s.source_id:<7}{s.num_rows:>6}{s.num_rows - s.num_scored:>8}{mape:>9}{bias:>9}{target_text:>9}"
              f"  {verdict:<7}  {reference}")
        for r in s.worst:
            print(f"{'':>9}worst row {r.row_id}: {r.layout} measured {r.measured_s:.4g} s predicted "
                  f"{r.predicted_s:.4g} s ({(r.signed_error or 0) * 100:+.1f}%)")
    overall = f"{report.overall_mape * 100:.2f}%" if report.overall_mape is not None else "-"
    mean_src = f"{report.mean_source_mape * 100:.2f}%" if report.mean_source_mape is not None else "-"
    print(f"overall MAPE {overall} over {len(report.rows) - report.num_failed} rows; mean of per-source MAPE "
          f"{mean_src}; {report.num_failed} failed; {len(report.rows)} rows in {wall_s:.1f} s wall")
    report_contradictions(runs, report)
    if audit:
        audit_s24(runs, report, VTRAIN_LUT_CSV)
        audit_vtrain_readings(runs, report)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
