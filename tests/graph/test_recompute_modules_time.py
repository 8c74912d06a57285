"""Megatron-LM --recompute-modules under selective recompute: which forward ops each module replays in backward
(graph/backward._module_replays), so the re-run forwards are timed, not only the attention core."""

from __future__ import annotations

from llmperf_hook.api import predict_command
from llmperf_hook.graph.build import build_graph

BASE = ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "4", "--hidden-size", "2048",
        "--num-attention-heads", "16", "--seq-length", "2048", "--max-position-embeddings", "2048",
        "--vocab-size", "32000", "--micro-batch-size", "1", "--global-batch-size", "64", "--bf16", "--swiglu",
        "--ffn-hidden-size", "5632", "--disable-bias-linear", "--tensor-model-parallel-size", "2",
        "--sequence-parallel", "--recompute-granularity", "selective"]
MOE = ["--num-experts", "8", "--moe-router-topk", "2", "--moe-ffn-hidden-size", "1408", "--moe-grouped-gemm",
       "--moe-shared-expert-intermediate-size", "2816", "--expert-model-parallel-size", "4"]


def _replayed(*flags: str, block: str = "dense_layer") -> tuple[list[str], float]:
    pred = predict_command([*BASE, *flags], {}, cluster="dgx-h100")
    graph = build_graph(pred.config, pred.cluster)
    (ops,) = [b.bwd for b in graph.stages[0].chunks[0].blocks if b.name == block]
    return [op.name for op in ops if op.phase == "recompute"], pred.estimate.step_time_s


def test_mlp_replays_the_whole_dense_mlp_module_and_not_the_attention_core() -> None:
    """recompute_mlp checkpoints self.mlp: its SP all-gather, fc1, activation, fc2 and reduce-scatter; with
    Transformer Engine (Megatron-LM's default impl) the pre-MLP norm is fused into linear_fc1, so it is replayed too."""
    names, _ = _replayed("--recompute-modules", "mlp")
    assert names == ["mlp.norm", "mlp.tp_allgather", "mlp.fc1", "mlp.swiglu", "mlp.fc2", "mlp.tp_reduce"]
    local, _ = _replayed("--recompute-modules", "mlp", "--transformer-impl", "local")
    assert local == ["mlp.tp_allgather", "mlp.fc1", "mlp.swiglu", "mlp.fc2", "mlp.tp_reduce"]


def test_layernorm_replays_the_norms_only_where_they_are_modules() -> None:
    """Transformer Engine's layers hold IdentityOp norms (fused into the next linear): nothing to replay."""
    assert _replayed("--recompute-modules", "layernorm")[0] == []
    assert _replayed("--recompute-modules", "layernorm", "--transformer-impl", "local")[0] == ["attn.norm", "mlp.norm"]


def test_each_module_adds_its_replay_to_the_step() -> None:
    core, core_s = _replayed("--recompute-modules", "core_attn")
    both, both_s = _replayed("--recompute-modules", "core_attn", "mlp")
    assert core == ["attn.core"] and both == ["attn.core", *_replayed("--recompute-modules", "mlp")[0]]
    assert both_s > core_s


def test_moe_modules() -> None:
    """moe: the whole MoE layer but its residual; moe_act: the experts' activation; shared_experts: the shared MLP;
    mlp touches only dense layers."""
    moe, _ = _replayed(*MOE, "--recompute-modules", "moe", block="moe_layer")
    assert moe and all(n.startswith("moe.") and n != "moe.residual" for n in moe) and "moe.router" in moe
    act, _ = _replayed(*MOE, "--recompute-modules", "moe_act", block="moe_layer")
    assert act and set(act) == {"moe.expert_act"}
    shared, _ = _replayed(*MOE, "--recompute-modules", "shared_experts", block="moe_layer")
    assert shared and all(n.startswith("moe.shared_") for n in shared)
    assert _replayed(*MOE, "--recompute-modules", "mlp", block="moe_layer")[0] == []
