"""tune's surrogate prices an MoE layer's dispatch / combine as the command's token dispatcher moves the tokens
(graph/moe_ops.py), so it orders expert-parallel layouts as the full model does: the allgather default, alltoall
and flex give the EP communication of the graph's ops; the bounded search finds the exhaustive top-5 under both
the default and alltoall; --overlap-moe-expert-parallel-comm hides the communication behind the layer."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest

from llmperf_hook import api
from llmperf_hook.frameworks.resolve import resolve_job
from llmperf_hook.graph.build import build_graph
from llmperf_hook.predict.alpha_beta import collective_time_s
from llmperf_hook.tune import search, surrogate, surrogate_moe
from llmperf_hook.tune.candidate import Candidate, apply_candidate
from llmperf_hook.tune.candidates import candidates_from_list, generate_candidates
from llmperf_hook.tune.search_space import parse_search_space
from llmperf_hook.frameworks.validation import validate_config

from .helpers import explain_valid, rule_rejected

# Mixtral-8x7B (Megatron-LM examples/mixtral) on 8 nodes of 8 GPUs, no dispatcher flag: Megatron's allgather.
MIXTRAL = [
    "torchrun", "--nnodes", "8", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "32",
    "--hidden-size", "4096", "--ffn-hidden-size", "14336", "--num-attention-heads", "32", "--group-query-attention",
    "--num-query-groups", "8", "--swiglu", "--normalization", "RMSNorm", "--position-embedding-type", "rope",
    "--untie-embeddings-and-output-weights", "--disable-bias-linear", "--num-experts", "8", "--moe-router-topk", "2",
    "--moe-grouped-gemm", "--expert-model-parallel-size", "2", "--seq-length", "4096", "--max-position-embeddings",
    "32768", "--vocab-size", "32000", "--micro-batch-size", "1", "--global-batch-size", "256",
    "--pipeline-model-parallel-size", "4", "--use-distributed-optimizer", "--bf16",
]
DISPATCHERS = {
    "allgather": [],
    "alltoall": ["--moe-token-dispatcher-type", "alltoall"],
    "flex": ["--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", "deepep"],
    "ncclep": ["--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", "ncclep"],
}
# Layouts whose tp_ep / EP groups stay on a node, span two nodes, or four (8 GPUs per node).
LAYOUTS = [(1, 4, 1, 2), (1, 4, 1, 8), (4, 1, 1, 1), (4, 1, 1, 4), (4, 1, 1, 8), (2, 2, 2, 8), (8, 1, 1, 8)]
# A space small enough to predict every candidate: TP, CP, PP and EP vary.
SPACE = {"micro_batch_size": [1, 2], "virtual_pipeline": [1], "context_parallel": [1, 2], "recompute": ["none", "full"],
         "distributed_optimizer": [True], "tensor_parallel": [1, 2, 4]}


@functools.lru_cache(maxsize=None)
def _cfg(kind: str):
    if kind == "deepspeed-moe":  # Megatron-DeepSpeed's DeepSpeed-MoE: an A2A of the top-k copies over EP
        return dataclasses.replace(_cfg("allgather"), framework="megatron-deepspeed")
    return resolve_job([*MIXTRAL, *DISPATCHERS[kind]], {})[1]


def _cand(tp: int, pp: int, cp: int, ep: int, mbs: int = 1) -> Candidate:
    return Candidate(tp, pp, 1, cp, tp > 1, mbs, "none", None, True, 0, ep=ep)


def _graph_ep_fwd_s(cfg, spec) -> float:
    """Seconds of the dispatch / combine collectives of one MoE layer's forward in the full graph (alpha-beta)."""
    graph = build_graph(cfg, spec)
    block = next(b for b in graph.stages[0].chunks[0].blocks if any(op.name.startswith("moe.") for op in b.fwd))
    return sum(collective_time_s(op, spec) for op in block.fwd
               if op.collective is not None and op.name.startswith(("moe.dispatch", "moe.combine")))


