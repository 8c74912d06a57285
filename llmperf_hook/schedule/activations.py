"""Activation memory per transformer layer and micro-batch: Korthikanti et al. 2022 (arXiv 2205.05198).

Section 4 counts, with 2-byte activations and 1-byte dropout masks, for s = sequence, b = micro-batch,
h = hidden, a = heads, t = tensor-parallel size (Table 2):

    no parallelism              sbh (34 + 5as/h)                                  (Eq. 1)
    tensor parallel             sbh (10 + 24/t + 5as/(ht))                        (Eq. 2)
    tensor + sequence parallel  sbh (34/t + 5as/(ht))                             (Eq. 3)
    tensor + selective recomp.  sbh (10 + 24/t)
    t + s + selective recomp.   sbh (34/t)
    full recompute              2sbh (only each layer's input is kept; /t with SP)

The 34 is the sum of: attention 11sbh (QKV input 2, Q and K 4, V 2, projection input 2, dropout mask 1) +
5as^2b (softmax output 2, dropout mask 1, dropout output 2); MLP 19sbh (fc1 input 2, GeLU input 8, fc2 input 8,
dropout mask 1); two LayerNorm inputs 4sbh. `layer_activation_bytes` recomputes the same terms for general
shapes (GQA: K and V scale with kv_heads/heads; SwiGLU: fc1 output 2f wide; any ffn width f), so the paper's
numbers come out exactly for GPT shapes (f = 4h, no GQA). Flash attention keeps no s x s tensors (only the
log-sum-exp, 4 bytes per row and head) in place of the 5as^2b scores.
Context parallelism divides s by cp. Megatron-LM's selective recompute re-runs the modules --recompute-modules names
(core_attn by default: the scores above); mlp, moe, moe_act and shared_experts drop their MLP tensors (mlp_terms).

FP8 (Megatron with Transformer Engine layers): each fp8 linear layer saves the fp8 cast of its GEMM input, one
byte (gemm_input_bytes), so the QKV and FC1 inputs (the fused norms' outputs) and the FC2 input drop to 1 byte,
while the norms' inputs, Q/K/V and the attention output (kept by the flash/cuDNN kernel, beside the projection's
fp8 copy) and the SwiGLU input stay bf16: 34 sbh -> 29.5 sbh for Llama-3 8B (tests/schedule/test_fp8_memory.py).
"""

from __future__ import annotations

from dataclasses import replace

from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.graph.attention_core_ops import FP32_BYTES, softmax_precision, torch_softmax_path
from llmperf_hook.graph.params import is_moe_layer, mtp_layer_is_moe

MASK_BYTES = 1


def act_bytes(cfg: TrainingConfig) -> int:
    """Bytes per stored activation: 2 in mixed precision (the paper's assumption; fp8 keeps bf16 activations
    between layers, only the GEMM inputs TE saves are fp8: gemm_input_bytes), 4 when training in fp32."""
    return 4 if cfg.precision == "fp32" else 2


def layer_terms(cfg: TrainingConfig) -> tuple[float, float, float]:
    """(replicated-across-TP bytes, TP-split bytes, attention-score bytes) of one layer, one micro-batch."""
    m = cfg.model
    s, b, h = m.seq_length / cfg.parallel.cp, cfg.batch.micro_batch_size, m.hidden_size
    kv = m.num_query_groups / m.num_attention_heads
    sbh = s * b * h
    ab = act_bytes(cfg)  # the paper's 2 bytes, per precision
    gb = gemm_input_bytes(cfg)  # what a linear layer saves of its input: ab, or 1 under Transformer Engine fp8
    ln_inputs = 2 * ab * sbh
    qkv_input, dropout_masks = gb * sbh, 2 * hidden_mask_bytes(cfg) * sbh
    mlp_replicated, mlp_split = mlp_terms(cfg)
    replicated = ln_inputs + qkv_input + mlp_replicated + dropout_masks  # = 10 sbh
    qkv = ab * sbh * (1 + 2 * kv)  # Q, K, V (Q and K for QK^T, V for AV)
    proj_input = (gb + attention_output_bytes(cfg)) * sbh  # what the projection saves, and the attention beside it
    if m.multi_latent_attention:
        latents, qkv, proj_input = mla_terms(cfg)
        replicated += latents
    split = qkv + proj_input + mlp_split  # = 24 sbh for f = 4h, MHA, GeLU
    a = m.num_attention_heads
    scores = stored_score_bytes(cfg) * a * s * s * b  # = 5 a s^2 b in mixed precision
    return replicated, split, scores


