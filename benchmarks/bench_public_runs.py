"""Accuracy on public measured runs that dev.csv does not have (benchmarks/data/public_runs.csv): a stand-in for
issue 5's held-out set, scored before it is, without fitting to it.

    python benchmarks/bench_public_runs.py [CSV]        # default: benchmarks/data/public_runs.csv

Both scoring paths of the issue are run as a user runs them, through the CLI:
  1. `llmperf validate CSV --format json --write-batch DIR` (the rows as launch commands, one file per cluster);
  2. `llmperf predict --cluster C --batch FILE --format json` on those files; the two step times of every row
     must agree (the largest relative difference is printed).
Then per source: rows, MAPE, bias (mean signed error, + = predicted slower), the worst rows; breakdowns by GPU
type, GPU count band, model size, and by feature (GQA, SwiGLU, MoE, CP, VPP, SP, FP8, recompute mode, a head
dimension whose rows are not 16-byte aligned); the A100 bias by source within each GPU-count band (is it scale or
source?); the configurations that two sources measured identically (how far the sources themselves disagree); the
same model on the same GPUs in two sources (another release or batch: does the prediction follow their ratio?); each
series of rows that differ only in data-parallel size split into a share of the work and seconds per step the
prediction lacks; per GPU type and source, the predicted step split into its parts (compute, in-layer
communication, pipeline bubble, send/recv, data-parallel sync, optimizer, host) beside the bias, which says which
part would have to carry it; and the same figures for ../shared/validation/dev.csv for comparison. One thread per
process (OMP_NUM_THREADS=1).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

os.environ.setdefault("OMP_NUM_THREADS", "1")

from llmperf_hook.validate.measured_run import MeasuredRun  # noqa: E402
from llmperf_hook.validate.runs_csv import build_runs_or_failures, read_runs_csv  # noqa: E402

HERE = Path(__file__).resolve().parent
PUBLIC_CSV = HERE / "data" / "public_runs.csv"
DEV_CSV = HERE.parents[1] / "shared" / "validation" / "dev.csv"
LLMPERF = [sys.executable, "-m", "llmperf_hook.cli"]


def run_cli(args: list[str]) -> str:
    """stdout of `llmperf ARGS` (the installed entry point's module), failing loudly on a non-zero exit."""
    done = subprocess.run([*LLMPERF, *args], capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    if done.returncode != 0:
        raise SystemExit(f"llmperf {' '.join(args)} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return done.stdout


def validate_json(csv_path: Path, batch_dir: Path | None = None) -> dict:
    args = ["validate", str(csv_path), "--format", "json"]
    if batch_dir is not None:
        args += ["--write-batch", str(batch_dir)]
    return json.loads(run_cli(args))


def batch_predictions(batch_dir: Path) -> dict[str, dict]:
    """Row id -> `llmperf predict --batch --format json` result (step time, breakdown, ...) on each
    commands-<cluster>.txt the validation wrote."""
    out: dict[str, dict] = {}
    for commands in sorted(batch_dir.glob("commands-*.txt")):
        name = commands.stem.removeprefix("commands-")
        cluster = str(batch_dir / f"{name}.yaml") if (batch_dir / f"{name}.yaml").exists() else name
        row_ids = re.findall(r"^# row (\S+) ", commands.read_text(encoding="utf-8"), flags=re.M)
        lines = [json.loads(x) for x in run_cli(["predict", "--cluster", cluster, "--batch", str(commands),
                                                "--format", "json"]).splitlines() if x.strip()]
        out.update(zip(row_ids, lines))
    return out


STEP_PARTS: dict[str, str] = {
    "compute": "compute", "recompute": "compute",
    "comm_tp": "in-layer comm", "comm_cp": "in-layer comm", "comm_ep": "in-layer comm",
    "pipeline_bubble": "bubble",
    "pipeline_p2p": "p2p", "comm_pp": "p2p", "comm_pp_gather": "p2p",
    "comm_dp": "dp sync", "comm_dp_grad": "dp sync", "comm_param_gather": "dp sync", "comm_embedding_grad": "dp sync",
    "comm_zero": "dp sync",
    "optimizer": "optimizer",
    "host_overhead": "host", "host_zero3_hooks": "host", "host_optimizer_step": "host",
}
"""Breakdown key of `llmperf predict --format json` (schedule/compose.py _breakdown) -> the part of the step it is
part of; any other key (a calibration's correction, a new kind) counts as "other"."""
PARTS = ("compute", "in-layer comm", "bubble", "p2p", "dp sync", "optimizer", "host", "other")


def part_shares(breakdown: dict[str, float]) -> dict[str, float]:
    """Share of the predicted step in each of PARTS (the breakdown sums to the step time)."""
    total = sum(breakdown.values())
    shares = dict.fromkeys(PARTS, 0.0)
    for key, seconds in breakdown.items():
        shares[STEP_PARTS.get(key, "other")] += seconds / total if total > 0 else 0.0
    return shares


def print_parts(runs: dict[str, MeasuredRun], errors: dict[str, float], batch: dict[str, dict]) -> None:
    """Per GPU type and source: the bias beside the mean share of each part in the predicted step. A part that is
    a few % of the step cannot carry a bias of -15 %: the last column is the factor the compute part alone would
    need to close the mean bias b (predicted = (1 + b) measured): 1 + (1 / (1 + b) - 1) / compute share."""
    print("\nbias and the predicted step's parts (mean share of the predicted step, rows with a breakdown):")
    print(f"  {'gpu / source':<14}{'rows':>5}{'bias':>8}" + "".join(f"{p:>14}" for p in PARTS) + f"{'compute x':>11}")
    groups: dict[tuple[str, str], list[str]] = defaultdict(list)
    for row_id, run in runs.items():
        if row_id in errors and "breakdown" in batch.get(row_id, {}):
            gpu = run.gpu_type.split("-")[0]
            groups[(gpu, "all")].append(row_id)
            groups[(gpu, run.source_id)].append(row_id)
    for (gpu, source), ids in sorted(groups.items()):
        shares = [part_shares(batch[i]["breakdown"]) for i in ids]
        mean = {p: float(np.mean([s[p] for s in shares])) for p in PARTS}
        bias = float(np.mean([errors[i] for i in ids]))
        need = 1.0 + (1.0 / (1.0 + bias) - 1.0) / mean["compute"] if mean["compute"] > 0 else float("nan")
        print(f"  {gpu + ' ' + source:<14}{len(ids):>5}{bias * 100:>+7.1f}%"
              + "".join(f"{mean[p] * 100:>13.1f}%" for p in PARTS) + f"{need:>11.2f}")


def params_b(run: MeasuredRun) -> float:
    """Total parameters in billions (attention with GQA, 2 or 3 MLP matrices, every expert, embedding + head)."""
    h, layers = run.hidden_size, run.num_layers
    kv_channels = _flag_value(run, "--kv-channels") or h // run.num_attention_heads
    attn = h * kv_channels * (2 * run.num_attention_heads + 2 * run.num_query_groups)
    experts = _flag_value(run, "--num-experts") or 1
    ffn = _flag_value(run, "--moe-ffn-hidden-size") or run.ffn_hidden_size
    mlp = (3 if "--swiglu" in run.extra_args else 2) * h * ffn * experts
    return (layers * (attn + mlp) + 2 * run.vocab_size * h) / 1e9


def _flag_value(run: MeasuredRun, flag: str) -> int:
    args = list(run.extra_args)
    return int(args[args.index(flag) + 1]) if flag in args else 0


def gpu_band(n: int) -> str:
    return next(label for top, label in ((8, "1-8"), (64, "9-64"), (512, "65-512"), (10**9, "513+")) if n <= top)


def size_band(run: MeasuredRun) -> str:
    p = params_b(run)
    return "<10B" if p < 10 else ("10-100B" if p < 100 else ">=100B")


FEATURES: dict[str, Callable[[MeasuredRun], bool]] = {
    "GQA": lambda r: r.num_query_groups < r.num_attention_heads,
    "SwiGLU": lambda r: r.swiglu or "--swiglu" in r.extra_args,
    "MoE": lambda r: "--num-experts" in r.extra_args,
    "CP>1": lambda r: r.cp > 1,
    "VPP>1": lambda r: r.vpp > 1,
    "SP": lambda r: r.sequence_parallel,
    "FP8": lambda r: r.precision == "fp8",
    "TP-overlap": lambda r: "--tp-comm-overlap" in r.extra_args and r.sequence_parallel,
    "ZeRO/DeepSpeed": lambda r: r.zero_stage > 0,
    # cuBLAS runs its fastest tensor-core kernels only on 16-byte aligned operands (cuBLAS guide, "Tensor Core
    # usage"); the unfused attention's batched GEMMs step through Q, K, V by the head dimension
    "head dim not 16 B": lambda r: (r.hidden_size // r.num_attention_heads) * 2 % 16 != 0,
}


def config_key(run: MeasuredRun) -> tuple:
    """What a step time depends on in a row: model, layout, batch, precision, GPU type and count."""
    return (run.gpu_type, run.num_gpus, run.num_layers, run.hidden_size, run.num_attention_heads,
            run.num_query_groups, run.ffn_hidden_size, run.vocab_size, run.seq_length, run.micro_batch_size,
            run.global_batch_size, run.tp, run.pp, run.vpp, run.cp, run.dp, run.ep, run.recompute, run.precision)


def print_same_config(runs: dict[str, MeasuredRun], report: dict) -> None:
    """Rows of different sources with identical configurations: the spread between sources is a floor no model of
    the configuration can go under."""
    predicted = {r["row_id"]: r["predicted_s"] for r in report["rows"]}
    groups: dict[tuple, list[MeasuredRun]] = defaultdict(list)
    for run in runs.values():
        groups[config_key(run)].append(run)
    shared = [g for g in groups.values() if len({r.source_id for r in g}) > 1]
    print(f"\nsame configuration, different sources ({len(shared)} configurations):")
    for group in shared:
        group.sort(key=lambda r: r.iteration_time_s)
        low = group[0].iteration_time_s
        cells = ", ".join(f"{r.source_id} {r.row_id} {r.iteration_time_s:.4g} s "
                          f"({(r.iteration_time_s / low - 1) * 100:+.1f}%)" for r in group)
        pred = predicted.get(group[0].row_id)
        pred_text = f"{pred:.4g} s" if pred else "-"
        print(f"  {group[0].model[:24]:<24} {group[0].num_gpus:>5} GPUs: {cells}; predicted {pred_text}")


def print_same_model_across_sources(runs: dict[str, MeasuredRun], report: dict) -> None:
    """Rows of different sources with the same model on the same GPUs but another software release or batch: time
    per sample measured and predicted, and their ratios between the sources. A measured ratio the prediction does
    not follow is the software (what one release ran and the other did not), not the cost of the layout."""
    predicted = {r["row_id"]: r["predicted_s"] for r in report["rows"]}
    groups: dict[tuple, list[MeasuredRun]] = defaultdict(list)
    for run in runs.values():
        if predicted.get(run.row_id):
            groups[(run.model, run.gpu_type, run.num_gpus, run.seq_length)].append(run)
    shared = [g for key, g in sorted(groups.items()) if len({r.source_id for r in g}) > 1]
    print(f"\nsame model and GPUs, different sources ({len(shared)} pairs; time per sample, measured / predicted):")
    for group in shared:
        group.sort(key=lambda r: (r.source_id, r.row_id))
        base = group[0]
        cells = []
        for r in group:
            m, p = r.iteration_time_s / r.global_batch_size, predicted[r.row_id] / r.global_batch_size
            m0 = base.iteration_time_s / base.global_batch_size
            p0 = predicted[base.row_id] / base.global_batch_size
            cells.append(f"{r.source_id} {r.row_id} gbs{r.global_batch_size} {m * 1e3:.4g} / {p * 1e3:.4g} ms "
                         f"(x{m / m0:.2f} / x{p / p0:.2f})")
        print(f"  {base.model[:20]:<20} {base.num_gpus:>5} GPUs: " + "; ".join(cells))


def series_key(run: MeasuredRun) -> tuple:
    """Rows that differ only in their data-parallel size: one replica's work per sample is the same in all."""
    return (run.source_id, run.model, run.num_layers, run.hidden_size, run.gpu_type, run.tp, run.pp, run.vpp, run.cp,
            run.micro_batch_size, run.global_batch_size, run.seq_length, run.recompute, run.precision)


def dp_series(runs: dict[str, MeasuredRun], predicted: dict[str, float]) -> list[list[MeasuredRun]]:
    """The predicted rows grouped by series_key, each sorted by dp; groups with fewer than 3 distinct dp dropped."""
    groups: dict[tuple, list[MeasuredRun]] = defaultdict(list)
    for run in runs.values():
        if predicted.get(run.row_id):
            groups[series_key(run)].append(run)
    series = [sorted(g, key=lambda r: r.dp) for g in groups.values() if len({r.dp for r in g}) >= 3]
    return sorted(series, key=lambda g: (g[0].source_id, g[0].model, g[0].tp, g[0].pp))


def fit_series(predicted_s: np.ndarray, measured_s: np.ndarray) -> tuple[float, float, float]:
    """(r, x, fit MAPE) of the least-squares measured = (1 + r) x predicted + x."""
    (slope, x), *_ = np.linalg.lstsq(np.stack([predicted_s, np.ones_like(predicted_s)], axis=1), measured_s,
                                     rcond=None)
    fit_mape = float(np.mean(np.abs(slope * predicted_s + x - measured_s) / measured_s))
    return float(slope - 1.0), float(x), fit_mape


def print_dp_series(runs: dict[str, MeasuredRun], report: dict) -> None:
    """Each series of three or more rows that differ only in data-parallel size, fitted as measured = (1 + r) x
    predicted + x seconds. At a fixed global batch the predicted step shrinks as 1 / dp, so r is the share of the
    modelled work the measurement adds (a compute rate, a per-token cost), and x what it adds per step whatever the
    step's length (optimizer, bookkeeping, gradient sync, host work); the fit's MAPE says whether the two numbers
    explain the series."""
    predicted = {r["row_id"]: r["predicted_s"] for r in report["rows"]}
    series = dp_series(runs, predicted)
    print(f"\ndata-parallel series ({len(series)}): measured = (1 + r) x predicted + x")
    print(f"  {'series':<56}{'dp':>12}{'rows':>5}{'r':>8}{'x s':>9}{'fit MAPE':>10}{'MAPE':>8}")
    for group in series:
        pred = np.array([predicted[r.row_id] for r in group])
        meas = np.array([r.iteration_time_s for r in group])
        r, x, fit_mape = fit_series(pred, meas)
        mape = float(np.mean(np.abs(pred - meas) / meas))
        r0 = group[0]
        name = (f"{r0.source_id} {r0.model[:12]} L{r0.num_layers} h{r0.hidden_size} tp{r0.tp} pp{r0.pp} "
                f"mbs{r0.micro_batch_size} gbs{r0.global_batch_size}")
        print(f"  {name:<56}{f'{group[0].dp}-{group[-1].dp}':>12}{len(group):>5}{r:>+8.1%}{x:>+9.3f}"
              f"{fit_mape:>10.1%}{mape:>8.1%}")


def print_bias_by_source_and_band(runs: dict[str, MeasuredRun], errors: dict[str, float], gpu: str) -> None:
    """Bias of one GPU type's rows per (source, model size) and GPU-count band: a scale effect moves along a line,
    a source (software, system) effect shifts the whole line."""
    cells: dict[tuple[str, str], list[float]] = defaultdict(list)
    for row_id, err in errors.items():
        run = runs[row_id]
        if run.gpu_type.startswith(gpu):
            cells[(f"{run.source_id} {size_band(run)}", gpu_band(run.num_gpus))].append(err)
    bands = ("1-8", "9-64", "65-512", "513+")
    print(f"\n{gpu} bias by source, model size and GPU count (mean signed error, rows):")
    print(f"  {'source':<14}" + "".join(f"{b:>16}" for b in bands))
    for line in sorted({s for s, _ in cells}):
        row = [cells.get((line, b), []) for b in bands]
        print(f"  {line:<14}" + "".join(f"{np.mean(e) * 100:+10.1f}% ({len(e):>2})" if e else f"{'-':>16}"
                                        for e in row))


def summary(errors: Iterable[float]) -> str:
    e = np.array(list(errors))
    if e.size == 0:
        return "    -"
    return f"{e.size:5d} rows  MAPE {np.mean(np.abs(e)) * 100:6.2f}%  bias {np.mean(e) * 100:+7.2f}%"


def print_groups(title: str, runs: dict[str, MeasuredRun], errors: dict[str, float],
                 key: Callable[[MeasuredRun], str]) -> None:
    groups: dict[str, list[float]] = defaultdict(list)
    for row_id, err in errors.items():
        groups[key(runs[row_id])].append(err)
    print(f"\nby {title}:")
    for label in sorted(groups):
        print(f"  {label:<24}{summary(groups[label])}")


def print_features(runs: dict[str, MeasuredRun], errors: dict[str, float]) -> None:
    print("\nby feature (a row counts under every feature it has; 'without' = the other rows):")
    for name, has in FEATURES.items():
        with_f = [e for i, e in errors.items() if has(runs[i])]
        without = [e for i, e in errors.items() if not has(runs[i])]
        if with_f:
            print(f"  {name:<15} with {summary(with_f)} | without {summary(without)}")
    print_groups("recompute mode", runs, errors, lambda r: r.recompute)


def print_sources(report: dict, num_worst: int) -> None:
    print(f"{'source':<7}{'rows':>5}{'scored':>8}{'MAPE':>9}{'bias':>9}  description")
    rows = {r["row_id"]: r for r in report["rows"]}
    for source_id, s in report["sources"].items():
        mape = f"{s['mape'] * 100:.2f}%" if s["mape"] is not None else "-"
        bias = f"{s['bias'] * 100:+.1f}%" if s["bias"] is not None else "-"
        print(f"{source_id:<7}{s['num_rows']:>5}{s['num_scored']:>8}{mape:>9}{bias:>9}  {s['source'][:70]}")
        for row_id in s["worst_rows"][:num_worst]:
            r = rows[row_id]
            print(f"{'':>9}worst {row_id} {r['model']} {r['layout']}: measured {r['measured_s']:.4g} s, predicted "
                  f"{r['predicted_s']:.4g} s ({r['signed_error'] * 100:+.1f}%)")
    for r in report["rows"]:
        if r["error"]:
            print(f"  FAILED row {r['row_id']} ({r['source_id']}): {r['error']}")
    o = report["overall"]
    print(f"overall MAPE {o['mape'] * 100:.2f}% over {o['num_rows'] - o['num_failed']} rows; mean of per-source "
          f"MAPE {o['mean_source_mape'] * 100:.2f}%; {o['num_failed']} failed")


def check_paths_agree(report: dict, batch: dict[str, float | None]) -> None:
    diffs = []
    for r in report["rows"]:
        if r["predicted_s"] is None:
            continue
        other = batch.get(r["row_id"])
        diffs.append(float("inf") if other is None else abs(other - r["predicted_s"]) / r["predicted_s"])
    worst = max(diffs) if diffs else 0.0
    print(f"\nllmperf validate vs llmperf predict --batch: {len(diffs)} rows, largest relative difference "
          f"{worst:.2e} ({'agree' if worst < 1e-4 else 'DISAGREE'})")


def main(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv[1:]):
        print(__doc__)
        return 0
    csv_path = Path(argv[1]) if len(argv) > 1 else PUBLIC_CSV
    runs = {r.row_id: r for r in build_runs_or_failures(read_runs_csv(csv_path)) if isinstance(r, MeasuredRun)}
    with tempfile.TemporaryDirectory(prefix="llmperf-public-") as tmp:
        report = validate_json(csv_path, Path(tmp))
        batch = batch_predictions(Path(tmp))
    print(f"== {csv_path} ==")
    print_sources(report, num_worst=3)
    check_paths_agree(report, {row_id: result.get("step_time_s") for row_id, result in batch.items()})
    errors = {r["row_id"]: r["signed_error"] for r in report["rows"] if r["signed_error"] is not None}
    print_groups("GPU type", runs, errors, lambda r: r.gpu_type.split("-")[0])
    print_groups("GPU count", runs, errors, lambda r: gpu_band(r.num_gpus))
    print_groups("model size (total parameters)", runs, errors, size_band)
    print_features(runs, errors)
    print_bias_by_source_and_band(runs, errors, "A100")
    print_same_config(runs, report)
    print_same_model_across_sources(runs, report)
    print_dp_series(runs, report)
    print_parts(runs, errors, batch)
    if DEV_CSV.exists():
        print(f"\n== for comparison: {DEV_CSV} ==")
        print_sources(validate_json(DEV_CSV), num_worst=0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
