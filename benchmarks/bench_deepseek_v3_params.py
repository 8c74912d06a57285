"""DeepSeek-V3 parameters as llmperf's graph counts them, against the published 671B total / 37B activated.

    python benchmarks/bench_deepseek_v3_params.py

The model as Megatron-Core trains it (DeepSeek-V3 technical report, arXiv 2412.19437, Sec. 4.2 and its public
config.json): 61 layers, the first 3 dense (ffn 18432), hidden 7168, 128 heads, MLA with q_lora 1536, kv_lora
512, qk 128 + rope 64, v 128; 256 routed experts (ffn 2048, top-8) and one shared expert (2048) per MoE layer;
vocabulary 129280, untied head, SwiGLU, RMSNorm with the q/kv latent norms (--qk-layernorm), one MTP depth.
The report's 671B counts the main model; the MTP module (14B in the released checkpoint, which stores its own
copies of the embedding and head) comes on top. Printed: our totals from graph/params.py on one rank (TP = PP =
EP = 1), Megatron's own theoretical_memory_usage formula re-stated by hand, and the differences.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from llmperf_hook.frameworks.resolve import resolve_job  # noqa: E402
from llmperf_hook.frameworks.training_config import TrainingConfig  # noqa: E402
from llmperf_hook.graph import params as pc  # noqa: E402

DEEPSEEK_V3_FLAGS = (
    "--num-layers 61 --hidden-size 7168 --num-attention-heads 128 --ffn-hidden-size 18432 "
    "--multi-latent-attention --q-lora-rank 1536 --kv-lora-rank 512 --qk-head-dim 128 --qk-pos-emb-head-dim 64 "
    "--v-head-dim 128 --qk-layernorm --num-experts 256 --moe-router-topk 8 --moe-ffn-hidden-size 2048 "
    "--moe-shared-expert-intermediate-size 2048 --moe-layer-freq ([0]*3+[1]*58) --swiglu --normalization RMSNorm "
    "--disable-bias-linear --untie-embeddings-and-output-weights --position-embedding-type rope --mtp-num-layers 1 "
    "--vocab-size 129280 --seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1 "
    "--global-batch-size 1 --bf16"
).split()
PUBLISHED_TOTAL, PUBLISHED_ACTIVE = 671e9, 37e9


def deepseek_v3_config(extra: tuple[str, ...] = (), gpus: int = 1) -> TrainingConfig:
    argv = ["torchrun", "--nproc-per-node", str(gpus), "pretrain_gpt.py", *DEEPSEEK_V3_FLAGS, *extra]
    return resolve_job(argv, {})[1]


def main_model_params(cfg: TrainingConfig) -> tuple[int, int]:
    """(total, activated) parameters of the main model (no MTP) on one rank of a TP = PP = EP = 1 layout."""
    m = cfg.model
    layers = [pc.layer_params(cfg, pc.is_moe_layer(cfg, i)) for i in range(m.num_layers)]
    total = pc.embedding_params(cfg) + sum(layers) + pc.head_params(cfg)
    idle = m.num_experts - m.moe_router_topk  # experts a token does not visit, per MoE layer
    per_expert = pc.expert_params(cfg) // m.num_experts
    num_moe = sum(pc.is_moe_layer(cfg, i) for i in range(m.num_layers))
    return total, total - num_moe * idle * per_expert


def megatron_formula(cfg: TrainingConfig) -> tuple[float, float]:
    """megatron/training/theoretical_memory_usage.py compute_weight_and_optimizer_memory (MLA branch), without
    its MTP block: (total, active) parameters."""
    m = cfg.model
    h, n, norm = m.hidden_size, m.num_attention_heads, 1
    attn = (m.q_lora_rank * (h + n * (m.qk_head_dim + m.qk_pos_emb_head_dim) + norm)
            + m.kv_lora_rank * (h + n * (m.qk_head_dim + m.v_head_dim) + norm) + h * m.qk_pos_emb_head_dim
            + n * m.v_head_dim * h)
    gated = 3 / 2
    dense = attn + 2 * h * m.ffn_hidden_size * gated + 2 * h * norm
    routed = 2 * h * m.moe_ffn_hidden_size * m.num_experts * gated
    active_routed = 2 * h * m.moe_ffn_hidden_size * m.moe_router_topk * gated
    common = attn + 2 * h * m.moe_shared_expert_intermediate_size * gated + 2 * h * norm + h * m.num_experts
    num_moe = sum(m.moe_layer_pattern)
    rest = dense * (m.num_layers - num_moe) + norm * h + 2 * h * m.padded_vocab_size
    return rest + num_moe * (common + routed), rest + num_moe * (common + active_routed)


def main() -> None:
    start = time.perf_counter()
    cfg = deepseek_v3_config()
    total, active = main_model_params(cfg)
    mtp = pc.mtp_params(cfg)
    ref_total, ref_active = megatron_formula(cfg)
    print("DeepSeek-V3 (main model, MTP apart)       ours            Megatron formula     published")
    print(f"  total parameters              {total / 1e9:12.2f} B {ref_total / 1e9:14.2f} B {PUBLISHED_TOTAL / 1e9:12.0f} B"
          f"   ({100 * (total / PUBLISHED_TOTAL - 1):+.2f} % vs published)")
    print(f"  activated per token           {active / 1e9:12.2f} B {ref_active / 1e9:14.2f} B {PUBLISHED_ACTIVE / 1e9:12.0f} B"
          f"   ({100 * (active / PUBLISHED_ACTIVE - 1):+.2f} % vs published)")
    print(f"  MTP depth (1, shares embedding and head on one stage)  {mtp / 1e9:.2f} B")
    print(f"  with MTP                      {(total + mtp) / 1e9:12.2f} B")
    print(f"  wall time {time.perf_counter() - start:.3f} s")


if __name__ == "__main__":
    main()