def recomputes(cfg: TrainingConfig, module: str) -> bool:
    """Whether the selective recompute re-runs `module` in backward instead of keeping what it saved: Megatron-LM's
    --recompute-modules (RecomputeConfig.modules; core_attn by default); Megatron-DeepSpeed's selective
    granularity, which has no such flag, the attention core only."""
    r = cfg.recompute
    if r.granularity != "selective":
        return False
    return module in r.modules if cfg.framework == "megatron" else module == "core_attn"


def mlp_terms(cfg: TrainingConfig) -> tuple[float, float]:
    """(replicated, TP-split) bytes the layer's MLP keeps for one micro-batch: its saved input (a dense MLP's fc1
    saves the fused norm's output; in an MoE layer the router saves the pre-MLP TENorm's output), an MoE's routed
    copies, and per MLP the activation's input (fc1 output, bf16: fused_bias_swiglu saves it) and fc2's input.

    Megatron's selective recompute drops what a module it re-runs saved (transformer_layer.py, moe/): `mlp`
    checkpoints a dense MLP from its input (tensor_parallel.checkpoint / te_checkpoint of self.mlp on the pre-MLP
    norm output: under Transformer Engine the norm is fused into fc1, so that input is the residual, which the
    norm's saved input already counts; otherwise the norm's output stays); `moe` checkpoints the whole MoE layer
    from its input, the router's (moe_layer.py moe_layer_recompute); `moe_act` re-runs the experts' activation
    (experts.py CheckpointWithoutOutput: fc2's input discarded, fc1's output kept); `shared_experts` checkpoints the
    shared experts' MLP."""
    m = cfg.model
    s, b = m.seq_length / cfg.parallel.cp, cfg.batch.micro_batch_size
    sbh = s * b * m.hidden_size
    ab, gb = act_bytes(cfg), gemm_input_bytes(cfg)
    swiglu = 2 if m.swiglu else 1

    def mlp(f: float, fc2_input: bool = True) -> float:
        return ab * s * b * f * swiglu + (gb * s * b * f if fc2_input else 0.0)

    if not m.num_experts:
        if recomputes(cfg, "mlp"):
            return (0.0 if cfg.transformer_impl == "transformer_engine" else ab * sbh), 0.0
        return gb * sbh, mlp(m.ffn_hidden_size)
    router_input = ab * sbh
    if recomputes(cfg, "moe"):
        return router_input, 0.0
    share = moe_copy_share(cfg)
    routed = (m.moe_ffn_hidden_size or m.ffn_hidden_size) * m.moe_router_topk * share
    replicated = router_input
    if cfg.framework == "megatron":
        # The experts' FC1 saves its input for the weight gradient: the routed copies, k x ETP x (sbh / t under SP)
        # per rank (graph/moe_ops.py)
        replicated += gb * sbh * m.moe_router_topk * max(1, cfg.parallel.etp) * share
    elif cfg.framework == "megatron-deepspeed":
        replicated = deepspeed_moe_saved_bytes(cfg)
    split = mlp(routed, fc2_input=not recomputes(cfg, "moe_act"))
    if m.moe_shared_expert_intermediate_size and not recomputes(cfg, "shared_experts"):
        split += mlp(m.moe_shared_expert_intermediate_size)  # shared experts: one more MLP, TP-split
    return replicated, split


def deepspeed_moe_saved_bytes(cfg: TrainingConfig) -> float:
    """What Megatron-DeepSpeed's MoE layer (deepspeed.moe.layer.MoE -> sharded_moe.MOELayer, DeepSpeed v0.19.4 on:
    #8195 619e3199d) keeps for its backward besides the experts' intermediates (mlp_terms' split term), one
    micro-batch, in sbh units (n = s b tokens, /t under SP as layer_activation_bytes divides the replicated term):
    - the gate's fp32 copy of its input: TopKGate.forward `input_fp32 = input.float()`, F.linear saves it: 4;
    - the experts' FC1 input, the k routed copies of every token (capacity factor 1): _sparse_encode's [E, C, M]
      buffer, cut to 1/TP per rank by drop_tokens before the dispatch all-to-all, re-gathered whole by gather_tokens
      after it with --enable-expert-tensor-parallelism (etp = TP): a k etp / t;
    - _sparse_decode's `routed * gates.unsqueeze(-1)` saves `routed`, the k expert outputs of every token (after
      gather_tokens on every TP rank): a k.
    The bf16 norm output itself is kept by none of them (index_select keeps only its index). DeepSpeed up to
    v0.19.3 (TrainingConfig.deepspeed_moe_dense_dispatch) keeps the same, the combine einsum's expert_output in
    place of `routed`, plus dense_dispatch_bytes."""
    m, p = cfg.model, cfg.parallel
    sbh = m.seq_length / p.cp * cfg.batch.micro_batch_size * m.hidden_size
    k, ab = m.moe_router_topk, act_bytes(cfg)
    dense = dense_dispatch_bytes(cfg) if cfg.deepspeed_moe_dense_dispatch else 0.0
    return sbh * (FP32_BYTES + ab * k * max(1, p.etp) / p.tp + ab * k) + dense


