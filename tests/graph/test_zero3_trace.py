"""DeepSpeed ZeRO-3's fetch trace (graph/zero3_trace.py) and what it prices: the word embedding's and output layer's
fetches and gradient reduction (graph/zero_edge_ops.py), the layers' backward fetches the reuse distance skips, and
the gathered parameters in memory (schedule/memory.py zero3_live_params). Rules from DeepSpeed's
partitioned_param_coordinator.py (__params_to_release, fetch_sub_module's prefetch) and parameter_offload.py."""

from __future__ import annotations

from dataclasses import replace

from llmperf_hook.graph import params as pc
from llmperf_hook.graph.build import build_graph
from llmperf_hook.graph.sample_configs import make_config
from llmperf_hook.graph.zero3_trace import zero3_trace
from llmperf_hook.hardware.load import load_cluster
from llmperf_hook.schedule.memory import estimate_memory

DGX = load_cluster("dgx-a100")
H, V = 2048, 51200
LAYER_MODULES = (3 * H * H, H * H, 4 * H * H, 4 * H * H)  # QKV, projection, MLP up, MLP down (biases resident)
WORD = V * H + 2048 * H  # word + learned position table


def _cfg(framework: str = "hf-deepspeed", layers: int = 24, untie: bool = False, **opt: object):
    return make_config(num_layers=layers, hidden_size=H, num_attention_heads=16, dp=8, vocab_size=V,
                       framework=framework, model_kw=dict(untie_embeddings=untie),
                       optimizer_kw=dict(zero_stage=3, fp32_main_grads=False, **opt))  # DeepSpeed's 16-bit grads


def _fetched_layer() -> int:
    """A layer's fetched elements: its four modules, biases included; the two norms stay resident."""
    return pc.layer_params(_cfg(), False) - 2 * pc.norm_params(_cfg())


def test_module_sizes_of_the_gpt_layer() -> None:
    assert pc.zero3_gather_modules(_cfg(), pc.layer_params(_cfg(), False))[0] == LAYER_MODULES[0]
    assert zero3_trace(_cfg(), 0).embedding_elems == WORD


def test_tied_head_stays_gathered_from_the_embedding_within_the_reuse_distance() -> None:
    """Hugging Face ties lm_head.weight to embed_tokens.weight (one ds_id): between the embedding's forward and the
    head's the trace passes 24 layers of 50.3 M elements, 1.21e9 >= 1e9: released and fetched again; with 12 layers
    (0.60e9 < 1e9) it is still gathered. The head's backward follows its forward directly: never fetched again."""
    big, small = zero3_trace(_cfg(), 0), zero3_trace(_cfg(layers=12), 0)
    assert (big.head_fwd_fetch, big.head_bwd_fetch, big.embedding_bwd_fetch) == (True, False, True)
    assert (small.head_fwd_fetch, small.head_bwd_fetch, small.embedding_bwd_fetch) == (False, False, False)
    none = zero3_trace(_cfg(stage3_max_reuse_distance=0), 0)  # 0: every parameter released after each use
    assert (none.head_fwd_fetch, none.head_bwd_fetch, none.embedding_bwd_fetch, none.layer_bwd_fetch_skipped) == \
        (True, True, True, 0)


def test_last_layers_stay_gathered_across_the_turn() -> None:
    """Layer k from the end (0-based) is passed twice, with the head twice, between its forward and backward: its
    first module (QKV) is kept while 2 x (word + k whole layers + the rest of its own) < 1e9. Word 109 M, layer 50.3
    M: k = 7 keeps QKV (2 x (109.1 + 352.3 + 37.7) M = 0.998e9), k = 8 does not: 8 layers skip their backward fetch."""
    trace = zero3_trace(_cfg(), 0)
    layer = _fetched_layer()
    assert 2 * (WORD + 7 * layer + layer - LAYER_MODULES[0]) < 1e9 <= 2 * (WORD + 8 * layer + layer - LAYER_MODULES[0])
    assert trace.layer_bwd_fetch_skipped == 8
    # the peak at the turn: the word weight, the 8 kept layers, the modules of the ninth still under the distance,
    # and a prefetch bucket (5e7)
    assert 1e9 / 2 <= trace.peak_live_elems <= WORD + 9 * layer + 50_000_000


