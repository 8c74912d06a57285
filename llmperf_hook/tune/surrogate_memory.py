"""Peak memory per GPU of every candidate of a table, from the full memory model's own terms.

`llmperf predict`'s memory model (schedule/memory.estimate_memory over graph/build.build_graph) costs about a
millisecond per configuration; a candidate table holds 10^4-10^5. Each of its terms reads only a few knobs, so here
each is computed by the full model's own function once per distinct value of the knobs it reads, and broadcast:
- state (weights, gradients, optimizer states, fp8 weight copies, distributed-optimizer padding, hpZ), fixed buffers
  (CUDA context, NCCL, ZeRO buckets and live parameters) and the optimizer step's gradient bytes: memory.state_bytes,
  buffer_bytes and optimizer_step_bytes per (tp, pp, vpp, cp, ep, etp, zero, distopt) on the pipeline ranks that can
  hold the peak, as StageGraphs with the ranks' real parameter blocks (graph/build.py's names and counts, no ops);
- one layer's activations (no recompute, selective with the job's --recompute-modules, a full-recompute checkpoint;
  an MoE model's MoE and dense layers, mixed per chunk), the softmax backward, embedding,
  logits, MTP and the attention score buffer: schedule/activations.py per (tp, cp, sp, mbs, etp);
- micro-batches in flight: activations.microbatches_in_flight per (pp, vpp, micro-batches, rank);
composed as memory.stage_memory composes them (chunk_layer_bytes' recompute methods, checkpoints_off_gpu_bytes,
one_peak_of_two, fragmentation, the optimizer-step phase). tests/tune/test_surrogate_memory.py checks the result
equals `estimate_memory` over random jobs, layouts, precisions and ZeRO stages, so tune's out-of-memory verdicts
are predict's.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Mapping, Sequence

import numpy as np

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.graph import params as pc
from llmperf_hook.graph.build import _chunk_params, ranks_per_node
from llmperf_hook.graph.op_graph import ChunkOps, OpBlock, StageGraph
from llmperf_hook.graph.stages import layers_per_virtual_stage
from llmperf_hook.hardware.spec import ClusterSpec
from llmperf_hook.schedule import activations as act
from llmperf_hook.schedule import gradient_lifetime as life
from llmperf_hook.schedule import memory as mem
from llmperf_hook.schedule.allocator_reserve import (LossBlocks, allocator_reserve_bytes, gradients_outgrow_activations,
                                                     loss_blocks)
from llmperf_hook.schedule.memory_cpu import on_cpu
from llmperf_hook.schedule.memory_rule import must_fit_bytes
from llmperf_hook.tune.candidate import RECOMPUTE_CODES, apply_candidate
from llmperf_hook.tune.candidates import CandidateTable

Cols = Mapping[str, np.ndarray]
STATE_KEYS = ("tp", "pp", "vpp", "cp", "ep", "etp", "zero", "distopt")
"""Knobs the state, fixed buffers and optimizer step read (with the pipeline rank), plus sp for Megatron-DeepSpeed,
whose parameter count follows it (graph/params.py embedding_params)."""
LAYER_KEYS = ("tp", "cp", "sp", "mbs", "etp")
"""Knobs one layer's activations read (etp: the routed copies an expert FC1 saves, activations.layer_terms)."""
_NONE, _SEL, _FULL, _BLOCK = (RECOMPUTE_CODES[k] for k in ("none", "selective", "full", "block"))


