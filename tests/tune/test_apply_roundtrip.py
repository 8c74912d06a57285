"""Property: for any valid candidate, the command --apply writes parses (issue 2's resolve_job, what `explain`
runs) into exactly the configuration tune predicted for it."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from llmperf_hook.frameworks.resolve import JobOverrides, resolve_job
from llmperf_hook.tune.apply import plan_tuned_command, write_planned_files
from llmperf_hook.tune.candidate import apply_candidate, candidate_of
from llmperf_hook.tune.candidates import generate_candidates
from llmperf_hook.tune.search_space import load_search_space, parse_search_space

from .helpers import explain_valid, rule_rejected
from .test_tune_command import SMALL_MEGATRON

MDS = ["torchrun", "--nnodes", "2", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "24", "--hidden-size",
       "2048", "--num-attention-heads", "16", "--seq-length", "2048", "--max-position-embeddings", "2048",
       "--tokenizer-type", "GPT2BPETokenizer", "--micro-batch-size", "1", "--global-batch-size", "256",
       "--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2", "--checkpoint-activations",
       "--fp16", "--deepspeed", "--deepspeed_config", "ds.json", "--zero-stage", "1"]


def _valid_candidates(argv: list[str], space) -> tuple:
    _, cfg = resolve_job(argv, {})
    table = generate_candidates(cfg, space, 8)
    out = explain_valid(cfg, table, np.flatnonzero(~rule_rejected(cfg, table)))
    return cfg, out


def _key(cfg) -> tuple:
    p, b, r, o = cfg.parallel, cfg.batch, cfg.recompute, cfg.optimizer
    return (p.tp, p.pp, p.vpp, p.cp, p.dp, p.sequence_parallel, b.micro_batch_size, b.global_batch_size,
            b.num_microbatches, r.granularity, r.method if r.granularity == "full" else None,
            r.num_layers if r.granularity == "full" else None, o.distributed_optimizer, o.zero_stage,
            cfg.model.padded_vocab_size, cfg.pipeline_schedule, cfg.deepspeed_pipeline_engine, p.ep, p.etp)


@functools.lru_cache(maxsize=1)
def _mds_candidates() -> tuple:
    """Needs ds.json in the working directory on first call (the test writes it)."""
    return _valid_candidates(MDS, load_search_space(None, "megatron-deepspeed"))


SPACE = parse_search_space({"recompute": ["none", "selective", "full", "block"],
                            "context_parallel": [1, 2], "micro_batch_size": [1, 2, 4]})
MEG_CFG, MEG_CANDS = _valid_candidates(SMALL_MEGATRON, SPACE)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, len(MEG_CANDS) - 1))
def test_megatron_roundtrip(i: int) -> None:
    cand = MEG_CANDS[i]
    plan = plan_tuned_command(SMALL_MEGATRON, MEG_CFG, cand, apply_candidate(MEG_CFG, cand))
    _, parsed = resolve_job(list(plan.argv), {})
    assert _key(parsed) == _key(apply_candidate(MEG_CFG, cand)), plan.argv


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_megatron_deepspeed_roundtrip(tmp_path: Path, monkeypatch, data) -> None:
    monkeypatch.chdir(tmp_path)
    ds = {"train_batch_size": 256, "train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 1},
          "fp16": {"enabled": True}}
    for f in tmp_path.glob("ds*.json"):
        f.unlink()
    (tmp_path / "ds.json").write_text(json.dumps(ds))
    cfg, cands = _mds_candidates()
    cand = data.draw(st.sampled_from(cands))
    plan = plan_tuned_command(MDS, cfg, cand, apply_candidate(cfg, cand))
    write_planned_files(plan)
    _, parsed = resolve_job(list(plan.argv), {})
    assert _key(parsed) == _key(apply_candidate(cfg, cand)), plan.argv
    assert json.loads((tmp_path / "ds.json").read_text()) == ds


@pytest.mark.parametrize("auto", [True, False])
def test_hugging_face_roundtrip(tmp_path: Path, monkeypatch, auto: bool) -> None:
    """Trainer + DeepSpeed: ds values ("auto" or explicit) and Trainer flags stay equal, as the Trainer demands."""
    monkeypatch.chdir(tmp_path)
    micro, gas = ("auto", "auto") if auto else (2, 4)
    ds = {"train_batch_size": "auto" if auto else 64, "train_micro_batch_size_per_gpu": micro,
          "gradient_accumulation_steps": gas, "zero_optimization": {"stage": 2}, "bf16": {"enabled": True}}
    (tmp_path / "ds.json").write_text(json.dumps(ds))
    argv = ["deepspeed", "--num_gpus", "8", "run_clm.py", "--model_name_or_path", "meta-llama/Meta-Llama-3-8B",
            "--deepspeed", "ds.json", "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "4",
            "--bf16", "True", "--output_dir", "out"]
    overrides = JobOverrides(model="llama3-8b")
    _, cfg = resolve_job(argv, {}, overrides)
    assert cfg.framework == "hf-deepspeed"
    space = load_search_space(None, cfg.framework)
    table = generate_candidates(cfg, space, 8)
    cands = [table.candidate(i) for i in range(len(table))]
    cands = [c for c in cands if 64 % (c.micro_batch_size * 8) == 0 and c != candidate_of(cfg)]
    assert cands
    for cand in cands:
        plan = plan_tuned_command(argv, cfg, cand, apply_candidate(cfg, cand))
        write_planned_files(plan)
        _, parsed = resolve_job(list(plan.argv), {}, overrides)
        assert _key(parsed) == _key(apply_candidate(cfg, cand)), plan.argv
        for f in tmp_path.glob("ds.llmperf-tuned*.json"):
            f.unlink()
    assert json.loads((tmp_path / "ds.json").read_text()) == ds


_GPT = ["torchrun", "--nnodes", "2", "--nproc-per-node", "8", "pretrain_gpt.py", "--hidden-size", "2048",
        "--num-attention-heads", "16", "--seq-length", "2048", "--max-position-embeddings", "2048",
        "--vocab-size", "50257", "--micro-batch-size", "1", "--bf16"]
SHAPES = {  # command forms whose rewrite went wrong once (each commit's regression), layers 24 unless given
    "no --global-batch-size (Megatron's default micro x DP)": ["--num-layers", "24", "--tensor-model-parallel-size", "2"],
    "--account-for-*-in-pipeline-split": ["--num-layers", "30", "--global-batch-size", "64",
                                          "--pipeline-model-parallel-size", "2",
                                          "--account-for-embedding-in-pipeline-split",
                                          "--account-for-loss-in-pipeline-split"],
    "--sequence-parallel at TP 1": ["--num-layers", "24", "--global-batch-size", "64", "--sequence-parallel"],
    "--virtual-pipeline-model-parallel-size": ["--num-layers", "24", "--global-batch-size", "64",
                                               "--pipeline-model-parallel-size", "2",
                                               "--virtual-pipeline-model-parallel-size", "3"],
    "MoE with expert parallelism": ["--num-layers", "24", "--global-batch-size", "64", "--num-experts", "8",
                                    "--moe-router-topk", "2", "--expert-model-parallel-size", "2",
                                    "--tensor-model-parallel-size", "2", "--sequence-parallel",
                                    "--moe-token-dispatcher-type", "alltoall"],
    "uneven first / last stages": ["--num-layers", "24", "--global-batch-size", "64", "--pipeline-model-parallel-size",
                                   "4", "--decoder-first-pipeline-num-layers", "4", "--decoder-last-pipeline-num-layers",
                                   "8", "--num-virtual-stages-per-pipeline-rank", "2"],
}
_SHAPE_SPACE = parse_search_space({"micro_batch_size": [1, 2, 4], "context_parallel": [1, 2]})


@functools.lru_cache(maxsize=None)
def _shape_candidates(name: str) -> tuple:
    argv = [*_GPT, *SHAPES[name]]
    _, cfg = resolve_job(argv, {})
    table = generate_candidates(cfg, _SHAPE_SPACE, 8)
    rows = np.random.default_rng(0).permutation(np.flatnonzero(~rule_rejected(cfg, table)))
    return argv, cfg, explain_valid(cfg, table, rows, limit=60)


@pytest.mark.parametrize("name", sorted(SHAPES))
@settings(max_examples=12, deadline=None)
@given(data=st.data())
def test_command_forms_roundtrip(name: str, data) -> None:
    """The rewritten command of any valid layout resolves to that layout and to the global batch tune held."""
    argv, cfg, cands = _shape_candidates(name)
    cand = data.draw(st.sampled_from(cands))
    plan = plan_tuned_command(argv, cfg, cand, apply_candidate(cfg, cand))
    _, parsed = resolve_job(list(plan.argv), {})
    assert _key(parsed) == _key(apply_candidate(cfg, cand)), plan.argv
    assert parsed.batch.global_batch_size == cfg.batch.global_batch_size
