"""Per-micro-batch cost outside the transformer layers, from vTrain's single-node layer sweeps (S24), measured vs predicted.

    OMP_NUM_THREADS=1 python benchmarks/bench_outside_layers.py [CSV] [--ops] [--pp N]

S24 (github.com/VIA-Research/vTrain data/ground_truth_single.csv: A100, Megatron-DeepSpeed, GPT vocab 50257 padded,
seq 1024, fp16, full recompute) runs the same layout with 16, 24, ... layers and several global batches. Its measured
rows with one pipeline stage of one (TP, hidden, micro-batch, DP) family are fitted by least squares to

    t = n (a L + b) + c L + d        (n micro-batches, L layers)

so `a` is the cost per layer and micro-batch, `b` the cost per micro-batch outside the layers (embedding, final
LayerNorm, LM head, cross entropy, pipeline-engine bookkeeping), `c L + d` per step (optimizer, gradient reduction).
A row with DP > 1 is its DP = 1 run plus vTrain's table all-reduce once per step (ranking_diagnostics.is_composed),
so its `a` and `b` are still the single GPU's measured ones (every TP = 1 single-stage row has DP > 1).
The same fit runs over our predicted step times. Printed per cell: rows behind the fit, a and b measured / predicted,
and the fit's largest residual relative to the row (the fit is trusted only when it is small). `--ops` adds, per cell,
our predicted forward + backward seconds per micro-batch of each op outside the layers. `--pp 2` fits the two-stage
rows instead: 1F1B runs (n + 1) passes of its slower stage, the last one (LM head and loss), so `b` is then the
head's cost per micro-batch on its own (no embedding), and `a` the cost per layer of the whole model.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np

os.environ.setdefault("OMP_NUM_THREADS", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
DEV_CSV = ROOT.parent / "shared" / "validation" / "dev.csv"


def fit_cell(points: list[tuple[int, int, float]]) -> tuple[np.ndarray, float] | None:
    """(a, b, c, d) of t = n (a L + b) + c L + d over points (L, n, t), and the largest |residual| / t."""
    if len({layers for layers, _, _ in points}) < 2 or len({(layers, n) for layers, n, _ in points}) < 4:
        return None
    x = np.array([[n * layers, n, layers, 1.0] for layers, n, _ in points])
    t = np.array([t for _, _, t in points])
    coef = np.linalg.lstsq(x, t, rcond=None)[0]
    return coef, float(np.max(np.abs(x @ coef - t) / t))


def collect_cells(csv_path: Path, presets, work: Path, pp: int = 1) -> dict:
    """(tp, hidden, mbs, dp) -> [(layers, n, measured_s, predicted_s, cfg, spec)] for S24's rows with `pp` stages."""
    from bench_tune_ranking import load_groups, resolve_rows
    from llmperf_hook import api

    cells: dict = defaultdict(list)
    for runs in load_groups(csv_path).values():
        rows = [r for r in runs if r.source_id == "S24" and r.pp == pp]
        for run, cfg, spec in resolve_rows(rows, presets, work):
            pred = float(api.predict_config(cfg, spec).step_time_s)
            cells[(run.tp, run.hidden_size, run.micro_batch_size, run.dp)].append(
                (run.num_layers, cfg.batch.num_microbatches, run.iteration_time_s, pred, cfg, spec))
    return cells


def outside_ops_s(cfg, spec) -> dict[str, float]:
    """Predicted seconds per micro-batch of each op of the blocks outside the transformer layers (embedding, head),
    first pipeline stage and last, forward and backward (backward includes any recomputed forward)."""
    from llmperf_hook.graph.build import build_graph
    from llmperf_hook.predict.dispatch import op_id, predict_op_times

    graph = build_graph(cfg, spec)
    seconds = predict_op_times(graph, spec, cfg.precision).seconds
    out: dict[str, float] = defaultdict(float)
    for stage in graph.stages:
        for chunk in stage.chunks:
            for block in chunk.blocks:
                if block.name not in ("embedding", "head"):
                    continue
                for phase, ops in (("fwd", block.fwd), ("bwd", block.bwd)):
                    for op in ops:
                        out[f"{block.name} {phase} {op.name} {op.op_class} {dict(op.dims)}"] += \
                            seconds[op_id(op)] * block.count
    return dict(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("csv", nargs="?", default=str(DEV_CSV))
    ap.add_argument("--ops", action="store_true", help="also print our predicted ops outside the layers per cell")
    ap.add_argument("--pp", type=int, default=1, help="fit the rows with this many pipeline stages (1 or 2)")
    args = ap.parse_args()
    from llmperf_hook.resources import configs_dir
    from llmperf_hook.validate.cluster_choice import read_cluster_presets

    presets = read_cluster_presets(configs_dir() / "clusters")
    with tempfile.TemporaryDirectory(prefix="llmperf-outside-") as tmp:
        cells = collect_cells(Path(args.csv), presets, Path(tmp), args.pp)
    print(f"S24 rows with PP {args.pp}: t = n (a L + b) + c L + d per (TP, hidden, micro-batch, DP)")
    print(f"{'TP':>3} {'hidden':>6} {'mbs':>4} {'dp':>3} {'rows':>5}  {'a ms/layer meas/pred':>22}  "
          f"{'b ms/mb outside meas/pred':>26}  {'b ratio':>7}  {'max resid meas/pred':>20}")
    ratios = []
    for (tp, h, mbs, dp), pts in sorted(cells.items()):
        meas = fit_cell([(p[0], p[1], p[2]) for p in pts])
        pred = fit_cell([(p[0], p[1], p[3]) for p in pts])
        if meas is None or pred is None:
            print(f"{tp:3d} {h:6d} {mbs:4d} {dp:3d} {len(pts):5d}  under-determined")
            continue
        (mc, mres), (pc, pres) = meas, pred
        ratios.append(pc[1] / mc[1])
        print(f"{tp:3d} {h:6d} {mbs:4d} {dp:3d} {len(pts):5d}  {1e3 * mc[0]:9.3f} / {1e3 * pc[0]:9.3f}  "
              f"{1e3 * mc[1]:11.2f} / {1e3 * pc[1]:11.2f}  {pc[1] / mc[1]:7.2f}  "
              f"{100 * mres:8.2f} % / {100 * pres:6.2f} %")
        if args.ops:
            _, _, _, _, cfg, spec = pts[0]
            for name, sec in sorted(outside_ops_s(cfg, spec).items(), key=lambda kv: -kv[1]):
                print(f"{'':20}{name:48s} {1e3 * sec:8.3f} ms")
    if ratios:
        print(f"predicted / measured outside-layer cost: median {np.median(ratios):.2f}, "
              f"range {min(ratios):.2f} .. {max(ratios):.2f} over {len(ratios)} cells")


if __name__ == "__main__":
    main()
