"""Round-4 campaign: Megatron-Core era flags checked against megatron/training/arguments.py and
megatron/core/transformer/transformer_config.py (argparse choices, validate_args asserts, TransformerConfig errors)."""

from __future__ import annotations

import pytest

from llmperf_hook.errors import ConfigError
from tests.frameworks.helpers import megatron

MOE = ("--num-experts", "8", "--moe-router-topk", "2")


@pytest.mark.parametrize(("args", "fragment"), [
    (["--fp8-format", "e5m2"], "not a choice"),
    (["--transformer-impl", "te"], "not a choice"),
    (["--attention-backend", "flash2"], "not a choice"),
    (["--position-embedding-type", "sinusoidal"], "not a choice"),  # alibi is the bigscience fork's
    (["--moe-token-dispatcher-type", "all2all", *MOE], "not a choice"),
    # validate_args: interleaving without p2p overlap needs PP > 2
    (["--pipeline-model-parallel-size", "2", "--num-virtual-stages-per-pipeline-rank", "2",
      "--no-overlap-p2p-communication"], "PP > 2"),
    # validate_args / TransformerConfig: distributed saved activations
    (["--distribute-saved-activations", "--recompute-granularity", "full", "--recompute-method", "uniform",
      "--recompute-num-layers", "1"], "tensor-parallel group"),
    (["--tensor-model-parallel-size", "2", "--distribute-saved-activations", "--recompute-activations"], "full"),
    (["--tensor-model-parallel-size", "2", "--sequence-parallel", "--distribute-saved-activations",
      "--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"], "sequence"),
    (["--pipeline-model-parallel-size", "2", "--decoder-first-pipeline-num-layers", "15",
      "--account-for-embedding-in-pipeline-split"], "cannot be combined"),
    (["--context-parallel-size", "2", "--cp-comm-type", "a2a+p2p"], "hierarchical"),
    (["--recompute-granularity", "selective", "--recompute-modules", "core_attn", "attn"], "not a module"),
    (["--recompute-granularity", "selective", "--recompute-modules", "moe_act", *MOE], "moe-grouped-gemm"),
    (["--moe-router-topk", "9", "--num-experts", "8"], "exceeds"),
    (["--moe-pad-expert-input-to-capacity", *MOE], "capacity-factor"),
    (["--cpu-offloading", "--pipeline-model-parallel-size", "2"], "offloading"),
    (["--moe-layer-recompute", "--recompute-granularity", "full", "--recompute-method", "uniform",
      "--recompute-num-layers", "1", *MOE], "moe-layer-recompute"),
])
def test_megatron_refusals(args: list[str], fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        megatron(*args)


def test_accepted_megatron_core_settings() -> None:
    cfg = megatron("--pipeline-model-parallel-size", "2", "--num-virtual-stages-per-pipeline-rank", "2",
                   "--global-batch-size", "8")
    assert cfg.parallel.vpp == 2 and cfg.parallel.overlap_p2p_comm  # overlap is Megatron's default
    cfg = megatron("--context-parallel-size", "2", "--cp-comm-type", "a2a+p2p", "--hierarchical-context-parallel-sizes",
                   "1", "2")
    assert cfg.parallel.cp == 2
    cfg = megatron("--tensor-model-parallel-size", "2", "--distribute-saved-activations", "--recompute-granularity",
                   "full", "--recompute-method", "uniform", "--recompute-num-layers", "1")
    assert cfg.recompute.distribute_saved_activations
    cfg = megatron("--recompute-granularity", "selective", "--recompute-modules", "core_attn", "mlp", "--fp8-format", "hybrid",
                   "--transformer-impl", "transformer_engine", "--attention-backend", "fused")
    assert cfg.recompute.granularity == "selective" and cfg.precision == "fp8"
    assert megatron(*MOE, "--moe-layer-recompute").recompute.granularity == "selective"


def test_block_recompute_of_more_layers_than_a_rank_holds_is_accepted() -> None:
    # megatron/core/recompute.py recomputes layer_idx < recompute_num_layers: a larger count means every layer.
    cfg = megatron("--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers", "40")
    assert cfg.recompute.num_layers == 40


def test_rules_only_recent_releases_enforce_warn() -> None:
    cfg = megatron("--tensor-model-parallel-size", "2", "--sequence-parallel", *MOE)
    assert any("Bias in Moe" in w for w in cfg.warnings)
    assert not any("Bias in Moe" in w for w in megatron("--tensor-model-parallel-size", "2", "--sequence-parallel",
                                                         "--disable-bias-linear", *MOE).warnings)
    assert any("pre-softmax" in w for w in megatron("--num-experts", "8", "--moe-router-topk", "1").warnings)
    assert not any("pre-softmax" in w for w in megatron("--num-experts", "8", "--moe-router-topk", "1",
                                                         "--moe-router-pre-softmax").warnings)
    assert any("moe-ffn-hidden-size" in w for w in megatron("--moe-ffn-hidden-size", "1024").warnings)


def test_megatron_deepspeed_interleaving_needs_pp_above_two(tmp_path) -> None:
    ds = tmp_path / "ds.json"
    ds.write_text('{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 1}}')
    with pytest.raises(ConfigError, match="PP > 2"):
        megatron("--deepspeed", "--deepspeed_config", str(ds), "--pipeline-model-parallel-size", "2",
                 "--num-layers-per-virtual-pipeline-stage", "4", "--global-batch-size", "8")


def test_fsdp_is_modelled_as_the_distributed_optimizer_and_keeps_megatron_rules() -> None:
    # validate_args: FSDP2 refuses PP/EP > 1, the distributed optimizer, fp16, tied embeddings (since 2024-11)
    cfg = megatron("--use-torch-fsdp2", "--untie-embeddings-and-output-weights", "--ckpt-format", "torch_dcp",
                   "--no-gradient-accumulation-fusion")
    assert cfg.optimizer.distributed_optimizer and cfg.optimizer.fsdp == "torch_fsdp2"
    assert cfg.optimizer.zero_stage == 3  # fully_shard: params, gradients, optimizer states
    fsdp = megatron("--use-megatron-fsdp", "--ckpt-format", "fsdp_dtensor").optimizer
    assert fsdp.distributed_optimizer and fsdp.zero_stage == 3  # default optim_grads_params
    assert megatron("--use-megatron-fsdp", "--data-parallel-sharding-strategy", "optim_grads", "--ckpt-format",
                    "fsdp_dtensor").optimizer.zero_stage == 2
    assert megatron().optimizer.zero_stage == 0
    with pytest.raises(ConfigError, match="not a choice"):
        megatron("--use-megatron-fsdp", "--data-parallel-sharding-strategy", "full")
    for extra in (["--pipeline-model-parallel-size", "2"], ["--use-distributed-optimizer"], []):
        with pytest.raises(ConfigError, match="fsdp2"):
            megatron("--use-torch-fsdp2", *extra, *([] if not extra else ["--untie-embeddings-and-output-weights"]))
    for fmt, fragment in (("safetensors", "not a choice"), ("torch_dcp", "torch_dcp"), ("fsdp_dtensor", "fsdp_dtensor")):
        with pytest.raises(ConfigError, match=fragment):
            megatron("--ckpt-format", fmt)


def test_fp8_with_the_local_transformer_and_relative_positions() -> None:
    cfg = megatron("--bf16", "--fp8-format", "hybrid", "--transformer-impl", "local")
    assert cfg.precision == "bf16" and any("no effect" in w for w in cfg.warnings)
    assert megatron("--bf16", "--fp8-format", "hybrid").precision == "fp8"
    assert any("relative position" in w for w in megatron("--position-embedding-type", "relative").warnings)
    assert not any("position" in w for w in megatron("--position-embedding-type", "rope").warnings)
    with pytest.raises(ConfigError, match="transformer_engine"):
        megatron("--position-embedding-type", "relative", "--transformer-impl", "local")


def test_gpt_oss_style_flags() -> None:
    # Megatron-LM examples/gptoss/02_train.sh: quick-GeGLU is a gated MLP; windowed attention warns.
    cfg = megatron("--quick-geglu", "--ffn-hidden-size", "2048", "--window-size", "127,0", "--num-experts", "4",
                   "--moe-token-dispatcher-type", "alltoall", "--disable-bias-linear")
    assert cfg.model.swiglu and cfg.model.ffn_hidden_size == 2048
    assert any("sliding-window" in w for w in cfg.warnings)
    with pytest.raises(ConfigError, match="both set"):
        megatron("--swiglu", "--quick-geglu")


def test_legacy_fp8_switches() -> None:
    # Megatron-DeepSpeed (and Megatron-LM of 2023): --fp8-e4m3 / --fp8-hybrid need Transformer Engine, one at a time.
    assert megatron("--bf16", "--fp8-hybrid", "--transformer-impl", "transformer_engine").precision == "fp8"
    with pytest.raises(ConfigError, match="transformer-engine required"):
        megatron("--bf16", "--fp8-e4m3")
    with pytest.raises(ConfigError, match="both"):
        megatron("--fp8-e4m3", "--fp8-hybrid", "--transformer-impl", "transformer_engine")


def test_context_parallelism_needs_transformer_engine_attention() -> None:
    with pytest.raises(ConfigError, match="TEDotProductAttention"):
        megatron("--context-parallel-size", "2", "--transformer-impl", "local")
    assert megatron("--context-parallel-size", "2").parallel.cp == 2


def test_unexpanded_variable_in_a_training_flag_is_named_as_such() -> None:
    with pytest.raises(ConfigError, match="unexpanded shell variable"):
        megatron("--tensor-model-parallel-size", "$TP")
    assert megatron("--tensor-model-parallel-size", "2").parallel.tp == 2