@pytest.mark.parametrize("kind", [*DISPATCHERS, "deepspeed-moe"])
def test_surrogate_ep_comm_follows_the_graph(kind: str) -> None:
    cfg, spec = _cfg(kind), api.load_cluster("dgx-h100")
    cands = tuple(_cand(*layout) for layout in LAYOUTS)
    cols = candidates_from_list(cands).columns
    tokens = cols["mbs"] * cfg.model.seq_length / cols["cp"]
    est = surrogate_moe.ep_comm_fwd_s(cfg, spec, cols, tokens)
    ref = np.array([_graph_ep_fwd_s(apply_candidate(cfg, c), spec) for c in cands])
    assert ref[0] > 0 and np.allclose(est, ref, rtol=0.02, atol=1e-6), (kind, est, ref)


def test_dispatchers_move_different_volumes() -> None:
    """TP 4, EP 8 (tp_ep = 32 ranks over 4 nodes): the allgather default gathers every token of the group, more
    than alltoall's top-2 copies. TP 1, EP 8 on one node: DeepEP sends a token once per distinct destination GPU
    (8 (1 - (7/8)^2) = 1.875 of its 2 copies), less than alltoall."""
    spec = api.load_cluster("dgx-h100")
    cols = candidates_from_list((_cand(4, 1, 1, 8), _cand(1, 4, 1, 8))).columns
    tokens = cols["mbs"] * 4096.0
    est = {k: surrogate_moe.ep_comm_fwd_s(_cfg(k), spec, cols, tokens) for k in ("allgather", "alltoall", "flex")}
    assert est["allgather"][0] > 1.5 * est["alltoall"][0]
    assert est["flex"][1] == pytest.approx(est["alltoall"][1] * 1.875 / 2, rel=0.02)


@pytest.mark.parametrize("kind", ["allgather", "alltoall"])
def test_step_estimate_ranks_expert_layouts_like_the_full_model(kind: str) -> None:
    cfg, spec = _cfg(kind), api.load_cluster("dgx-h100")
    table = generate_candidates(cfg, parse_search_space(SPACE), spec.gpus_per_node)
    order = np.random.default_rng(4).permutation(np.flatnonzero(~rule_rejected(cfg, table)))
    cands = explain_valid(cfg, table, order, limit=50)
    est = surrogate.estimate_step_time(cfg, spec, candidates_from_list(tuple(cands)).columns)
    full = np.array([api.predict_config(apply_candidate(cfg, c), spec).step_time_s for c in cands])
    rank = lambda x: np.argsort(np.argsort(x))  # noqa: E731
    assert {c.ep for c in cands} == {1, 2, 4, 8}
    assert np.corrcoef(rank(est), rank(full))[0, 1] > 0.9


@pytest.mark.parametrize("kind", ["allgather", "alltoall"])
def test_bounded_search_finds_the_exhaustive_top5(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """bench_tune's exhaustive check on a space small enough to predict in full: the bound changes nothing."""
    cfg, spec = _cfg(kind), api.load_cluster("dgx-h100")
    table = generate_candidates(cfg, parse_search_space(SPACE), spec.gpus_per_node)

    def run():
        return search.search_candidates(cfg, spec, table, top_k=5, margin=0.05, predict=api.predict_config,
                                        validate=validate_config)

    bounded = run()
    monkeypatch.setattr(search, "Z_BOUND", 1e6)
    monkeypatch.setattr(search, "MAX_FULL_PREDICTIONS", 10**9)
    full = run()
    assert bounded.num_full_predictions < full.num_full_predictions / 2
    assert [e.candidate for e in bounded.top] == [e.candidate for e in full.top]
    assert bounded.top[0].step_time_s == full.top[0].step_time_s


def test_ep_overlap_hides_the_dispatch_behind_the_layer() -> None:
    """--overlap-moe-expert-parallel-comm: exposed = max(0, comm - the layer's compute) (schedule/compose.py);
    at EP 1 there is nothing to hide, at EP 8 over two nodes the estimate drops."""
    spec = api.load_cluster("dgx-h100")
    plain = _cfg("alltoall")
    d = dataclasses.replace(plain.model.moe_dispatch, overlap_ep_comm=True)
    overlapped = dataclasses.replace(plain, model=dataclasses.replace(plain.model, moe_dispatch=d))
    cols = candidates_from_list((_cand(4, 1, 1, 8), _cand(1, 4, 1, 1))).columns
    with_overlap = surrogate.estimate_step_time(overlapped, spec, cols)
    without = surrogate.estimate_step_time(plain, spec, cols)
    assert with_overlap[0] < without[0] and with_overlap[1] == pytest.approx(without[1])
