"""A Megatron candidate that changes recompute is priced with the RecomputeConfig `explain` resolves for the rewritten
command (as test_zero_stage_fields does for the optimizer): the user's --recompute-modules (3e355ed), Megatron-
DeepSpeed's --partition-activations / --checkpoint-in-cpu under any full recompute (a full -> block move priced them
off), and --moe-layer-recompute dropped where the candidate leaves selective (TransformerConfig.__post_init__ raises
ValueError on it under full granularity, and turns selective back on under none)."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from llmperf_hook import api
from llmperf_hook.frameworks.training_config import RecomputeConfig
from llmperf_hook.tune.apply import plan_tuned_command
from llmperf_hook.tune.candidate import apply_candidate, candidate_of

MODEL = ["--num-layers", "8", "--hidden-size", "2048", "--num-attention-heads", "16", "--seq-length", "2048",
         "--max-position-embeddings", "2048", "--vocab-size", "32000", "--micro-batch-size", "1",
         "--global-batch-size", "64", "--bf16", "--tensor-model-parallel-size", "2"]
MEGATRON = ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", *MODEL]
MDS = ["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", *MODEL, "--deepspeed", "--deepspeed_config", "ds.json",
       "--zero-stage", "1", "--deepspeed-activation-checkpointing", "--partition-activations", "--checkpoint-in-cpu"]
FULL = ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
MOE = ["--num-experts", "8", "--moe-router-topk", "2", "--moe-grouped-gemm", "--expert-model-parallel-size", "4",
       "--swiglu", "--disable-bias-linear", "--sequence-parallel"]
COMMANDS = {
    "full, modules mlp": [*MEGATRON, *FULL, "--recompute-modules", "mlp"],
    "selective, modules core_attn mlp": [*MEGATRON, "--recompute-granularity", "selective", "--recompute-modules",
                                         "core_attn", "mlp"],
    "--recompute-activations": [*MEGATRON, "--recompute-activations"],
    "no recompute, modules mlp": [*MEGATRON, "--recompute-modules", "mlp"],
    "full, distributed saved": [*MEGATRON, *FULL, "--distribute-saved-activations"],
    "--moe-layer-recompute": [*MEGATRON, *MOE, "--moe-layer-recompute"],
    "Megatron-DeepSpeed --checkpoint-activations": [*MDS, "--checkpoint-activations"],
    "Megatron-DeepSpeed full": [*MDS, *FULL],
}
MODES = [("none", None), ("selective", None), ("full", 1), ("block", 2)]


def _resolve(argv: list[str]):
    return api.resolve_command(argv, dict(os.environ), cluster="dgx-h100")[1]


def _read(r: RecomputeConfig) -> RecomputeConfig:
    """What Megatron reads of it: the modules only under selective (TransformerConfig checks and uses them there)."""
    return r if r.granularity == "selective" else dataclasses.replace(r, modules=())


@pytest.fixture(autouse=True)
def _ds_config(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ds.json").write_text(json.dumps({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 1,
                                                  "bf16": {"enabled": True}, "zero_optimization": {"stage": 1}}))


@pytest.mark.parametrize("mode,layers", MODES)
@pytest.mark.parametrize("name", list(COMMANDS))
def test_the_candidates_recompute_is_what_the_applied_command_resolves_to(name: str, mode: str, layers: int | None,
                                                                          tmp_path: Path) -> None:
    argv = COMMANDS[name]
    cfg = _resolve(argv)
    cand = dataclasses.replace(candidate_of(cfg), recompute=mode, recompute_num_layers=layers)
    priced = apply_candidate(cfg, cand)
    applied = _resolve(list(plan_tuned_command(argv, cfg, cand, priced, tmp_path).argv))
    assert _read(applied.recompute) == _read(priced.recompute)


def test_a_move_to_block_keeps_deepspeeds_checkpointing() -> None:
    """The case that failed: full uniform -> block priced --partition-activations / --checkpoint-in-cpu off."""
    cfg = _resolve([*MDS, "--checkpoint-activations"])
    priced = apply_candidate(cfg, dataclasses.replace(candidate_of(cfg), recompute="block", recompute_num_layers=2))
    assert priced.recompute.partition_activations and priced.recompute.checkpoint_in_cpu
    to_selective = apply_candidate(cfg, dataclasses.replace(candidate_of(cfg), recompute="selective",
                                                            recompute_num_layers=None))
    assert not (to_selective.recompute.partition_activations or to_selective.recompute.checkpoint_in_cpu)