def dense_dispatch_bytes(cfg: TrainingConfig) -> float:
    """DeepSpeed v0.15-v0.19.3 MOELayer.forward (sharded_moe.py at v0.19.3): `einsum("sec,sm->ecm",
    dispatch_mask.type_as(input), reshaped_input)` keeps the 16-bit dispatch mask (the input's gradient needs it),
    `einsum("sec,ecm->sm", combine_weights.type_as(input), expert_output)` the 16-bit combine weights; each is
    [S, E x C] with E x C = k S slots (top-1 capacity S/E, top-2 2S/E, capacity factor 1): 2 a k S^2. The gate's
    `einsum("se,sc->sec", gates, locations_sc)` per route keeps its fp32 one-hot locations [S, C]: 4 k S (k S / E)."""
    m = cfg.model
    n, k = m.seq_length / cfg.parallel.cp * cfg.batch.micro_batch_size, m.moe_router_topk
    return 2 * act_bytes(cfg) * k * n * n + FP32_BYTES * k * n * (k * n / max(1, m.num_experts))


def fp8_saves_gemm_inputs(cfg: TrainingConfig) -> bool:
    """Megatron's Transformer Engine layers under --fp8-format (Megatron-DeepSpeed's --fp8-hybrid/--fp8-e4m3 with
    TE too): each fp8 linear layer saves its input for the weight-gradient GEMM as the fp8 cast it ran the GEMM on."""
    return cfg.precision == "fp8" and "megatron" in cfg.framework and cfg.transformer_impl == "transformer_engine"


def gemm_input_bytes(cfg: TrainingConfig) -> int:
    """Bytes per element a linear layer keeps of its input for the weight gradient. Under fp8 Transformer Engine
    saves the fp8 cast, one byte, and frees the bf16 one (TransformerEngine 4329ff84 = 2.17, the revision Megatron-LM
    d98e8a6 pins in pyproject.toml; pytorch/module/linear.py L373-389: input_quantizer(inputmat) with columnwise
    usage, L558-565: 'Discard row-wise data since it is not needed in backward pass', saved_inputmat = inputmat;
    layernorm_linear.py L232-246: the norm writes ln_out in fp8 (with_quantized_norm), L448-458 keeps its column-wise
    data, L492-502 saves it beside the norm's bf16 input `inputmat`, which ln_inputs count). Under sequence
    parallelism with per-tensor scaling it keeps the row-wise fp8 shard to re-gather: still one byte."""
    return 1 if fp8_saves_gemm_inputs(cfg) else act_bytes(cfg)


def attention_output_bytes(cfg: TrainingConfig) -> int:
    """Bytes per element the attention keeps of its own output beside the output projection's saved input
    (gemm_input_bytes). In bf16 the two are one tensor, the flash/cuDNN kernel's saved `out` (Korthikanti's 2sbh):
    nothing more. Under fp8 the projection saves its own fp8 cast (1 byte) while the attention keeps its bf16 output
    (attention/dot_product_attention/backends.py FusedAttnFunc.forward L1538: f16_tensors = (q, k, v, out_f16), saved
    at L1560-1570; flash-attn's _flash_attn_forward saves out too): 1 + 2. Megatron's unfused attention saves its
    probabilities and V, not its output: only the fp8 copy remains."""
    return act_bytes(cfg) if fp8_saves_gemm_inputs(cfg) and cfg.attention_backend != "unfused" else 0


def hidden_mask_bytes(cfg: TrainingConfig) -> int:
    """Bytes per element of a hidden-state dropout mask (the two after attention and MLP, the embedding's): 1, or
    none at --hidden-dropout 0, where torch's dropout returns its input without drawing a mask
    (aten/src/ATen/native/Dropout.cpp: `if (p == 0 || !train ...) return input`), as Megatron's bias-dropout-add
    and embedding dropout call it. Megatron's Llama recipes train at 0."""
    return MASK_BYTES if cfg.hidden_dropout > 0 else 0


def stored_score_bytes(cfg: TrainingConfig) -> float:
    """Bytes per score a layer keeps for its backward: the softmax output (for the softmax's backward), the dropout
    mask and the dropout output (the AV product's input): Korthikanti et al.'s 5 in mixed precision. At
    --attention-dropout 0 there is no dropout (torch returns its input), and the AV product keeps the softmax
    output itself, or its bf16 cast where the softmax ran in fp32."""
    f, ab = softmax_output_bytes(cfg), act_bytes(cfg)
    if cfg.attention_dropout > 0:
        return f + ab + MASK_BYTES
    return f + (ab if f != ab else 0.0)


