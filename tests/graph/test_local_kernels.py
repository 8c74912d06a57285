"""The kernels of Megatron's local layers outside the GEMM and attention-core ops (graph/local_kernels.py): the QKV
linear's separate bias add and its bias-gradient sum, the unfused core attention's context copy; GPU time only (their
host issue is in the unit of the op they follow)."""

from __future__ import annotations

from dataclasses import replace

from llmperf_hook.graph.op import Op
from llmperf_hook.predict.host_issue import op_host_units


def _layer(**fields) -> tuple[list[Op], list[Op]]:
    from llmperf_hook.graph.build import build_graph
    from llmperf_hook.graph.sample_configs import make_config
    from llmperf_hook.hardware.load import load_cluster

    cfg = make_config(num_layers=2, hidden_size=2048, num_attention_heads=16, seq_length=1024, tp=2,
                      micro_batch_size=2, precision="fp16", framework="megatron-deepspeed",
                      attention_backend="unfused")
    block = next(b for b in build_graph(replace(cfg, **fields), load_cluster("dgx-a100")).stages[0].chunks[0].blocks
                 if b.name.startswith("dense_layer"))
    return list(block.fwd), list(block.bwd)


def _names(ops: list[Op]) -> list[str]:
    return [op.name for op in ops]


def test_local_layer_adds_the_qkv_bias_after_its_gemm_and_copies_the_context_after_the_av_bmm() -> None:
    fwd, bwd = _layer(transformer_impl="local")
    names = _names(fwd)
    assert names.index("attn.qkv_bias") == names.index("attn.qkv") + 1
    assert names.index("attn.context_copy") == names.index("attn.av") + 1
    tokens, qkv_width, context_width = 2 * 1024, 3 * 2048 // 2, 2048 // 2
    bias = fwd[names.index("attn.qkv_bias")]
    copy = fwd[names.index("attn.context_copy")]
    assert bias.bytes_moved == 2 * tokens * qkv_width * 2  # read the GEMM output, write the sum (fp16)
    assert copy.bytes_moved == 2 * tokens * context_width * 2
    # Backward: the bias-gradient sum reads the gradient once; the copy has no backward kernel.
    grads = [op for op in bwd if op.phase == "bwd"]
    assert next(op for op in grads if op.name == "attn.qkv_bias").bytes_moved == tokens * qkv_width * 2
    assert "attn.context_copy" not in _names(grads)


def test_both_cost_no_host_unit_in_any_phase() -> None:
    fwd, bwd = _layer(transformer_impl="local")
    extra = [op for op in fwd + bwd if op.name in ("attn.qkv_bias", "attn.context_copy")]
    assert {op.phase for op in extra} >= {"fwd", "bwd"}
    assert all(op_host_units(op) == 0.0 for op in extra)
    assert op_host_units(next(op for op in fwd if op.name == "attn.qkv")) == 1.0


def test_transformer_engine_layers_fuse_the_bias_and_have_no_local_core_attention() -> None:
    fwd, _ = _layer(transformer_impl="transformer_engine")
    assert "attn.qkv_bias" not in _names(fwd) and "attn.context_copy" not in _names(fwd)


def test_no_bias_add_without_a_qkv_bias_and_no_copy_under_flash_attention() -> None:
    from llmperf_hook.graph.sample_configs import make_config

    base = make_config(num_layers=2, hidden_size=2048, num_attention_heads=16, seq_length=1024, tp=2,
                       micro_batch_size=2, precision="fp16", framework="megatron-deepspeed")
    fwd, _ = _layer(transformer_impl="local", model=replace(base.model, add_bias_linear=False))
    assert "attn.qkv_bias" not in _names(fwd) and "attn.context_copy" in _names(fwd)
    fwd, _ = _layer(transformer_impl="local", attention_backend="flash")
    assert "attn.qkv_bias" in _names(fwd) and "attn.context_copy" not in _names(fwd)


def test_full_recompute_replays_both_and_selective_replays_the_copy_only() -> None:
    from llmperf_hook.frameworks.training_config import RecomputeConfig

    def replayed(granularity: str) -> list[str]:
        _, bwd = _layer(transformer_impl="local", recompute=RecomputeConfig(granularity=granularity))
        return _names([op for op in bwd if op.phase == "recompute"])
    assert {"attn.qkv_bias", "attn.context_copy"} <= set(replayed("full"))
    # Selective recompute checkpoints the core attention, whose forward ends with the context copy.
    assert "attn.context_copy" in replayed("selective") and "attn.qkv_bias" not in replayed("selective")


def test_torch_scripts_nn_linear_fuses_the_qkv_bias_into_addmm() -> None:
    """A torch script's attention is nn.Linear (aten::linear -> addmm: the bias in the GEMM's epilogue; the testbed's
    H200 kernel tables show 48 addmm a step and no bias add): no separate add, whichever framework steps it. The
    testbed's train_gpt.py under DeepSpeed resolves to the local layers with a QKV bias, so it was priced before."""
    import json
    import tempfile
    from pathlib import Path

    from llmperf_hook.api import resolve_command
    from llmperf_hook.graph.build import build_graph

    train = str(Path(__file__).resolve().parents[2] / "examples" / "cpu-testbed" / "train_gpt.py")
    with tempfile.TemporaryDirectory() as tmp:
        ds = Path(tmp) / "ds.json"
        ds.write_text(json.dumps({"zero_optimization": {"stage": 1}, "train_micro_batch_size_per_gpu": 2}))
        argv = ["deepspeed", "--num_gpus", "1", train, "--deepspeed_config", str(ds), "--no-pipeline-parallel",
                "--num-layers", "2", "--hidden-size", "1024", "--num-attention-heads", "16", "--seq-length", "1024",
                "--max-position-embeddings", "1024", "--vocab-size", "32000", "--bf16", "--micro-batch-size", "2",
                "--global-batch-size", "2"]
        _, cfg, cluster, _ = resolve_command(argv, {}, cluster="dgx-h100")
    assert cfg.transformer_impl == "local" and cfg.model.qkv_biased
    ops = [op.name for chunk in build_graph(cfg, cluster).stages[0].chunks for b in chunk.blocks for op in b.fwd]
    assert "attn.qkv" in ops and "attn.qkv_bias" not in ops
    megatron_fwd, _ = _layer(transformer_impl="local")
    assert "attn.qkv_bias" in _names(megatron_fwd)


def test_script_frameworks_match_the_schedules() -> None:
    """graph/local_kernels keeps its own copy of schedule/activations' set (the graph does not import stage [5])."""
    from llmperf_hook.graph.local_kernels import SCRIPT_FRAMEWORKS
    from llmperf_hook.schedule import activations

    assert SCRIPT_FRAMEWORKS == activations.SCRIPT_FRAMEWORKS
