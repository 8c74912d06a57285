"""DeepSpeed ZeRO-3's fetch trace (graph/zero3_trace.py) and what it prices: the word embedding's and output layer's
fetches and gradient reduction (graph/zero_edge_ops.py), the layers' backward fetches the reuse distance skips, and
the gathered parameters in memory (schedule/memory.py zero3_live_params). Rules from DeepSpeed's
partitioned_param_coordinator.py (__params_to_release, fetch_sub_module's prefetch) and parameter_offload.py."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmperf_hook.frameworks.training_config import RecomputeConfig
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
    # distance 0 and no prefetch: every parameter released after each use
    none = zero3_trace(_cfg(stage3_max_reuse_distance=0, stage3_prefetch_bucket_size_elems=0), 0)
    assert (none.head_fwd_fetch, none.head_bwd_fetch, none.embedding_bwd_fetch, none.layer_bwd_fetch_skipped) == \
        (True, True, True, 0)


def test_last_layers_stay_gathered_across_the_turn() -> None:
    """Layer k from the end (0-based) is passed twice, with the head twice, between its forward and backward: its
    first module (QKV) is kept while 2 x (word + k whole layers + the rest of its own) < 1e9. Word 109 M, layer 50.3
    M: k = 7 keeps QKV (2 x (109.1 + 352.3 + 37.7) M = 0.998e9), k = 8 does not: 8 layers skip their backward fetch
    (prefetch off, so that only the distance keeps them)."""
    trace = zero3_trace(_cfg(stage3_prefetch_bucket_size_elems=0), 0)
    layer = _fetched_layer()
    assert 2 * (WORD + 7 * layer + layer - LAYER_MODULES[0]) < 1e9 <= 2 * (WORD + 8 * layer + layer - LAYER_MODULES[0])
    assert trace.layer_bwd_fetch_skipped == 8
    # the peak at the turn: the word weight, the 8 kept layers, the modules of the ninth still under the distance
    assert 1e9 / 2 <= trace.peak_live_elems <= WORD + 9 * layer


def test_megatron_deepspeed_root_holds_the_tied_embedding() -> None:
    """GPTModel computes the logits from word_embeddings.weight itself: an external parameter of the root module,
    gathered once per micro-batch and held through forward and backward, whatever the reuse distance."""
    trace = zero3_trace(_cfg("megatron-deepspeed", stage3_max_reuse_distance=0), 0)
    assert (trace.head_fwd_fetch, trace.head_bwd_fetch, trace.embedding_bwd_fetch) == (False, False, False)
    assert trace.peak_live_elems >= WORD + LAYER_MODULES[2]


def test_prefetch_accumulates_up_to_max_live_parameters() -> None:
    """fetch_sub_module pops the fetch queue: each module's prefetch takes whole parameters beyond the previous ones
    while under min(prefetch bucket, max_live - available), so what is gathered grows by up to a bucket per module
    until max_live_parameters caps it (one parameter can overshoot); a bucket of 0, or max_live_parameters 0,
    prefetches nothing. Without reuse."""
    base = dict(stage3_max_reuse_distance=0)
    lazy = zero3_trace(_cfg(untie=True, stage3_prefetch_bucket_size_elems=0, **base), 0)
    assert lazy.peak_live_elems == WORD  # the largest single parameter (the embedding / the untied output)
    capped = zero3_trace(_cfg(untie=True, stage3_max_live_parameters=0, **base), 0)
    assert capped.peak_live_elems == WORD
    # the 24 layers (1.21e9 elements) are longer than the 1e9 cap: gathered elements reach it, overshot by at most
    # one parameter (here the 104.9 M untied output layer)
    default = zero3_trace(_cfg(untie=True, **base), 0)
    assert 1e9 <= default.peak_live_elems <= 1e9 + V * H
    limited = zero3_trace(_cfg(untie=True, stage3_max_live_parameters=300_000_000, **base), 0)
    assert 300_000_000 <= limited.peak_live_elems <= 300_000_000 + V * H


def test_a_use_the_prefetch_passed_keeps_its_parameter_gathered() -> None:
    """__params_to_release keeps a parameter whose later use the prefetch queue has already passed
    (most_recent_step_id_param_fetched_for > step_id), whatever the reuse distance: with distance 0 the layers the
    queue reaches across the forward/backward turn skip their backward fetch; with the queue held back by
    max_live_parameters 0 none do."""
    ahead = zero3_trace(_cfg(stage3_max_reuse_distance=0), 0)
    held_back = zero3_trace(_cfg(stage3_max_reuse_distance=0, stage3_max_live_parameters=0), 0)
    assert held_back.layer_bwd_fetch_skipped == 0 < ahead.layer_bwd_fetch_skipped
    # the head's backward use is the very next module: released at distance 0 even though the queue passed it
    assert ahead.head_bwd_fetch


def _block(graph, name: str):
    return next(b for b in graph.stages[0].chunks[0].blocks if b.name == name)


def test_graph_prices_the_embedding_and_head_fetches_and_their_reduction() -> None:
    cfg = _cfg(untie=True, stage3_max_reuse_distance=0, stage3_max_live_parameters=60_000_000)
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
    for cfg in (_cfg(), _cfg(stage3_prefetch_bucket_size_elems=0)):
        layer = next(b for b in _block_names(build_graph(cfg, DGX)) if b.name == "dense_layer")
        fwd, bwd = (sum(op.dims["bytes"] for op in ops if op.name.startswith("zero3.param_")) for ops in
                    (layer.fwd, layer.bwd))
        skipped = zero3_trace(cfg, 0).layer_bwd_fetch_skipped
        assert bwd == pytest.approx(fwd * (1 - skipped / 24), abs=4)
    assert skipped == 8  # the distance alone (test_last_layers_stay_gathered_across_the_turn)


def _block_names(graph):
    return graph.stages[0].chunks[0].blocks


def test_memory_holds_what_the_trace_holds() -> None:
    cfg = _cfg()
    held = estimate_memory(cfg, build_graph(cfg, DGX), DGX).components["zero3_live_params"]
    assert held == 2 * zero3_trace(cfg, 0).peak_live_elems
    tight = replace(cfg, optimizer=replace(cfg.optimizer, stage3_max_reuse_distance=0,
                                           stage3_max_live_parameters=100_000_000))
    assert estimate_memory(tight, build_graph(tight, DGX), DGX).components["zero3_live_params"] < held / 2


def test_the_recompute_gather_serves_the_backward_within_the_reuse_distance() -> None:
    """Full recompute: the checkpointed layer's modules run again inside backward with their ZeRO-3 hooks, and each
    module's backward follows its recompute within a few modules (a 50.3 M-element layer, far under the 1e9 reuse
    distance): __params_to_release keeps the recompute's gather for the backward, which fetches nothing. Prefetch
    off, so that only the distance keeps: layer k from the end keeps its forward gather into its recompute while
    its rest (37.7 M) + the word weight twice (head forward and backward, 218.1 M) + 3k layers < 1e9, k <= 4: 19 of
    the 24 layers fetch once after the forward, 5 not at all (the old price was 2 fetches for each). With distance
    0 every module is fetched for the recompute and again for its backward; the prefetch (default) keeps more."""
    def full(**opt: object):
        return replace(_cfg(**opt), recompute=RecomputeConfig(granularity="full", method="uniform", num_layers=1))

    near = full(stage3_prefetch_bucket_size_elems=0)
    far = full(stage3_max_reuse_distance=0, stage3_prefetch_bucket_size_elems=0)
    assert zero3_trace(near, 0).layer_bwd_fetches * 24 == pytest.approx(19)
    assert zero3_trace(far, 0).layer_bwd_fetches == 2.0
    assert zero3_trace(full(), 0).layer_bwd_fetches < 19 / 24
    for cfg, fetches in ((near, 19 / 24), (far, 2.0)):
        layer = next(b for b in _block_names(build_graph(cfg, DGX)) if b.name == "dense_layer.recomputed")
        fwd, bwd = (sum(op.dims["bytes"] for op in ops if op.name.startswith("zero3.param_")) for ops in
                    (layer.fwd, layer.bwd))
        assert bwd == pytest.approx(fwd * fetches, rel=1e-6)


def test_a_checkpoint_of_several_layers_is_recomputed_whole_before_its_backward() -> None:
    """--recompute-method uniform --recompute-num-layers 2 (Megatron-DeepSpeed --checkpoint-num-layers 2): each pair
    of layers runs its forward again, then both backwards. Reuse distance 2 layers + 1 element, prefetch off: with
    one layer per checkpoint every module's backward follows its recompute within the distance (each layer fetched
    once after the forward); with pairs, the first layer's QKV, projection and MLP up lie more than two layers from
    their backward use and are fetched again; its MLP down (two layers away) and the second layer stay gathered."""
    layer = _fetched_layer()

    def fetches(n: int) -> float:
        cfg = _cfg(stage3_prefetch_bucket_size_elems=0, stage3_max_reuse_distance=2 * layer + 1)
        cfg = replace(cfg, recompute=RecomputeConfig(granularity="full", method="uniform", num_layers=n))
        return zero3_trace(cfg, 0).layer_bwd_fetches * 24

    assert fetches(1) == pytest.approx(24)
    assert fetches(2) == pytest.approx(24 + 12 * (1 - LAYER_MODULES[-1] / layer), rel=1e-4)  # biases: 1e-5
