"""The search with a stand-in predictor: counts add up, top-K is exact among what was predicted, margins hold."""

import dataclasses

import pytest

from llmperf_hook.errors import ConfigError
from llmperf_hook.tune.candidate import apply_candidate
from llmperf_hook.tune.candidates import candidates_from_list, generate_candidates
from llmperf_hook.tune.search import search_candidates
from llmperf_hook.tune.search_space import load_search_space, parse_search_space

from .helpers import GiB, FakePredictor, a100_cluster, gpt_config, no_validation


def _search(cfg, cluster, space, top_k=5, validate=no_validation, predictor=None):
    table = generate_candidates(cfg, space, cluster.gpus_per_node)
    pred = predictor or FakePredictor()
    return search_candidates(cfg, cluster, table, top_k=top_k, margin=space.memory_margin,
                             predict=pred, validate=validate), table, pred


def test_counts_add_up_and_top_is_sorted_and_fits() -> None:
    cfg, cluster = gpt_config(), a100_cluster()
    res, table, pred = _search(cfg, cluster, load_search_space(None, "megatron"))
    accounted = (res.num_invalid + res.num_oom_estimated + res.num_oom_predicted + res.num_over_margin + res.num_slower
                 + res.num_fitting)
    assert accounted == res.num_considered == len(table)
    times = [e.step_time_s for e in res.top]
    assert times == sorted(times) and len(res.top) == 5
    assert all(e.fits and e.must_fit_bytes <= 0.95 * 80 * GiB for e in res.top)  # schedule/memory_rule.py
    assert res.baseline is not None and res.baseline.changes == {}
    assert pred.calls < len(table) / 10  # the bound skips most candidates


def test_top1_equals_exhaustive_best(monkeypatch) -> None:
    """With no pruning by estimate (every candidate predicted), the answer must be the same."""
    import llmperf_hook.tune.search as search

    cfg = gpt_config(layers=24, hidden=2048, heads=16, world=16, tp=1, pp=1, gbs=128)
    cluster = a100_cluster(40)
    space = load_search_space(None, "megatron")
    fast, _, _ = _search(cfg, cluster, space, top_k=3)
    monkeypatch.setattr(search, "Z_BOUND", 1e6)  # no candidate can be bounded out
    monkeypatch.setattr(search, "MAX_FULL_PREDICTIONS", 10**9)
    full, _, _ = _search(cfg, cluster, space, top_k=3)
    assert full.num_slower == 0 and fast.num_slower > 0 and fast.num_full_predictions < full.num_full_predictions / 5
    assert [e.candidate for e in fast.top] == [e.candidate for e in full.top]


def test_margin_is_applied() -> None:
    cfg, cluster = gpt_config(), a100_cluster()
    space = dataclasses.replace(load_search_space(None, "megatron"), memory_margin=0.5)
    res, _, _ = _search(cfg, cluster, space)
    assert res.top and all(e.must_fit_bytes <= 0.5 * 80 * GiB for e in res.top)


def test_framework_validation_rejections_are_counted() -> None:
    def reject_vpp(cfg):
        if cfg.parallel.vpp > 1:
            raise ConfigError("the interleaved schedule needs something. Details follow.")

    res, _, _ = _search(gpt_config(), a100_cluster(), load_search_space(None, "megatron"), validate=reject_vpp)
    assert all(e.candidate.vpp == 1 for e in res.top)
    assert res.invalid_by_rule.get("framework validation: the interleaved schedule needs something", 0) > 0


def test_nothing_fits_names_nearest_and_layers_that_fit() -> None:
    cfg = gpt_config(layers=96, hidden=12288, heads=96, world=8, tp=8, pp=1, gbs=64)
    res, _, _ = _search(cfg, a100_cluster(), load_search_space(None, "megatron"))
    assert res.top == ()
    assert res.nearest is not None and not res.nearest.fits
    assert res.layers_that_fit is None or res.layers_that_fit < 96
    if res.layers_that_fit:
        smaller = dataclasses.replace(res.nearest.config, model=dataclasses.replace(cfg.model, num_layers=res.layers_that_fit))
        est = FakePredictor()(smaller, a100_cluster())
        assert est.memory.must_fit_bytes <= 0.95 * est.memory.capacity_bytes  # tune's rule: schedule/memory_rule.py


def test_fixed_candidate_list_is_ranked() -> None:
    cfg, cluster = gpt_config(layers=24, hidden=2048, heads=16, world=8, tp=1, pp=1, gbs=64), a100_cluster()
    space = parse_search_space({"micro_batch_size": [1, 2, 4], "tensor_parallel": [1, 2], "pipeline_parallel": [1, 2]})
    full = generate_candidates(cfg, space, 8)
    cands = tuple(full.candidate(i) for i in range(min(len(full), 12)))
    res = search_candidates(cfg, cluster, candidates_from_list(cands), top_k=3, margin=0.05,
                            predict=FakePredictor(), validate=no_validation)
    pred = FakePredictor()
    fits = [(pred(apply_candidate(cfg, c), cluster).step_time_s, c) for c in cands
            if cfg.world_size % (c.tp * c.pp) == 0 and 64 % (c.micro_batch_size * cfg.world_size // (c.tp * c.pp)) == 0]
    assert res.top[0].candidate == min(fits, key=lambda t: t[0])[1]


def test_predictor_failures_on_single_layouts_are_counted_not_fatal() -> None:
    inner = FakePredictor()

    def flaky(cfg, cluster):
        if cfg.parallel.pp == 8 and cfg.batch.micro_batch_size == 2:
            raise AssertionError("pipeline schedule deadlocked (internal error)")
        if cfg.parallel.pp == 4 and cfg.batch.micro_batch_size == 4:
            raise ConfigError("the schedule rejects this. More text.")
        return inner(cfg, cluster)

    res, _, _ = _search(gpt_config(), a100_cluster(), load_search_space(None, "megatron"), predictor=flaky)
    assert res.top and all(not (e.candidate.pp == 8 and e.candidate.micro_batch_size == 2) for e in res.top)
    keys = " ".join(res.invalid_by_rule)
    assert "prediction failed (internal error" in keys or "framework validation: the schedule rejects this" in keys
