"""Backward and recompute ops derived from forward ops.

Backward of a GEMM is two GEMMs of the same size (dgrad, wgrad): 2x the forward FLOPs and bytes. Flash
attention backward recomputes the scores and runs five GEMM-like products against two in forward: 2.5x
(Dao 2023, FlashAttention-2, Sec. 3.2). Memory-bound ops read the saved input and the output gradient and write
the input gradient: ~2x forward traffic. Collectives mirror their forward: all-gather <-> reduce-scatter under
sequence parallelism, all-reduce stays (the conjugate f/g operators of Shoeybi et al. 2019; where Megatron runs it
asynchronously beside the column-parallel linear's weight-grad GEMM it is tagged to overlap that GEMM), all-to-all
and the CP exchange repeat (the CP ring also returns dK/dV, 2x).
"""

from __future__ import annotations

from llmperf_hook.graph.layer_ops import (ASYNC_DGRAD, DTYPE_BYTES, GRAD_INPUT_ALLREDUCE, IDENTITY_BACKWARD,
                                          UNORDERED_LAUNCH)
from llmperf_hook.graph.op import Op
from llmperf_hook.hardware.spec import HardwareSpec

BWD_FLOP_FACTOR = {"gemm": 2.0, "bmm": 2.0, "router": 2.0, "attention": 2.5}
BWD_BYTES_FACTOR = {"cross_entropy": 14.0 / 38.0, "cast": 1.0, "scale": 1.0, "bias_dropout_add": 0.8,
                    "bias_activation": 1.25, "bias_add": 0.5}
"""Backward traffic / forward traffic where it is not the FLOP factor: Megatron's cross-entropy backward moves
14 bytes per logit against 38 in forward (graph/vocab_ops.py CE_FWD_BYTES_PER_LOGIT); the unfused softmax
path's cast and scale (attention_core_ops.softmax_fallback_ops) backpropagate as one kernel of the same traffic (cast
back, multiply by the scale); its mask fill is two kernels (backward_bytes). The unfused bias-dropout-add and
bias-activation (layer_ops.residual / activation, --no-bias-dropout-fusion / --no-bias-gelu-fusion) backpropagate
as their fused kernels do (the add passes its gradient through; dropout's mask multiply and the bias-gradient sum run
either way): bias-dropout-add the fused residual's 6 passes (0.8 x its 7.5 forward passes with biases and dropout),
bias + GeLU the GeLU's 4 passes plus one read of the gradient for the bias sum (1.25 x its 4). The local QKV
linear's bias add (graph/local_kernels.py) backpropagates as the bias-gradient sum alone: one read of the gradient
(0.5 x its 2 forward passes), the input gradient passing through."""
BWD_COMM_CLASS = {"allgather": "reducescatter", "reducescatter": "allgather"}
SELECTIVE_RECOMPUTE_CLASSES = frozenset({"attention", "bmm", "softmax", "dropout", "cast", "scale", "mask_fill",
                                         "context_copy"})
"""Korthikanti et al. 2022 Sec. 5: selective recompute replays the attention core (QK^T, softmax, dropout, AV; the
local core attention's context copy is inside the checkpointed function, graph/local_kernels.py)."""


def backward_op(op: Op) -> Op:
    # Op(...) directly rather than dataclasses.replace: this runs for every op of every graph built.
    if op.collective is not None:
        # the CP KV exchange sends K and V and their gradients back; an FP8 TE linear gathers its output gradient
        # quantized, half the bytes of the bf16 reduce-scatter it mirrors (graph/fp8_tags.FP8_PAYLOAD)
        factor = 2.0 if op.name == "attn.cp_kv_exchange" else 0.5 if op.tags.get("bwd_payload") == "fp8" else 1.0
        op_class = op.tags.get("bwd_class") or BWD_COMM_CLASS.get(op.op_class, op.op_class)  # moe_ops: drop_tokens
        return Op(op.name, op_class, "bwd", {"bytes": int(op.dims["bytes"] * factor)},
                  op.flops, op.bytes_moved, op.dtype, op.collective, op.tags)
    factor = BWD_FLOP_FACTOR.get(op.op_class, 2.0)
    return Op(op.name, op.op_class, "bwd", op.dims, op.flops * factor, backward_bytes(op, factor), op.dtype, None,
              op.tags)


