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

import math
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


def _linear(weight: int, bias: int, biased: bool) -> list[int]:
    """A linear's weight, and its bias where it has one."""
    return [weight, bias] if biased else [weight]


def attention_linears(cfg: TrainingConfig) -> list[tuple[int, int]]:
    """(weight, bias) elements of one layer's QKV and projection linears on this TP rank (not under MLA)."""
    m, t = cfg.model, cfg.parallel.tp
    qkv_out = (m.num_attention_heads + 2 * m.num_query_groups) * m.kv_channels
    proj_in = m.num_attention_heads * m.kv_channels
    return [(m.hidden_size * qkv_out // t, qkv_out // t), (proj_in * m.hidden_size // t, m.hidden_size)]


def mlp_linears(cfg: TrainingConfig) -> list[tuple[int, int]]:
    """(weight, bias) elements of one dense layer's FC1 and FC2 on this TP rank."""
    m, t = cfg.model, cfg.parallel.tp
    up = m.ffn_hidden_size * (2 if m.swiglu else 1)
    return [(m.hidden_size * up // t, up // t), (m.ffn_hidden_size * m.hidden_size // t, m.hidden_size)]


def attention_tensors(cfg: TrainingConfig) -> list[int]:
    """One layer's attention parameters as Megatron-Core registers them: the input norm, QKV, projection (graph/
    params.py attention_params; MLA as one block of its own count, graph/params.py mla_params), the core attention's
    learned softmax offsets (--softmax-type learnable)."""
    m = cfg.model
    sinks = [pc.attention_sink_params(cfg)] if m.attention_sinks else []
    if m.multi_latent_attention:
        return _norm(cfg) + [pc.mla_params(cfg)] + sinks
    (qkv, qkv_bias), (proj, proj_bias) = attention_linears(cfg)  # the QKV bias also alone (add_qkv_bias)
    return _norm(cfg) + _linear(qkv, qkv_bias, m.qkv_biased) + _linear(proj, proj_bias, m.add_bias_linear) + sinks


def mlp_tensors(cfg: TrainingConfig) -> list[int]:
    biased = cfg.model.mlp_biased  # ModelShape.mlp_bias: Llama's mlp_bias, GPT-NeoX's MLP apart from attention
    return _norm(cfg) + [n for weight, bias in mlp_linears(cfg) for n in _linear(weight, bias, biased)]


def moe_dense_tensors(cfg: TrainingConfig) -> list[int]:
    """The non-expert parameters of an MoE block: its norm, the router, the shared experts (graph/params.py)."""
    shared, m = pc.shared_expert_params(cfg), cfg.model
    router = _linear(m.hidden_size * m.num_experts, m.num_experts, pc.router_biased(cfg))
    return _norm(cfg) + router + ([shared] if shared else [])


def expert_tensors(cfg: TrainingConfig) -> list[int]:
    """This rank's local experts of one MoE layer, FC1 and FC2 per expert (Transformer Engine's GroupedLinear
    registers one weight per GEMM: weight0 .. weight{n-1}), each followed by its bias where linears are biased
    (graph/params.py expert_params)."""
    m, p = cfg.model, cfg.parallel
    ffn = m.moe_ffn_hidden_size or m.ffn_hidden_size
    up = ffn * (2 if m.swiglu else 1) // max(1, p.etp)
    down = ffn * m.hidden_size // max(1, p.etp)
    biased = pc.experts_biased(cfg)
    per_expert = _linear(m.hidden_size * up, up, biased) + _linear(down, m.hidden_size, biased)
    return per_expert * max(1, m.num_experts // p.ep)


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


def fp8_param_gather(cfg: TrainingConfig) -> bool:
    """Megatron --fp8-param-gather with an fp8 format and Transformer Engine layers: the linear layers are built
    under TE's fp8_model_init (megatron/core/fp8_utils.py get_fp8_context / fp8_model_init), so their weights are
    fp8 primary weights; the distributed optimizer keeps their fp32 master shards and casts its updates straight
    into the uint8 buffer (quantize_param_shard). Embeddings, output layer, norms and biases stay 16-bit."""
    return (cfg.optimizer.fp8_param_gather and cfg.precision == "fp8" and cfg.framework == "megatron"
            and cfg.transformer_impl == "transformer_engine" and cfg.optimizer.zero_stage < 3)


def fp8_weight_tensors(cfg: TrainingConfig, chunk: ChunkOps) -> tuple[list[int], list[int]]:
    """(dense, expert) fp8 primary weights of a chunk under --fp8-param-gather, in registration order: the weights of
    Transformer Engine's linear layers built under fp8_model_init (QKV, projection, FC1, FC2, every local expert's
    FC1 / FC2); their biases, the norms, the router, embedding and output layer stay 16-bit. MLA and MTP blocks are
    left 16-bit here (approximation)."""
    if not fp8_param_gather(cfg):
        return [], []
    attn = [] if cfg.model.multi_latent_attention else [weight for weight, _ in attention_linears(cfg)]
    mlp = [weight for weight, _ in mlp_linears(cfg)]
    dense: list[int] = []
    expert: list[int] = []
    for block in chunk.blocks:
        if block.name.startswith("dense_layer"):
            dense += (attn + mlp) * block.count
        elif block.name.startswith("moe_layer"):
            dense += attn * block.count
            expert += expert_tensors(cfg) * block.count
    return dense, expert


def _take_in_order(tensors: list[int], taken: list[int]) -> tuple[list[int], list[int]]:
    """(`tensors` without `taken`, `taken`): `taken` is a subsequence of `tensors` in the same order."""
    if not taken:  # no fp8 weights (every run without --fp8-param-gather)
        return list(tensors), []
    rest, queue = [], list(taken)
    for n in tensors:
        if queue and n == queue[0]:
            queue.pop(0)
        else:
            rest.append(n)
    return rest, [n for n in taken if n > 0]


def chunk_buffers(cfg: TrainingConfig, chunk: ChunkOps) -> list[tuple[str, list[int]]]:
    """The chunk's DDP buffers as Megatron groups its parameters (param_and_grad_buffer.py group_params_for_buffers:
    one buffer per (param storage dtype, grad dtype, is_expert_parallel)): dense and expert, and under
    --fp8-param-gather a uint8 buffer of each for the fp8 weights (fp8_weight_tensors), bucketed on its own. Names
    "dense", "expert", "dense_fp8", "expert_fp8"; empty buffers left out."""
    dense, expert = chunk_tensors(cfg, chunk)
    fp8_dense, fp8_expert = fp8_weight_tensors(cfg, chunk)
    dense, fp8_dense = _take_in_order(dense, fp8_dense)
    expert, fp8_expert = _take_in_order(expert, fp8_expert)
    named = [("dense", dense), ("expert", expert), ("dense_fp8", fp8_dense), ("expert_fp8", fp8_expert)]
    return [(name, tensors) for name, tensors in named if sum(tensors)]


PARAM_START_ALIGN_ELEMS = 64
"""The distributed optimizer starts every parameter on a 64-element boundary (megatron/core/optimizer/param_layout.py
pad_param_start)."""


def bucket_end_divisor(data_parallel_size: int) -> int:
    """Distributed-optimizer bucket ends are padded to a multiple of lcm(DP, 128) (param_layout.py bucket_end_divisor;
    2^16 more with --ddp-pad-buckets-for-high-nccl-busbw, not modelled), so each bucket splits evenly over DP."""
    return math.lcm(max(1, data_parallel_size), 128)


def distopt_buckets(tensors: Iterable[int], bucket_elems: int | None, data_parallel_size: int) -> list[int]:
    """Padded bucket sizes of one distributed-optimizer buffer in launch order (distrib_optimizer.py
    _compute_per_buffer_param_layout): parameters walked in reverse, each start aligned to 64 elements, a bucket
    closed once its span (padding included) reaches bucket_elems, its end padded to bucket_end_divisor. Shared
    embeddings' own buckets (pp > 1, tied) are not modelled."""
    divisor = bucket_end_divisor(data_parallel_size)
    pad = lambda i, d: -(-i // d) * d  # noqa: E731
    buckets, start, end = [], 0, 0
    for n in reversed([n for n in tensors if n > 0]):
        end = pad(end, PARAM_START_ALIGN_ELEMS) + n
        if bucket_elems is not None and end - start >= bucket_elems:
            buckets.append(pad(end, divisor) - start)
            start = end = pad(end, divisor)
    if end > start:
        buckets.append(pad(end, divisor) - start)
    return buckets


def distopt_padding_elems(cfg: TrainingConfig, stage: int, chunks: tuple[ChunkOps, ...], dense_dp: int,
                          expert_dp: int) -> int:
    """Elements the distributed optimizer's padding adds to this rank's parameter and gradient buffers (every chunk,
    every buffer; the first chunk of pipeline rank 0 bucketed as rank_grad_buckets has it). 0 without
    --use-distributed-optimizer or outside Megatron's DDP."""
    o = cfg.optimizer
    if not o.distributed_optimizer or "deepspeed" in cfg.framework or o.fsdp != "none" or not chunks:
        return 0
    size = (_first_chunk_bucket_elems(cfg, stage, [chunk_tensors(cfg, c) for c in chunks])
            if megatron_chunk_bucketed(cfg, stage) else None)  # tested first: every chunk's tensors only when bucketed
    padding: dict[tuple[int, int | None], int] = {}  # a chunk's padding follows its blocks and its bucket size
    total = 0
    for i, chunk in enumerate(chunks):
        key = (id(chunk.blocks), size if i == 0 else None)  # chunks of one layer mix share blocks (build_chunk)
        if key not in padding:
            padding[key] = _chunk_padding_elems(cfg, chunk, key[1], dense_dp, expert_dp)
        total += padding[key]
    return total


def _chunk_padding_elems(cfg: TrainingConfig, chunk: ChunkOps, bucket_elems: int | None, dense_dp: int,
                         expert_dp: int) -> int:
    """One chunk's padding: each of its buffers bucketed (`bucket_elems`, None = one bucket) and padded for its DP."""
    total = 0
    for name, buffer in chunk_buffers(cfg, chunk):
        dp = expert_dp if name.startswith("expert") else dense_dp
        total += sum(distopt_buckets(buffer, bucket_elems, dp)) - sum(buffer)
    return total


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
    buffers, one collective per bucket: the first chunk's buckets in launch order (its 16-bit buffer's, then under
    --fp8-param-gather its fp8 buffer's, bucketed apart), then each later chunk's buffers whole. DeepSpeed and
    Megatron without --overlap-grad-reduce reduce each buffer whole (graph/step_ops.py build_step_ops does not call
    this for them)."""
    tensors = [chunk_tensors(cfg, c) for c in chunks]
    if not tensors:
        return []
    size = _first_chunk_bucket_elems(cfg, stage, tensors)
    kind = "expert" if expert else "dense"
    out: list[int] = []
    for i, chunk in enumerate(chunks):
        for name, buffer in chunk_buffers(cfg, chunk):
            if name.split("_")[0] == kind:
                out += megatron_buckets(buffer, size) if i == 0 else [sum(buffer)]
    return out


def last_bucket_elems(cfg: TrainingConfig, stage: int, chunks: tuple[ChunkOps, ...]) -> int:
    """Elements reduced after the rank's last backward ends, which nothing hides: the last bucket of the first chunk
    (its embedding end) of each of its buffers (dense, expert and, under --fp8-param-gather, their fp8 buffers),
    launched in the same last layers."""
    tensors = [chunk_tensors(cfg, c) for c in chunks]
    if not tensors:
        return 0
    size = _first_chunk_bucket_elems(cfg, stage, tensors)
    return sum(megatron_buckets(buffer, size)[-1] for _, buffer in chunk_buffers(cfg, chunks[0]))
