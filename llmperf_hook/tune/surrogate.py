"""Vectorised estimates of memory and step time for a whole candidate table at once.

Memory is the full memory model's own (tune/surrogate_memory.py: schedule/memory.py's terms computed once per distinct
value of the knobs each reads), so tune's out-of-memory verdicts are `llmperf predict`'s. Step time is closed-form:
it only ORDERS the search (every candidate `tune` reports is re-predicted with the full `api.predict_config`) and
follows the textbook formulas so that it tracks the full model's trends (not its absolute numbers):
- compute: FLOPs of Narayanan et al. eq. 3 per layer, divided by an efficiency that falls off for
  small per-rank GEMMs; communication: ring all-reduce 2(n-1)/n bytes / bandwidth (Patarasuk & Yuan 2009),
  MoE token dispatch / combine as the command's dispatcher moves the tokens (tune/surrogate_moe.py);
- unaligned GEMM widths on Hopper: predict's measured slowdown for the widths each TP leaves (surrogate_alignment.py;
  an MoE layer's expert GEMMs, split by expert TP, are priced aligned: the full prediction prices them);
- pipeline: (m + (pp - 1) / vpp) micro-batch slots per step (Narayanan et al. SC21 section 2.2);
- host issue: a micro-batch never runs faster than its CPU issues it (predict/host_issue.py's units: per dense
  layer 13 ops forward, again per recompute pass, 2 units each in backward, one per TP collective call on the
  compute stream, and the micro-batch prologue), so small layers stop getting faster with TP or smaller micro-batches.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping

import numpy as np

from llmperf_hook.frameworks.training_config import ModelShape, TrainingConfig
from llmperf_hook.graph import params
from llmperf_hook.graph.layer_ops import DTYPE_BYTES
from llmperf_hook.graph.step_ops import adam_bytes_per_param
from llmperf_hook.hardware.spec import ClusterSpec
from llmperf_hook.predict import host_issue
from llmperf_hook.tune import surrogate_memory, surrogate_moe
from llmperf_hook.tune.surrogate_comm import per_node, ring_s
from llmperf_hook.tune.candidate import RECOMPUTE_CODES, moe_whole_pipe_sends, padded_vocab_at
from llmperf_hook.tune.surrogate_alignment import alignment_factors

_BYTES = DTYPE_BYTES
"""Activation bytes the graph moves between ranks (graph/layer_ops.DTYPE_BYTES): fp8 training keeps its activations
and TP / pipeline traffic in bf16 (this said 1 byte, halving those costs under fp8)."""
DENSE_LAYER_OPS = 13
"""Compute ops of a dense transformer layer's forward in the graph (graph/layer_ops.py: 2 norms, QKV, QK^T,
softmax, dropout, AV, projection, 2 residual adds, FC1, activation, FC2)."""
_GEMM_HALF_EFFICIENCY_DIM = 192.0
"""GEMM dimension at which achieved throughput is half its large-matrix value (A100 cuBLAS BF16 curve in
shared/validation/calibration: ~50 % of the best at 256-512 square; used only to order candidates)."""


@dataclass(frozen=True)
class SurrogateEstimate:
    """Per-candidate arrays (same order as the table)."""

    peak_bytes: np.ndarray
    """Estimated peak memory of the busiest rank, bytes."""
    must_fit_bytes: np.ndarray
    """Estimated must-fit bytes (the allocated bytes, schedule/memory_rule.py), the most
    over the ranks: what tune's memory rule compares with the usable memory."""
    step_time_s: np.ndarray
    """Estimated step time, seconds (orders candidates; the full model gives the reported number)."""


def moe_layer_fraction(m: ModelShape) -> float:
    """Share of the layers that are MoE (--moe-layer-freq k: 1/k; a list pattern: its count of 1s)."""
    if m.moe_layer_pattern:
        return sum(1 for v in m.moe_layer_pattern if v == 1) / len(m.moe_layer_pattern)
    return 1.0 / max(m.moe_layer_freq, 1)


