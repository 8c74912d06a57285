"""How many parameter tensors the optimizer of a pipeline stage steps (CPU framework cost, predict/cpu_framework.py).

torch's Adam(W) without a fused / multi-tensor kernel (the CPU case) runs its update once per parameter
tensor, so its cost has a per-tensor part. A Megatron GPT layer holds, per linear, a weight and (with
--add-bias-linear, the default) a bias: QKV, projection, MLP up and down; per norm a weight (+ a bias for
LayerNorm): two norms per layer. Outside the layers: the word embedding, learned positions
(--position-embedding-type learned_absolute), the final norm, an untied output layer. DeepSpeed's ZeRO 1-3
and bf16/fp16 optimizers step flat fp32 partitions, one per parameter group (deepspeed/runtime/zero/
stage_1_and_2.py `single_partition_of_fp32_groups`, bf16_optimizer.py): one tensor for a one-group model.
"""

from __future__ import annotations

from llmperf_hook.frameworks.training_config import TrainingConfig

LINEARS_PER_LAYER = 4
NORMS_PER_LAYER = 2


def tensors_per_layer(cfg: TrainingConfig) -> int:
    m = cfg.model
    per_norm = 1 if m.normalization == "RMSNorm" else 2
    if m.multi_latent_attention:
        # MLA (graph/params.py mla_params): q_down + q_up or one q_proj, kv_down, kv_up, proj (the only one with a
        # bias), MLP up and down; the q and kv latent norms with --qk-layernorm.
        linears = (2 if m.q_lora_rank else 1) + 3 + 2
        norms = NORMS_PER_LAYER + (2 if m.qk_layernorm else 0)
        return linears + (3 if m.add_bias_linear else 0) + norms * per_norm
    return LINEARS_PER_LAYER * (2 if m.add_bias_linear else 1) + NORMS_PER_LAYER * per_norm


def optimizer_param_tensors(cfg: TrainingConfig, stage: int, num_layers: int) -> int:
    """Tensors the optimizer of pipeline stage `stage` (holding `num_layers` layers) updates one by one."""
    flat = "deepspeed" in cfg.framework and (cfg.optimizer.zero_stage >= 1 or cfg.precision != "fp32")
    return 1 if flat else model_param_tensors(cfg, stage, num_layers)


def model_param_tensors(cfg: TrainingConfig, stage: int, num_layers: int) -> int:
    """Parameter tensors of the model on pipeline stage `stage` (holding `num_layers` layers)."""
    m, p = cfg.model, cfg.parallel
    n = num_layers * tensors_per_layer(cfg)
    if stage == 0:
        n += 1 + (1 if m.position_embedding == "learned_absolute" else 0)
    if stage == p.pp - 1:
        n += (1 if m.normalization == "RMSNorm" else 2) + (1 if m.untie_embeddings or p.pp > 1 else 0)
    return n