def softmax_output_bytes(cfg: TrainingConfig) -> float:
    """Bytes per score of the saved softmax output: the PyTorch fallback in fp32 saves its fp32 output (the cast
    back to bf16 saves nothing; graph/attention_core_ops.torch_softmax_path decides which path runs)."""
    return FP32_BYTES if torch_softmax_path(cfg) and softmax_precision(cfg)[1] else act_bytes(cfg)


def score_elements(cfg: TrainingConfig) -> float:
    """a s^2 b / t: attention scores of one layer and micro-batch on a rank."""
    m, t = cfg.model, cfg.parallel.tp
    s = m.seq_length / cfg.parallel.cp
    return m.num_attention_heads / t * s * m.seq_length * cfg.batch.micro_batch_size


def softmax_backward_extra_bytes(cfg: TrainingConfig) -> float:
    """Bytes alive during one layer's attention backward on the PyTorch softmax path beyond its stored scores.

    With f the softmax's bytes per score (4 in fp32, softmax_output_bytes) and a the activations': the layer stores
    the softmax output (f), the dropout mask (1) and the dropout output (a) (layer_terms). The backward frees the
    dropout's two once the AV product's and the dropout's backward have run; the softmax backward then holds its
    saved output, the incoming gradient (cast to f bytes), `tmp = grad * output` and the input gradient at once
    (aten/src/ATen/native/cuda/SoftMax.cu softmax_backward_cuda_out): 4f per score against the f + a + 1 stored
    (stored_score_bytes), (3f - a - 1) a s^2 b more (9 per score in fp32). Full recompute: the rematerialised layer's (recompute_working_bytes
    holds its stored part); selective recompute stores no scores, so all 4f. The fused kernel computes its
    gradient in place (scaled_masked_softmax backward writes output_grads): nothing extra."""
    if not torch_softmax_path(cfg):
        return 0.0
    f = softmax_output_bytes(cfg)
    per_score = 4 * f if recomputes(cfg, "core_attn") else 4 * f - stored_score_bytes(cfg)
    return per_score * score_elements(cfg)


def score_buffer_bytes(cfg: TrainingConfig) -> float:
    """Megatron's unfused attention writes QK^T with baddbmm into a global buffer it keeps for the whole run
    (megatron-core transformer/dot_product_attention.py and Megatron-DeepSpeed CoreAttention:
    parallel_state.get_global_memory_buffer().get_tensor(..., "mpu")): a s^2 b / t activations, allocated once."""
    if cfg.attention_backend != "unfused" or "megatron" not in cfg.framework:
        return 0.0
    return act_bytes(cfg) * score_elements(cfg)


def moe_copy_share(cfg: TrainingConfig) -> float:
    """Routed copies kept per top-k copy under --moe-expert-capacity-factor f: f when padded to capacity,
    min(1, f) when dropping (balanced routing, graph/moe_ops.copies_per_rank without its ceil); 1 dropless."""
    d = cfg.model.moe_dispatch
    if d.capacity_factor is None or cfg.framework != "megatron":
        return 1.0
    return d.capacity_factor if d.pad_to_capacity else min(1.0, d.capacity_factor)


def mla_terms(cfg: TrainingConfig) -> tuple[float, float, float]:
    """(latent bytes, Q K V bytes, output-projection input bytes) of multi-latent attention, one micro-batch.

    The up projections save their inputs, the q latent (with --q-lora-rank) and the kv latent, plus the rope key;
    the down projections run whole on every TP rank (graph/mla_ops.py), so these are replicated without
    sequence parallelism. The latent norms (--qk-layernorm) save their inputs too. Q and K are d_qk + d_rope wide
    per head, V and the projection input d_v, all split over TP."""
    m = cfg.model
    sb, ab, n = m.seq_length / cfg.parallel.cp * cfg.batch.micro_batch_size, act_bytes(cfg), m.num_attention_heads
    q_lora = m.q_lora_rank or 0
    latents = ab * sb * (q_lora + m.kv_lora_rank + m.qk_pos_emb_head_dim)
    if m.qk_layernorm:
        latents += ab * sb * (q_lora + m.kv_lora_rank)
    qkv = ab * sb * n * (2 * (m.qk_head_dim + m.qk_pos_emb_head_dim) + m.v_head_dim)
    return latents, qkv, ab * sb * n * m.v_head_dim