TORCH_SOFTMAX_BWD_BYTES_FACTOR = 3.0
"""PyTorch's softmax backward on CUDA is two kernels (aten/src/ATen/native/cuda/SoftMax.cu
softmax_backward_cuda_out: `Tensor tmp = grad * output;` then host_softmax_backward(tmp, output)): the product
reads grad and output and writes tmp, the reduction kernel reads tmp and output and writes the input gradient:
6 tensor passes against the forward's 2 (read scores, write probabilities). Megatron's fused softmax kernels
(scaled_masked_softmax backward) are one kernel of 3 passes: the default factor. Check, not fit: in the H100
kernel table of l12h1024-m4 (measurements/h100-sxm5-80gb-2026-11-26-b/kernels) the 24 fp32 softmax backwards
take 25.2 ms of _softmax_backward_data plus ~25 ms of the 80 `mul` calls (24 of them s^2 fp32 products), against
37.5 ms for the 48 forwards: 2.7x one forward."""


def backward_bytes(op: Op, flop_factor: float) -> float:
    """HBM bytes of a memory-bound op's backward (BWD_BYTES_FACTOR, else the FLOP factor), with two ops whose
    backward is more than one kernel: PyTorch's softmax (TORCH_SOFTMAX_BWD_BYTES_FACTOR, ops tagged kernel=torch by
    attention_core_ops.attention_core) and the mask fill of the unfused softmax path, whose gradient is
    `grad.masked_fill(mask, 0)` (torch derivatives.yaml masked_fill_.Scalar): at::masked_fill clones the gradient
    (read + write, no mask) and runs masked_fill_ on the clone (the forward's traffic): 2 x forward - the mask byte."""
    if op.op_class == "mask_fill":
        return 2.0 * op.bytes_moved - float(op.dims.get("elements", 0))
    if op.op_class == "softmax" and op.tags.get("kernel") == "torch":
        return op.bytes_moved * TORCH_SOFTMAX_BWD_BYTES_FACTOR
    return op.bytes_moved * BWD_BYTES_FACTOR.get(op.op_class, flop_factor)


def _replayed(op: Op) -> Op:
    return Op(op.name, op.op_class, "recompute", op.dims, op.flops, op.bytes_moved, op.dtype, op.collective, op.tags)


_NORMS = ("attn.norm", "mlp.norm", "moe.norm")


def _module_replays(module: str, op: Op, te_norms: bool) -> bool:
    """Whether Megatron's --recompute-modules value `module` replays forward op `op` (megatron/core/transformer at
    Megatron-LM d98e8a6). core_attn: the attention core (attention.py checkpoint_core_attention). mlp: a dense
    layer's whole MLP module with its TP collectives (transformer_layer.py recompute_mlp:
    tensor_parallel.checkpoint(self.mlp), dense layers only). moe: the whole MoE layer, router, dispatch, experts and
    combine (moe_layer.py moe_layer_recompute). moe_act: the experts' activation (experts.py). shared_experts: the
    shared expert MLP. layernorm: the input and pre-MLP norms (recompute_input_layernorm /
    recompute_pre_mlp_layernorm, CheckpointWithoutOutput), which exist only where the norm is its own module: with
    Transformer Engine (`te_norms`) each norm is fused into the next linear (TELayerNormColumnParallelLinear; the
    layer's norms are IdentityOp), so layernorm replays nothing and mlp's checkpoint replays the pre-MLP norm inside
    linear_fc1. mla_up_proj, mhc, gdn_norm_out, gdp_in_proj and gdp_qkv name ops the graph does not split out: none
    (megatron.py warns; tests/frameworks/test_recompute_modules_rules ties this to RECOMPUTE_MODULES_TIMED)."""
    if module == "core_attn":
        return op.name.startswith("attn.") and op.op_class in SELECTIVE_RECOMPUTE_CLASSES
    if module == "layernorm":
        return not te_norms and op.name in _NORMS
    if module in ("mlp", "moe"):
        prefix = module + "."
        return op.name.startswith(prefix) and op.name != prefix + "residual" and (te_norms or op.name not in _NORMS)
    if module == "moe_act":
        return op.name == "moe.expert_act"
    return module == "shared_experts" and op.name.startswith("moe.shared_")