def _groups(cols: Cols, keys: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """(first row of each distinct value of `keys`, group number of every row): np.unique(axis=0)'s first indices
    and inverse, groups in the rows' lexicographic order, from 1-D uniques: np.unique over rows (a sort of their void
    view) took 0.36-0.42 s for the 48,020 rows of GPT-3 175B's table against 0.08-0.10 s, and ~1 ms for one row
    against 3 us (tests/tune/test_surrogate_memory_groups.py checks the two agree)."""
    return _unique_rows([np.asarray(cols[k], dtype=np.int64) for k in keys])


def _unique_rows(columns: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """(first index, inverse) of the distinct rows of these equal-length integer columns, lexicographic order: each
    column's dense rank folded into the rows' code so far (code * distinct + rank keeps the order), which is
    re-densified after each fold so it stays below rows^2."""
    n = len(columns[0])
    if n <= 1:
        return np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    code = np.zeros(n, dtype=np.int64)
    for col in columns:
        values, rank = np.unique(col, return_inverse=True)
        code = np.unique(code * len(values) + rank.reshape(-1), return_inverse=True)[1].reshape(-1)
    first = np.unique(code, return_index=True)[1]
    return first, code


class _RowConfigs:
    """Row i's job (tune/candidate.apply_candidate, as every full prediction gets it), built once per row and call:
    the state, layer and in-flight tables read the first row of their groups, often the same rows."""

    def __init__(self, cfg: TrainingConfig, cols: Cols) -> None:
        self._cfg, self._table, self._built = cfg, CandidateTable(cols, 0), {}

    def __call__(self, i: int) -> TrainingConfig:
        if i not in self._built:  # a row that raises is not kept: it raises again where asked again
            self._built[i] = apply_candidate(self._cfg, self._table.candidate(i))
        return self._built[i]


UNKNOWN_ERRORS = (ConfigError, AssertionError, ArithmeticError, ValueError, IndexError)
"""What a term may raise on a candidate only the graph or the framework refuses (uneven stages): its memory is then
unknown (NaN), never pruned; the search's full prediction counts it invalid or as a model error."""


def _guarded(fn: Callable[..., object], *args: object, width: int = 1) -> object:
    """fn(*args), or NaN (a tuple of `width` NaNs) where it raises one of UNKNOWN_ERRORS."""
    try:
        return fn(*args)
    except UNKNOWN_ERRORS:
        return np.nan if width == 1 else (np.nan,) * width


def _with_granularity(cfg: TrainingConfig, granularity: str, modules: tuple[str, ...]) -> TrainingConfig:
    if (cfg.recompute.granularity, cfg.recompute.modules) == (granularity, modules):
        return cfg  # what replace would build, equal field by field
    return dataclasses.replace(cfg, recompute=dataclasses.replace(cfg.recompute, granularity=granularity,
                                                                  modules=modules))


def _dense_layer(cfg: TrainingConfig) -> TrainingConfig:
    """activations.dense_layer_config; a dense model's own config is already its dense layer."""
    return act.dense_layer_config(cfg) if cfg.model.num_experts else cfg


LAYER_TERMS = ("layer", "layer_selective", "checkpoint", "softmax_backward", "softmax_backward_selective",
               "embedding", "logits_and_loss", "mtp", "attention_score_buffer", "recompute_selective", "dense_layer",
               "dense_layer_selective", "rematerialised_layer", "loss_block", "loss_blocks", "loss_unusable",
               "gradients_outgrow", "deferred_wgrad")
"""The columns _layer_terms returns, in order."""


def _layer_terms(cfg: TrainingConfig, modules: tuple[str, ...]) -> tuple[float, ...]:
    """(layer without recompute, selective, full-recompute checkpoint, softmax backward without / with selective
    recompute, embedding, logits and loss, MTP, attention score buffer, the selective recompute's working set, an
    MoE model's dense layer without / with selective recompute, the layer full recompute re-runs), one
    micro-batch. Selective re-runs the job's --recompute-modules (Megatron's default without the flag), which every
    candidate keeps (tune/candidate.apply_candidate), whatever the job's own granularity."""
    none, sel, full = (_with_granularity(cfg, g, modules) for g in ("none", "selective", "full"))
    return (act.layer_activation_bytes(none), act.layer_activation_bytes(sel), act.layer_activation_bytes(full),
            act.softmax_backward_extra_bytes(none), act.softmax_backward_extra_bytes(sel),
            act.embedding_activation_bytes(cfg), act.output_activation_bytes(cfg),
            act.mtp_activation_bytes(cfg) if cfg.model.mtp_num_layers else 0.0, act.score_buffer_bytes(cfg),
            act.recompute_working_bytes(sel), act.layer_activation_bytes(_dense_layer(none)),
            act.layer_activation_bytes(_dense_layer(sel)), act.rematerialised_layer_bytes(cfg),
            *dataclasses.astuple(loss_blocks(cfg, True)), float(gradients_outgrow_activations(cfg)),
            act.deferred_wgrad_microbatch_bytes(cfg))


def _layer_table(cfg: TrainingConfig, cols: Cols, row_config: _RowConfigs) -> np.ndarray:
    """_layer_terms of every row, computed once per distinct LAYER_KEYS: shape (rows, len(LAYER_TERMS))."""
    first, inverse = _groups(cols, (*LAYER_KEYS, "builds"))
    modules = cfg.recompute.modules
    values = np.array([_guarded(lambda i: _layer_terms(row_config(int(i)), modules), i, width=len(LAYER_TERMS))
                       for i in first], dtype=np.float64)
    return values[inverse]


def _chunk(cfg: TrainingConfig, stage: int, chunk: int, num_layers: int, num_moe: int) -> ChunkOps:
    """graph/build.build_chunk's blocks (names and counts) without their ops: what the memory model reads."""
    p, m = cfg.parallel, cfg.model
    first, last = stage == 0 and chunk == 0, stage == p.pp - 1 and chunk == p.vpp - 1
    blocks = [OpBlock("embedding", (), (), 1)] if first else []
    blocks += [OpBlock(name, (), (), k) for name, k in (("dense_layer", num_layers - num_moe), ("moe_layer", num_moe)) if k]
    if last and m.mtp_num_layers:
        blocks.append(OpBlock("mtp", (), (), m.mtp_num_layers))
    if last:
        blocks.append(OpBlock("head", (), (), 1))
    return ChunkOps(stage=stage, chunk=chunk, num_layers=num_layers, blocks=tuple(blocks))


def peak_stages(cfg: TrainingConfig) -> list[StageGraph]:
    """The pipeline ranks whose memory can be the peak: of ranks holding the same layers the first (it has the most
    micro-batches in flight, activations.microbatches_in_flight), and rank 0 and the last (embedding, logits)."""
    p = cfg.parallel
    counts = layers_per_virtual_stage(cfg)  # chunk v = vchunk * pp + stage, in model order (graph/stages.py)
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(int)
    moe = [pc.is_moe_layer(cfg, i) for i in range(int(starts[-1]))] if cfg.model.num_experts else []
    moe_before = np.concatenate([[0], np.cumsum(moe)]).astype(int) if moe else np.zeros(starts[-1] + 1, dtype=int)
    seen: dict[tuple, StageGraph] = {}
    for s in range(p.pp):
        v = [c * p.pp + s for c in range(p.vpp)]
        layers = tuple(counts[i] for i in v)
        moes = tuple(int(moe_before[starts[i + 1]] - moe_before[starts[i]]) for i in v)
        key = (s == 0, s == p.pp - 1, layers, moes)
        if key in seen:
            continue
        chunks = tuple(_chunk(cfg, s, c, layers[c], moes[c]) for c in range(p.vpp))
        sums = [_chunk_params(cfg, ch) for ch in chunks]
        seen[key] = StageGraph(stage=s, chunks=chunks, step_ops=(), num_params=sum(t for t, _ in sums),
                               num_expert_params=sum(e for _, e in sums), num_layers=sum(layers))
    return list(seen.values())


_STATE_FIELDS = ("stage", "state", "gradients", "buffers", "zero3_live", "zero_buckets", "step", "no_grads_1",
                 "no_grads_m", "lazy_bucket_1", "lazy_bucket_m", "flat_partition", "flat_a", "flat_b",
                 "weight_gradients")
"""Per rank: memory.state_bytes' sum and gradients, buffer_bytes (less the score buffer, which follows the micro-batch)
with its ZeRO-3 live parameters and buckets, optimizer_step_bytes; gradient_lifetime.backward_starts_without_gradients
and bucket_allocated_after_loss with one micro-batch (_1) and with more (_m); memory.step_flat_buffers (the contiguous
partition, then up to two step buffers, 0 where absent); memory.weight_gradient_bytes."""


def _with_microbatches(cfg: TrainingConfig, n: int) -> TrainingConfig:
    return dataclasses.replace(cfg, batch=dataclasses.replace(cfg.batch, num_microbatches=n))


def _stage_terms(cfg: TrainingConfig, stage: StageGraph, cluster: ClusterSpec) -> list[float]:
    """_STATE_FIELDS of one rank."""
    gpn = ranks_per_node(cfg, cluster)
    state = mem.state_bytes(cfg, stage, gpn, cluster.gpu)
    buffers = mem.buffer_bytes(cfg, stage, gpn)
    fixed = sum(v for k, v in buffers.items() if k != "attention_score_buffer")
    one, many = _with_microbatches(cfg, 1), _with_microbatches(cfg, 2)
    partition, step_buffers = mem.step_flat_buffers(cfg, stage, gpn)
    flats = [*step_buffers, 0.0, 0.0][:2]
    return [stage.stage, sum(state.values()), state["gradients"], fixed, buffers.get("zero3_live_params", 0.0),
            buffers.get("zero_buckets", 0.0), mem.optimizer_step_bytes(cfg, stage, gpn),
            life.backward_starts_without_gradients(one), life.backward_starts_without_gradients(many),
            life.bucket_allocated_after_loss(one) and "zero_buckets" in buffers,
            life.bucket_allocated_after_loss(many) and "zero_buckets" in buffers, partition, *flats,
            mem.weight_gradient_bytes(cfg, stage)]


def _group_state(row_config: _RowConfigs, cluster: ClusterSpec, i: int, layouts: dict[tuple, list[StageGraph]]
                 ) -> tuple[list[list[float]], list[list[tuple[int, int]]]]:
    """(_stage_terms of each peak rank, (layers, MoE layers) of each of its chunks) for row i's group; NaN where
    unknown."""
    try:
        group_cfg = row_config(i)
        p = group_cfg.parallel
        layout = (p.tp, p.pp, p.vpp, p.ep, p.etp, p.sequence_parallel, group_cfg.deepspeed_pipeline_engine)
        if layout not in layouts:
            layouts[layout] = peak_stages(group_cfg)
        stages = layouts[layout]
        return ([_stage_terms(group_cfg, s, cluster) for s in stages],
                [[(c.num_layers, mem.moe_layer_count(c) or 0) for c in s.chunks] for s in stages])
    except UNKNOWN_ERRORS:  # a split only the graph refuses (uneven stages): unknown here, refused by the search
        return [[np.nan] * len(_STATE_FIELDS)], [[(0, 0)]]


def _state_table(cfg: TrainingConfig, cluster: ClusterSpec, cols: Cols, row_config: _RowConfigs
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(per row and candidate peak rank: _STATE_FIELDS, (rows, ranks, len)), (per row and rank: layers and MoE
    layers of each model chunk, (rows, ranks, vpp, 2)); groups with fewer peak ranks repeat their first."""
    keys = list(STATE_KEYS) + (["sp"] if cfg.framework == "megatron-deepspeed" else [])
    if act.fp8_saves_gemm_inputs(cfg) and not cfg.parameter_transpose_cache:
        keys += ["num_mb", "rc"]  # fp8 weight copies per micro-batch in flight (memory.fp8_weight_bytes)
    first, inverse = _groups(cols, keys)
    layouts: dict[tuple, list[StageGraph]] = {}  # the ranks' blocks do not depend on ZeRO / distopt / CP
    groups = [_group_state(row_config, cluster, int(i), layouts) for i in first]
    terms, chunks = [g[0] for g in groups], [g[1] for g in groups]
    ranks = max(len(t) for t in terms)
    vpp = max(len(c[0]) for c in chunks)
    term_arr = np.array([t + [t[0]] * (ranks - len(t)) for t in terms], dtype=np.float64)
    chunk_arr = np.zeros((len(first), ranks, vpp, 2))
    for g, c in enumerate(chunks):
        for r in range(ranks):
            layers = c[r] if r < len(c) else c[0]
            chunk_arr[g, r, :len(layers)] = layers
    return term_arr[inverse], chunk_arr[inverse]


def _in_flight(cols: Cols, stage: np.ndarray, row_config: _RowConfigs) -> np.ndarray:
    """activations.microbatches_in_flight per row and rank, computed once per (pp, vpp, micro-batches, rank)."""
    first, group = _groups(cols, ("pp", "vpp", "num_mb"))
    configs = [_guarded(row_config, int(i)) for i in first]
    groups, ranks = np.repeat(group, stage.shape[1]), stage.reshape(-1).astype(np.int64)
    firsts, inverse = _unique_rows([groups, ranks])
    values = np.array([_guarded(act.microbatches_in_flight, configs[g], int(r))
                       if isinstance(configs[g], TrainingConfig) else np.nan
                       for g, r in zip(groups[firsts], ranks[firsts])], dtype=np.float64)
    return values[inverse].reshape(stage.shape)


def _chunk_activations(cfg: TrainingConfig, cols: Cols, chunks: np.ndarray, layer: np.ndarray) -> np.ndarray:
    """Sum over a rank's chunks of activations.chunk_layer_bytes less memory.checkpoints_off_gpu_bytes, per row and
    rank. chunks: (rows, ranks, vpp, 2) layer and MoE-layer counts; layer: the _layer_terms columns per row."""
    layers, moes = chunks[..., 0], chunks[..., 1]
    term = lambda i: layer[:, i, None, None]  # noqa: E731
    # activations.layers_bytes: the chunk's mix of MoE and dense layers (a dense model's are all dense)
    moe_share = np.divide(moes, layers, out=np.zeros_like(layers), where=layers > 0)
    none = moe_share * term(0) + (1 - moe_share) * term(10)
    sel = moe_share * term(1) + (1 - moe_share) * term(11)
    ckpt = term(2)
    rc, n = cols["rc"][:, None, None], np.maximum(cols["rc_layers"], 1)[:, None, None]
    block_n = np.minimum(n, layers)
    checkpoints = np.where(rc == _BLOCK, block_n, np.ceil(layers / n))
    out = np.where(rc == _NONE, layers * none, layers * sel)
    out = np.where(rc == _FULL, checkpoints * ckpt, out)
    out = np.where(rc == _BLOCK, block_n * ckpt + (layers - block_n) * none, out)
    r = cfg.recompute
    if r.partition_activations or r.checkpoint_in_cpu:
        tp = cols["tp"][:, None, None]
        stored = checkpoints * ckpt
        kept = 0.0 if r.checkpoint_in_cpu else stored / (tp if r.partition_activations else 1)
        out = out - np.where(rc >= _FULL, stored - kept, 0.0)
    return out.sum(axis=2)


def _with_row_job_columns(cfg: TrainingConfig, cols: Cols) -> dict[str, np.ndarray]:
    """cols plus what each row's job has beyond its knobs, so that a group's first row stands for all of it:
    "builds" (TP x PP x CP divides the world, which TrainingConfig asserts: else apply_candidate raises and the row's
    terms are unknown) and "num_mb", the job's micro-batch count (apply_candidate's global // (micro x dp); -1 where
    the row does not build). A group of a table that also holds rows a layout rule rejects (0 micro-batches, a split
    of the world that does not divide) then never lends such a row's NaN or count to the valid rows beside it."""
    split = cols["tp"] * cols["pp"] * cols["cp"]
    builds = cfg.world_size % split == 0
    dp = np.maximum(cfg.world_size // split, 1)
    num_mb = np.where(builds, cfg.batch.global_batch_size // (cols["mbs"] * dp), -1)
    return {**cols, "builds": builds.astype(np.int64), "num_mb": num_mb}


def estimate_peak_bytes(cfg: TrainingConfig, cluster: ClusterSpec, cols: Cols) -> np.ndarray:
    """Peak bytes per GPU of each candidate, as memory.estimate_memory gives it (the busiest pipeline rank)."""
    return estimate_memory_bytes(cfg, cluster, cols)[0]


def estimate_memory_bytes(cfg: TrainingConfig, cluster: ClusterSpec, cols: Cols) -> tuple[np.ndarray, np.ndarray]:
    """(peak bytes per GPU, must-fit bytes) of each candidate, as memory.estimate_memory gives them (peak_bytes_per_gpu
    and must_fit_bytes: each the most over the pipeline ranks, schedule/memory_rule.py). On CPU hardware both are
    unknown (NaN: never pruned by this estimate, the full predictions decide by predict's rule): there a rank's memory
    is its process's and the verdict is the sum of a host's ranks against its RAM (schedule/memory_cpu.py), not the
    GPU terms composed here (CUDA context, whole ZeRO buckets, the caching allocator's reserve, one rank)."""
    if len(cols["tp"]) == 0:
        return np.zeros(0), np.zeros(0)
    if on_cpu(cluster.gpu):
        unknown = np.full(len(cols["tp"]), np.nan)
        return unknown, unknown.copy()
    cols = _with_row_job_columns(cfg, cols)
    row_config = _RowConfigs(cfg, cols)
    state, layers = _state_table(cfg, cluster, cols, row_config)
    (stage, state_b, grads, buffers, live, buckets, step, no_grads_1, no_grads_m, lazy_1, lazy_m, partition, flat_a,
     flat_b, weight_grads) = (state[:, :, i] for i in range(len(_STATE_FIELDS)))
    stage = np.nan_to_num(stage)  # unknown rows stay NaN through state_b
    layer = _layer_table(cfg, cols, row_config)
    in_flight = _in_flight(cols, stage, row_config)
    rc, col = cols["rc"][:, None], lambda i: layer[:, i, None]  # noqa: E731
    activations = _chunk_activations(cfg, cols, layers, layer) * in_flight
    offloaded = act.cpu_offloaded_layers(cfg)  # memory.activation_bytes: --cpu-offloading layers live on the host
    if offloaded:
        activations = activations - offloaded * np.where((rc == _NONE) & (cols["pp"][:, None] == 1), col(0), 0.0)
    # activations.recompute_working_bytes: one re-run layer (block) or --recompute-num-layers of them (uniform)
    working = np.where(rc == _FULL, np.maximum(cols["rc_layers"], 1)[:, None] * col(12), 0.0)
    working = np.where(rc == _BLOCK, col(12), working) + np.where(rc == _SEL, col(4) + col(9), col(3))
    last = stage == (cols["pp"][:, None] - 1)
    embedding = np.where(stage == 0, col(5) * in_flight, 0.0)
    logits, mtp = np.where(last, col(6), 0.0), np.where(last, col(7), 0.0)
    single = (cols["num_mb"] <= 1)[:, None]
    no_grads = np.where(single, no_grads_1, no_grads_m) > 0
    # memory.one_peak_of_two keeps the logits when they are the larger; then a bucket allocated after the loss and
    # the logits are never alive together either (memory.stage_memory)
    has_logits = (logits > 0) & (logits >= working)
    lazy = (np.where(single, lazy_1, lazy_m) > 0) & has_logits
    kept_logits = np.where(lazy & (buckets > logits), 0.0, logits)
    kept_buckets = np.where(lazy & (buckets <= logits), 0.0, buckets)
    # activations.deferred_embedding_wgrad_bytes: the last stage's deferred output-layer wgrad buffers
    deferred_mb = np.array([act.deferred_wgrad_microbatches(cfg, int(m)) for m in cols["num_mb"]], dtype=np.float64)
    deferred = np.where(last, deferred_mb[:, None] * col(LAYER_TERMS.index("deferred_wgrad")), 0.0)
    transient = activations + embedding + mtp + deferred + np.where(has_logits, kept_logits, working)
    freed = (cols["zero"] == 1) | (cols["zero"] == 2) | (not cfg.optimizer.contiguous_gradients)
    backward_only = transient + live + np.where(freed[:, None], kept_buckets, 0.0)
    later = np.maximum(grads, step)
    held_grads = np.where(no_grads, np.minimum(grads, np.maximum(later - backward_only, 0.0)), grads)
    top_up = np.maximum(np.where(no_grads, later - backward_only - held_grads, step - grads - backward_only), 0.0)
    allocated = (state_b - grads + held_grads + transient + buffers - buckets + kept_buckets + col(8) + top_up
                 - mem.CUDA_CONTEXT_BYTES)
    backward_peak = allocated - top_up - np.where(no_grads, held_grads, 0.0)
    own_segments = weight_grads * col(LAYER_TERMS.index("gradients_outgrow"))
    reserve = allocator_reserve_bytes(allocated, backward_peak, transient, _loss_blocks(layer, last),
                                      (np.where(no_grads, partition, 0.0), flat_a, flat_b), own_segments)
    peak = allocated + mem.CUDA_CONTEXT_BYTES + reserve
    return peak.max(axis=1), must_fit_bytes(peak, reserve).max(axis=1)


def _loss_blocks(layer: np.ndarray, last: np.ndarray) -> LossBlocks:
    """allocator_reserve.loss_blocks per row and rank: the layer table's columns on the last stage, none elsewhere."""
    def column(name: str) -> np.ndarray:
        return np.where(last, layer[:, LAYER_TERMS.index(name), None], 0.0)

    return LossBlocks(column("loss_block"), column("loss_blocks"), column("loss_unusable"))
