"""What vTrain's multi-node rows (S23 of ../shared/validation/dev.csv) say about their residual, six ways.

    python benchmarks/audit_s23.py [CSV]

Each row is predicted as `llmperf validate` predicts it (shipped presets, the vtrain-a100 cluster); the gap is
measured minus predicted step time and `dp AR` the modelled data-parallel all-reduce on the step's critical path.

1. 3.6B without tensor parallelism, pipeline 1 (DP 64) against pipeline 2 (DP 32) at the same micro-batch: the
   second holds half the gradients per rank, so a gap made of a slower gradient all-reduce would halve with it;
   `gap / dp AR` is that test (constant if the all-reduce's bandwidth were the cause).
2. 3.6B, pipeline 1, by tensor-parallel degree: the mean gap and the node bandwidth the all-reduce would need
   to run at for the gap to be all in it (each node sends ~2x the model's fp16 gradients whatever the TP).
3. The pipelined TP 2 / TP 4 layouts at several micro-batch sizes: seconds per sample and pipeline slot,
   step / ((m + pp - 1) x micro-batch), measured and predicted; a cost that the model lacks per micro-batch or
   per sample would move both the same way.
4. The gap as a share of the modelled GPU work (compute + recompute + pipeline bubble, which is idle time made of
   the other stages' compute), by model and TP: a GEMM or kernel rate the profile over-states would show as one
   share for every layout; a share that depends on TP and not on the work points at what TP changes (the DP
   group's ranks per node, 8 / TP; the TP collectives).
5. What the framework ran: vTrain measured Megatron-DeepSpeed under --deepspeed, whose validate_args switches the
   async TP all-reduce off (megatron/arguments.py since f90b8877, 2023-07; its layers had none before) and needs no
   CUDA_DEVICE_MAX_CONNECTIONS=1 without it: every TP all-reduce is on the critical path, as priced
   (TrainingConfig.async_tp_allreduce False). The overlap Megatron-LM would give cannot be the missing time; it
   would shorten the predictions the gap says are already short.
6. The TP all-reduce as the cause, tested two ways: the intra-node model against vTrain's own NCCL LUT by group
   size (calibration/nccl_allreduce_a100_intranode_vtrain_lut_subsampled.csv, messages >= 16 MB: the model is
   ~10 % fast at 2 GPUs, ~5 % slow at 8), and the gap over the modelled exposed TP communication per row (if the
   TP all-reduce ran at a lower rate in training than in nccl-tests, gap / comm_tp would be one number per TP).
   Scaling each intra-node all-reduce to the LUT's own rate for its group size (2 GPUs slower, 8 faster) was tried
   on dev.csv: S23 8.16 -> 8.26 %, S24 7.19 -> 7.28 %, S03 3.98 -> 4.07 %, S01 4.67 -> 4.63 %: not taken.
7. The gap at one layout against the number of micro-batches (global batch fixed, so the tokens per step are too):
   a robust (Theil-Sen) line gap = a + b x m per layout with three rows or more. A cost the model lacks per micro-batch
   (host launches, pipeline exchanges, DeepSpeed's per-micro-batch accumulation) gives b > 0; a cost per step
   (gradient reduction, optimizer, its bookkeeping) or per token gives b ~ 0 and the same a.
8. Where the error sits, by placement: the signed error by whether a node holds several ranks of one data-parallel
   group (TP < 8: 8 / TP of them, and as many TP groups) or one, and by the nodes each pipeline stage spans (at
   TP <= 8 also the nodes each data-parallel group's all-reduce crosses; at TP 16 that group crosses DP nodes).
   Then, per placement class, a robust line gap = a + b x the modelled exposed gradient all-reduce: b ~ 0 if that
   all-reduce is priced right, b ~ 1 if it really takes twice the modelled time (read with care: the all-reduce
   grows with the parameters per rank, as the optimizer does).
9. The pipelined TP 2 / TP 4 rows: the gap per layer and pipeline slot, gap / ((m + pp - 1) x layers per stage).
   Pipeline exchanges and the bubble are per slot, not per layer: a layout measured at two pipeline depths that
   shows one excess per layer-slot puts the missing time inside every layer's passes.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

from llmperf_hook import api  # noqa: E402
from llmperf_hook.validate.measured_run import MeasuredRun  # noqa: E402
from llmperf_hook.validate.cluster_choice import read_cluster_presets  # noqa: E402
from llmperf_hook.validate.runner import plan_run  # noqa: E402
from llmperf_hook.validate.runs_csv import build_measured_runs, read_runs_csv  # noqa: E402
from llmperf_hook.resources import configs_dir  # noqa: E402

DEFAULT_CSV = Path(__file__).resolve().parents[2] / "shared" / "validation" / "dev.csv"
FP16_BYTES = 2
LUT_NAME = "nccl_allreduce_a100_intranode_vtrain_lut_subsampled.csv"


WORK_PARTS = ("compute", "recompute", "pipeline_bubble")
"""Breakdown lines that scale with the GPUs' compute rate (section 4)."""