def mtp_activation_bytes(cfg: TrainingConfig) -> float:
    """Last stage, the micro-batch in backward: each MTP depth stores a transformer layer's activations, its
    enorm/hnorm inputs and the eh_proj input (2h + 2h, /t under SP), the embedding dropout mask and its own
    logits and loss (multi_token_prediction.py; output_activation_bytes per depth, less the native fused loss's
    backward buffer, a transient of one loss's backward at a time that output_activation_bytes already holds once).
    Its layer is of the decoder's last layer's kind (graph/params.mtp_layer_is_moe)."""
    m, p = cfg.model, cfg.parallel
    if not m.mtp_num_layers:
        return 0.0
    sbh = m.seq_length / p.cp * cfg.batch.micro_batch_size * m.hidden_size
    around = (4 * act_bytes(cfg) * sbh + hidden_mask_bytes(cfg) * sbh) / (p.tp if p.sequence_parallel else 1)
    layer = layers_bytes(cfg, 1, 1.0 if mtp_layer_is_moe(cfg) else 0.0)
    return m.mtp_num_layers * (layer + around + output_activation_bytes(cfg) - native_fused_loss_extra_bytes(cfg))


def layer_activation_bytes(cfg: TrainingConfig) -> float:
    """Stored activations of one layer for one micro-batch on one rank (Table 2 row for this config)."""
    t, sp = cfg.parallel.tp, cfg.parallel.sequence_parallel
    replicated, split, scores = layer_terms(cfg)
    m = cfg.model
    s, b, h = m.seq_length / cfg.parallel.cp, cfg.batch.micro_batch_size, m.hidden_size
    granularity = cfg.recompute.granularity
    if granularity == "full":
        return act_bytes(cfg) * s * b * h / (t if sp else 1)
    base = (replicated + split) / t if sp else replicated + split / t
    if cfg.attention_backend == "unfused" and not recomputes(cfg, "core_attn"):
        return base + scores / t
    # Flash/fused attention (or selective recompute) keeps only the fp32 log-sum-exp per row and head.
    lse = 4 * m.num_attention_heads / t * s * b if cfg.attention_backend != "unfused" else 0.0
    return base + lse


def _without_recompute(cfg: TrainingConfig) -> TrainingConfig:
    return replace(cfg, recompute=replace(cfg.recompute, granularity="none"))


