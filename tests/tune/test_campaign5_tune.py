"""Round-5 campaign: tune --apply on Megatron-DeepSpeed jobs whose ds_config sets the pipeline engine's
activation_checkpoint_interval (it overrides GPTModelPipe's, deepspeed/runtime/pipe/engine.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf_hook.frameworks.resolve import resolve_job
from llmperf_hook.tune.apply import plan_tuned_command, write_planned_files
from llmperf_hook.tune.candidate import apply_candidate, candidate_of

MDS = ["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", "--num-layers", "24", "--hidden-size", "2048",
       "--num-attention-heads", "16", "--seq-length", "2048", "--max-position-embeddings", "2048", "--vocab-size",
       "50257", "--micro-batch-size", "2", "--global-batch-size", "64", "--bf16", "--deepspeed", "--deepspeed_config",
       "ds.json", "--pipeline-model-parallel-size", "2"]


def test_a_candidate_without_recompute_releases_the_ds_config_interval(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ds.json").write_text(json.dumps({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2,
                                                  "zero_optimization": {"stage": 1}, "bf16": {"enabled": True},
                                                  "pipeline": {"activation_checkpoint_interval": 1}}))
    _, base_cfg = resolve_job(MDS, {})
    assert base_cfg.recompute.granularity == "full"
    base = candidate_of(base_cfg)
    new = base.__class__(**{**base.__dict__, "recompute": "none", "recompute_num_layers": None})
    new_cfg = apply_candidate(base_cfg, new)
    plan = plan_tuned_command(MDS, base_cfg, new, new_cfg, cwd=tmp_path)
    write_planned_files(plan)
    _, tuned = resolve_job(list(plan.argv), {})
    assert tuned.recompute.granularity == "none"
    assert json.loads((tmp_path / "ds.json").read_text())["pipeline"]["activation_checkpoint_interval"] == 1
