"""Property, stronger than test_apply_roundtrip's layout key: the command `--apply` writes for a valid candidate
resolves (as `explain` and `predict` resolve it) to exactly the TrainingConfig tune priced for it, every field of every
stage output but the provenance and warnings. A field tune derives differently from the framework (a ZeRO stage
change priced with DeepSpeed's default bucket all-reduce where the ds_config or the release said otherwise, R14)
shows up here as the field's name."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from llmperf_hook.frameworks.resolve import JobOverrides, resolve_job
from llmperf_hook.tune.apply import plan_tuned_command, write_planned_files
from llmperf_hook.tune.candidate import apply_candidate
from llmperf_hook.tune.candidates import generate_candidates
from llmperf_hook.tune.search_space import load_search_space

from .helpers import explain_valid, rule_rejected
from .test_apply_predict_agreement import DS_SCRIPT
from .test_apply_roundtrip import _GPT, MDS, SHAPES

HF_TRAINER = ["deepspeed", "--num_gpus", "8", "run_clm.py", "--model_name_or_path", "meta-llama/Meta-Llama-3-8B",
              "--deepspeed", "ds.json", "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "4",
              "--bf16", "True", "--gradient_checkpointing", "--output_dir", "out"]
JOBS = {  # name -> (argv, ds_config zero_optimization or None, --model, env)
    **{f"megatron, {name}": ([*_GPT, *extra], None, None, {}) for name, extra in SHAPES.items()},
    "megatron-deepspeed": (MDS, {"stage": 1}, None, {}),
    "deepspeed ZeRO-0": (DS_SCRIPT, {"stage": 0}, "llama2-7b", {}),
    "deepspeed use_multi_rank_bucket_allreduce false": (
        DS_SCRIPT, {"stage": 0, "use_multi_rank_bucket_allreduce": False}, "llama2-7b", {}),
    "deepspeed 0.10 (before use_multi_rank_bucket_allreduce)": (
        DS_SCRIPT, {"stage": 3}, "llama2-7b", {"LLMPERF_DEEPSPEED_VERSION": "0.10.0"}),
    # Releases before v0.6.0 ran ZeRO-3 their own way (frameworks/deepspeed_release.py): a candidate moving to or
    # from ZeRO-3 runs that release's ZeRO-3, as the applied command's explain says.
    "deepspeed 0.5.4 ZeRO-1 (per-tensor ZeRO-3 reduce)": (
        DS_SCRIPT, {"stage": 1}, "llama2-7b", {"LLMPERF_DEEPSPEED_VERSION": "0.5.4"}),
    "deepspeed 0.4.0 ZeRO-1 overlap_comm true (synchronous ZeRO-3 fetch)": (
        DS_SCRIPT, {"stage": 1, "overlap_comm": True}, "llama2-7b", {"LLMPERF_DEEPSPEED_VERSION": "0.4.0"}),
    "deepspeed 0.4.0 ZeRO-3 overlap_comm true": (
        DS_SCRIPT, {"stage": 3, "overlap_comm": True}, "llama2-7b", {"LLMPERF_DEEPSPEED_VERSION": "0.4.0"}),
    "deepspeed reduce_scatter false": (DS_SCRIPT, {"stage": 2, "reduce_scatter": False}, "llama2-7b", {}),
    "deepspeed overlap_comm false": (DS_SCRIPT, {"stage": 3, "overlap_comm": False}, "llama2-7b", {}),
    "hugging face trainer, use_multi_rank_bucket_allreduce false": (
        HF_TRAINER, {"stage": 0, "use_multi_rank_bucket_allreduce": False}, "llama3-8b", {}),
}


def _differences(priced: Any, applied: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    if dataclasses.is_dataclass(priced):
        return [d for f in dataclasses.fields(priced) if f.name not in ("sources", "warnings")
                for d in _differences(getattr(priced, f.name), getattr(applied, f.name), f"{path}.{f.name}")]
    return [] if priced == applied else [(path, priced, applied)]


@pytest.mark.parametrize("name", sorted(JOBS))
def test_the_applied_command_resolves_to_the_priced_config(name: str, tmp_path: Path, monkeypatch) -> None:
    argv, zero, model, env = JOBS[name]
    monkeypatch.chdir(tmp_path)
    if zero is not None:
        batch = {"train_batch_size": 256 if argv is MDS else 64, "train_micro_batch_size_per_gpu": 1}
        if argv is HF_TRAINER:  # the Trainer fills them from its flags
            batch = dict.fromkeys(("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps"),
                                  "auto")
        (tmp_path / "ds.json").write_text(json.dumps({**batch, "fp16": {"enabled": argv is not HF_TRAINER},
                                                      "bf16": {"enabled": argv is HF_TRAINER}, "zero_optimization": zero}))
    overrides = JobOverrides(model=model)
    _, cfg = resolve_job(argv, env, overrides)
    table = generate_candidates(cfg, load_search_space(None, cfg.framework), 8)
    rows = np.random.default_rng(0).permutation(np.flatnonzero(~rule_rejected(cfg, table)))
    cands = explain_valid(cfg, table, rows, limit=16)
    assert len(cands) >= 8
    if zero is not None:
        assert {c.zero_stage for c in cands} != {cfg.optimizer.zero_stage}  # stage changes are among them
    for cand in cands:
        priced = apply_candidate(cfg, cand)
        plan = plan_tuned_command(argv, cfg, cand, priced)
        write_planned_files(plan)
        _, applied = resolve_job(list(plan.argv), env, overrides)
        assert _differences(priced, applied) == [], (cand.describe(), plan.argv)
