"""DeepSpeed releases before v0.6.0 ran ZeRO-3 their own way (frameworks/deepspeed_release.py: per-tensor list
gathers after a device synchronize before v0.5.5, per-tensor gradient reduce-scatters before v0.6.0). A job of such a
release that tune moves to ZeRO-3 runs that ZeRO-3: tune prices the candidate exactly as `predict` prices the command
--apply writes; it priced today's ZeRO-3 (a ZeRO-1 job of DeepSpeed 0.4 listed ZeRO-3 far faster than it runs)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from llmperf_hook import api
from llmperf_hook.frameworks.deepspeed_release import RELEASE_KEY
from llmperf_hook.frameworks.resolve import JobOverrides
from llmperf_hook.tune.apply import plan_tuned_command, write_planned_files
from llmperf_hook.tune.candidate import apply_candidate, candidate_of

DS_SCRIPT = ["deepspeed", "--num_gpus", "8", "train.py", "--deepspeed_config", "ds.json"]
MODEL = JobOverrides(model="llama2-7b")


def _job(tmp_path: Path, stage: int, release: str | None, **zero: object):
    (tmp_path / "ds.json").write_text(json.dumps({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 1,
                                                  "bf16": {"enabled": True},
                                                  "zero_optimization": {"stage": stage, **zero}}))
    env = {"LLMPERF_DEEPSPEED_VERSION": release} if release else {}
    _, cfg, spec, _ = api.resolve_command(DS_SCRIPT, env, cluster="dgx-h100", overrides=MODEL)
    return cfg, spec, env


def _priced_and_applied(cfg, spec, env, stage: int):
    """(tune's step time for the job moved to `stage`, predict's for the command --apply writes)."""
    cand = dataclasses.replace(candidate_of(cfg), zero_stage=stage)
    priced = apply_candidate(cfg, cand)
    plan = plan_tuned_command(DS_SCRIPT, cfg, cand, priced)
    write_planned_files(plan)
    _, applied, _, _ = api.resolve_command(list(plan.argv), env, cluster="dgx-h100", overrides=MODEL)
    return priced, api.predict_config(priced, spec).step_time_s, api.predict_config(applied, spec).step_time_s


@pytest.mark.parametrize("release,list_gather", [("0.4.0", True), ("0.5.7", False)])
def test_a_move_to_zero3_runs_the_releases_zero3(release: str, list_gather: bool, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    cfg, spec, env = _job(tmp_path, 1, release)
    assert cfg.sources[RELEASE_KEY].detail.endswith(release) and not cfg.optimizer.zero3_per_tensor_grad_reduce
    priced, tuned_s, applied_s = _priced_and_applied(cfg, spec, env, 3)
    o = priced.optimizer
    assert (o.zero3_per_tensor_grad_reduce, o.zero3_list_param_gather) == (True, list_gather)
    assert tuned_s == pytest.approx(applied_s, rel=1e-9)
    today, spec_today, _ = _job(tmp_path, 1, None)
    _, today_s, _ = _priced_and_applied(today, spec_today, {}, 3)
    assert tuned_s > today_s  # the old ZeRO-3 is slower: what the ranking must see


@pytest.mark.parametrize("zero,overlap", [({"overlap_comm": True}, True), ({}, False)])
def test_a_move_from_the_releases_zero3_runs_todays_zero1(zero: dict, overlap: bool, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """DeepSpeed 0.4's ZeRO-3 overlaps nothing; at ZeRO-1 the ds_config's overlap_comm true overlaps again, and
    DeepSpeed's default (on at ZeRO-3 only) does not."""
    monkeypatch.chdir(tmp_path)
    cfg, spec, env = _job(tmp_path, 3, "0.4.0", **zero)
    assert not cfg.optimizer.overlap_grad_reduce and cfg.optimizer.stage3_prefetch_bucket_size_elems == 0
    priced, tuned_s, applied_s = _priced_and_applied(cfg, spec, env, 1)
    o = priced.optimizer
    assert o.overlap_grad_reduce == overlap and not (o.zero3_per_tensor_grad_reduce or o.zero3_list_param_gather)
    assert o.stage3_prefetch_bucket_size_elems > 0 and tuned_s == pytest.approx(applied_s, rel=1e-9)
