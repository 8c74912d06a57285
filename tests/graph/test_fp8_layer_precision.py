"""FP8 recipes in the graph: --first-last-layers-bf16 keeps the network's first and last transformer layers out of
FP8 (megatron/core/fp8_utils.py is_first_last_bf16_layer), and --fp8-recipe tensorwise tags every FP8 GEMM for its
current-scaling amax pass (predict/roofline.fp8_quantize_s)."""

from __future__ import annotations

import pytest

from llmperf_hook import api
from llmperf_hook.graph.build import build_graph
from llmperf_hook.hardware.load import load_cluster
from llmperf_hook.schedule.compose import compose_step
from llmperf_hook.predict.dispatch import predict_op_times

BASE = ("torchrun --nnodes 1 --nproc-per-node 8 pretrain_gpt.py --num-layers 8 --hidden-size 4096 "
        "--num-attention-heads 32 --ffn-hidden-size 14336 --swiglu --normalization RMSNorm "
        "--position-embedding-type rope --seq-length 4096 --max-position-embeddings 4096 --vocab-size 32000 "
        "--micro-batch-size 1 --global-batch-size 32 --tensor-model-parallel-size 1 "
        "--pipeline-model-parallel-size 2 --bf16 --fp8-format hybrid --use-distributed-optimizer")


def _graph(extra: str):
    cfg = api.resolve_command((BASE + " " + extra).split(), {"CUDA_DEVICE_MAX_CONNECTIONS": "1"},
                              cluster="dgx-h100")[1]
    cluster = load_cluster("dgx-h100")
    return cfg, cluster, build_graph(cfg, cluster)


def _layer_gemm_dtypes(graph, stage: int) -> list[tuple[str, int]]:
    """(dtype of the block's QKV GEMM, block count) per transformer-layer block of a stage."""
    out = []
    for chunk in graph.stages[stage].chunks:
        for block in chunk.blocks:
            if block.name.startswith("dense_layer"):
                qkv = next(op for op in block.fwd if op.name == "attn.qkv")
                out.append((qkv.dtype, block.count))
    return out


def test_first_and_last_layers_run_in_bf16() -> None:
    cfg, _, graph = _graph("--fp8-recipe tensorwise --first-last-layers-bf16")
    assert (cfg.bf16_layers_at_start, cfg.bf16_layers_at_end) == (1, 1)
    assert _layer_gemm_dtypes(graph, 0) == [("bf16", 1), ("fp8", 3)]
    assert _layer_gemm_dtypes(graph, 1) == [("fp8", 3), ("bf16", 1)]
    cfg, _, graph = _graph("--fp8-recipe tensorwise --first-last-layers-bf16 --num-layers-at-start-in-bf16 2 "
                           "--num-layers-at-end-in-bf16 0")
    assert _layer_gemm_dtypes(graph, 0) == [("bf16", 2), ("fp8", 2)]
    assert _layer_gemm_dtypes(graph, 1) == [("fp8", 4)]


def test_without_the_flag_every_layer_is_fp8_and_bf16_runs_are_untouched() -> None:
    cfg, _, graph = _graph("--fp8-recipe tensorwise")
    assert (cfg.bf16_layers_at_start, cfg.bf16_layers_at_end) == (0, 0)
    assert _layer_gemm_dtypes(graph, 0) == [("fp8", 4)] and _layer_gemm_dtypes(graph, 1) == [("fp8", 4)]
    bf16_run = BASE.replace(" --fp8-format hybrid", "") + " --first-last-layers-bf16"
    cfg = api.resolve_command(bf16_run.split(), {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}, cluster="dgx-h100")[1]
    graph = build_graph(cfg, load_cluster("dgx-h100"))
    assert _layer_gemm_dtypes(graph, 0) == [("bf16", 4)] and _layer_gemm_dtypes(graph, 1) == [("bf16", 4)]


def _step_s(extra: str) -> float:
    cfg, cluster, graph = _graph(extra)
    seconds = dict(predict_op_times(graph, cluster, cfg.precision).seconds)
    return compose_step(graph, seconds, cfg, host_per_op_s=cluster.host_overhead_per_op_s).step_time_s


def test_bf16_edge_layers_cost_more_than_fp8_ones() -> None:
    fp8 = _step_s("--fp8-recipe tensorwise")
    edges = _step_s("--fp8-recipe tensorwise --first-last-layers-bf16")
    # One of each stage's four layers runs its GEMMs at the bf16 rate (FP8 is 1.6-2.0x faster, predict/fp8_gemm.py).
    assert fp8 * 1.03 < edges < fp8 * 1.25


def test_current_scaling_tags_the_fp8_linear_gemms() -> None:
    _, _, graph = _graph("--fp8-recipe tensorwise")
    gemms = [op for c in graph.stages[0].chunks for b in c.blocks for op in b.fwd + b.bwd if op.op_class == "gemm"]
    assert gemms and all(op.tags.get("fp8_scaling") == "current" for op in gemms if op.dtype == "fp8")
    _, _, graph = _graph("")  # delayed scaling, Megatron's default recipe
    gemms = [op for c in graph.stages[0].chunks for b in c.blocks for op in b.fwd + b.bwd if op.op_class == "gemm"]
    assert gemms and not any("fp8_scaling" in op.tags for op in gemms)


