"""A DeepSpeed candidate that changes the ZeRO stage is priced with the optimizer settings DeepSpeed derives for that
stage, as `explain` / `predict` resolve them from the rewritten command's ds_config: overlap_comm (unset) on at ZeRO-3
only, ZeRO-1/2's bucket all-reduce. apply_candidate kept the command's (ZeRO-0) values, so tune ranked ZeRO-1 at
2.718 s and ZeRO-3 at 2.743 s where predict says 2.744 s and 2.631 s for the applied commands (Llama-2 7B, 8 H100s)."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from llmperf_hook import api
from llmperf_hook.frameworks.resolve import JobOverrides
from llmperf_hook.tune.apply import plan_tuned_command, write_planned_files
from llmperf_hook.tune.candidate import apply_candidate, candidate_of


def _resolve(argv: list[str]):
    return api.resolve_command(argv, dict(os.environ), cluster="dgx-h100", overrides=JobOverrides(model="llama2-7b"))[1]


@pytest.mark.parametrize("zero", [{"stage": 0}, {"stage": 1}, {"stage": 3}, {"stage": 2, "overlap_comm": False},
                                  {"stage": 0, "reduce_scatter": False},
                                  {"stage": 0, "use_multi_rank_bucket_allreduce": False}])
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_the_candidates_optimizer_is_what_the_applied_command_resolves_to(zero: dict, stage: int, tmp_path: Path,
                                                                          monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ds.json").write_text(json.dumps({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 1,
                                                  "bf16": {"enabled": True}, "zero_optimization": zero}))
    argv = ["deepspeed", "--num_gpus", "8", "train.py", "--deepspeed_config", "ds.json"]
    cfg = _resolve(argv)
    cand = dataclasses.replace(candidate_of(cfg), zero_stage=stage, micro_batch_size=2)
    priced = apply_candidate(cfg, cand)
    plan = plan_tuned_command(argv, cfg, cand, priced, tmp_path)
    write_planned_files(plan)
    applied = _resolve(list(plan.argv))
    assert applied.optimizer == priced.optimizer, {f.name: (getattr(priced.optimizer, f.name),
                                                            getattr(applied.optimizer, f.name))
                                                   for f in dataclasses.fields(applied.optimizer)
                                                   if getattr(priced.optimizer, f.name) != getattr(applied.optimizer, f.name)}


@pytest.mark.parametrize("zero", [{"stage": 2}, {"stage": 1}, {"stage": 2, "contiguous_gradients": False}])
@pytest.mark.parametrize("stage", [1, 2])
def test_a_release_that_runs_zero1_without_contiguous_gradients(zero: dict, stage: int, tmp_path: Path,
                                                                monkeypatch) -> None:
    """DeepSpeed 0.10.0 all-reduces ZeRO-1 buckets (its engine turns contiguous gradients off at stage 1) and
    reduce-scatters ZeRO-2's: a candidate moving between them is priced as the applied command resolves."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LLMPERF_DEEPSPEED_VERSION", "0.10.0")
    (tmp_path / "ds.json").write_text(json.dumps({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 1,
                                                  "bf16": {"enabled": True}, "zero_optimization": zero}))
    argv = ["deepspeed", "--num_gpus", "8", "train.py", "--deepspeed_config", "ds.json"]
    cfg = _resolve(argv)
    priced = apply_candidate(cfg, dataclasses.replace(candidate_of(cfg), zero_stage=stage))
    assert priced.optimizer.zero_grad_allreduce == (stage == 1 or "contiguous_gradients" in zero)
    plan = plan_tuned_command(argv, cfg, dataclasses.replace(candidate_of(cfg), zero_stage=stage), priced, tmp_path)
    write_planned_files(plan)
    assert _resolve(list(plan.argv)).optimizer == priced.optimizer


@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_megatron_deepspeed_zero_stages_too(stage: int, tmp_path: Path, monkeypatch) -> None:
    """Megatron-DeepSpeed: --zero-stage (and --no-pipeline-parallel for ZeRO-2/3) rewritten in argv, the ds_config's
    derived settings as DeepSpeed derives them for the new stage."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ds.json").write_text(json.dumps({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 1,
                                                  "bf16": {"enabled": True}, "zero_optimization": {"stage": 1}}))
    argv = ["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", "--num-layers", "24", "--hidden-size", "2048",
            "--num-attention-heads", "16", "--seq-length", "2048", "--max-position-embeddings", "2048", "--vocab-size",
            "32000", "--micro-batch-size", "1", "--global-batch-size", "64", "--bf16", "--deepspeed",
            "--deepspeed_config", "ds.json", "--zero-stage", "1"]
    cfg = _resolve(argv)
    cand = dataclasses.replace(candidate_of(cfg), zero_stage=stage)
    priced = apply_candidate(cfg, cand)
    plan = plan_tuned_command(argv, cfg, cand, priced, tmp_path)
    write_planned_files(plan)
    assert _resolve(list(plan.argv)).optimizer == priced.optimizer