def recompute_ops(fwd: list[Op], granularity: str, modules: tuple[str, ...] = ("core_attn",),
                  te_norms: bool = False) -> list[Op]:
    """The forward ops replayed before backward, in forward order: all of them (full) or, under selective
    recompute, those of the --recompute-modules (_module_replays)."""
    if granularity == "full":
        return [_replayed(op) for op in fwd]
    if granularity == "selective":
        return [_replayed(op) for op in fwd if any(_module_replays(m, op, te_norms) for m in modules)]
    return []


NCCL_NVSWITCH_RING_CTAS = 24
"""Thread blocks (one SM each) of an NCCL ring collective among the 8 GPUs of an NVSwitch node. NCCL's topology
search (src/graph/search.cc ncclTopoCompute) starts intra-node rings at 40 GB/s per channel on sm80 (speedArrayIntra)
and 60 GB/s on sm90 (sm90SpeedArrayIntra) against 12 x 20 GB/s (SM80_NVLINK_BW) / 18 x 20.6 GB/s (SM90_NVLINK_BW)
of NVLink to the switch: 6 channels; ncclTopoDupChannels doubles them (bwIntra >= 25 GB/s): 12; ncclTopoPostset
(src/graph/connect.cc, 'Duplication should be complete now') doubles again: 24, the 'Channel xx/24' of a DGX A100
NCCL_DEBUG=INFO log. B200 / GB200 are priced with 24 too, which the same search does not give them: on sm100 it starts
at 90 GB/s per channel (sm100SpeedArrayIntra) against 18 x 40.1 GB/s (SM100_NVLINK_BW): 8 channels, doubled twice: 32
(not measured here)."""

def nccl_sm_share(gpu: HardwareSpec) -> float:
    """Share of the GPU's SMs an in-node NCCL collective holds while a GEMM runs beside it: the GEMM's thread blocks
    get the other SMs, so for as long as the two overlap the GEMM runs at 1 - share of its speed (schedule/compose.py
    gemm_window_exposed_s). NCCL_NVSWITCH_RING_CTAS over the GPU's SMs (HardwareSpec.streaming_multiprocessors, stated
    in the hardware YAML for NVSwitch parts: A100 108, H100 / H200 / GH200 132, B200 / GB200 148); 0 where the preset
    does not state them (PCIe boards, AMD parts: no ring of 24 channels, no contention priced)."""
    sms = gpu.streaming_multiprocessors
    return NCCL_NVSWITCH_RING_CTAS / sms if sms > 0 else 0.0


SP_REGATHER_SUFFIX = ".bwd_regather"
"""Name suffix of the backward re-gather of a column-parallel linear's sequence-parallel input."""


def sp_gathered_gemm(fwd: list[Op], i: int) -> Op | None:
    """The column-parallel GEMM whose input the sequence-parallel all-gather fwd[i] gathers (layer_ops.tp_enter:
    a TP all-gather right before a GEMM), else None."""
    op = fwd[i]
    if op.op_class != "allgather" or op.collective is None or op.collective.group != "tp" or op.phase != "fwd":
        return None
    if op.tags.get("bwd_class"):  # a gather with a backward of its own (moe_ops.megatron_deepspeed_moe_ops)
        return None
    nxt = fwd[i + 1] if i + 1 < len(fwd) else None
    return nxt if nxt is not None and nxt.op_class == "gemm" and nxt.collective is None else None