def _layer_params(cfg: TrainingConfig) -> tuple[float, float]:
    """(parameters of one layer outside its routed experts, routed-expert parameters per layer on average), unsplit:
    graph/params.py's counts (MLA, GQA, shared experts, dense layers between MoE ones) at TP = EP = ETP = 1."""
    m = cfg.model
    lay = cfg.parallel
    one = replace(cfg, parallel=replace(lay, tp=1, dp=lay.dp * lay.tp, ep=1, etp=1, sequence_parallel=False))
    attn = params.attention_params(one)
    if not m.num_experts:
        return float(attn + params.mlp_params(one)), 0.0
    frac = moe_layer_fraction(m)
    dense = attn + frac * params.moe_dense_params(one) + (1.0 - frac) * params.mlp_params(one)
    return float(dense), float(params.expert_params(one) * frac)


def _expert_grid(cfg: TrainingConfig, cols: Mapping[str, np.ndarray],
                 expert: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(the rank's expert parameters, ep * etp: ranks one layer's experts are split over, expert data-parallel
    size world / (etp * ep * pp)), Megatron-core parallel_state.py's expert rank generator."""
    split = np.maximum(cols["ep"] * cols["etp"], 1)
    params = (cfg.model.num_layers / cols["pp"]) * expert / split
    return params, split, np.maximum(cfg.world_size // (split * cols["pp"]), 1)


def estimate_step_time(cfg: TrainingConfig, cluster: ClusterSpec, cols: Mapping[str, np.ndarray]) -> np.ndarray:
    m, gpu = cfg.model, cluster.gpu
    tp, pp, vpp, cp, mbs = (cols[k].astype(np.float64) for k in ("tp", "pp", "vpp", "cp", "mbs"))
    dp = np.maximum(cfg.world_size // (tp * pp * cp), 1)
    num_mb = np.maximum(cfg.batch.global_batch_size // (mbs * dp), 1)
    tokens = mbs * m.seq_length / cp
    dense, expert = _layer_params(cfg)
    active_expert = expert * min(m.moe_router_topk, max(m.num_experts, 1)) / max(m.num_experts, 1)
    # Narayanan et al. eq. 3 per layer: 2 FLOP per parameter per token, plus causal attention 2*s*q_dim per token.
    q_dim = m.num_attention_heads * m.kv_channels
    fwd_layer = tokens * (2 * (dense + active_expert) + 2 * m.seq_length * q_dim) / tp
    width = np.minimum(m.hidden_size, m.ffn_hidden_size / tp)
    eff = gpu.gemm_efficiency * (tokens / (tokens + _GEMM_HALF_EFFICIENCY_DIM)) * (width / (width + _GEMM_HALF_EFFICIENCY_DIM))
    peak = gpu.peak_flop_per_s.get(cfg.precision, max(gpu.peak_flop_per_s.values()))
    rc_passes = _recompute_passes(cfg, cols)
    layers_per_stage = m.num_layers / pp
    # The padded vocabulary at each TP (Megatron pads to divisible_by x TP) and the Hopper price of widths that TP
    # leaves unaligned (tune/surrogate_alignment.py: predict's alignment_factor per distinct TP).
    tps, row_tp = np.unique(cols["tp"], return_inverse=True)
    vocab = np.asarray([padded_vocab_at(cfg, int(t)) for t in tps], dtype=np.float64)[row_tp]
    layer_align, head_align = alignment_factors(cfg, gpu, cols["tp"])
    head = 2 * tokens * m.hidden_size * vocab / tp
    compute_mb = (layers_per_stage * fwd_layer * (3 + rc_passes) * layer_align + 3 * head * head_align) / (peak * eff)
    tp_comm_mb = _tp_comm_s(cfg, cluster, cols, tokens) * layers_per_stage * (4 + 2 * (rc_passes > 0.5))
    mb_s = np.maximum(compute_mb + tp_comm_mb, _host_mb_s(cfg, cluster, cols, layers_per_stage, rc_passes))
    if m.num_experts:
        exposed = _moe_exposed_s(cfg, cluster, cols, tokens, fwd_layer / (peak * eff), peak * eff, rc_passes)
        mb_s = mb_s + exposed * (layers_per_stage * moe_layer_fraction(m))
    p2p_s = _p2p_s(cfg, cluster, cols, tokens)
    pipeline_s = (num_mb + (pp - 1) / vpp) * mb_s + np.where(pp > 1, 2 * (num_mb + pp - 1) * vpp * p2p_s, 0.0)
    layer_params = (dense, expert)
    return pipeline_s + _dp_sync_s(cfg, cluster, cols, dp, layer_params) + _optimizer_s(cfg, cluster, cols, dp,
                                                                                         layer_params)


def _host_mb_s(cfg: TrainingConfig, cluster: ClusterSpec, cols: Mapping[str, np.ndarray],
               layers_per_stage: np.ndarray, rc_passes: np.ndarray) -> np.ndarray:
    """CPU time to issue one micro-batch of a stage (predict/host_issue.py): compute-op units of each layer's
    forward, recompute and backward, the TP collective calls on the compute stream (2 per layer and pass, 4 with
    sequence parallelism; none under --tp-comm-overlap) and the micro-batch prologue."""
    units = host_issue.KERNELS_PER_PHASE
    compute = DENSE_LAYER_OPS * (units["fwd"] + units["recompute"] * rc_passes + units["bwd"])
    calls = np.where(cols["sp"] > 0, 4.0, 2.0) * (2.0 + rc_passes)
    if cfg.optimizer.tp_comm_overlap:
        calls = np.zeros_like(calls)
    calls = np.where(cols["tp"] > 1, calls * host_issue.COLLECTIVE_CALL_UNITS, 0.0)
    per_mb_units = layers_per_stage * (compute + calls) + host_issue.MICROBATCH_PROLOGUE_UNITS
    return cluster.host_overhead_per_op_s * per_mb_units


def _recompute_passes(cfg: TrainingConfig, cols: Mapping[str, np.ndarray]) -> np.ndarray:
    """Extra forward passes per layer from recompute (selective: the attention core only, ~10 % of a layer)."""
    rc = cols["rc"]
    per_chunk = np.maximum(cfg.model.num_layers / (cols["pp"] * cols["vpp"]), 1.0)
    block_frac = np.minimum(cols["rc_layers"] / per_chunk, 1.0)
    out = np.where(rc == RECOMPUTE_CODES["full"], 1.0, 0.0)
    out = np.where(rc == RECOMPUTE_CODES["block"], block_frac, out)
    return np.where(rc == RECOMPUTE_CODES["selective"], 0.1, out)


def _bandwidth(cluster: ClusterSpec, intra: np.ndarray) -> np.ndarray:
    return np.where(intra, cluster.intra_node.bandwidth_bytes_per_s, cluster.inter_node.bandwidth_bytes_per_s)


def _tp_comm_s(cfg: TrainingConfig, cluster: ClusterSpec, cols: Mapping[str, np.ndarray], tokens: np.ndarray) -> np.ndarray:
    """One TP all-reduce (or all-gather + reduce-scatter pair under SP: same bytes) of a layer's activations."""
    tp = cols["tp"].astype(np.float64)
    nbytes = tokens * cfg.model.hidden_size * _BYTES.get(cfg.precision, 2)
    bw = _bandwidth(cluster, cols["tp"] <= cluster.gpus_per_node)
    ring = 2 * (tp - 1) / tp * nbytes / bw + 2 * (tp - 1) * cluster.intra_node.latency_s
    return np.where(tp > 1, ring, 0.0)


def _moe_exposed_s(cfg: TrainingConfig, cluster: ClusterSpec, cols: Mapping[str, np.ndarray], tokens: np.ndarray,
                   layer_fwd_s: np.ndarray, flop_per_s: np.ndarray, rc_passes: np.ndarray) -> np.ndarray:
    """Exposed token dispatch + combine of one MoE layer per micro-batch, as the command's dispatcher moves the
    tokens (tune/surrogate_moe.py), less what its EP-comm or shared-expert overlap hides."""
    m = cfg.model
    comm = surrogate_moe.ep_comm_fwd_s(cfg, cluster, cols, tokens)
    # Shared experts: a dense MLP over every token, TP-split (graph/layer_ops.shared_expert_ops), 2 FLOP / weight.
    shared_weights = m.hidden_size * m.moe_shared_expert_intermediate_size * (3 if m.swiglu else 2)
    shared_fwd_s = 2.0 * tokens * shared_weights / cols["tp"] / flop_per_s
    return surrogate_moe.exposed_ep_s(cfg, comm, layer_fwd_s, shared_fwd_s, rc_passes)


def _p2p_s(cfg: TrainingConfig, cluster: ClusterSpec, cols: Mapping[str, np.ndarray], tokens: np.ndarray) -> np.ndarray:
    # Adjacent stages are tp*cp*dp ranks apart (Megatron order tp-cp-dp-pp): same node only if that fits.
    stride = cfg.world_size // cols["pp"]
    nbytes = tokens * cfg.model.hidden_size * _BYTES.get(cfg.precision, 2) / np.where(cols["sp"] > 0, cols["tp"], 1)
    whole = nbytes / _bandwidth(cluster, stride < cluster.gpus_per_node) + cluster.inter_node.latency_s
    if not (cfg.deepspeed_pipeline_engine and cfg.deepspeed_pipe_partitioned):
        return whole
    # DeepSpeed's PipelineEngine sends 1/TP slices and all-gathers them over the TP group (graph/build.py _p2p_ops),
    # unless the ds_config sets pipeline.pipe_partitioned / grad_partitioned false, as --apply does for an MoE
    # candidate at TP > 1 and PP > 1 (candidate.moe_whole_pipe_sends).
    send = nbytes / cols["tp"] / _bandwidth(cluster, stride < cluster.gpus_per_node) + cluster.inter_node.latency_s
    sliced = send + np.where(cols["tp"] > 1, nbytes / _bandwidth(cluster, cols["tp"] <= cluster.gpus_per_node), 0.0)
    return np.where(moe_whole_pipe_sends(cfg, cols["tp"], cols["pp"], True), whole, sliced)


def _dp_sync_s(cfg: TrainingConfig, cluster: ClusterSpec, cols: Mapping[str, np.ndarray], dp: np.ndarray,
               layer_params: tuple[float, float]) -> np.ndarray:
    """Gradient all-reduce over the data-parallel group (with CP: dp x cp ranks, tp apart) and, for MoE models,
    of the expert gradients over the expert data-parallel group (etp x ep apart), graph/step_ops.dp_groups; a
    ring over the members a node holds (tune/surrogate_comm.py), so a group of neighbouring ranks that spans
    nodes runs at the node's NIC bandwidth, not one GPU's. layer_params: _layer_params(cfg)."""
    dense, expert = layer_params
    tp, gpn = cols["tp"], cluster.gpus_per_node
    params = (cfg.model.num_layers / cols["pp"]) * dense / tp + cfg.model.padded_vocab_size * cfg.model.hidden_size / tp
    grad_bytes = 4.0 if cfg.framework == "megatron" and cfg.optimizer.fp32_main_grads else 2.0
    zero3 = np.where(cols["zero"] == 3, 2.5, 1.0)
    exposed = 0.3 if cfg.optimizer.overlap_grad_reduce else 1.0
    group = dp * cols["cp"]
    out = exposed * 2 * ring_s(cluster, params * grad_bytes * zero3, group, per_node(group, tp, gpn))
    if not expert:
        return out
    e_params, split, edp = _expert_grid(cfg, cols, expert)
    return out + exposed * 2 * ring_s(cluster, e_params * grad_bytes * zero3, edp, per_node(edp, split, gpn))


def _optimizer_s(cfg: TrainingConfig, cluster: ClusterSpec, cols: Mapping[str, np.ndarray], dp: np.ndarray,
                 layer_params: tuple[float, float]) -> np.ndarray:
    """Adam's step over the rank's (sharded) parameters. layer_params: _layer_params(cfg)."""
    dense, expert = layer_params
    params = (cfg.model.num_layers / cols["pp"]) * dense / cols["tp"]
    sharded = (cols["distopt"] > 0) | (cols["zero"] > 0)
    params = np.where(sharded, params / dp, params)
    if expert:
        e_params, _, edp = _expert_grid(cfg, cols, expert)
        params = params + np.where(sharded, e_params / np.where(cols["distopt"] > 0, edp, dp), e_params)
    # The bytes per parameter of the Adam the job runs, as the graph prices it (graph/step_ops.adam_bytes_per_param:
    # the framework's fused Adam 30 B, torch AdamW over fp32 80 B or over the 16-bit model 40 B).
    bytes_per_param = adam_bytes_per_param(cfg)[0]
    return params * bytes_per_param / (cluster.gpu.memory_bandwidth_bytes_per_s * cluster.gpu.memory_efficiency)


def estimate(cfg: TrainingConfig, cluster: ClusterSpec, cols: Mapping[str, np.ndarray]) -> SurrogateEstimate:
    peak, must_fit = surrogate_memory.estimate_memory_bytes(cfg, cluster, cols)
    return SurrogateEstimate(peak_bytes=peak, must_fit_bytes=must_fit,
                             step_time_s=estimate_step_time(cfg, cluster, cols))