def test_current_scaling_is_slower_than_delayed() -> None:
    assert _step_s("--fp8-recipe tensorwise") > _step_s("") * 1.005


def test_bf16_edge_layers_with_delayed_scaling_are_refused() -> None:
    """TransformerConfig raises 'Delayed scaling does not support first / last layer in BF16' (exit 2)."""
    from llmperf_hook.errors import ConfigError

    with pytest.raises(ConfigError, match="Delayed scaling does not support"):
        _graph("--first-last-layers-bf16")


def test_sequence_parallel_gemms_name_the_operand_tp_gathers() -> None:
    def tags(extra: str) -> dict[str, str]:
        _, _, graph = _graph(extra)
        block = next(b for c in graph.stages[0].chunks for b in c.blocks if b.name.startswith("dense_layer"))
        return {op.name: op.tags.get("fp8_sp_gathered", "") for op in block.fwd if op.op_class == "gemm"}

    assert tags("--tensor-model-parallel-size 2 --sequence-parallel") == {
        "attn.qkv": "input/2", "attn.proj": "grad/2", "mlp.fc1": "input/2", "mlp.fc2": "grad/2"}
    assert set(tags("--tensor-model-parallel-size 2").values()) == {""}  # no SP: TP all-reduces, nothing gathered


def test_more_bf16_edge_layers_than_a_stage_holds_are_refused() -> None:
    """TransformerConfig: num_layers_at_start_in_bf16 must be between 0 and num_layers // pipeline size (8 // 2)."""
    from llmperf_hook.errors import ConfigError

    with pytest.raises(ConfigError, match="number of layers per pipeline stage \\(4\\)"):
        _graph("--fp8-recipe tensorwise --first-last-layers-bf16 --num-layers-at-start-in-bf16 5")
    _graph("--fp8-recipe tensorwise --first-last-layers-bf16 --num-layers-at-start-in-bf16 4")


def test_fp8_linears_gather_their_sequence_shards_quantized() -> None:
    """TE's FP8 linears all-gather the quantized input shard and output gradient (1 B per element); the output
    reduce-scatter and the input-gradient reduce-scatter stay bf16 (2 B). A bf16 run gathers 2 B everywhere."""
    def comm_bytes(extra: str) -> dict[tuple[str, str, str], int]:
        _, _, graph = _graph("--tensor-model-parallel-size 2 --sequence-parallel " + extra)
        block = next(b for c in graph.stages[0].chunks for b in c.blocks if b.name.startswith("dense_layer"))
        return {(op.name, op.phase, op.op_class): op.dims["bytes"] for op in block.fwd + block.bwd
                if op.collective is not None and op.collective.group == "tp"}

    shard = 4096 * 4096  # tokens x hidden elements of the gathered tensor
    fp8 = comm_bytes("")
    assert fp8[("attn.tp_allgather", "fwd", "allgather")] == shard
    assert fp8[("attn.tp_allgather.bwd_regather", "bwd", "allgather")] == shard
    assert fp8[("attn.tp_allgather", "bwd", "reducescatter")] == 2 * shard
    assert fp8[("attn.tp_reduce", "fwd", "reducescatter")] == 2 * shard
    assert fp8[("attn.tp_reduce", "bwd", "allgather")] == shard
    cfg = api.resolve_command((BASE.replace(" --fp8-format hybrid", "") + " --tensor-model-parallel-size 2 "
                               "--sequence-parallel").split(), {"CUDA_DEVICE_MAX_CONNECTIONS": "1"},
                              cluster="dgx-h100")[1]
    graph = build_graph(cfg, load_cluster("dgx-h100"))
    block = next(b for c in graph.stages[0].chunks for b in c.blocks if b.name.startswith("dense_layer"))
    assert {op.dims["bytes"] for op in block.fwd + block.bwd
            if op.collective is not None and op.collective.group == "tp"} == {2 * shard}


def test_block_recipes_gather_the_output_gradient_in_both_layouts() -> None:
    """mxfp8 / blockwise: GEMMs tagged fp8_scaling=block; the input shard is still gathered row-wise in FP8 (1 B),
    but the row-parallel output gradient is gathered row- and column-wise (linear.py _Linear.backward sets both
    usages; distributed.py _all_gather_mxfp8): 2 B per element, no bwd_payload=fp8 tag, unlike tensorwise."""
    def tp_ops(recipe: str) -> dict[tuple[str, str], object]:
        _, _, graph = _graph(f"--tensor-model-parallel-size 2 --sequence-parallel --fp8-recipe {recipe}")
        block = next(b for c in graph.stages[0].chunks for b in c.blocks if b.name.startswith("dense_layer"))
        return {(op.name, op.phase): op for op in block.fwd + block.bwd}

    shard = 4096 * 4096
    for recipe, grad_bytes, scaling in (("blockwise", 2 * shard, "block"), ("tensorwise", shard, "current")):
        ops = tp_ops(recipe)
        assert ops[("attn.qkv", "fwd")].tags["fp8_scaling"] == scaling
        assert ops[("attn.tp_allgather", "fwd")].dims["bytes"] == shard
        assert ops[("attn.tp_reduce", "bwd")].dims["bytes"] == grad_bytes, recipe