def predict_rows(runs: list[MeasuredRun]) -> tuple[dict[str, tuple[float, float, float]], dict[str, float]]:
    """Row id -> (predicted step s, modelled exposed data-parallel gradient sync s, modelled GPU work s), and row id
    -> modelled exposed TP communication s."""
    presets = read_cluster_presets(configs_dir() / "clusters")
    out: dict[str, tuple[float, float, float]] = {}
    comm_tp: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="llmperf-s23-") as tmp:
        for run in runs:
            plan, choice = plan_run(run, presets, Path(tmp))
            est = api.predict_command(list(plan.argv), {}, cluster=choice.cluster).estimate
            work = sum(est.breakdown.get(k, 0.0) for k in WORK_PARTS)
            out[run.row_id] = (est.step_time_s, est.breakdown.get("comm_dp_grad", 0.0), work)
            comm_tp[run.row_id] = est.breakdown.get("comm_tp", 0.0)
    return out, comm_tp


def model_params(run: MeasuredRun) -> float:
    """GPT parameters: 12 h^2 per layer plus the 50,257-token embedding (vTrain's vocabulary)."""
    return run.num_layers * 12 * run.hidden_size ** 2 + 50257 * run.hidden_size


def micro_batches(run: MeasuredRun) -> int:
    """m: micro-batches per step on each pipeline (global batch / (DP x micro-batch))."""
    return run.global_batch_size // (run.dp * run.micro_batch_size)


def section_pp(runs: list[MeasuredRun], pred: dict[str, tuple[float, float, float]]) -> None:
    print("1. GPT 3.6B, TP 1: pipeline 1 (DP 64) vs pipeline 2 (DP 32)")
    print(f"   {'mbs':>4} {'pp':>3} {'measured':>9} {'predicted':>10} {'gap s':>7} {'dp AR s':>8} {'gap/AR':>7}")
    rows = sorted((r for r in runs if r.hidden_size == 3072 and r.tp == 1), key=lambda r: (r.micro_batch_size, r.pp))
    for r in rows:
        step, ar, _ = pred[r.row_id]
        gap = r.iteration_time_s - step
        print(f"   {r.micro_batch_size:>4} {r.pp:>3} {r.iteration_time_s:>9.3f} {step:>10.3f} {gap:>7.3f} {ar:>8.3f} "
              f"{gap / ar if ar else float('nan'):>7.2f}")


