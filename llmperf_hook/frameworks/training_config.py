"""Stage [2] output: the framework-independent training configuration.

After this stage nothing knows which launcher or framework produced the job: framework differences are
fields here. Short parallel names inside (tp pp vpp cp dp ep etp), long names at the edges.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Mapping

from llmperf_hook.provenance import Source

Precision = Literal["fp32", "fp16", "bf16", "fp8"]
Normalization = Literal["LayerNorm", "RMSNorm"]
PositionEmbedding = Literal["learned_absolute", "rope", "none"]
RecomputeGranularity = Literal["none", "selective", "full"]
AttentionBackend = Literal["flash", "fused", "unfused", "auto"]


@dataclass(frozen=True)
class MoeDispatch:
    """How Megatron-Core moves and computes an MoE layer's tokens (megatron/core/transformer/moe/): the token
    dispatcher, the expert GEMM kernel, token dropping and the EP communication overlaps."""

    token_dispatcher: str | None = None
    """--moe-token-dispatcher-type: "allgather" (Megatron's default), "alltoall" or "flex"; None = the
    framework's own (DeepSpeed-MoE and Hugging Face models: an all-to-all of the top-k copies)."""
    flex_backend: str = "deepep"
    """--moe-flex-dispatcher-backend of the flex dispatcher: deepep (default), hybridep or ncclep."""
    grouped_gemm: bool = False
    """--moe-grouped-gemm: one grouped GEMM over all local experts (TEGroupedMLP) instead of one GEMM per
    expert (SequentialMLP)."""
    permute_fusion: bool = False
    """--moe-permute-fusion: Transformer Engine's fused permute / unpermute kernels."""
    capacity_factor: float | None = None
    """--moe-expert-capacity-factor: tokens an expert takes = ceil(tokens * topk / experts * factor); None =
    dropless."""
    pad_to_capacity: bool = False
    """--moe-pad-expert-input-to-capacity: every expert computes exactly its capacity (padding)."""
    overlap_ep_comm: bool = False
    """--overlap-moe-expert-parallel-comm: EP all-to-all hidden behind the other micro-batch's compute."""
    shared_expert_overlap: bool = False
    """--moe-shared-expert-overlap: shared experts run on a side stream during the dispatch / combine."""
    router_group_topk: int | None = None
    """--moe-router-group-topk with --moe-router-num-groups: experts chosen from at most this many groups
    (DeepSeek-V3's node-limited routing); None = unlimited."""
    router_num_groups: int | None = None
    """--moe-router-num-groups: expert groups of the group-limited router (None = no grouping)."""
    router_dtype: str | None = None
    """--moe-router-dtype fp32 / fp64: the routing probs' dtype (None = the activations'); the allgather and
    alltoall dispatchers reduce-scatter the expert outputs in it (token_dispatcher.py: .to(probs.dtype))."""


@dataclass(frozen=True)
class ModelShape:
    """The network being trained (a decoder-only transformer, dense or MoE)."""

    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    """Dense MLP width (for SwiGLU: the width of each of the two up projections)."""
    num_attention_heads: int
    num_query_groups: int
    """Key/value heads; equals num_attention_heads without GQA."""
    kv_channels: int
    """Per-head dimension (Megatron default hidden_size // num_attention_heads)."""
    seq_length: int
    vocab_size: int
    """Tokenizer vocabulary before padding."""
    padded_vocab_size: int
    """ceil(V / (make_vocab_size_divisible_by * TP)) * make_vocab_size_divisible_by * TP (Megatron)."""
    swiglu: bool = False
    normalization: Normalization = "LayerNorm"
    position_embedding: PositionEmbedding = "learned_absolute"
    untie_embeddings: bool = False
    """True when input embedding and LM head are separate weights."""
    add_bias_linear: bool = True
    """A bias on every linear layer (Megatron --add-bias-linear, its default; --disable-bias-linear turns it off)."""
    add_qkv_bias: bool = False
    """A bias on the query / key / value projection only, whatever add_bias_linear says: Megatron --add-qkv-bias
    (TransformerConfig.add_qkv_bias; attention.py builds linear_qkv with bias=add_bias_linear or add_qkv_bias, and
    arguments.py sets it whenever add_bias_linear is on), Qwen2's and Qwen2-MoE's q/k/v biases, GLM-4's
    attention_bias (frameworks/hf_config.linear_biases). Read through qkv_biased."""
    mlp_bias: bool | None = None
    """Whether the dense MLP's linears (and a transformers MoE block's experts and router) carry biases where that
    differs from add_bias_linear; None = as add_bias_linear says (every Megatron model). Hugging Face: Llama's
    attention_bias without mlp_bias (q, k, v and o_proj biased, LlamaMLP not), GPT-NeoX's attention_bias false
    (GPTNeoXMLP's nn.Linears keep their default bias). Read through mlp_biased."""
    separate_qkv: bool = False
    """Hugging Face modules that keep q_proj, k_proj and v_proj apart in a GELU layer (OPT, GPT-J): three linears (and
    biases) where GPT-2 / GPT-NeoX / BLOOM fuse one. transformers' SwiGLU families always keep them apart
    (graph/param_tensors.py); Megatron always fuses them."""
    attention_sinks: bool = False
    """A learned sink logit per attention head that joins every softmax row as one more column and takes probability
    mass without a value (gpt-oss: GptOssAttention.sinks; Megatron --softmax-type learnable:
    DotProductAttention.softmax_offset, Transformer Engine's softmax_type "learnable")."""
    zero_sink_logit: bool = False
    """Megatron --softmax-type off-by-one (Miller's "attention is off by one"): the same extra column with its logit
    fixed at 0 (DotProductAttention.softmax_offset = torch.zeros(heads per partition), a plain tensor, no parameter).
    Read with attention_sinks through softmax_sink."""
    num_experts: int = 0
    """0 for a dense model."""
    moe_router_topk: int = 2
    moe_ffn_hidden_size: int = 0
    """Per-expert MLP width (Megatron default: ffn_hidden_size)."""
    moe_layer_freq: int = 1
    """Every k-th layer is MoE (1 = all)."""
    moe_layer_pattern: tuple[int, ...] = ()
    """Per-layer pattern of --moe-layer-freq's list form (1 = MoE layer, else dense); () when moe_layer_freq applies."""
    max_position_embeddings: int | None = None
    """Size of the learned position table (Megatron --max-position-embeddings); None when not stated."""
    word_embed_proj_dim: int | None = None
    """Hugging Face OPT `word_embed_proj_dim` where it differs from hidden_size (facebook/opt-350m: 512 vs 1024): the
    word embedding and the tied LM head are that wide, and bias-free project_in / project_out linears map between it
    and hidden_size (transformers OPTDecoder). None = hidden_size wide, no projections."""
    make_vocab_size_divisible_by: int | None = None
    """Megatron's vocab padding unit (padded = multiple of this * TP); None = not padded (Hugging Face models)."""
    multi_latent_attention: bool = False
    """Megatron-Core --multi-latent-attention (DeepSeek-V2/V3 MLA): low-rank q / kv projections replace QKV."""
    q_lora_rank: int | None = None
    """MLA --q-lora-rank: width of the query's low-rank latent; None = one direct q projection (Megatron default)."""
    kv_lora_rank: int = 32
    """MLA --kv-lora-rank: width of the key/value latent (Megatron default 32)."""
    qk_head_dim: int = 128
    """MLA --qk-head-dim: per-head query/key width without the rope part (Megatron default 128)."""
    qk_pos_emb_head_dim: int = 64
    """MLA --qk-pos-emb-head-dim: per-head rope width of query and key, one shared rope key (Megatron default 64)."""
    v_head_dim: int = 128
    """MLA --v-head-dim: per-head value width; the output projection reads heads x v_head_dim (default 128)."""
    qk_layernorm: bool = False
    """Megatron --qk-layernorm; under MLA it adds the q latent norm (with q_lora_rank) and the kv latent norm."""
    mtp_num_layers: int = 0
    """Megatron --mtp-num-layers: multi-token prediction depths on the last pipeline stage (0 = none)."""
    moe_shared_expert_intermediate_size: int = 0
    """Megatron --moe-shared-expert-intermediate-size: width of the shared-expert MLP of every MoE layer (0 = none)."""
    moe_shared_expert_gate: bool = False
    """Megatron --moe-shared-expert-gate: a sigmoid gate (h weights) scales the shared experts' output."""
    moe_dispatch: MoeDispatch = field(default_factory=MoeDispatch)
    """Megatron-Core's token dispatcher and expert-kernel settings of the MoE layers."""

    @property
    def qkv_biased(self) -> bool:
        """The QKV projection(s) carry a bias: every linear does, or only they do (add_qkv_bias)."""
        return self.add_bias_linear or self.add_qkv_bias

    @property
    def softmax_sink(self) -> bool:
        """A sink column joins every softmax row: learned (attention_sinks) or fixed at 0 (zero_sink_logit)."""
        return self.attention_sinks or self.zero_sink_logit

    @property
    def mlp_biased(self) -> bool:
        """The MLP's linears carry biases: mlp_bias where a Hugging Face config sets it apart, else add_bias_linear."""
        return self.add_bias_linear if self.mlp_bias is None else self.mlp_bias


@dataclass(frozen=True)
class ParallelLayout:
    """Parallel degrees; rank order follows Megatron: tp innermost, then cp, dp, pp (order 'tp-cp-ep-dp-pp')."""

    tp: int = 1
    pp: int = 1
    vpp: int = 1
    """Virtual pipeline stages per pipeline rank (1 = no interleaving)."""
    cp: int = 1
    dp: int = 1
    ep: int = 1
    etp: int = 1
    """Expert tensor parallel size (Megatron --expert-tensor-parallel-size; defaults to tp). Megatron-DeepSpeed: tp
    with --enable-expert-tensor-parallelism, else 1 (DeepSpeed's experts whole on every TP rank)."""
    etp_follows_tp: bool = True
    """Expert TP changes with TP (Megatron's default, Megatron-DeepSpeed's --enable-expert-tensor-parallelism);
    False where the experts stay whole whatever the TP (Megatron-DeepSpeed without that flag): tune keeps etp."""
    sequence_parallel: bool = False
    decoder_first_pipeline_num_layers: int | None = None
    decoder_last_pipeline_num_layers: int | None = None
    account_for_embedding_in_pipeline_split: bool = False
    """Megatron --account-for-embedding-in-pipeline-split: the embedding counts as one layer when splitting."""
    account_for_loss_in_pipeline_split: bool = False
    """Megatron --account-for-loss-in-pipeline-split: the LM head/loss counts as one layer when splitting."""
    pipeline_layout: str | None = None
    """Megatron --pipeline-model-parallel-layout as given (modelled as an even split; see validation)."""
    microbatch_group_size: int | None = None
    """Megatron --microbatch-group-size-per-virtual-pipeline-stage: contiguous micro-batches per model chunk in the
    interleaved schedule (None = pipeline-model-parallel-size, Megatron's default)."""
    overlap_p2p_comm: bool = True
    """Megatron's overlap of pipeline send/recv in the interleaved schedule (on unless
    --no-overlap-p2p-communication); without it Megatron needs PP > 2 for virtual stages."""
    pp_partition_method: str | None = None
    """DeepSpeed PipelineModule partition_method of the bigscience Megatron-DeepSpeed fork's --pp-partition-method
    ('type:REGEX', 'uniform', 'parameters'); None = the microsoft fork's fixed 'type:transformer'."""

    @property
    def vpp_group(self) -> int:
        """Micro-batches the interleaved schedule runs through one model chunk before the next."""
        return self.microbatch_group_size or self.pp


@dataclass(frozen=True)
class BatchConfig:
    micro_batch_size: int
    global_batch_size: int
    num_microbatches: int
    """global_batch_size // (micro_batch_size * dp): gradient accumulation steps per optimizer step."""


@dataclass(frozen=True)
class RecomputeConfig:
    granularity: RecomputeGranularity = "none"
    method: Literal["uniform", "block"] | None = None
    num_layers: int | None = None
    """Layers recomputed per stage (block) or per chunk (uniform); None = all."""
    cpu_offloading: bool = False
    """Megatron --cpu-offloading (activations offloaded to the host; Megatron refuses it with pipeline parallelism
    and with recomputation)."""
    cpu_offloading_num_layers: int = 0
    """Megatron --cpu-offloading-num-layers (default 0; > 0 sets --cpu-offloading): layers whose saved activations
    Transformer Engine's CPU offload moves to pinned host memory (schedule/activations.cpu_offloaded_layers)."""
    distribute_saved_activations: bool = False
    """Megatron --distribute-saved-activations: full-recompute checkpoints split over the TP group (needs TP > 1,
    full granularity with a method, and no sequence parallelism)."""
    partition_activations: bool = False
    """Megatron-DeepSpeed --partition-activations (with --deepspeed-activation-checkpointing): DeepSpeed's
    checkpointing stores each full-recompute checkpoint split over the tensor-parallel group (1/TP per rank) and
    all-gathers it over TP before the recompute (deepspeed/runtime/activation_checkpointing/checkpointing.py).
    Recorded at any granularity (frameworks/ds_checkpointing.py: selective's attention checkpoint is priced as
    Megatron's own, none checkpoints nothing); read under full recompute only."""
    checkpoint_in_cpu: bool = False
    """Megatron-DeepSpeed --checkpoint-in-cpu: the full-recompute checkpoints are kept in host memory (copied out
    over PCIe in forward and back before the recompute); GPU memory holds none of them."""
    modules: tuple[str, ...] = ("core_attn",)
    """Megatron --recompute-modules (TransformerConfig default ["core_attn"]; the deprecated --moe-layer-recompute
    adds "moe"), kept at any granularity: what the selective recompute re-runs (schedule/activations.py)."""


@dataclass(frozen=True)
class OptimizerConfig:
    name: Literal["adam", "sgd"] = "adam"
    zero_stage: int = 0
    """DeepSpeed ZeRO stage 0-3. Megatron's distributed optimizer is `distributed_optimizer` (ZeRO-1-like)."""
    distributed_optimizer: bool = False
    fsdp: Literal["none", "torch_fsdp2", "megatron_fsdp"] = "none"
    """Megatron --use-torch-fsdp2 / --use-megatron-fsdp: priced through zero_stage (what they shard) with
    distributed_optimizer on, which they imply (frameworks/megatron.py fsdp_zero_stage)."""
    offload_optimizer: Literal["none", "cpu", "nvme"] = "none"
    offload_param: Literal["none", "cpu", "nvme"] = "none"
    overlap_grad_reduce: bool = False
    """Megatron --overlap-grad-reduce or DeepSpeed zero_optimization.overlap_comm."""
    overlap_param_gather: bool = False
    overlap_param_gather_with_optimizer_step: bool = False
    """Megatron --overlap-param-gather-with-optimizer-step: the first chunk's parameter all-gather starts inside the
    optimizer step; Megatron then builds every chunk's gradient buffer unbucketed (training.py disable_bucketing)."""
    tp_comm_overlap: bool = False
    grad_bucket_size_elems: int | None = None
    """Megatron --ddp-bucket-size or DeepSpeed reduce_bucket_size; None = framework default/unbucketed."""
    grad_num_buckets: int | None = None
    """Megatron --ddp-num-buckets: the overlapped gradient reduction in this many buckets of params // N elements
    each (megatron/training/training.py resolve_ddp_bucket_size); None = by grad_bucket_size_elems or the default."""
    allgather_bucket_size_elems: int | None = None
    contiguous_gradients: bool = True
    """DeepSpeed zero_optimization.contiguous_gradients (DeepSpeed's default True): gradients copied into the
    reduction buffers as they are produced; False keeps them as separate tensors (schedule/memory.zero_bucket_count)."""
    stage3_prefetch_bucket_size_elems: int | None = None
    stage3_max_live_parameters: int | None = None
    stage3_max_reuse_distance: int | None = None
    """DeepSpeed ZeRO-3: a parameter used again within this many elements of fetched modules stays gathered
    (graph/zero3_trace.py); None = DeepSpeed's 1e9."""
    nvme_param_buffer_elems: int = 100_000_000
    """DeepSpeed offload_param.buffer_size: elements of each NVMe swap buffer, which must hold the largest parameter
    partition (frameworks/deepspeed_nvme.py)."""
    nvme_param_max_in_cpu_elems: int = 1_000_000_000
    """DeepSpeed offload_param.max_in_cpu (offload_config.py, default 1e9): under offload_param nvme, the leading
    parameter sub-groups of a rank's partition up to this many elements are swapped in once, at the optimizer's
    construction, and stay in host memory (stage3.py _create_param_groups_fp16_flat_cpu_memory, _move_to_flat_buffer:
    'permanently to CPU'); only the rest is read from NVMe (schedule/host_memory.py)."""
    nvme_param_buffer_count: int = 5
    """DeepSpeed offload_param.buffer_count (offload_config.py, default 5): pinned NVMe swap buffers of
    nvme_param_buffer_elems each (schedule/host_memory.py)."""
    nvme_optimizer_buffer_count: int = 4
    """DeepSpeed offload_optimizer.buffer_count (offload_config.py, default 4): pinned fp32 swap buffers of the
    largest optimizer sub-group each (schedule/host_memory.py)."""
    offload_optimizer_pin_memory: bool = True
    """DeepSpeed offload_optimizer.pin_memory (offload_config.py, default True since v0.19.5, False before): the
    host buffers of the offloaded optimizer are page-locked, in torch's power-of-two blocks
    (schedule/host_memory.py)."""
    offload_param_pin_memory: bool = True
    """DeepSpeed offload_param.pin_memory (same default): zero.Init pins each parameter's partition as it moves it to
    the host (partition_parameters.py _partition_param), before ZeRO-3 copies them into its own pinned flat buffer
    (schedule/host_memory.py)."""
    native_pinned_memory: bool = False
    """DS_PIN_MEMORY_BACKEND=native (DeepSpeed >= 0.19.6, aa0e91b95): get_accelerator().pin_memory page-locks with
    posix_memalign + mlock at the requested size and frees on release, not through torch's caching host allocator
    (deepspeed/utils/pin_memory.py NativePinnedMemory)."""
    pin_cpu_grads: bool = True
    """Megatron --no-pin-cpu-grads clears it: HybridDeviceOptimizer's CPU fp32 gradients are pageable."""
    pin_cpu_params: bool = True
    """Megatron --no-pin-cpu-params clears it: HybridDeviceOptimizer's CPU fp32 parameters are pageable."""
    fp32_main_grads: bool = True
    """Megatron keeps fp32 main gradients (accumulate_allreduce_grads_in_fp32 / main_grads)."""
    precision_aware: bool = False
    """Megatron --use-precision-aware-optimizer: Transformer Engine's FusedAdam keeps the master weights and Adam's
    moments in the dtypes below (schedule/optimizer_state.py)."""
    main_params_dtype: str = "fp32"
    """Megatron --main-params-dtype (fp32 | fp16; arguments.py default fp32), read only with precision_aware."""
    exp_avg_dtype: str = "fp32"
    """Megatron --exp-avg-dtype (fp32 | fp16 | bf16 | fp8), read only with precision_aware."""
    exp_avg_sq_dtype: str = "fp32"
    """Megatron --exp-avg-sq-dtype (fp32 | fp16 | bf16 | fp8), read only with precision_aware."""
    fp8_param_gather: bool = False
    """Megatron --fp8-param-gather: with an fp8 format, Transformer Engine's linear layers hold fp8 primary weights
    (1 byte in the distributed optimizer's uint8 parameter buffer, all-gathered as such; graph/step_ops.py
    fp8_param_gather). Without an fp8 format it does nothing."""
    gradient_clipping: float = 0.0
    zero_hpz_partition_size: int = 1
    """DeepSpeed ZeRO++ hpZ (stage 3): ranks of the group holding a secondary copy of the 16-bit weights, which the
    backward all-gathers read instead of the whole data-parallel group; 1 = off."""
    zero_quantized_weights: bool = False
    """DeepSpeed ZeRO++ qwZ (stage 3): parameter all-gathers in int8 with fp32 block scales."""
    zero_quantized_gradients: bool = False
    """DeepSpeed ZeRO++ qgZ (stage 3): the gradient reduce-scatter as a two-hop int4 all-to-all (intra- then
    inter-node) when the data-parallel group spans nodes."""
    grad_accum_dtype: str | None = None
    """DeepSpeed data_types.grad_accum_dtype ("fp32" | "bf16" | "fp16"); None = the model's dtype (DeepSpeed's
    default)."""
    zero3_accum_cast_on_reduce: bool = True
    """DeepSpeed ZeRO-3 with a grad_accum_dtype wider than the model's casts each reduce-scattered gradient partition
    to it before partition_grads copies or adds it (stage3.py __avg_scatter_grads, v0.19.2 on); False: the job's
    release (v0.10.1-v0.19.1) keeps the partition in the model's dtype and widens it in that copy (graph/step_ops.py
    ZERO3_FP32_ACCUM_FIRST_BYTES_UNCAST). Set from the release by deepspeed_release.as_released."""
    zero3_comm_dtype_bucket: bool = True
    """DeepSpeed ZeRO-3 allocates its gradient (ipg) bucket in communication_data_type (stage3.py ipg_buckets, from
    ed5f73755 in v0.17.2); False: the job's release keeps it in the model's dtype and casts each gradient to the
    communication dtype before the reduce-scatter (__avg_scatter_grads). Priced by graph/zero3_grad_dtypes.py; set
    from the release by deepspeed_release.as_released."""
    zero0_bf16_accum_dtype: str | None = None
    """The gradient-accumulation dtype DeepSpeed's engine gives a bf16 model without ZeRO ("fp32" | "bf16"; the rule
    by release: deepspeed_engine_rules.zero0_bf16_accum_dtype), which picks its optimizer wrapper
    (_do_optimizer_sanity_check): BF16_Optimizer for fp32 under either engine, for bf16 under the PipelineEngine
    only (else DDP_BFLOAT16). BF16_Optimizer keeps a gradient buffer of the whole model in this dtype, all-reduced
    after the backward, partitions the fp32 master and the optimizer step over the data-parallel ranks and
    all-gathers the 16-bit weights (bf16_optimizer.py), as at ZeRO-1 (graph/step_ops.runs_bf16_optimizer). None: no
    BF16_Optimizer at stage 0 in this release; read only at ZeRO stage 0."""
    grad_comm_dtype: str | None = None
    """DeepSpeed communication_data_type: the dtype of the gradient reduction; None = llmperf's framework default
    (grad_bytes in graph/step_ops.py)."""
    offload_optimizer_ratio: float = 1.0
    """DeepSpeed offload_optimizer.ratio (ZeRO-3 partial offload): the share of the optimizer's sub-groups kept on
    the host; Megatron --optimizer-offload-fraction (HybridDeviceOptimizer, default 1.0): the share of the rank's
    optimizer parameters stepped on the host; 1.0 = everything offloaded."""
    distopt_instances: int = 1
    """Megatron --num-distributed-optimizer-instances (default 1): the distributed optimizer shards its state over
    dp x cp / N ranks (parallel_state.py intra_partial_data_parallel_size) and keeps N copies."""
    sub_group_size_elems: int = 1_000_000_000
    """DeepSpeed zero_optimization.sub_group_size: elements per optimizer sub-group of a rank's partition (the unit
    a partial offload assigns to the GPU or the host)."""
    zero3_list_param_gather: bool = False
    """DeepSpeed ZeRO-3 before v0.5.5: one list all-gather per parameter tensor, each with a Python loop and one
    copy per rank (graph/zero3_legacy.py); False = today's flat gathers. Set for runs of that era
    (validate/framework_era.py); no ds_config key carries it."""
    zero3_per_tensor_grad_reduce: bool = False
    """DeepSpeed ZeRO-3 before v0.6.0: one list reduce-scatter per parameter gradient, small ones included
    (graph/zero3_legacy.py); False = today's coalesced reduce-scatter. Set like zero3_list_param_gather."""
    master_weights: bool = True
    """False: the optimizer updates the 16-bit model parameters themselves, as a plain-torch script does that casts
    its model (model.to(torch.bfloat16), .half()) and builds a torch.optim optimizer over it: gradients and the
    optimizer's states are in the model's dtype and no fp32 master copy exists (frameworks/script_shape.py
    script_training). True: mixed precision with fp32 master weights (Megatron, DeepSpeed, torch autocast)."""
    torch_optimizer_impl: str = ""
    """The torch.optim Adam implementation the step runs: "foreach" (the CUDA default, multi-tensor kernels) or "fused"
    (fused=True); over the 16-bit model when master_weights is False, else over fp32 weights (a plain-torch fp32
    script; DeepSpeed stepping its fp32 partition with a client torch.optim.Adam / AdamW or the optimizer section's
    torch_adam). "" = the framework's own fused Adam (Megatron's apex / TE FusedAdam, DeepSpeed's FusedAdam), also
    assumed when the optimizer is not recognised (graph/step_ops.adam_bytes_per_param). "sgd": torch.optim.SGD without
    momentum (the Hugging Face Trainer's --optim sgd); "adam_8bit": bitsandbytes' 8-bit AdamW (--optim adamw_bnb_8bit,
    adamw_8bit, paged_adamw_8bit). A script's call is read for the rest (frameworks/torch_step_impl.py):
    "foreach_amsgrad", "fused_amsgrad", "sgd_momentum", "sgd_nesterov", "sgd_fused", "sgd_momentum_fused"
    (graph/step_ops.py TORCH_STEP_ACCESSES)."""
    torch_weight_decay: str = "decoupled"
    """How the torch.optim Adam step (torch_optimizer_impl "foreach") applies weight decay, a pass of its own
    (torch/optim/adam.py _multi_tensor_adam, torch 2.x, where AdamW is Adam(decoupled_weight_decay=True)):
    "decoupled" (AdamW with weight_decay != 0, AdamW's default 1e-2: _foreach_mul_(params, 1 - lr * wd)), "l2" (Adam
    with weight_decay != 0: _foreach_add(grads, params, alpha=wd)), "none" (weight_decay 0, Adam's default and the
    Trainer's --weight_decay default: skipped). Read from the script's optimizer call or the Trainer's flags;
    "decoupled" where not read. The fused kernel applies it in place (no bytes)."""
    grad_nan_check: bool = True
    """Megatron's DDP takes the L2 norm of every gradient bucket before reducing it to catch NaN / Inf
    (ddp_config.check_for_nan_in_grad = --check-for-nan-in-loss-and-grad, on unless
    --no-check-for-nan-in-loss-and-grad; param_and_grad_buffer.py check_grads; graph/megatron_step.py). Off under
    --fp16 with dynamic loss scaling (no --loss-scale): validate_args switches the check off there, the scaler's
    overflow check takes its place (arguments.py)."""
    grad_scale: Literal["dp", "tokens", "none"] = "dp"
    """The pass of Megatron's DDP that scales the whole gradient buffer (read and write) once per step: "dp" multiplies
    each bucket by 1 / (dp x cp) before reducing it (param_and_grad_buffer.py start_grad_sync; factor 1, no pass, at
    dp x cp 1); "tokens" under --calculate-per-token-loss (factor 1 there, distributed_data_parallel.py) divides it by
    the global batch's token count after the reduction, at any dp (finalize_model_grads.py: model_chunk
    .scale_gradients(1 / num_tokens)); "none" under --ddp-average-in-collective (ReduceOp.AVG)."""
    zero_grad_allreduce: bool = False
    """DeepSpeed ZeRO-1/2 all-reduces each gradient bucket and keeps its own partition (stage_1_and_2.py
    average_tensor: reduce_scatter false, or use_multi_rank_bucket_allreduce, the default since v0.12.4,
    allreduce_and_scatter; or without contiguous gradients, reduce_ipg_grads' buffered_reduce_fallback) instead of
    reducing each slice to its owner (reduce-scatter traffic); set from the ds_config and the job's DeepSpeed release
    (frameworks/deepspeed_release.py)."""
    zero_bucket_allreduce: bool = True
    """What zero_grad_allreduce is at ZeRO-2 for this job's ds_config and DeepSpeed release, whatever stage it runs
    (reduce_scatter false, use_multi_rank_bucket_allreduce on a release >= 0.12.4, or contiguous_gradients false):
    tune re-derives zero_grad_allreduce from it for a candidate that changes the stage, as DeepSpeed does for the
    rewritten ds_config."""
    zero1_bucket_allreduce: bool = True
    """The same at ZeRO-1, where releases 0.4.4-0.7.1 and (without MoE) 0.8.0-0.12.x also turn contiguous gradients
    off and so all-reduce (frameworks/deepspeed_release.py ZERO1_NONCONTIGUOUS_RELEASES)."""


@dataclass(frozen=True)
class TrainingConfig:
    """Everything stages [3]-[6] need, with the origin of each value in `sources` (keys = JSON key names)."""

    framework: str
    """"megatron" | "deepspeed" | "megatron-deepspeed" | "hf-deepspeed" | "torch"."""
    launcher: str
    world_size: int
    nnodes: int
    nproc_per_node: int
    model: ModelShape
    parallel: ParallelLayout
    batch: BatchConfig
    precision: Precision = "bf16"
    recompute: RecomputeConfig = field(default_factory=RecomputeConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    attention_backend: AttentionBackend = "flash"
    masked_softmax_fusion: bool = True
    """Unfused attention: Megatron's fused scale-mask-softmax kernel where its shape rules allow it (off with
    --no-masked-softmax-fusion: the PyTorch fallback always)."""
    softmax_in_fp32: bool | None = None
    """Unfused attention: the PyTorch fallback's softmax in fp32 (Megatron --attention-softmax-in-fp32, implied by
    query-key layer scaling); None = the framework's default."""
    query_key_layer_scaling: bool | None = None
    """Unfused attention: scores scaled by the layer number before the softmax (Megatron
    --apply-query-key-layer-scaling; Megatron-DeepSpeed's default, off with --no-query-key-layer-scaling); None =
    the framework's default."""
    bias_activation_fusion: bool = True
    """Megatron's fused bias-add + activation kernel (TransformerConfig.bias_activation_fusion: bias_gelu_impl /
    bias_swiglu_impl, mlp.py); False
    (--no-bias-gelu-fusion, --no-bias-swiglu-fusion with --swiglu) adds the FC1 bias in a kernel of its own when the
    layers have biases (for SwiGLU it also runs the activation as PyTorch's composite)."""
    gelu_approximate: Literal["tanh", "none"] = "tanh"
    """The GELU the MLP runs, in torch's names: "tanh" approximation (Megatron's fused bias_gelu_impl) or "none", the
    exact erf GELU (torch's F.gelu default); frameworks/script_gelu.py says which job runs which. The graph tags its
    gelu ops with it (graph/layer_ops.activation)."""
    bias_dropout_fusion: bool = True
    """Megatron's fused bias-dropout-add (fusions/fused_bias_dropout.py); False (--no-bias-dropout-fusion): bias
    add, dropout and residual add as separate kernels (_bias_dropout_add_func)."""
    hidden_dropout: float = 0.1
    """Megatron --hidden-dropout (default 0.1): with the unfused bias-dropout-add a probability of 0 runs no dropout
    kernel (torch's dropout returns its input)."""
    attention_dropout: float = 0.1
    """Megatron --attention-dropout (default 0.1). At 0 the unfused attention runs no dropout over its scores (torch's
    dropout returns its input); the graph still prices it (frameworks/step_flags.py warns)."""
    apply_rope_fusion: bool = True
    """Megatron's fused rotary-embedding kernel; False (--no-rope-fusion): PyTorch's rotate-half composite."""
    gradient_accumulation_fusion: bool = True
    """Megatron's wgrad GEMMs accumulate into main_grad themselves; False (--no-gradient-accumulation-fusion, Megatron
    DDP only): each micro-batch's weight gradients are added into main_grad by the DDP hook (main_grad.add_)."""
    fused_wgrad_return: Literal["none", "empty", "zeros"] = "zeros"
    """What a Megatron-LM linear returns to autograd as its weight gradient under --gradient-accumulation-fusion
    (it writes the product into main_grad itself; core/tensor_parallel/layers.py
    LinearWithGradAccumulationAndAsyncCommunication.backward): "zeros" since a96650b9b2 (2023-11-30) for the
    embedding weight shared with the LM head at pp 1 (language_module.py sets zero_out_wgrad; a zero-filled dummy,
    other weights an empty one), "empty" since 28766b55fb (2023-08, an uninitialised dummy for every weight), "none"
    before (grad_weight = None: the head adds nothing to the shared weight's autograd gradient). What the tied
    weight's gradient sum costs (graph/vocab_ops.weight_grad_sum_ops). Default: today's."""
    pipeline_schedule: Literal["1f1b", "interleaved", "none"] = "1f1b"
    sources: Mapping[str, Source] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    """One line per accepted-but-not-modelled setting."""
    deepspeed_pipeline_engine: bool = False
    """True when DeepSpeed's PipelineEngine runs the model (Megatron-DeepSpeed without --no-pipeline-parallel,
    or a DeepSpeed script with pipeline stages); it rejects ZeRO-2/3."""
    deepspeed_pipe_partitioned: bool = True
    """Whether that engine sends stage activations and gradients in 1/TP slices at TP > 1 (the ds_config's
    pipeline.pipe_partitioned / grad_partitioned, DeepSpeed's default true; False when the file sets both false)."""
    transformer_impl: str = "transformer_engine"
    """Megatron --transformer-impl (transformer_engine | local | inference_optimized); the local layers' attention
    has no context parallelism."""
    torch_linear_layers: bool = False
    """True when the script builds its network from torch.nn.Linear (transformers' models, and scripts that only take
    Megatron-style flags, as the CPU testbed's train_gpt.py), not from Megatron's own linear autograd functions: under
    DeepSpeed ZeRO-3 their bias adds leave the GEMM (graph/zero_layer_ops.py zero3_bias_add_ops). False where ZeRO-3
    keeps the fused GEMM: GPT-2's Conv1D, memory_efficient_linear false, an old release (deepspeed_release.
    zero3_splits_bias)."""

    fp8_recipe: str = "delayed"
    """Megatron --fp8-recipe (delayed, its default; tensorwise, mxfp8, blockwise): per-tensor recipes keep one fp8
    layout that Blackwell's GEMMs read both ways; mxfp8 / blockwise scale along rows and columns separately, so a
    weight keeps a rowwise and a columnwise copy on any GPU (schedule/memory.fp8_copy_bytes_per_param)."""
    bf16_layers_at_start: int = 0
    """Transformer layers an FP8 run keeps in bf16 at the start of the network, and bf16_layers_at_end at its end:
    Megatron --first-last-layers-bf16 with --num-layers-at-start-in-bf16 / --num-layers-at-end-in-bf16 (1 each by
    default; TransformerConfig; megatron/core/fp8_utils.py is_first_last_bf16_layer runs those global layer indices
    outside the fp8 autocast). 0 without the flag."""
    bf16_layers_at_end: int = 0
    parameter_transpose_cache: bool = True
    """False under Megatron --disable-parameter-transpose-cache: Transformer Engine re-quantizes each weight every
    micro-batch instead of caching its fp8 copies (is_first_microbatch is not passed)."""
    cross_entropy_fusion_impl: str = ""
    """Megatron --cross-entropy-loss-fusion with --cross-entropy-fusion-impl: "native" (fused_vocab_parallel_cross_
    entropy under torch.compile: one fp32 copy of the logits more than the unfused one, schedule/activations.py) or
    "te" (Transformer Engine's parallel_cross_entropy: no fp32 copy of the logits, the gradient written into them);
    "" = not fused."""
    deepspeed_moe_dense_dispatch: bool = False
    """Megatron-DeepSpeed MoE under a DeepSpeed release before v0.19.4 (deepspeed_release.SPARSE_MOE_DISPATCH_VERSION):
    MOELayer dispatches and combines with einsums over one-hot [S, E, C] tensors that autograd keeps."""
    wgrad_deferral_limit: int | None = None
    """Megatron --defer-embedding-wgrad-compute's --wgrad-deferral-limit: micro-batches whose output-layer weight
    gradient waits for the pipeline flush, their input and logits gradient kept until then (0 = all, Megatron's
    default; ModelParallelConfig); None without the flag."""
    cuda_device_max_connections: int = 1
    """The job's CUDA_DEVICE_MAX_CONNECTIONS (its environment): hardware work queues from the host to the GPU (CUDA
    Programming Guide, CUDA Environment Variables: 1 to 32, default 8). 1 keeps kernels in launch order, so the
    async TP collective Megatron launches before a GEMM reaches the SMs first and overlaps it; Megatron-LM requires
    it for TP or CP > 1 since bdd9731 (2022-10-14), on GPUs before Blackwell only since 50d847514d (2025-02-12).
    Default 1: a job that does not state it runs as Megatron requires. Any other value on a GPU before Blackwell:
    the overlap is not guaranteed and sequence parallelism's backward re-gather and reduce-scatter, and the async
    grad-input all-reduce, are priced serialized (graph/launch_order.py, graph/backward.sp_column_backward)."""

    async_tp_allreduce: bool = False
    """Megatron-LM's column-parallel linears all-reduce their input gradient asynchronously, beside their weight-grad
    GEMM, under TP > 1 without sequence parallelism (megatron/mpu/layers.py ColumnParallelLinearWithAsyncAllreduce
    since 16c90445, 2021-09-02; core/tensor_parallel/layers.py allreduce_dgrad today; Transformer Engine's Linear
    the same). --no-async-tensor-model-parallel-allreduce turned it off until Megatron-LM 5fffdfc737 (2024-04-29)
    made it 'DEPRECATED. This flag is ignored.': ignored here (frameworks/megatron_rules.ignored_flag_warnings).
    Megatron-DeepSpeed turns it off under --deepspeed (megatron/arguments.py validate_args since f90b8877,
    2023-07-12; its layers had no async path before), and the other frameworks have none: False, the all-reduce
    serialized (graph/backward.py)."""

    @property
    def tp_comm_ordered(self) -> bool:
        """Kernels reach the GPU in launch order (CUDA_DEVICE_MAX_CONNECTIONS=1): Megatron's async TP collectives
        overlap the GEMM launched after them. Blackwell and newer GPUs overlap them without it: the graph decides with
        the GPU (graph/launch_order.tp_launch_ordered)."""
        return self.cuda_device_max_connections == 1

    def __post_init__(self) -> None:
        p = self.parallel
        assert p.tp * p.pp * p.cp * p.dp == self.world_size, (p, self.world_size)