def sp_column_backward(gather: Op, gemm: Op) -> tuple[Op, Op, Op]:
    """(re-gather, GEMM backward, grad-input reduce-scatter) of a column-parallel linear under sequence
    parallelism, as Megatron runs them (LinearWithGradAccumulationAndAsyncCommunication.backward, megatron/mpu/
    layers.py since the sequence-parallel merge 7f9a48b, 2022-05; megatron/core/tensor_parallel/layers.py today;
    Transformer Engine's Linear / LayerNormLinear backward does the same with ub_bulk_dgrad / ub_bulk_wgrad under
    --tp-comm-overlap): forward saved only the rank's 1/tp sequence shard, so backward all-gathers it again,
    asynchronously, launched before the grad-input GEMM and waited for before the weight-grad GEMM (tag
    overlap=dgrad); then the grad input is reduce-scattered asynchronously, launched before the weight-grad GEMM
    and waited for after it (overlap=wgrad). `window` names the GEMM whose dgrad / wgrad half hides each one
    (schedule/compose.py); the gather's `sm_share` tag (layer_ops.tp_enter) says how much of the GPU the NCCL
    kernel takes from that GEMM while they overlap.

    That overlap needs the collective's kernel to reach the GPU before the GEMM: Megatron has required
    CUDA_DEVICE_MAX_CONNECTIONS=1 (one hardware queue, launch order kept) for sequence parallelism and the async TP
    all-reduce since bdd9731 (2022-10-14, 'Remove noop used to try to force scheduling and check for environment
    variable instead'; today's arguments.py asserts it for TP or CP > 1 before Blackwell). Before it, with
    CUDA's default 8 queues, a 3 us no-op only tried to delay the GEMM; a GEMM that reaches the SMs first fills them
    and the collective waits for its CTAs to drain (serialized, the whole collective exposed). A job whose
    CUDA_DEVICE_MAX_CONNECTIONS is not 1 on a GPU before Blackwell (graph/launch_order.tp_launch_ordered; the 2022
    rows of validate/framework_era.py) has its gather tagged launch=unordered (layer_ops.tp_enter): both collectives
    then keep the gather's tags, no overlap tag, so schedule/compose.py puts the whole of each on the critical path,
    one after the other with the GEMM, and no SM share applies (they never run beside it)."""
    if gather.tags.get("launch") == UNORDERED_LAUNCH:
        regather_tags = reduce_tags = gather.tags
    else:
        tags = {**gather.tags, "window": gemm.name}
        regather_tags, reduce_tags = {**tags, "overlap": "dgrad"}, {**tags, "overlap": "wgrad"}
    nbytes = {"bytes": int(gather.dims["bytes"])}
    regather = Op(gather.name + SP_REGATHER_SUFFIX, "allgather", "bwd", nbytes, 0.0, 0.0, gather.dtype,
                  gather.collective, regather_tags)
    # an FP8 linear re-gathers its quantized input (payload=fp8, 1 B) but reduce-scatters a bf16 input gradient
    grad_bytes = {"bytes": nbytes["bytes"] * (2 if gather.tags.get("payload") == "fp8" else 1)}
    reduce = Op(gather.name, "reducescatter", "bwd", grad_bytes, 0.0, 0.0, gather.dtype, gather.collective,
                reduce_tags)
    return regather, backward_op(gemm), reduce


def _region_start(fwd: list[Op], i: int) -> int:
    """Index of the first op of the TP region closed by the collective fwd[i]: the op after the previous TP
    collective, or the block's start."""
    start = i
    while start > 0 and not (fwd[start - 1].collective is not None and fwd[start - 1].collective.group == "tp"):
        start -= 1
    return start


def region_column_gemm(fwd: list[Op], i: int) -> Op | None:
    """The column-parallel GEMM that opened the TP region closed by the all-reduce fwd[i]: the first GEMM after the
    previous TP collective (or the block's start), as Megatron's f / g operators bracket the region (Shoeybi et al.
    2019, Fig. 3: attention's QKV ... projection, the MLP's FC1 ... FC2). None where the region routes tokens (a MoE
    router: Megatron-Core needs SP for MoE under TP) or holds no GEMM."""
    region = fwd[_region_start(fwd, i):i]
    if any(op.op_class == "router" for op in region):
        return None
    return next((op for op in region if op.op_class == "gemm" and op.collective is None), None)


def column_grad_allreduces(fwd: list[Op]) -> dict[int, int]:
    """Index of each GEMM tagged grad_input=tp_allreduce -> index of the TP all-reduce that closes its region, whose
    tags (layer_ops.async_dgrad_tags: async or not, SM share) its grad-input all-reduce takes."""
    out: dict[int, int] = {}
    for i, op in enumerate(fwd):
        if op.op_class == "allreduce" and op.collective is not None and op.collective.group == "tp":
            for j in range(_region_start(fwd, i), i):
                if fwd[j].tags.get("grad_input") == GRAD_INPUT_ALLREDUCE:
                    out[j] = i
    return out


