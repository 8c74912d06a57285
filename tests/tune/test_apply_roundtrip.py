"""Property: for any valid candidate, the command --apply writes parses (issue 2's resolve_job, what `explain`
runs) into exactly the configuration tune predicted for it."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.resolve import resolve_job
from llmperf_hook.frameworks.validation import validate_config
from llmperf_hook.tune.apply import plan_tuned_command, write_planned_files
from llmperf_hook.tune.candidate import apply_candidate, candidate_of
from llmperf_hook.tune.candidates import generate_candidates, rule_masks
from llmperf_hook.tune.search_space import load_search_space, parse_search_space

from .test_tune_command import SMALL_MEGATRON

MDS = ["torchrun", "--nnodes", "2", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "24", "--hidden-size",
       "2048", "--num-attention-heads", "16", "--seq-length", "2048", "--max-position-embeddings", "2048",
       "--tokenizer-type", "GPT2BPETokenizer", "--micro-batch-size", "1", "--global-batch-size", "256",
       "--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size", "2", "--checkpoint-activations",
       "--fp16", "--deepspeed", "--deepspeed_config", "ds.json", "--zero-stage", "1"]


def _valid_candidates(argv: list[str], space) -> tuple:
    _, cfg = resolve_job(argv, {})
    table = generate_candidates(cfg, space, 8)
    bad = np.zeros(len(table), dtype=bool)
    for mask in rule_masks(cfg, table.columns).values():
        bad |= mask
    out = []
    for i in np.flatnonzero(~bad):
        cand = table.candidate(int(i))
        try:
            validate_config(apply_candidate(cfg, cand))
        except ConfigError:
            continue
        out.append(cand)
    return cfg, out


def _key(cfg) -> tuple:
    p, b, r, o = cfg.parallel, cfg.batch, cfg.recompute, cfg.optimizer
    return (p.tp, p.pp, p.vpp, p.cp, p.dp, p.sequence_parallel, b.micro_batch_size, b.global_batch_size,
            b.num_microbatches, r.granularity, r.method if r.granularity == "full" else None,
            r.num_layers if r.granularity == "full" else None, o.distributed_optimizer, o.zero_stage,
            cfg.model.padded_vocab_size, cfg.pipeline_schedule, cfg.deepspeed_pipeline_engine)


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
