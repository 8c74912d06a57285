"""The gradient buckets a rank reduces: Megatron's DDP buckets as it builds them, DeepSpeed's reduction buffer.

Megatron-LM (megatron/training/training.py get_model + resolve_ddp_bucket_size, megatron/core/distributed/
distributed_data_parallel.py, param_and_grad_buffer.py; HEAD 2026-08, same rules since 5d745a79cd, Sep 2023):
- bucket size: --ddp-num-buckets N gives num_parameters // N, where num_parameters sums every parameter of the
  rank over all its model chunks, dense and expert alike (training.py `num_parameters = sum(p.nelement() ...)`);
  else --ddp-bucket-size; else max(40M, 1M x dp_cp). Without --overlap-grad-reduce: one bucket (None).
- only pipeline rank 0's first model chunk is bucketed; chunks after the first (`disable_bucketing = model_chunk_idx
  > 0`), every chunk under --overlap-param-gather-with-optimizer-step (`... or args.overlap_param_gather_with_
  optimizer_step`), and pipeline ranks > 0 (`bucket_size = None`) reduce each buffer as one bucket.
- a buffer holds the chunk's parameters of one (param dtype, grad dtype, is_expert_parallel) kind: dense and expert
  parameters are bucketed separately, each with the same bucket size.
- _compute_default_per_buffer_param_layout walks the parameters in reverse (backprop) order and closes a bucket
  after the first whole tensor that brings it to >= bucket_size elements; the rest is the last bucket. So buckets
  follow the tensor sizes: a bucket size below every tensor gives one bucket per tensor, and the last bucket
  launched (the one exposed after the last backward) holds the first parameters: the word embedding on rank 0.
"""

from __future__ import annotations

from typing import Iterable

from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.graph import params as pc
from llmperf_hook.graph.op_graph import ChunkOps

MEGATRON_DEFAULT_BUCKET_ELEMS = 40_000_000
"""Megatron DDP default bucket: max(40M, 1M x dp_cp) parameters (distributed_data_parallel.py, training.py
resolve_ddp_bucket_size)."""
DEEPSPEED_DEFAULT_BUCKET_ELEMS = 500_000_000
"""DeepSpeed zero_optimization.reduce_bucket_size default (runtime/zero/config.py)."""