def column_grad_allreduce(gemm: Op, reduce: Op) -> Op:
    """The grad-input all-reduce of the column-parallel linear `gemm` (m x k input, the activation dtype's bytes),
    in the group of its region's all-reduce `reduce`: launched after the linear's grad-input GEMM and, where Megatron
    runs it async (reduce tagged dgrad=async), waited for after its weight-grad GEMM (async_dgrad_backward)."""
    nbytes = gemm.dims["m"] * gemm.dims["k"] * DTYPE_BYTES[gemm.dtype]
    window = gemm if reduce.tags.get("dgrad") == ASYNC_DGRAD else None
    return _grad_input_allreduce(gemm.name + ".dgrad_allreduce", nbytes, reduce, window)


def async_dgrad_backward(reduce: Op, gemm: Op | None) -> Op:
    """Backward of a non-SP TP all-reduce tagged dgrad=async (layer_ops.async_dgrad_tags): its conjugate is the
    grad-input all-reduce of the region's column-parallel linear (same T x h bytes), which Megatron launches
    asynchronously after that linear's grad-input GEMM and waits for after its weight-grad GEMM
    (LinearWithGradAccumulationAndAsyncCommunication.backward: `handle = torch.distributed.all_reduce(grad_input,
    async_op=True)`, 'we rely on CUDA_DEVICE_MAX_CONNECTIONS=1 to ensure that the all-reduce is scheduled before the
    weight gradient computation'; Transformer Engine's Linear: allreduce(dgrad, async_op=True) before its wgrad).
    Tagged overlap=wgrad with that GEMM as its window, priced as sequence parallelism's reduce-scatter is
    (schedule/compose.py gemm_window_exposed_s); untagged (serialized) where the region has no such GEMM."""
    return _grad_input_allreduce(reduce.name, reduce.dims["bytes"], reduce, gemm)


def _grad_input_allreduce(name: str, nbytes: float, reduce: Op, window: Op | None) -> Op:
    """A backward all-reduce of `nbytes` in the group of the forward all-reduce `reduce`, with its tags less dgrad;
    overlapping `window`'s weight-grad GEMM where one is given, else serialized."""
    tags = {k: v for k, v in reduce.tags.items() if k != "dgrad"}
    if window is not None:
        tags.update(overlap="wgrad", window=window.name)
    return Op(name, "allreduce", "bwd", {"bytes": int(nbytes)}, 0.0, 0.0, reduce.dtype, reduce.collective, tags)


def _op_backward(fwd: list[Op], i: int, columns: dict[int, int]) -> list[Op]:
    """Backward of fwd[i], not an SP column linear: a TP all-reduce whose region's column GEMMs bring their own
    grad-input all-reduces has none (column_grad_allreduces), nor one tagged backward=identity (the embedding's); a
    tagged GEMM is followed by its own."""
    op = fwd[i]
    if i in columns:
        return [backward_op(op), column_grad_allreduce(op, fwd[columns[i]])]
    if i in columns.values() or op.tags.get("backward") == IDENTITY_BACKWARD:
        return []
    if op.collective is not None and op.tags.get("dgrad") == ASYNC_DGRAD:
        return [async_dgrad_backward(op, region_column_gemm(fwd, i))]
    return [backward_op(op)]


def backward_pass(fwd: list[Op]) -> list[Op]:
    """The backward ops of `fwd` in reverse execution order; a sequence-parallel column-parallel linear's
    all-gather + GEMM become its re-gather, GEMM backward and reduce-scatter (sp_column_backward); a non-SP TP
    all-reduce becomes the grad-input all-reduce(s) of its region's column-parallel linear(s): one of its own bytes
    (async_dgrad_backward when tagged dgrad=async), or one per GEMM tagged grad_input=tp_allreduce."""
    out: list[Op] = []
    columns = column_grad_allreduces(fwd)
    i = len(fwd) - 1
    while i >= 0:
        if i >= 1 and sp_gathered_gemm(fwd, i - 1) is not None:  # the gather's GEMM is fwd[i]
            out.extend(sp_column_backward(fwd[i - 1], fwd[i]))
            i -= 2
            continue
        out.extend(_op_backward(fwd, i, columns))
        i -= 1
    return out


def backward_block(fwd: list[Op], granularity: str, modules: tuple[str, ...] = ("core_attn",),
                   te_norms: bool = False) -> tuple[Op, ...]:
    """Recomputed forward (if any), then the backward ops in reverse execution order."""
    return tuple(recompute_ops(fwd, granularity, modules, te_norms) + backward_pass(fwd))
