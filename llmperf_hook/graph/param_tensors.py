"""How many parameter tensors a pipeline stage's model registers (ZeRO-3's hooks, DeepSpeed's per-tensor host
work, the CPU optimizer's per-tensor cost: graph/zero3_hooks.py, step_ops.py, predict/cpu_framework.py).

A tensor is one `nn.Parameter`: torch's Adam(W) without a multi-tensor kernel updates them one by one, and DeepSpeed
ZeRO-3 fetches, releases and reduces them one by one. The count follows the modules each framework builds:

- Megatron-LM (megatron/core/transformer/transformer_layer.py, attention.py, mlp.py) and Megatron-DeepSpeed
  (megatron/model/transformer.py ParallelTransformerLayer) fuse Q, K and V into one linear and SwiGLU's gate and up
  projections into one fc1, so a layer has 4 linears, each a weight plus a bias unless --disable-bias-linear, and 2
  norms (weight, + bias for LayerNorm). Transformer Engine fuses the norms into the next linear's kernel but keeps
  them separate parameters (TELayerNormColumnParallelLinear.layer_norm_weight / layer_norm_bias). --qk-layernorm
  adds q_layernorm and k_layernorm. An MoE layer replaces the MLP by the pre-MLP norm, the router's weight (+ its
  bias unless --disable-bias-linear: moe/router.py TopKRouter; expert_bias is a buffer), each local expert's fc1
  and fc2 (+ biases): SequentialMLP, and TE's GroupedLinear behind TEGroupedMLP, register one weight per GEMM,
  i.e. per local expert (weight0 .. weightN-1; Megatron-DeepSpeed's DeepSpeed-MoE keeps a ParallelMLP per local
  expert), and the shared experts' fc1 and fc2 (no biases, + the gate's weight with --moe-shared-expert-gate).
  Without Transformer Engine, --moe-grouped-gemm builds the legacy GroupedMLP: one weight1 and one weight2 for all
  local experts. (Checked against named_parameters() of megatron-core 0.16.1 GPTModels built on CPU with the local
  spec: dense, --qk-layernorm, SequentialMLP with and without biases, GroupedMLP, shared experts with gate.)
- DeepSpeed and Hugging Face scripts (frameworks deepspeed, hf-deepspeed, torch) build transformers' modules
  (transformers 5.23, models/*/modeling_*.py). SwiGLU families (Llama, Mistral, Qwen, Mixtral) keep q_proj, k_proj,
  v_proj, o_proj, gate_proj, up_proj and down_proj apart: 7 linears (+ q, k, v, o biases with attention_bias; gate,
  up, down biases with mlp_bias: ModelShape.mlp_bias) and 2 RMSNorms, 9 tensors a layer where Megatron registers 6.
  GELU families fuse as Megatron does (GPT-2's c_attn,
  c_proj, c_fc, c_proj Conv1Ds with biases; GPT-NeoX's and BLOOM's query_key_value; the CPU testbed GPT's qkv):
  12 a layer. Since transformers 5 an MoE block registers the router's weight and its experts as two 3-D
  parameters for all experts, gate_up_proj and down_proj (MixtralExperts, Qwen2MoeExperts, ...), plus Qwen-MoE's
  shared expert (gate, up, down) and its gate: Mixtral-8x7B has 32 x 9 + 3 = 291 tensors. transformers 4.x kept
  every expert's w1, w2 and w3 (32 x 31 + 3 = 995); the count follows the current release.
  OPT and GPT-J keep q, k, v apart in a GELU layer (ModelShape.separate_qkv: OPT 16 a layer). Qwen2 / Qwen2-MoE /
  GLM-4 bias q, k and v only (ModelShape.add_qkv_bias), Megatron's --add-qkv-bias its fused QKV only; gpt-oss and
  Megatron's --softmax-type learnable add one sink tensor a layer (ModelShape.attention_sinks). Not told apart by
  the shape: BLOOM's embedding LayerNorm.
- DeepSpeed's ZeRO 1-3 and bf16/fp16 optimizers step flat fp32 partitions, one per parameter group (deepspeed/
  runtime/zero/stage_1_and_2.py `single_partition_of_fp32_groups`, bf16_optimizer.py): one tensor for a one-group
  model (optimizer_param_tensors).
"""

from __future__ import annotations

from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.graph.params import embedding_projection_params, is_moe_layer, legacy_grouped_mlp, router_biased

MEGATRON_FRAMEWORKS = ("megatron", "megatron-deepspeed")
"""Frameworks whose model code is Megatron's (fused QKV and fc1); every other builds transformers-style modules."""


def megatron_layout(cfg: TrainingConfig) -> bool:
    return cfg.framework in MEGATRON_FRAMEWORKS


def _per_norm(cfg: TrainingConfig) -> int:
    return 1 if cfg.model.normalization == "RMSNorm" else 2


