"""Megatron-Core MLA / MTP / shared-expert flags: parsing with Megatron's defaults, the rules validate_args and
the configs enforce (exit 2), explain's provenance, and DeepSeek-V3's parameter count."""

from __future__ import annotations

import pytest

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks import explain_json
from llmperf_hook.graph import params as pc
from tests.frameworks.helpers import megatron

MLA = ("--multi-latent-attention", "--position-embedding-type", "rope")
SMALL = ["--num-layers", "4", "--hidden-size", "1024", "--num-attention-heads", "16", "--seq-length", "2048",
         "--max-position-embeddings", "2048", "--vocab-size", "32000", "--micro-batch-size", "1"]

DEEPSEEK_V3 = [
    "--num-layers", "61", "--hidden-size", "7168", "--num-attention-heads", "128", "--ffn-hidden-size", "18432",
    "--multi-latent-attention", "--q-lora-rank", "1536", "--kv-lora-rank", "512", "--qk-head-dim", "128",
    "--qk-pos-emb-head-dim", "64", "--v-head-dim", "128", "--qk-layernorm", "--num-experts", "256",
    "--moe-router-topk", "8", "--moe-ffn-hidden-size", "2048", "--moe-shared-expert-intermediate-size", "2048",
    "--moe-layer-freq", "([0]*3+[1]*58)", "--swiglu", "--normalization", "RMSNorm", "--disable-bias-linear",
    "--untie-embeddings-and-output-weights", "--position-embedding-type", "rope", "--mtp-num-layers", "1",
    "--vocab-size", "129280", "--seq-length", "4096", "--max-position-embeddings", "4096", "--micro-batch-size", "1",
]


def test_mla_defaults_are_megatrons() -> None:
    m = megatron(*MLA, base=SMALL).model
    assert m.multi_latent_attention and m.q_lora_rank is None
    assert (m.kv_lora_rank, m.qk_head_dim, m.qk_pos_emb_head_dim, m.v_head_dim) == (32, 128, 64, 128)


def test_explain_shows_the_new_fields_with_their_origin() -> None:
    cfg = megatron(*MLA, "--q-lora-rank", "512", "--mtp-num-layers", "2", "--num-experts", "8",
                   "--moe-shared-expert-intermediate-size", "2048", "--disable-bias-linear", base=SMALL)
    data = explain_json(cfg)
    assert (data["q_lora_rank"], data["kv_lora_rank"], data["mtp_num_layers"]) == (512, 32, 2)
    assert data["moe_shared_expert_intermediate_size"] == 2048
    assert data["sources"]["q_lora_rank"].startswith("argv")
    assert data["sources"]["kv_lora_rank"].startswith("framework default") and "32" in data["sources"]["kv_lora_rank"]
    assert data["sources"]["mtp_num_layers"].startswith("argv")
    assert not any("not modelled" in w and ("latent" in w or "multi-token" in w) for w in data["warnings"])


def test_plain_jobs_keep_their_explain_keys() -> None:
    data = explain_json(megatron(base=SMALL))
    assert not {"multi_latent_attention", "mtp_num_layers", "moe_shared_expert_intermediate_size"} & set(data)


@pytest.mark.parametrize("args, fragment", [
    ((*MLA, "--group-query-attention", "--num-query-groups", "4"), "mutually exclusive"),
    ((*MLA, "--rope-type", "rope"), "only works with YARN"),
    ((*MLA, "--rotary-interleaved"), "rotary_interleaved"),
    ((*MLA, "--transformer-impl", "local"), "k_channels"),
    (("--rope-type", "yarn"), "Common attention"),
    (("--mla-down-proj-fusion",), "requires --multi-latent-attention"),
    (("--mtp-num-layers", "1"), "learned_absolute"),
    (("--mtp-num-layers", "1", "--position-embedding-type", "mrope"), "rope and none"),
    (("--mtp-num-layers", "1", "--use-rotary-position-embeddings"), "rope and none"),
    (("--num-experts", "8", "--moe-shared-expert-intermediate-size", "1024"), "--disable-bias-linear"),
    (("--num-experts", "8", "--moe-shared-expert-intermediate-size", "0", "--disable-bias-linear"), "<= 0"),
    (("--num-experts", "8", "--moe-shared-expert-intermediate-size", "1024", "--disable-bias-linear",
      "--moe-shared-expert-overlap"), "alltoall or flex"),
])
def test_rules_megatron_enforces_exit_2(args: tuple[str, ...], fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        megatron(*args, base=SMALL)
    assert info.value.exit_code == 2 and fragment in str(info.value)


def test_accepted_variants() -> None:
    assert megatron(*MLA, "--rope-type", "rope", "--no-rope-fusion", base=SMALL).model.multi_latent_attention
    # a user's own --spec builds its own core attention; TE's unfused core takes MLA's two widths
    assert megatron(*MLA, "--transformer-impl", "local", "--spec", "my_specs", "layer_spec",
                    base=SMALL).model.multi_latent_attention
    assert megatron(*MLA, "--attention-backend", "unfused", base=SMALL).attention_backend == "unfused"
    assert megatron("--mtp-num-layers", "1", "--position-embedding-type", "none", base=SMALL).model.mtp_num_layers == 1
    # validate_args turns rope fusion off for a position type other than rope, so MLATransformerConfig's
    # 'apply_rope_fusion for MLA only works with YARN RoPE' cannot fire.
    assert megatron("--multi-latent-attention", "--position-embedding-type", "none", "--rope-type", "rope",
                    base=SMALL).model.multi_latent_attention
    ignored = megatron("--q-lora-rank", "512", base=SMALL)
    assert not ignored.model.multi_latent_attention and any("--q-lora-rank" in w for w in ignored.warnings)


def _hand_count_deepseek_v3() -> tuple[int, int]:
    """Main-model parameters (total, activated) by hand: Megatron's theoretical_memory_usage MLA sums."""
    h, n, vocab = 7168, 128, 129280
    attn = (h * 1536 + 1536 * n * 192 + 1536 + h * (512 + 64) + 512 * n * 256 + 512 + n * 128 * h) + h
    dense = attn + 3 * h * 18432 + h
    expert = 3 * h * 2048
    moe_common = attn + h + h * 256 + expert  # norm, router, the shared expert (2048 wide)
    rest = 3 * dense + 2 * vocab * h + h
    return rest + 58 * (moe_common + 256 * expert), rest + 58 * (moe_common + 8 * expert)


def test_deepseek_v3_parameters_match_megatrons_formula_and_the_published_671b() -> None:
    cfg = megatron(*DEEPSEEK_V3, gpus=1, base=[])
    m = cfg.model
    layers = sum(pc.layer_params(cfg, pc.is_moe_layer(cfg, i)) for i in range(m.num_layers))
    total = pc.embedding_params(cfg) + layers + pc.head_params(cfg)
    active = total - 58 * (256 - 8) * 3 * 7168 * 2048
    assert (total, active) == _hand_count_deepseek_v3()
    assert abs(total / 671e9 - 1) < 0.01 and abs(active / 37e9 - 1) < 0.02
    # The MTP depth: enorm, hnorm, eh_proj 2h x h, one MoE layer (the last layer's kind), final norm.
    assert pc.mtp_params(cfg) == 3 * 7168 + 2 * 7168 * 7168 + pc.layer_params(cfg, True)
