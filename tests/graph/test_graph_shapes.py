"""Per-rank shapes, placement and parameter counts of the operator graph."""

import pytest

from llmperf_hook.frameworks.training_config import MoeDispatch
from llmperf_hook.graph.build import build_graph
from llmperf_hook.graph.placement import place_group
from llmperf_hook.graph.sample_configs import gpt3_175b, llama3_8b, make_config
from llmperf_hook.graph.stages import layers_per_virtual_stage
from llmperf_hook.hardware.load import load_cluster

DGX = load_cluster("dgx-a100")


def _layer_ops(graph, stage=0, name="dense_layer"):
    block = next(b for b in graph.stages[stage].chunks[0].blocks if b.name.startswith(name))
    return {op.name: op for op in block.fwd}, block


def test_tp_sp_shapes_follow_megatron() -> None:
    cfg = gpt3_175b(tp=8, pp=8, dp=1, sequence_parallel=True, micro_batch_size=2, global_batch_size=16)
    ops, _ = _layer_ops(build_graph(cfg, DGX))
    tokens = 2 * 2048
    assert dict(ops["attn.qkv"].dims) == {"m": tokens, "n": 3 * 12288 // 8, "k": 12288}
    assert dict(ops["mlp.fc2"].dims) == {"m": tokens, "n": 12288, "k": 4 * 12288 // 8}
    assert ops["attn.norm"].dims["tokens"] == tokens // 8  # sequence parallel: norms see s/tp
    assert ops["attn.tp_allgather"].op_class == "allgather"
    assert ops["mlp.tp_reduce"].op_class == "reducescatter"
    assert ops["mlp.tp_reduce"].dims["bytes"] == tokens * 12288 * 2
    assert ops["attn.core"].dims["heads"] == 12


def test_without_sp_tp_uses_allreduce_and_full_tokens() -> None:
    cfg = gpt3_175b(tp=8, pp=8, dp=1, global_batch_size=8)
    ops, block = _layer_ops(build_graph(cfg, DGX))
    assert "attn.tp_allgather" not in ops and ops["attn.tp_reduce"].op_class == "allreduce"
    assert ops["attn.norm"].dims["tokens"] == 2048
    assert block.count == 12
    bwd_classes = [op.op_class for op in block.bwd if op.is_comm]
    assert bwd_classes == ["allreduce", "allreduce"]


def test_gqa_swiglu_rope_context_parallel_shapes() -> None:
    cfg = llama3_8b(tp=2, cp=2, dp=2, global_batch_size=4)
    ops, _ = _layer_ops(build_graph(cfg, load_cluster("dgx-h100")))
    tokens = 8192 // 2
    assert dict(ops["attn.qkv"].dims) == {"m": tokens, "n": (16 + 2 * 4) * 128, "k": 4096}
    assert ops["mlp.fc1"].dims["n"] == 2 * 14336 // 2
    assert ops["attn.rope"].op_class == "rope" and ops["mlp.swiglu"].op_class == "swiglu"
    assert ops["attn.cp_kv_exchange"].collective.group == "cp"
    assert ops["attn.norm"].op_class == "rmsnorm"


def test_moe_layer_has_router_alltoall_and_local_experts() -> None:
    cfg = make_config(num_layers=4, hidden_size=4096, num_attention_heads=32, ffn_hidden_size=14336, dp=8, ep=8,
                      global_batch_size=8, model_kw=dict(num_experts=8, moe_router_topk=2, swiglu=True,
                                                         moe_dispatch=MoeDispatch(token_dispatcher="alltoall")))
    graph = build_graph(cfg, load_cluster("dgx-h100"))
    ops, block = _layer_ops(graph, name="moe_layer")
    assert ops["moe.router"].dims["experts"] == 8
    assert ops["moe.dispatch_alltoall"].collective.group_size == 8
    experts = [op for op in block.fwd if op.name == "moe.expert_fc1"]
    assert len(experts) == 1  # 8 experts over EP 8: one local expert
    assert experts[0].dims["m"] == 2048 * 2  # tokens * topk routed to this rank
    assert graph.stages[0].num_expert_params > 0


def test_placement_tp_inside_node_dp_across_nodes() -> None:
    cfg = gpt3_175b(tp=8, pp=16, dp=8, global_batch_size=1536)
    tp = place_group("tp", 8, cfg.parallel, 8)
    dp = place_group("dp_cp", 8, cfg.parallel, 8)
    assert tp.intra_node and tp.groups_sharing_node == 1
    assert not dp.intra_node and dp.ranks_per_node == 1 and dp.groups_sharing_node == 8
    small = make_config(num_layers=2, hidden_size=256, num_attention_heads=4, tp=2, dp=4)
    assert place_group("dp_cp", 4, small.parallel, 8).intra_node
    four = place_group("dp_cp", 4, small.parallel, 4)  # 4 GPUs per node, stride 2: 2 per node, 2 nodes
    assert four.ranks_per_node == 2 and four.num_nodes == 2 and four.groups_sharing_node == 2


def test_gpt3_parameter_count_and_flops() -> None:
    cfg = gpt3_175b(tp=8, pp=16, dp=8, global_batch_size=1536)
    graph = build_graph(cfg, DGX)
    params = sum(s.num_params for s in graph.stages) * 8
    assert 174e9 < params < 177e9
    tokens = 1536 * 2048
    # 6 N T plus causal attention: within a few % of 6 * 175e9 * tokens
    assert 0.98 < graph.model_flops_per_step / (6 * 175e9 * tokens) < 1.08


def test_uneven_first_last_stage_layers() -> None:
    cfg = make_config(num_layers=30, hidden_size=512, num_attention_heads=8, pp=4, dp=1, global_batch_size=8,
                      parallel_kw=dict(decoder_first_pipeline_num_layers=6, decoder_last_pipeline_num_layers=6))
    assert layers_per_virtual_stage(cfg) == [6, 9, 9, 6]
    graph = build_graph(cfg, DGX)
    assert [s.num_layers for s in graph.stages] == [6, 9, 9, 6]
    assert graph.stages[0].chunks[0].blocks[0].name == "embedding"
    assert graph.stages[-1].chunks[0].blocks[-1].name == "head"


def test_interleaved_chunks_and_full_recompute_blocks() -> None:
    cfg = make_config(num_layers=16, hidden_size=512, num_attention_heads=8, pp=2, vpp=2, dp=1,
                      global_batch_size=8, recompute="full")
    graph = build_graph(cfg, DGX)
    assert [len(s.chunks) for s in graph.stages] == [2, 2]
    layer = next(b for b in graph.stages[1].chunks[0].blocks if b.name.startswith("dense_layer"))
    assert layer.name == "dense_layer.recomputed" and layer.count == 4
    assert sum(op.phase == "recompute" for op in layer.bwd) == len(layer.fwd)


def test_zero3_gathers_per_layer_and_zero2_reduces_in_backward() -> None:
    z3 = make_config(num_layers=4, hidden_size=1024, num_attention_heads=16, dp=8, framework="deepspeed",
                     optimizer_kw=dict(zero_stage=3, stage3_max_reuse_distance=0))  # re-fetched before the backward
    _, block = _layer_ops(build_graph(z3, DGX))
    assert block.fwd[0].name == "zero3.param_allgather"
    assert [op.name for op in block.bwd if op.name.startswith("zero")] == [
        "zero3.param_allgather", "zero.grad_reduce_scatter"]
    z2 = make_config(num_layers=4, hidden_size=1024, num_attention_heads=16, dp=8, framework="deepspeed",
                     optimizer_kw=dict(zero_stage=2))
    graph = build_graph(z2, DGX)
    _, block = _layer_ops(graph)
    assert block.bwd[-1].name == "zero.grad_reduce_scatter"
    assert any(op.name == "dp.param_allgather" for op in graph.stages[0].step_ops)


def test_placement_uses_the_launch_processes_per_node() -> None:
    from dataclasses import replace

    cfg = make_config(num_layers=4, hidden_size=1024, num_attention_heads=16, tp=8, dp=2, global_batch_size=2)
    packed = build_graph(cfg, load_cluster("dgx-h100"))
    spread = build_graph(replace(cfg, nnodes=4, nproc_per_node=4), load_cluster("dgx-h100"))
    tp_packed = next(op for op in packed.stages[0].chunks[0].blocks[1].fwd if op.name == "attn.tp_reduce")
    tp_spread = next(op for op in spread.stages[0].chunks[0].blocks[1].fwd if op.name == "attn.tp_reduce")
    assert tp_packed.collective.intra_node and not tp_spread.collective.intra_node
    assert tp_spread.collective.ranks_per_node == 4


def test_zero3_without_prefetch_fetches_each_module_exposed_and_again_for_recompute() -> None:
    """stage3_prefetch_bucket_size 0: QKV, projection, MLP up and down fetched when reached (untagged, so the
    schedule exposes them); full recompute fetches once more before the recomputed forward. Reuse distance 0, as
    in a model far over DeepSpeed's 1e9 elements: this 50 M-element one would stay gathered (zero3_trace)."""
    kw = dict(num_layers=4, hidden_size=1024, num_attention_heads=16, dp=8, framework="deepspeed")
    lazy = make_config(**kw, recompute="full", optimizer_kw=dict(zero_stage=3, stage3_prefetch_bucket_size_elems=0,
                                                                 stage3_max_reuse_distance=0))
    _, block = _layer_ops(build_graph(lazy, DGX))
    fetch_f = [op for op in block.fwd if op.name == "zero3.param_fetch"]
    fetch_b = [op for op in block.bwd if op.name == "zero3.param_fetch"]
    assert len(fetch_f) == 4 and len(fetch_b) == 8 and not any(op.tags for op in fetch_f)
    h = 1024
    assert [op.dims["bytes"] for op in fetch_f][:2] == [3 * h * h * 2, h * h * 2]  # QKV, projection (bf16)
    assert sum(op.dims["bytes"] for op in fetch_f) == pytest.approx(12 * h * h * 2, rel=0.01)
    prefetched = make_config(**kw, recompute="full", optimizer_kw=dict(zero_stage=3, stage3_max_reuse_distance=0,
                                                                       stage3_max_live_parameters=0))
    _, block = _layer_ops(build_graph(prefetched, DGX))
    gathers = [op for op in block.bwd if op.name == "zero3.param_allgather"]
    assert len(gathers) == 2 and all(op.tags.get("overlap") == "param_gather" for op in gathers)


def test_zero3_exposed_fetches_lengthen_the_step() -> None:
    from llmperf_hook.api import predict_config

    kw = dict(num_layers=8, hidden_size=4096, num_attention_heads=32, dp=64, framework="deepspeed", recompute="full")
    hidden = predict_config(make_config(**kw, optimizer_kw=dict(zero_stage=3)), DGX)
    exposed = predict_config(make_config(**kw, optimizer_kw=dict(zero_stage=3, stage3_prefetch_bucket_size_elems=0)),
                             DGX)
    assert exposed.step_time_s > hidden.step_time_s
    assert exposed.breakdown["comm_zero"] > 0


def test_tp_comm_overlap_leaves_the_last_pipelined_reduce_scatter_chunk_exposed() -> None:
    """TE userbuffers' "pipeline" overlap (4 chunks) hides the reduce-scatter of chunks 1-3 under the next chunk's
    GEMM; the last quarter stays on the critical path in forward, its backward mirror (ring-exchange all-gather
    of the dgrad GEMM) hides."""
    from llmperf_hook.schedule.op_timeline import hidden_comm

    cfg = gpt3_175b(tp=8, pp=1, dp=1, sequence_parallel=True, global_batch_size=1,
                    optimizer_kw=dict(tp_comm_overlap=True))
    ops, block = _layer_ops(build_graph(cfg, DGX))
    full, tail = ops["attn.tp_reduce"], ops["attn.tp_reduce.tail"]
    assert full.dims["bytes"] + tail.dims["bytes"] == 2048 * 12288 * 2 and tail.dims["bytes"] == 2048 * 12288 * 2 // 4
    assert hidden_comm(full, True) and not hidden_comm(tail, True)
    tail_bwd = next(op for op in block.bwd if op.name == "attn.tp_reduce.tail")
    assert tail_bwd.op_class == "allgather" and hidden_comm(tail_bwd, True)
    plain = gpt3_175b(tp=8, pp=1, dp=1, sequence_parallel=True, global_batch_size=1)
    assert "attn.tp_reduce.tail" not in _layer_ops(build_graph(plain, DGX))[0]


def test_cross_entropy_traffic_follows_megatrons_passes() -> None:
    """fp32 cast, max, subtract, exp, sum, divide: 38 bytes per logit forward; scale and cast back: 14 backward."""
    cfg = gpt3_175b(tp=8, pp=1, dp=1, global_batch_size=1)
    graph = build_graph(cfg, DGX)
    head = next(b for b in graph.stages[0].chunks[0].blocks if b.name == "head")
    fwd = next(op for op in head.fwd if op.name == "head.cross_entropy")
    bwd = next(op for op in head.bwd if op.name == "head.cross_entropy")
    logits = fwd.dims["tokens"] * fwd.dims["vocab"]
    assert fwd.bytes_moved == 38 * logits and bwd.bytes_moved == pytest.approx(14 * logits)
