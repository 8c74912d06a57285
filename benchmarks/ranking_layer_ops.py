"""`bench_tune_ranking.py --layer-ops`: one transformer layer of a deciding S24 cell, op by op, against the A100
operator samples, and how the ops compose into the per-layer cost the ranking reads.

The cells that decide most ranking misses (notes h93 / h109 / h117) are priced per layer and micro-batch by the
ops of one dense layer: their GPU seconds (predict/) and the host launch queue over them
(predict/host_issue.queued_pass_s, one drained queue per block as schedule/compose.chunk_pass runs it). This
report prints, per op of the forward and of the backward pass (recompute + backward), the predicted microseconds
next to the Perlmutter A100-SXM4-80GB sample of the same per-rank shape (../shared/data/op-samples, the data the
shipped A100 profile is fitted on), then the composition: GPU busy time per pass, the host units the queue
issues and their seconds at the cluster's unit, the queued pass as priced, and beside it the pass with one queue
carried over CARRIED_LAYERS layers (no drain between layers). A cell whose ops match the samples but whose
per-layer cost does not match the measurement is mispriced by the composition (host floor, queue, what the
layer omits), not by an operator model.

Sample matching: the per-rank kernel shape, nothing interpolated. GEMMs (linear1-4) and gelu: the same (mp, b, l,
dim); attention batched GEMMs and the fused causal softmax (ScaledUpperTriangMaskedSoftmax, sampled at mp 1 only):
the same batch of heads on the rank (b x h / mp), sequence and head size; layernorm and residual add: the same
(b, l, dim), which TP does not split. Dropout has no sample (its price is the roofline of predict/roofline.py).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, replace
from pathlib import Path

SAMPLE_GPU = "NVIDIAA100-SXM4-80GB"

SAMPLE_OF = {"attn.qkv": "linear1", "attn.proj": "linear2", "mlp.fc1": "linear3", "mlp.fc2": "linear4",
             "attn.qk": "baddbmm", "attn.av": "bmm", "attn.softmax": "ScaledUpperTriangMaskedSoftmax",
             "attn.norm": "layernorm", "mlp.norm": "layernorm", "mlp.gelu": "gelu",
             "attn.residual": "res_add", "mlp.residual": "res_add"}
"""Layer op name (graph/layer_ops.py) -> the operator sample file that times the same kernel(s)
(../shared/data/op-samples/README.md's table)."""

CARRIED_LAYERS = 16
"""Layers in the one-queue pass `PassComposition.carried_s` divides by (S24's depths are 12-24)."""

DECIDING_CELLS = ((2048, 1, 1), (2048, 1, 2), (2048, 1, 4), (2048, 2, 2), (2048, 4, 2), (1024, 2, 4))
"""(hidden, TP, micro-batch) cells whose per-layer cost decides most misses (`--misses`), and the TP 1 GPU-bound
cells of the same hidden size that say whether the operator prices or the composition is off."""


@dataclass(frozen=True)
class CellShape:
    """The per-rank shape of one S24 cell, in the samples' column names."""
    mp: int
    b: int
    l: int  # noqa: E741 -- the samples' column name for the sequence length
    dim: int
    h: int


@dataclass(frozen=True)
class OpLine:
    """One op of the layer: predicted seconds of its forward and backward, and the sample's, where one exists."""
    name: str
    op_class: str
    fwd_s: float
    bwd_s: float
    sample_fwd_s: float | None
    sample_bwd_s: float | None


@dataclass(frozen=True)
class PassComposition:
    """How one pass (forward, or recompute + backward) of the layer composes from its ops."""
    gpu_s: float
    """Sum of the pass's op seconds (collectives on the compute stream included)."""
    host_units: float
    """Host units the launch queue issues for the pass (predict/host_issue.op_host_units)."""
    queued_s: float
    """The pass as the drained launch queue prices it (schedule/compose.chunk_pass with the host unit)."""
    carried_s: float
    """One layer's share of the pass over CARRIED_LAYERS layers issued as one queue (no drain between layers: the
    alternative of notes h93 section 8, not what the schedule prices)."""


def read_samples(sample_dir: Path) -> dict[str, list[dict[str, float]]]:
    """Sample file stem -> its rows as floats (only the stems SAMPLE_OF names)."""
    out = {}
    for stem in sorted(set(SAMPLE_OF.values())):
        path = sample_dir / f"{SAMPLE_GPU}_{stem}_fp16.csv"
        if path.exists():
            with path.open(newline="") as f:
                out[stem] = [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]
    return out


def _matches(stem: str, row: dict[str, float], cell: CellShape) -> bool:
    """Whether a sample row times the same per-rank kernel as the cell's op (module docstring's rules)."""
    if stem.startswith("linear") or stem == "gelu":
        return (row["mp"], row["b"], row["l"], row["dim"]) == (cell.mp, cell.b, cell.l, cell.dim)
    if stem in ("layernorm", "res_add"):
        return (row["b"], row["l"], row["dim"]) == (cell.b, cell.l, cell.dim)
    same_heads = row["b"] * row["h"] / row["mp"] == cell.b * cell.h / cell.mp and row["l"] == cell.l
    if stem == "ScaledUpperTriangMaskedSoftmax":
        return same_heads
    return same_heads and row["dim"] / row["h"] == cell.dim / cell.h  # baddbmm, bmm: the same head size too


def sample_seconds(name: str, cell: CellShape, samples: dict) -> tuple[float, float] | None:
    """(forward, backward) seconds of the first sample of the op's per-rank shape, or None without one."""
    stem = SAMPLE_OF.get(name)
    for row in samples.get(stem, ()) if stem else ():
        if _matches(stem, row, cell):
            return row["F_dur(us)"] * 1e-6, row["B_dur(us)"] * 1e-6
    return None


def cell_shape(cfg) -> CellShape:
    """The samples' (mp, b, l, dim, h) of a resolved TrainingConfig."""
    m = cfg.model
    return CellShape(cfg.parallel.tp, cfg.batch.micro_batch_size, m.seq_length, m.hidden_size, m.num_attention_heads)


def dense_block(graph):
    """The block of the first stage's first chunk that repeats most: one dense transformer layer."""
    blocks = graph.stages[0].chunks[0].blocks
    return max(blocks, key=lambda b: b.count)


def layer_ops(block, seconds: dict, cell: CellShape, samples: dict) -> list[OpLine]:
    """The layer's forward ops in order, each with its backward's predicted seconds and the sample's."""
    from llmperf_hook.predict.dispatch import op_id

    bwd = {op.name: seconds[op_id(op)] for op in block.bwd if op.phase == "bwd"}
    lines = []
    for op in block.fwd:
        sample = sample_seconds(op.name.removeprefix("layer."), cell, samples) if op.collective is None else None
        lines.append(OpLine(op.name, op.op_class, seconds[op_id(op)], bwd.get(op.name, 0.0),
                            sample[0] if sample else None, sample[1] if sample else None))
    return lines


def compose_passes(chunk, block, seconds: dict, host_per_op_s: float) -> tuple[PassComposition, PassComposition]:
    """(forward, recompute + backward) of one layer: GPU busy, host units, and the queued pass."""
    from llmperf_hook.graph.op_graph import ChunkOps
    from llmperf_hook.predict.dispatch import op_id
    from llmperf_hook.predict.host_issue import op_host_units, queued_pass_s
    from llmperf_hook.schedule.compose import chunk_pass

    one = ChunkOps(chunk.stage, chunk.chunk, 1, (replace(block, count=1),))
    out = []
    for backward, ops in ((False, block.fwd), (True, block.bwd)):
        queued = chunk_pass(one, seconds, False, backward, host_per_op_s).total_s
        carried = queued_pass_s(list(ops) * CARRIED_LAYERS, lambda op: seconds[op_id(op)], host_per_op_s)
        out.append(PassComposition(sum(seconds[op_id(op)] for op in ops), sum(op_host_units(op) for op in ops),
                                   queued, carried / CARRIED_LAYERS))
    return out[0], out[1]


def _us(s: float | None) -> str:
    return f"{s * 1e6:7.1f}" if s is not None else "      -"


def report_cell(cfg, spec, samples: dict) -> None:
    """Print one cell's layer op by op and its composition (module docstring)."""
    from llmperf_hook.graph.build import build_graph
    from llmperf_hook.predict.dispatch import predict_op_times

    graph = build_graph(cfg, spec)
    seconds = dict(predict_op_times(graph, spec, cfg.precision).seconds)
    chunk, block = graph.stages[0].chunks[0], dense_block(graph)
    cell = cell_shape(cfg)
    print(f"\nhidden {cell.dim} TP {cell.mp} mbs {cell.b} ({spec.name}, host unit "
          f"{spec.host_overhead_per_op_s * 1e6:.1f} us): us per op, predicted / sample (fwd, bwd)")
    lines = layer_ops(block, seconds, cell, samples)
    for line in lines:
        print(f"  {line.name:22s} {line.op_class:13s} fwd {_us(line.fwd_s)} / {_us(line.sample_fwd_s)}   "
              f"bwd {_us(line.bwd_s)} / {_us(line.sample_bwd_s)}")
    sampled = [x for x in lines if x.sample_fwd_s is not None]
    if sampled:
        pred = sum(2 * x.fwd_s + x.bwd_s for x in sampled)
        meas = sum(2 * x.sample_fwd_s + x.sample_bwd_s for x in sampled)
        print(f"  ops with a sample ({len(sampled)}/{len(lines)}), fwd x 2 (recompute) + bwd: predicted "
              f"{pred * 1e3:.3f} ms, samples {meas * 1e3:.3f} ms ({100 * (pred / meas - 1):+.1f} %)")
    fwd, bwd = compose_passes(chunk, block, seconds, spec.host_overhead_per_op_s)
    unit = spec.host_overhead_per_op_s
    for label, p in (("forward", fwd), ("recompute + backward", bwd)):
        print(f"  {label:21s} GPU {p.gpu_s * 1e3:6.3f} ms  host {p.host_units:4.0f} units = "
              f"{p.host_units * unit * 1e3:6.3f} ms  queued {p.queued_s * 1e3:6.3f} ms")
    gpu, host = fwd.gpu_s + bwd.gpu_s, (fwd.host_units + bwd.host_units) * unit
    print(f"  layer: GPU {gpu * 1e3:.3f}, host {host * 1e3:.3f}, max {max(gpu, host) * 1e3:.3f}, "
          f"queued {(fwd.queued_s + bwd.queued_s) * 1e3:.3f} ms (as priced; one queue over {CARRIED_LAYERS} layers "
          f"{(fwd.carried_s + bwd.carried_s) * 1e3:.3f}); measured per-layer slopes: --host-cells")


def is_deciding_row(run, cells=DECIDING_CELLS) -> bool:
    """A single-stage S24 row of one of the cells (the rows report_layer_ops needs resolved)."""
    return run.source_id == "S24" and run.pp == 1 and (run.hidden_size, run.tp, run.micro_batch_size) in cells


def report_layer_ops(resolved, sample_dir: Path, cells=DECIDING_CELLS) -> None:
    """report_cell for the first single-stage S24 row of each cell; `resolved` yields (run, cfg, spec)."""
    samples = read_samples(sample_dir)
    if not samples:
        print(f"\n--layer-ops: no operator samples under {sample_dir}")
        return
    seen: dict = {}
    for run, cfg, spec in resolved:
        key = (run.hidden_size, run.tp, run.micro_batch_size)
        if is_deciding_row(run, cells) and key not in seen:
            seen[key] = (cfg, spec)
    for key in cells:
        if key in seen:
            report_cell(*seen[key], samples)