def test_megatron_deepspeed_root_holds_the_tied_embedding() -> None:
    """GPTModel computes the logits from word_embeddings.weight itself: an external parameter of the root module,
    gathered once per micro-batch and held through forward and backward, whatever the reuse distance."""
    trace = zero3_trace(_cfg("megatron-deepspeed", stage3_max_reuse_distance=0), 0)
    assert (trace.head_fwd_fetch, trace.head_bwd_fetch, trace.embedding_bwd_fetch) == (False, False, False)
    assert trace.peak_live_elems >= WORD + LAYER_MODULES[2]


def test_prefetch_is_bounded_by_the_bucket_and_max_live_parameters() -> None:
    """Without reuse, the peak is the module running plus what fetch_sub_module prefetches: whole parameters while
    under min(prefetch bucket, max_live - available) (so one parameter can overshoot it); a bucket of 0, or
    max_live_parameters 0, prefetches nothing."""
    base = dict(stage3_max_reuse_distance=0)
    lazy = zero3_trace(_cfg(untie=True, stage3_prefetch_bucket_size_elems=0, **base), 0)
    assert lazy.peak_live_elems == WORD  # the largest single parameter (the embedding / the untied output)
    capped = zero3_trace(_cfg(untie=True, stage3_max_live_parameters=0, **base), 0)
    assert capped.peak_live_elems == WORD
    # after the embedding's fetch: the first layer's four modules, 50.35 M >= 5e7 elements, are prefetched
    default = zero3_trace(_cfg(untie=True, **base), 0)
    assert default.peak_live_elems == WORD + _fetched_layer()


def _block(graph, name: str):
    return next(b for b in graph.stages[0].chunks[0].blocks if b.name == name)


def test_graph_prices_the_embedding_and_head_fetches_and_their_reduction() -> None:
    cfg = _cfg(untie=True, stage3_max_reuse_distance=0)
    graph = build_graph(cfg, DGX)
    embedding, head = _block(graph, "embedding"), _block(graph, "head")
    first = embedding.fwd[0]
    assert (first.op_class, first.dims["bytes"], first.tags) == ("allgather", 2 * WORD, {})  # exposed, 16-bit
    assert [op.tags.get("overlap") for op in head.fwd if op.op_class == "allgather"] == ["param_gather"]
    assert [op.dims["bytes"] for op in head.bwd if op.op_class == "allgather"] == [2 * V * H]  # reuse 0: again
    # the gradients of both are reduced in each micro-batch's backward, not once per step
    assert embedding.bwd[-1].op_class == head.bwd[-1].op_class == "reducescatter"
    assert embedding.bwd[-1].dims["bytes"] == 2 * WORD
    assert not [op for op in graph.stages[0].step_ops if op.op_class == "reducescatter"]


def test_kept_layers_drop_their_backward_fetch_share() -> None:
    cfg = _cfg()
    layer = next(b for b in _block_names(build_graph(cfg, DGX)) if b.name == "dense_layer")
    fwd = next(op for op in layer.fwd if op.name == "zero3.param_allgather")
    bwd = next(op for op in layer.bwd if op.name == "zero3.param_allgather")
    assert bwd.dims["bytes"] == int(fwd.dims["bytes"] * (1 - 8 / 24))


def _block_names(graph):
    return graph.stages[0].chunks[0].blocks


def test_memory_holds_what_the_trace_holds() -> None:
    cfg = _cfg()
    held = estimate_memory(cfg, build_graph(cfg, DGX), DGX).components["zero3_live_params"]
    assert held == 2 * zero3_trace(cfg, 0).peak_live_elems
    tight = replace(cfg, optimizer=replace(cfg.optimizer, stage3_max_reuse_distance=0))
    assert estimate_memory(tight, build_graph(tight, DGX), DGX).components["zero3_live_params"] < held / 2