def grad_bucket_elems(cfg: TrainingConfig, rank_params: int) -> int:
    """Parameters per bucket of the overlapped gradient reduction; `rank_params` = every parameter the rank holds
    (all chunks, dense and expert). Megatron: resolve_ddp_bucket_size (see the module docstring); DeepSpeed: its
    reduce_bucket_size."""
    o = cfg.optimizer
    if "deepspeed" in cfg.framework:
        return o.grad_bucket_size_elems or DEEPSPEED_DEFAULT_BUCKET_ELEMS
    if o.grad_num_buckets:
        return max(1, rank_params // o.grad_num_buckets)
    dp_cp = cfg.parallel.dp * cfg.parallel.cp
    return o.grad_bucket_size_elems or max(MEGATRON_DEFAULT_BUCKET_ELEMS, 1_000_000 * dp_cp)


def megatron_chunk_bucketed(cfg: TrainingConfig, stage: int) -> bool:
    """Whether Megatron's DDP buckets this rank's first model chunk (module docstring)."""
    return ("deepspeed" not in cfg.framework and cfg.optimizer.overlap_grad_reduce and stage == 0
            and not cfg.optimizer.overlap_param_gather_with_optimizer_step)


def _norm(cfg: TrainingConfig) -> list[int]:
    h = cfg.model.hidden_size
    return [h] if cfg.model.normalization == "RMSNorm" else [h, h]


def _linear(cfg: TrainingConfig, weight: int, bias: int) -> list[int]:
    return [weight, bias] if cfg.model.add_bias_linear else [weight]


def attention_tensors(cfg: TrainingConfig) -> list[int]:
    """One layer's attention parameters as Megatron-Core registers them: the input norm, QKV, projection (graph/
    params.py attention_params; MLA as one block of its own count, graph/params.py mla_params)."""
    m, t = cfg.model, cfg.parallel.tp
    if m.multi_latent_attention:
        return _norm(cfg) + [pc.mla_params(cfg)]
    qkv_out = (m.num_attention_heads + 2 * m.num_query_groups) * m.kv_channels
    proj_in = m.num_attention_heads * m.kv_channels
    return (_norm(cfg) + _linear(cfg, m.hidden_size * qkv_out // t, qkv_out // t)
            + _linear(cfg, proj_in * m.hidden_size // t, m.hidden_size))


def mlp_tensors(cfg: TrainingConfig) -> list[int]:
    m, t = cfg.model, cfg.parallel.tp
    up = m.ffn_hidden_size * (2 if m.swiglu else 1)
    return (_norm(cfg) + _linear(cfg, m.hidden_size * up // t, up // t)
            + _linear(cfg, m.ffn_hidden_size * m.hidden_size // t, m.hidden_size))


def moe_dense_tensors(cfg: TrainingConfig) -> list[int]:
    """The non-expert parameters of an MoE block: its norm, the router, the shared experts (graph/params.py)."""
    shared = pc.shared_expert_params(cfg)
    return _norm(cfg) + [cfg.model.hidden_size * cfg.model.num_experts] + ([shared] if shared else [])


def expert_tensors(cfg: TrainingConfig) -> list[int]:
    """This rank's local experts of one MoE layer, FC1 and FC2 per expert (Transformer Engine's GroupedLinear
    registers one weight per GEMM: weight0 .. weight{n-1})."""
    m, p = cfg.model, cfg.parallel
    ffn = m.moe_ffn_hidden_size or m.ffn_hidden_size
    up = m.hidden_size * ffn * (2 if m.swiglu else 1) // max(1, p.etp)
    down = ffn * m.hidden_size // max(1, p.etp)
    return [up, down] * max(1, m.num_experts // p.ep)


def chunk_tensors(cfg: TrainingConfig, chunk: ChunkOps) -> tuple[list[int], list[int]]:
    """(dense, expert) parameter tensor sizes of one rank's model chunk, in registration (forward) order."""
    dense: list[int] = []
    expert: list[int] = []
    for block in chunk.blocks:
        if block.name.startswith("dense_layer"):
            dense += (attention_tensors(cfg) + mlp_tensors(cfg)) * block.count
        elif block.name.startswith("moe_layer"):
            dense += (attention_tensors(cfg) + moe_dense_tensors(cfg)) * block.count
            expert += expert_tensors(cfg) * block.count
        elif block.name == "embedding":
            dense += [n for n in (pc.embedding_params(cfg),) if n]
        elif block.name == "head":
            dense += [n for n in (pc.head_params(cfg),) if n]
        elif block.name == "mtp":  # graph/build.py _chunk_params: mtp_params holds every depth, experts included
            experts = expert_tensors(cfg) * block.count if pc.mtp_layer_is_moe(cfg) else []
            dense += [pc.mtp_params(cfg) - sum(experts)]
            expert += experts
    return dense, expert


def megatron_buckets(tensors: Iterable[int], bucket_elems: int | None) -> list[int]:
    """Bucket sizes in launch order: tensors walked in reverse, a bucket closed after the whole tensor that brings it
    to >= bucket_elems (param_and_grad_buffer.py _compute_default_per_buffer_param_layout); None = one bucket."""
    sizes = [n for n in tensors if n > 0]
    if bucket_elems is None:
        return [sum(sizes)] if sizes else []
    buckets, current = [], 0
    for n in reversed(sizes):
        current += n
        if current >= bucket_elems:
            buckets.append(current)
            current = 0
    return buckets + ([current] if current else [])


def _first_chunk_bucket_elems(cfg: TrainingConfig, stage: int, tensors: list[tuple[list[int], list[int]]]
                              ) -> int | None:
    """Bucket size of the rank's first chunk, from `tensors` (chunk_tensors of each of its chunks): grad_bucket_elems
    of every parameter the rank holds; None (one bucket) where Megatron does not bucket it."""
    if not megatron_chunk_bucketed(cfg, stage):
        return None
    return grad_bucket_elems(cfg, sum(sum(dense) + sum(expert) for dense, expert in tensors))


def rank_grad_buckets(cfg: TrainingConfig, stage: int, chunks: tuple[ChunkOps, ...], expert: bool) -> list[int]:
    """Elements of each gradient reduction Megatron's overlapped DDP launches for this rank's dense (or expert)
    buffers, one collective per bucket: the first chunk's buckets in launch order, then each later chunk whole.
    DeepSpeed and Megatron without --overlap-grad-reduce reduce each buffer whole (graph/step_ops.py build_step_ops
    does not call this for them)."""
    tensors = [chunk_tensors(cfg, c) for c in chunks]
    if not tensors:
        return []
    per_chunk = [t[1 if expert else 0] for t in tensors]
    first = megatron_buckets(per_chunk[0], _first_chunk_bucket_elems(cfg, stage, tensors))
    return first + [sum(t) for t in per_chunk[1:] if sum(t)]


def last_bucket_elems(cfg: TrainingConfig, stage: int, chunks: tuple[ChunkOps, ...]) -> int:
    """Elements reduced after the rank's last backward ends, which nothing hides: the last bucket of the first chunk
    (its embedding end) of the dense buffer, plus that of the expert buffer, launched in the same last layers."""
    tensors = [chunk_tensors(cfg, c) for c in chunks]
    if not tensors:
        return 0
    size = _first_chunk_bucket_elems(cfg, stage, tensors)
    return sum(megatron_buckets(buffer, size)[-1] for buffer in tensors[0] if buffer)