def attention_tensors(cfg: TrainingConfig) -> int:
    """The attention half of a layer: its input norm, the projections (+ biases), the q / k norms."""
    m = cfg.model
    norms = (1 + (2 if m.qk_layernorm else 0)) * _per_norm(cfg)
    if m.multi_latent_attention:
        # MLA (graph/params.py mla_params): q_down + q_up or one q_proj, kv_down, kv_up, proj (the only one with a
        # bias); with --qk-layernorm the q and kv latent norms instead of q / k norms.
        linears = (2 if m.q_lora_rank else 1) + 3
        return linears + (1 if m.add_bias_linear else 0) + norms + (1 if m.attention_sinks else 0)
    qkv = 3 if separate_qkv_linears(cfg) else 1  # q, k, v apart, or one fused QKV
    biases = (qkv if m.qkv_biased else 0) + (1 if m.add_bias_linear else 0)  # QKV (add_qkv_bias), projection
    return qkv + 1 + biases + norms + (1 if m.attention_sinks else 0)


def separate_qkv_linears(cfg: TrainingConfig) -> bool:
    """transformers' q_proj, k_proj, v_proj (SwiGLU families, OPT, GPT-J: ModelShape.separate_qkv) rather than one
    fused QKV linear (Megatron, GPT-2, GPT-NeoX, BLOOM)."""
    return not megatron_layout(cfg) and (cfg.model.swiglu or cfg.model.separate_qkv)


def mlp_tensors(cfg: TrainingConfig) -> int:
    """The dense MLP half: its norm, fc1 (gate and up fused, or apart in transformers' SwiGLU MLPs) and fc2."""
    m = cfg.model
    per_linear = 2 if m.mlp_biased else 1  # weight (+ bias: ModelShape.mlp_bias, Llama's mlp_bias)
    if m.multi_latent_attention or megatron_layout(cfg) or not m.swiglu:
        return _per_norm(cfg) + 2 * per_linear
    return _per_norm(cfg) + 3 * per_linear  # gate_proj, up_proj, down_proj


def tensors_per_layer(cfg: TrainingConfig) -> int:
    """Tensors of one dense transformer layer."""
    return attention_tensors(cfg) + mlp_tensors(cfg)


def moe_block_tensors(cfg: TrainingConfig) -> int:
    """The MoE half of a layer on a rank: norm, router, the rank's experts, the shared experts (module docstring)."""
    m = cfg.model
    shared = 0
    if m.moe_shared_expert_intermediate_size:
        shared = (2 if megatron_layout(cfg) else 3) + (1 if m.moe_shared_expert_gate else 0)
    if legacy_grouped_mlp(cfg):
        experts = 2  # GroupedMLP: weight1 and weight2 hold every local expert (no biases)
    elif megatron_layout(cfg):
        local = max(1, m.num_experts // max(1, cfg.parallel.ep))
        experts = local * 2 * (2 if m.mlp_biased else 1)
    else:
        experts = 2 * (2 if m.mlp_biased else 1)  # gate_up_proj, down_proj (+ gpt-oss's biases)
    router = 2 if router_biased(cfg) else 1  # weight (+ bias)
    return _per_norm(cfg) + router + experts + shared


def moe_layer_tensors(cfg: TrainingConfig) -> int:
    return attention_tensors(cfg) + moe_block_tensors(cfg)


def _stage_moe_layers(cfg: TrainingConfig, stage: int, num_layers: int) -> int:
    """MoE layers among the stage's `num_layers` (Megatron's --moe-layer-freq / pattern over global indices)."""
    if cfg.model.num_experts == 0:
        return 0
    p = cfg.parallel
    if p.pp == 1:
        return sum(1 for i in range(num_layers) if is_moe_layer(cfg, i))
    from llmperf_hook.graph.stages import chunk_layer_range

    ranges = [chunk_layer_range(cfg, stage, c) for c in range(max(1, p.vpp))]
    if sum(end - start for start, end in ranges) == num_layers:
        return sum(1 for start, end in ranges for i in range(start, end) if is_moe_layer(cfg, i))
    total = cfg.model.num_layers  # a partition of its own (DeepSpeed's PipelineEngine): the model's share
    return round(num_layers * sum(1 for i in range(total) if is_moe_layer(cfg, i)) / max(1, total))


def optimizer_param_tensors(cfg: TrainingConfig, stage: int, num_layers: int) -> int:
    """Tensors the optimizer of pipeline stage `stage` (holding `num_layers` layers) updates one by one."""
    flat = "deepspeed" in cfg.framework and (cfg.optimizer.zero_stage >= 1 or cfg.precision != "fp32")
    return 1 if flat else model_param_tensors(cfg, stage, num_layers)


def model_param_tensors(cfg: TrainingConfig, stage: int, num_layers: int) -> int:
    """Parameter tensors of the model on pipeline stage `stage` (holding `num_layers` layers)."""
    m, p = cfg.model, cfg.parallel
    moe = _stage_moe_layers(cfg, stage, num_layers)
    n = (num_layers - moe) * tensors_per_layer(cfg) + moe * moe_layer_tensors(cfg)
    projections = 1 if embedding_projection_params(cfg) else 0  # OPT's project_in / project_out
    if stage == 0:
        n += 1 + (1 if m.position_embedding == "learned_absolute" else 0) + projections
    if stage == p.pp - 1:
        n += _per_norm(cfg) + (1 if m.untie_embeddings or p.pp > 1 else 0) + projections
    return n