def chunk_layer_bytes(cfg: TrainingConfig, chunk_layers: int, moe_layers: int | None = None) -> float:
    """Stored activations of a chunk of `chunk_layers` layers for one micro-batch, `moe_layers` of them MoE layers
    (None: all of an MoE model's), by Megatron's recompute method: full/uniform keeps the input of every group of
    --recompute-num-layers layers (2sbh each, whatever the layer); full/block recomputes the first
    --recompute-num-layers layers of the chunk and stores the others in full (megatron/core/transformer/
    transformer_block.py, _checkpointed_forward; those are taken in the chunk's mix of layer kinds)."""
    r = cfg.recompute
    moe_share = 1.0 if moe_layers is None or not chunk_layers else moe_layers / chunk_layers
    if r.granularity != "full":
        return layers_bytes(cfg, chunk_layers, moe_share)
    checkpoint = layer_activation_bytes(cfg)  # 2sbh (/t under SP): one layer input
    n = max(1, r.num_layers or 1)
    if r.method == "block" and r.num_layers is not None:
        n = min(n, chunk_layers)
        return n * checkpoint + layers_bytes(_without_recompute(cfg), chunk_layers - n, moe_share)
    return -(-chunk_layers // n) * checkpoint


def layers_bytes(cfg: TrainingConfig, layers: float, moe_share: float = 1.0) -> float:
    """Stored activations of `layers` layers (one micro-batch), `moe_share` of them MoE layers in an MoE model: the
    others are --moe-layer-freq's dense layers, a dense MLP of --ffn-hidden-size (graph/params.is_moe_layer)."""
    if not cfg.model.num_experts or moe_share >= 1.0:
        return layers * layer_activation_bytes(cfg)
    dense = layer_activation_bytes(dense_layer_config(cfg))
    return layers * (moe_share * layer_activation_bytes(cfg) + (1.0 - moe_share) * dense)


def dense_layer_config(cfg: TrainingConfig) -> TrainingConfig:
    """The job's dense layers as layer_terms reads them: the model without experts."""
    return replace(cfg, model=replace(cfg.model, num_experts=0))


def _layer_kinds(cfg: TrainingConfig) -> list[TrainingConfig]:
    """The job's layer kinds: its own layer, and the dense one too in an MoE model with --moe-layer-freq's dense
    layers (graph/params.is_moe_layer)."""
    dense = cfg.model.num_experts and any(not is_moe_layer(cfg, i) for i in range(cfg.model.num_layers))
    return [cfg, dense_layer_config(cfg)] if dense else [cfg]


def recompute_working_bytes(cfg: TrainingConfig) -> float:
    """Full recompute: during backward one group of --recompute-num-layers layers is rematerialised at a time
    (one micro-batch); block method: one layer. Selective recompute of MLP or MoE modules: what they dropped, alive
    again during one layer's backward (mlp_terms; the attention core's is softmax_backward_extra_bytes'). In an MoE
    model with dense layers, the larger of the two kinds."""
    r = cfg.recompute
    if r.granularity == "selective":
        attention_only = replace(r, modules=tuple(m for m in r.modules if m == "core_attn"))
        return max(layer_activation_bytes(replace(c, recompute=attention_only)) - layer_activation_bytes(c)
                   for c in _layer_kinds(cfg))
    if r.granularity != "full":
        return 0.0
    group = 1 if r.method == "block" else max(1, r.num_layers or 1)
    return group * rematerialised_layer_bytes(cfg)


def rematerialised_layer_bytes(cfg: TrainingConfig) -> float:
    """One layer re-run by full recompute, all it stores without recompute; of an MoE model with dense layers the
    larger kind (a bound: which layer is re-run when is not followed)."""
    return max(layer_activation_bytes(_without_recompute(c)) for c in _layer_kinds(cfg))


TOKEN_ID_BYTES = 8
"""int64 token ids (Megatron's get_batch and Hugging Face's input_ids are torch.long)."""


def embedding_activation_bytes(cfg: TrainingConfig) -> float:
    """First stage, per micro-batch: the input-embedding dropout mask, sbh (/t under SP) (paper Sec. 4.2.3), and
    the token ids the embedding keeps for its backward, 8sb on every TP rank (F.embedding saves its indices;
    Megatron's VocabParallelEmbedding saves its masked copy of them; theoretical_memory_usage.py counts the same
    8sb per in-flight micro-batch as 'Input to embedding')."""
    m, p = cfg.model, cfg.parallel
    sb = m.seq_length / p.cp * cfg.batch.micro_batch_size
    return hidden_mask_bytes(cfg) * sb * m.hidden_size / (p.tp if p.sequence_parallel else 1) + TOKEN_ID_BYTES * sb


SCRIPT_FRAMEWORKS = frozenset({"deepspeed", "hf-deepspeed", "torch"})
"""TrainingConfig.framework of a script that is not Megatron's (frameworks/resolve.py): its network, loss and
training loop are transformers' or the user's own."""


def torch_script_model(cfg: TrainingConfig) -> bool:
    """Whether the network, its loss and its training loop are a torch script's (torch.nn layers, torch's
    F.cross_entropy, torch.optim or DeepSpeed's engine), not Megatron's: TrainingConfig.torch_linear_layers, or a
    framework of SCRIPT_FRAMEWORKS. torch_linear_layers alone says whether ZeRO-3 splits the linears' bias, and is
    False for scripts whose loss is still torch's: GPT-2's Conv1D models, memory_efficient_linear false, a DeepSpeed
    release before 0.19.4 with the model built outside zero.Init."""
    return cfg.torch_linear_layers or cfg.framework in SCRIPT_FRAMEWORKS


def output_activation_bytes(cfg: TrainingConfig) -> float:
    """Last stage, one micro-batch: final norm, output projection and fp32 cross-entropy, 4sbh/t (1 + v/h)
    (paper Sec. 4.2.3), with v the padded vocabulary, plus the 16-bit logits, alive beside their fp32 copy while
    the loss runs and again in its backward: the cross entropy upcasts a copy (megatron/core/tensor_parallel/
    cross_entropy.py calculate_logits_max: vocab_parallel_logits.float(), exp taken in place and saved) while the
    caller still holds the logits (GPTModel compute_language_model_loss(labels, logits); Megatron-DeepSpeed
    output.float(); Hugging Face logits.float()); the backward casts the fp32 gradient back to them. 2sbv/t more in
    mixed precision; theoretical_memory_usage.py counts the paper's figure. Megatron's --cross-entropy-fusion-impl te
    (with --cross-entropy-loss-fusion) runs Transformer Engine's parallel_cross_entropy on the logits as they are: it
    works in fp32 inside its Triton kernel, saves only the logits and per-token statistics (cross_entropy.py
    CrossEntropyFunction: ctx.save_for_backward(_input, target, m_d_X_y)) and writes the gradient into them, so the
    fp32 copy's 4sbv/t is not held. The native fused loss holds one fp32 copy more: native_fused_loss_extra_bytes.
    A torch script (torch_script_model) runs torch's loss instead: torch_cross_entropy_bytes."""
    m, p = cfg.model, cfg.parallel
    sbh = m.seq_length / p.cp * cfg.batch.micro_batch_size * m.hidden_size
    v_h = m.padded_vocab_size / m.hidden_size
    if torch_script_model(cfg):
        return torch_cross_entropy_bytes(cfg)
    if cfg.cross_entropy_fusion_impl == "te" and "megatron" in cfg.framework:
        return sbh / p.tp * (4 + act_bytes(cfg) * v_h)
    logits_16bit = act_bytes(cfg) if act_bytes(cfg) < FP32_BYTES else 0
    return sbh / p.tp * (4 * (1 + v_h) + logits_16bit * v_h) + native_fused_loss_extra_bytes(cfg)


def logits_elements(cfg: TrainingConfig) -> float:
    """s b v / t: one micro-batch's logits on a rank of the last stage (v the padded vocabulary)."""
    m, p = cfg.model, cfg.parallel
    return m.seq_length / p.cp * cfg.batch.micro_batch_size * m.padded_vocab_size / p.tp


def native_fused_loss_extra_bytes(cfg: TrainingConfig) -> float:
    """Megatron --cross-entropy-loss-fusion with --cross-entropy-fusion-impl native (the default): one fp32 copy
    of the logits, 4sbv/t, beyond the unfused loss. fused_vocab_parallel_cross_entropy (core_v0.16.1 fusions/
    fused_cross_entropy.py) runs the unfused loss's steps as @jit_fuser functions, torch.compile since torch 2.2
    (megatron/core/jit.py). Its backward, calculate_gradients, updates the saved fp32 softmax in place
    (`grad_2d[arange_1d, masked_target_1d] -= softmax_update`, then `mul_`) and returns `.to(torch.bfloat16)`; the
    compiled graph functionalises the index_put: Inductor writes the updated softmax into a new fp32 [s b, v/t]
    buffer, copies it back into the input and casts it, the three alive together (checked: torch 2.13's output code
    for these ops allocates the fp32 buffer beside the bf16 output; the forward's in-place subtract and exp are
    written into their input, no copy), where the unfused loss (tensor_parallel/cross_entropy.py) works in place.
    Measured: Megatron-LM CI's gpt3_mcore_te_tp2_pp2 with the fusion allocates 1.71 GiB, without it 1.33, +0.38 =
    4 x 4096 x 25152 bytes (benchmarks/megatron_ci_configs.py --golden)."""
    if cfg.cross_entropy_fusion_impl != "native" or "megatron" not in cfg.framework or torch_script_model(cfg):
        return 0.0
    return FP32_BYTES * logits_elements(cfg)


def deferred_embedding_wgrad_bytes(cfg: TrainingConfig) -> float:
    """Last stage under Megatron --defer-embedding-wgrad-compute: what the output layer keeps for the weight
    gradients it defers to the pipeline flush (core_v0.16.1 tensor_parallel/layers.py ColumnParallelLinear.forward
    appends its input to embedding_activation_buffer; LinearWithGradAccumulationAndAsyncCommunication.backward
    appends grad_output, the logits' gradient, to grad_output_buffer and skips the wgrad GEMM, both while fewer
    than --wgrad-deferral-limit are held, 0 = no limit; schedules.py finish_embedding_wgrad_compute ->
    utils.drain_embedding_wgrad_compute pops them after the last backward). The stage's peak is at a micro-batch's
    loss, with the earlier micro-batches' min(limit, m - 1) pairs held: each its logits gradient (16-bit, sbv/t)
    and its input (sbh, /t under SP). Measured: Megatron-LM CI's gpt3_mcore_te_tp2_pp2 with the flag and limit 2
    allocates 1.76 GiB, without 1.33 (+0.43; this counts 0.39)."""
    return deferred_wgrad_microbatches(cfg, cfg.batch.num_microbatches) * deferred_wgrad_microbatch_bytes(cfg)


def deferred_wgrad_microbatches(cfg: TrainingConfig, num_microbatches: int) -> int:
    """Earlier micro-batches whose deferred output-layer wgrad inputs the last stage holds at a loss:
    min(--wgrad-deferral-limit or m, m - 1); 0 without --defer-embedding-wgrad-compute or pipeline parallelism."""
    limit = cfg.wgrad_deferral_limit
    if limit is None or cfg.framework != "megatron" or cfg.parallel.pp == 1:
        return 0
    return max(0, min(limit or num_microbatches, num_microbatches - 1))


def deferred_wgrad_microbatch_bytes(cfg: TrainingConfig) -> float:
    """One deferred micro-batch: its 16-bit logits gradient (sbv/t) and the output layer's input (sbh, /t under SP)."""
    p = cfg.parallel
    sb = cfg.model.seq_length / p.cp * cfg.batch.micro_batch_size
    inputs = sb * cfg.model.hidden_size / (p.tp if p.sequence_parallel else 1)
    return act_bytes(cfg) * (logits_elements(cfg) + inputs)


TORCH_LOSS_BACKWARD_TENSORS = 3
"""fp32 [s b, v] tensors torch's cross-entropy backward holds at once: the log-softmax output its forward saved
(aten LogSoftmax, derivatives.yaml `result`; nll_loss saves the same tensor as `self`), the gradient nll_loss_backward
writes into a zeroed tensor of the input's shape (aten/src/ATen/native/cuda/Loss.cu nll_loss_backward_out_cuda:
grad_input.zero_() then the scatter), and the input gradient _log_softmax_backward_data allocates (SoftMax.cu
host_softmax_backward: gI = at::empty_like(grad)) while both are alive."""


def torch_cross_entropy_bytes(cfg: TrainingConfig) -> float:
    """Last stage, one micro-batch, of a torch script (torch_script_model: the transformers models, and scripts taking
    Megatron-style flags such as the CPU testbed's train_gpt.py), whose loss
    is torch.nn.functional.cross_entropy on fp32 logits (torch/nn/functional.py cross_entropy ->
    torch._C._nn.cross_entropy_loss = nll_loss(log_softmax(x)), aten LossNLL.cpp cross_entropy_loss; transformers
    ForCausalLMLoss and the testbed call it on logits.float()): the final norm's input and the LM head's input
    (2 sbh activations) and, at the loss's backward, TORCH_LOSS_BACKWARD_TENSORS fp32 logit tensors, 12 sbv/t. The
    forward holds less at its peak (16-bit logits 2 + their fp32 copy 4 + the log-softmax output 4 = 10, fp32: 4 + 4),
    and the 16-bit logits are freed when it returns (ToCopyBackward saves no tensor). Measured: the fp32 run h08
    (measurements/h200-sxm-141gb-2026-11-28) allocates 9.17 GiB, 9.10 by this count; Megatron's in-place loss
    (output_activation_bytes) would give 4 sbv/t in fp32 and left it 24 % short. A script that hands 16-bit logits to
    F.cross_entropy without .float() holds the three tensors in 16 bits (log_softmax keeps the input's dtype): 6
    sbv/t, over-counted here (the script's source is not read)."""
    m, p = cfg.model, cfg.parallel
    sb = m.seq_length / p.cp * cfg.batch.micro_batch_size
    logits = TORCH_LOSS_BACKWARD_TENSORS * FP32_BYTES * m.padded_vocab_size
    return sb / p.tp * (2 * act_bytes(cfg) * m.hidden_size + logits)


def cpu_offloaded_layers(cfg: TrainingConfig) -> int:
    """Layers whose saved activations Megatron's --cpu-offloading keeps in host memory, not on the GPU (pp 1 and no
    recompute: TransformerConfig refuses both). Transformer Engine's CPU offload (pytorch/cpu_offload.py
    OffloadSynchronizer._default_offload_sync_init) offloads layers 0 .. n-1 (n = --cpu-offloading-num-layers, via
    transformer_block.py get_cpu_offload_context), waits for layer i's copy to finish before layer L - n + i runs
    forward, and reloads it when layer L - 1 - n + i starts backward: 'peak memory usage of saving activations is
    (num_layers - num_offloaded_layers) * T'. Every saved tensor of 2^20 elements or more goes (_check_if_offload;
    smaller ones stay, not counted), into a pinned CPU tensor of its own (_offload_group: torch.empty_like(...,
    pin_memory=True))."""
    r = cfg.recompute
    if not r.cpu_offloading or cfg.framework != "megatron" or cfg.parallel.pp > 1 or r.granularity != "none":
        return 0
    return max(0, min(r.cpu_offloading_num_layers, cfg.model.num_layers - 1))


def microbatches_in_flight(cfg: TrainingConfig, stage: int) -> float:
    """Micro-batches whose activations a stage holds at its peak, in units of that stage's full layer set.

    1F1B: stage r holds min(pp - r, m) micro-batches. Interleaved: warm-up + 1 virtual micro-batches of one
    chunk each, i.e. (2 (pp - r - 1) + (vpp - 1) pp + 1) / vpp stage-equivalents; for r = 0 that is
    pp (1 + (pp - 1) / (pp vpp)) (Korthikanti et al. 2022, Sec. 4.2.3; Narayanan et al. 2021, Sec. 2.2.2).
    """
    p, m = cfg.parallel, cfg.batch.num_microbatches
    if p.vpp == 1:
        return float(min(p.pp - stage, m))
    total = m * p.vpp
    warmup = total if m == p.pp else min(total, 2 * (p.pp - stage - 1) + (p.vpp - 1) * p.pp)
    return min(total, warmup + 1) / p.vpp
