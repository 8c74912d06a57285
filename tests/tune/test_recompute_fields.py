"""A Megatron candidate that changes recompute is priced with the RecomputeConfig `explain` resolves for the rewritten
command (as test_zero_stage_fields does for the optimizer): the user's --recompute-modules (3e355ed), Megatron-
DeepSpeed's --partition-activations / --checkpoint-in-cpu (a full -> block move priced them off, and a move to full
from selective or none), and --moe-layer-recompute dropped where the candidate leaves selective
(TransformerConfig.__post_init__ raises ValueError on it under full granularity, and turns selective back on under
none)."""

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
    "Megatron-DeepSpeed selective": [*MDS, "--recompute-granularity", "selective"],
    "Megatron-DeepSpeed no recompute": [*MDS],
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


def test_a_move_to_full_keeps_deepspeeds_checkpointing_flags() -> None:
    """Full uniform -> block priced --partition-activations / --checkpoint-in-cpu off (fixed by ddf9d76); a move to
    full from selective or none priced them off while the written command (which keeps the flags) runs them on. A move
    to none or selective drops --deepspeed-activation-checkpointing (tune/megatron_argv.py), so they are off there."""
    for start in (["--checkpoint-activations"], [], ["--recompute-granularity", "selective"]):
        base = _resolve([*MDS, *start])
        for mode, layers in MODES:
            r = apply_candidate(base, dataclasses.replace(candidate_of(base), recompute=mode,
                                                          recompute_num_layers=layers)).recompute
            on = mode in ("full", "block") or (mode, layers) == (base.recompute.granularity, None)
            assert (r.partition_activations, r.checkpoint_in_cpu) == (on, on), (mode, start)


@pytest.mark.parametrize("start", [[], ["--recompute-granularity", "selective"]])
def test_tunes_full_recompute_peak_is_the_written_commands(start: list[str], tmp_path: Path) -> None:
    """The surrogate prices a full-recompute candidate of a selective / no-recompute job with the checkpoints split
    over TP and kept in host memory, as predict prices the command --apply writes."""
    from llmperf_hook.commands.tune import memory_only
    from llmperf_hook.tune import surrogate
    from llmperf_hook.tune.candidates import candidates_from_list

    argv = [*MDS, *start]
    _, cfg, spec, _ = api.resolve_command(argv, dict(os.environ), cluster="dgx-h100")
    cand = dataclasses.replace(candidate_of(cfg), recompute="full", recompute_num_layers=1)
    peak = surrogate.estimate(cfg, spec, candidates_from_list((cand,)).columns).peak_bytes[0]
    applied = _resolve(list(plan_tuned_command(argv, cfg, cand, apply_candidate(cfg, cand), tmp_path).argv))
    off = dataclasses.replace(applied, recompute=dataclasses.replace(applied.recompute, partition_activations=False,
                                                                     checkpoint_in_cpu=False))
    assert peak == pytest.approx(memory_only(applied, spec).peak_bytes_per_gpu, abs=64)
    assert memory_only(off, spec).peak_bytes_per_gpu > memory_only(applied, spec).peak_bytes_per_gpu + 1e6


def test_tunes_host_offloads_name_checkpoint_in_cpu_where_a_candidate_uses_it() -> None:
    from llmperf_hook.tune.infeasible import host_offloads

    assert host_offloads(_resolve([*MDS, "--checkpoint-activations"])) == ["--checkpoint-in-cpu"]
    for start in ([], ["--recompute-granularity", "selective"]):
        assert host_offloads(_resolve([*MDS, *start])) == ["--checkpoint-in-cpu (full-recompute candidates)"]