def section_tp(runs: list[MeasuredRun], pred: dict[str, tuple[float, float, float]]) -> None:
    print("\n2. GPT 3.6B, pipeline 1, by TP (64 GPUs, 8 nodes)")
    print(f"   {'tp':>3} {'rows':>5} {'gap s':>11} {'dp AR s':>8} {'node GB/s if the gap were the AR':>34}")
    by_tp: dict[int, list[MeasuredRun]] = defaultdict(list)
    for r in runs:
        if r.hidden_size == 3072 and r.pp == 1:
            by_tp[r.tp].append(r)
    for tp, rows in sorted(by_tp.items()):
        gaps = [r.iteration_time_s - pred[r.row_id][0] for r in rows]
        ar = sum(pred[r.row_id][1] for r in rows) / len(rows)
        mean_gap = sorted(gaps)[len(gaps) // 2] if len(gaps) > 2 else sum(gaps) / len(gaps)
        node_bytes = 2 * model_params(rows[0]) * FP16_BYTES  # ring all-reduce: ~2x the gradients leave each node
        need = node_bytes / (ar + mean_gap) / 1e9 if ar + mean_gap > 0 else float("nan")
        print(f"   {tp:>3} {len(rows):>5} {mean_gap:>11.3f} {ar:>8.3f} {need:>34.1f}")
    print("   (median gap where a layout has 3 rows or more; TP 16's all-reduce is its in-layer TP traffic)")


def section_slots(runs: list[MeasuredRun], pred: dict[str, tuple[float, float, float]]) -> None:
    print("\n3. Pipelined TP 2 / TP 4 layouts: seconds per sample and pipeline slot")
    print(f"   {'hidden':>6} {'tp':>3} {'pp':>3} {'dp':>3} {'mbs':>4} {'m':>4} {'measured':>9} {'predicted':>10} "
          f"{'error':>7}")
    picked = [r for r in runs if r.tp in (2, 4) and r.pp > 1]
    for r in sorted(picked, key=lambda r: (r.hidden_size, r.tp, r.pp, r.micro_batch_size)):
        m = micro_batches(r)
        slots = (m + r.pp - 1) * r.micro_batch_size
        step = pred[r.row_id][0]
        print(f"   {r.hidden_size:>6} {r.tp:>3} {r.pp:>3} {r.dp:>3} {r.micro_batch_size:>4} {m:>4} "
              f"{r.iteration_time_s / slots:>9.4f} {step / slots:>10.4f} "
              f"{(step - r.iteration_time_s) / r.iteration_time_s * 100:>+6.1f}%")


def section_work_share(runs: list[MeasuredRun], pred: dict[str, tuple[float, float, float]]) -> None:
    print("\n4. Gap / modelled GPU work (compute + recompute + bubble), median by model and TP")
    print(f"   {'hidden':>6} {'tp':>3} {'rows':>5} {'DP ranks/node':>14} {'gap / work':>11} {'range':>17}")
    groups: dict[tuple[int, int], list[float]] = defaultdict(list)
    for r in runs:
        step, _, work = pred[r.row_id]
        groups[(r.hidden_size, r.tp)].append((r.iteration_time_s - step) / work if work else float("nan"))
    for (hidden, tp), shares in sorted(groups.items()):
        shares.sort()
        per_node = max(1, 8 // tp)
        print(f"   {hidden:>6} {tp:>3} {len(shares):>5} {per_node:>14} {shares[len(shares) // 2]:>+10.1%} "
              f"{shares[0]:>+8.1%}..{shares[-1]:>+6.1%}")


def section_framework(runs: list[MeasuredRun]) -> None:
    print("\n5. What vTrain's Megatron-DeepSpeed ran (as llmperf validate resolves its rows)")
    presets = read_cluster_presets(configs_dir() / "clusters")
    seen: dict[tuple[str, bool, int], int] = defaultdict(int)
    with tempfile.TemporaryDirectory(prefix="llmperf-s23-") as tmp:
        for run in (r for r in runs if r.tp > 1):
            plan, choice = plan_run(run, presets, Path(tmp))
            cfg = api.predict_command(list(plan.argv), {}, cluster=choice.cluster).config
            seen[(cfg.framework, cfg.async_tp_allreduce, cfg.cuda_device_max_connections)] += 1
    for (framework, async_ar, connections), count in sorted(seen.items()):
        print(f"   {count:>3} TP > 1 rows: framework {framework}, async TP all-reduce {async_ar}, "
              f"CUDA_DEVICE_MAX_CONNECTIONS {connections}")
    if not any(async_ar for _, async_ar, _ in seen):
        print("   (no async TP collective: every TP all-reduce is serialized with the GEMMs, as priced, and the queue"
              "\n   setting changes nothing without one)")


def lut_error_by_group_size(lut_csv: Path, min_bytes: float = 16e6) -> dict[int, float]:
    """Mean signed error of the vtrain-a100 intra-node all-reduce model against vTrain's NCCL LUT, per group size."""
    import csv

    from llmperf_hook.graph.op import Collective, Op
    from llmperf_hook.hardware.load import load_cluster
    from llmperf_hook.predict.alpha_beta import collective_time_s

    cluster = load_cluster("vtrain-a100")
    errors: dict[int, list[float]] = defaultdict(list)
    with lut_csv.open() as f:
        for row in csv.DictReader(f):
            n, nbytes = int(row["num_gpus"]), int(row["size_bytes"])
            if nbytes < min_bytes:
                continue
            op = Op("lut", "allreduce", "fwd", {"bytes": nbytes}, dtype="fp32",
                    collective=Collective("tp", n, n))
            errors[n].append(collective_time_s(op, cluster) / (float(row["time_ns_out_of_place"]) * 1e-9) - 1)
    return {n: sum(e) / len(e) for n, e in sorted(errors.items())}


def section_tp_allreduce(runs: list[MeasuredRun], pred: dict[str, tuple[float, float, float]],
                         comm_tp: dict[str, float], lut_csv: Path) -> None:
    print("\n6. The TP all-reduce: model vs vTrain's NCCL LUT (>= 16 MB), and gap / modelled exposed TP comm")
    if lut_csv.exists():
        errs = lut_error_by_group_size(lut_csv)
        print("   LUT: " + "  ".join(f"{n} GPUs {e:+.1%}" for n, e in errs.items()) + "  (+ = model slower)")
    groups: dict[tuple[int, int], list[float]] = defaultdict(list)
    for r in runs:
        if comm_tp.get(r.row_id, 0.0) > 0 and r.tp <= 8:
            groups[(r.hidden_size, r.tp)].append((r.iteration_time_s - pred[r.row_id][0]) / comm_tp[r.row_id])
    print(f"   {'hidden':>6} {'tp':>3} {'rows':>5} {'gap / comm_tp':>14} {'range':>16}")
    medians_by_tp: dict[int, list[float]] = defaultdict(list)
    for (hidden, tp), ratios in sorted(groups.items()):
        ratios.sort()
        medians_by_tp[tp].append(ratios[len(ratios) // 2])
        print(f"   {hidden:>6} {tp:>3} {len(ratios):>5} {ratios[len(ratios) // 2]:>+14.2f} "
              f"{ratios[0]:>+7.2f}..{ratios[-1]:>+6.2f}")
    # A TP collective running at a lower rate in training would give one ratio per TP degree, whatever the model.
    print("   medians by TP over the hidden sizes: " + "  ".join(
        f"TP {tp} {min(m):+.2f}..{max(m):+.2f}" for tp, m in sorted(medians_by_tp.items())))


def section_microbatches(runs: list[MeasuredRun], pred: dict[str, tuple[float, float, float]]) -> None:
    print("\n7. Gap against the micro-batch count m at one layout (global batch fixed): gap = a + b x m")
    print(f"   {'hidden':>6} {'tp':>3} {'pp':>3} {'dp':>3} {'m':>14} {'gap s':>32} {'a s':>7} {'b ms':>7}")
    layouts: dict[tuple[int, int, int, int], list[tuple[int, float]]] = defaultdict(list)
    for r in runs:
        layouts[(r.hidden_size, r.tp, r.pp, r.dp)].append((micro_batches(r), r.iteration_time_s - pred[r.row_id][0]))
    for (hidden, tp, pp, dp), points in sorted(layouts.items()):
        if len({m for m, _ in points}) < 3:
            continue
        points.sort()
        a, b = _line([float(m) for m, _ in points], [g for _, g in points])
        ms = ",".join(str(m) for m, _ in points)
        gaps = ",".join(f"{g:.2f}" for _, g in points)
        print(f"   {hidden:>6} {tp:>3} {pp:>3} {dp:>3} {ms:>14} {gaps:>32} {a:>7.3f} {b * 1e3:>7.1f}")
    print("   (b ~ 0: the missing time is per step or per token, not per micro-batch)")


def _line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Theil-Sen line (median of the pairwise slopes, median intercept): the layouts hold single outlier rows (3.6B
    TP 8 at m 1 and 32, TP 4 at m 16) that would set a least-squares slope alone."""
    slopes = sorted((ys[j] - ys[i]) / (xs[j] - xs[i]) for i in range(len(xs)) for j in range(i + 1, len(xs))
                    if xs[j] != xs[i])
    b = _median(slopes) if slopes else 0.0
    return _median(sorted(y - b * x for x, y in zip(xs, ys))), b


def _median(values: list[float]) -> float:
    n = len(values)
    return values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2


def nodes_per_stage(run: MeasuredRun) -> int:
    """Nodes one pipeline stage spans: its TP x DP ranks are consecutive in Megatron's rank order (TP fastest, then
    DP, then PP; DeepSpeed's PipeModelDataParallelTopology axes pipe, data, model). A DP group (stride TP) crosses as
    many nodes when TP <= gpus_per_node, and DP nodes when TP spans nodes."""
    return max(1, -(-run.tp * run.dp // run.gpus_per_node))


def dp_ranks_per_node(run: MeasuredRun) -> int:
    """Ranks of one data-parallel group on a node: TP ranks are consecutive, so gpus_per_node / TP of them (at least
    1), and no more than the group has."""
    return min(run.dp, max(1, run.gpus_per_node // run.tp))


def errors_by_placement(runs: list[MeasuredRun], pred: dict[str, tuple[float, float, float]]
                        ) -> dict[tuple[bool, int], list[float]]:
    """(several DP ranks per node, nodes per stage) -> signed errors (predicted / measured - 1), sorted."""
    out: dict[tuple[bool, int], list[float]] = defaultdict(list)
    for r in runs:
        out[(dp_ranks_per_node(r) > 1, nodes_per_stage(r))].append(pred[r.row_id][0] / r.iteration_time_s - 1)
    return {k: sorted(v) for k, v in sorted(out.items())}


def section_placement(runs: list[MeasuredRun], pred: dict[str, tuple[float, float, float]]) -> None:
    print("\n8. Signed error by placement: DP ranks per node (several = TP < 8) and nodes per pipeline stage")
    print(f"   {'DP ranks/node':>13} {'nodes/stage':>11} {'rows':>5} {'median':>7}  errors %")
    for (several, nodes), errs in errors_by_placement(runs, pred).items():
        listed = " ".join(f"{e * 100:+.0f}" for e in errs)
        kind = "several" if several else "one"
        print(f"   {kind:>13} {nodes:>11} {len(errs):>5} {_median(errs) * 100:>+6.1f}%  {listed}")
    print("   gap = a + b x modelled exposed DP all-reduce (Theil-Sen):")
    for several in (False, True):
        picked = [r for r in runs if (dp_ranks_per_node(r) > 1) == several]
        a, b = _line([pred[r.row_id][1] for r in picked], [r.iteration_time_s - pred[r.row_id][0] for r in picked])
        print(f"   {'several' if several else 'one':>13} DP ranks per node, {len(picked):>3} rows: "
              f"a {a:+.3f} s, b {b:+.2f}")


def layer_slots(run: MeasuredRun) -> float:
    """(m + pp - 1) pipeline slots x the layers of a stage: what a cost in every layer's passes scales with."""
    return (micro_batches(run) + run.pp - 1) * run.num_layers / run.pp


def excess_per_layer_slot(run: MeasuredRun, predicted_s: float) -> float:
    """(measured - predicted) / layer_slots: the gap per layer and pipeline slot."""
    return (run.iteration_time_s - predicted_s) / layer_slots(run)


def p2p_send_bytes(run: MeasuredRun) -> int:
    """Bytes one GPU sends per pipeline transfer: the fp16 activation [s, b, h] split over the TP ranks (DeepSpeed's
    PipelineEngine sends a PartitionedTensor whenever TP > 1, pipe/engine.py is_pipe_partitioned)."""
    return run.seq_length * run.micro_batch_size * run.hidden_size * FP16_BYTES // run.tp


def section_layer_slots(runs: list[MeasuredRun], pred: dict[str, tuple[float, float, float]]) -> None:
    print("\n9. Pipelined TP 2 / TP 4 rows: gap per layer and pipeline slot (ms)")
    print(f"   {'hidden':>6} {'tp':>3} {'mbs':>4} {'pp':>3} {'m':>4} {'p2p MB':>7} {'error':>7} {'gap/layer-slot':>15} "
          f"{'predicted':>10}")
    picked = [r for r in runs if r.tp in (2, 4) and r.pp > 1]
    for r in sorted(picked, key=lambda r: (r.hidden_size, r.tp, r.micro_batch_size, r.pp)):
        step = pred[r.row_id][0]
        per_slot = step / layer_slots(r)
        print(f"   {r.hidden_size:>6} {r.tp:>3} {r.micro_batch_size:>4} {r.pp:>3} {micro_batches(r):>4} "
              f"{p2p_send_bytes(r) / 1e6:>7.1f} {(step / r.iteration_time_s - 1) * 100:>+6.1f}% "
              f"{excess_per_layer_slot(r, step) * 1e3:>15.1f} {per_slot * 1e3:>10.1f}")
    print("   (predicted = predicted step / layer-slots: the excess as a share of what one layer-slot is priced at)")


def main(argv: list[str]) -> int:
    if any(a in ("-h", "--help") for a in argv[1:]):
        print(__doc__)
        return 0
    csv_path = Path(argv[1]) if len(argv) > 1 else DEFAULT_CSV
    if not csv_path.exists():
        print(f"{csv_path} not found: pass the validation CSV as the first argument")
        return 2
    runs = [r for r in build_measured_runs(read_runs_csv(csv_path)) if r.source_id == "S23"]
    pred, comm_tp = predict_rows(runs)
    section_pp(runs, pred)
    section_tp(runs, pred)
    section_slots(runs, pred)
    section_work_share(runs, pred)
    section_framework(runs)
    section_tp_allreduce(runs, pred, comm_tp, csv_path.parent / "calibration" / LUT_NAME)
    section_microbatches(runs, pred)
    section_placement(runs, pred)
    section_layer_slots(runs, pred)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
