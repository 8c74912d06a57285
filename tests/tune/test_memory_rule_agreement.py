"""tune and predict share one memory rule (schedule/memory_rule.py): over a sample of candidates of a Megatron-LM
job, DeepSpeed ZeRO-1/2/3 jobs and an HF Trainer FSDP job, on a GPU sized so that the sample straddles the border,
a candidate tune keeps (search.evaluate at its margin) is one `llmperf predict` says fits on a GPU of (1 - margin) x
that capacity, and one it drops for memory is one predict says does not fit there; with no margin, tune keeps what
predict says fits on the GPU itself; and the memory model's pruning (the surrogate's must-fit bytes) agrees too."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from llmperf_hook import api
from llmperf_hook.commands.tune import memory_only
from llmperf_hook.frameworks.resolve import JobOverrides
from llmperf_hook.tune import surrogate
from llmperf_hook.tune.candidate import apply_candidate, candidate_of
from llmperf_hook.tune.candidates import candidates_from_list, generate_candidates
from llmperf_hook.tune.search import evaluate
from llmperf_hook.tune.search_space import load_search_space

from .helpers import explain_valid, rule_rejected

MARGIN = 0.05
MEGATRON = ["torchrun", "--nnodes", "2", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "16",
            "--hidden-size", "2048", "--num-attention-heads", "16", "--seq-length", "2048",
            "--max-position-embeddings", "2048", "--vocab-size", "50257", "--micro-batch-size", "1",
            "--global-batch-size", "64", "--bf16"]
TRAINER_FSDP = ["torchrun", "--nproc-per-node", "8", "train.py", "--model_name_or_path", "meta-llama/Llama-2-7b-hf",
                "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "4", "--bf16", "--output_dir",
                "out", "--fsdp", "full_shard auto_wrap"]


def _deepspeed(folder: Path, stage: int) -> list[str]:
    path = folder / f"zero{stage}.json"
    path.write_text(json.dumps({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": True},
                                "zero_optimization": {"stage": stage, "overlap_comm": stage == 1}}))
    return ["deepspeed", "--num_gpus", "8", "train.py", "--deepspeed_config", str(path)]


def _with_capacity(spec, capacity: float):
    return dataclasses.replace(spec, gpu=dataclasses.replace(spec.gpu, memory_capacity_bytes=int(capacity)))


@pytest.mark.parametrize("job", ["megatron", "zero1", "zero2", "zero3", "fsdp"])
def test_tune_keeps_exactly_what_predict_says_fits(job: str, tmp_path: Path) -> None:
    argv, model = (MEGATRON, None) if job == "megatron" else (TRAINER_FSDP, "llama2-7b") if job == "fsdp" else (
        _deepspeed(tmp_path, int(job[-1])), "llama2-7b")
    _, cfg, spec, _ = api.resolve_command(argv, {}, cluster="dgx-h100", overrides=JobOverrides(model=model))
    # the Trainer's FSDP full_shard is priced as torch with ZeRO-3's sharding (frameworks/fsdp_sharding.py)
    assert cfg.optimizer.zero_stage == (int(job[-1]) if job.startswith("zero") else 3 if job == "fsdp" else 0)
    assert (cfg.framework == "torch") == (job == "fsdp")
    table = generate_candidates(cfg, load_search_space(None, cfg.framework), spec.gpus_per_node)
    rows = np.random.default_rng(7).permutation(np.flatnonzero(~rule_rejected(cfg, table)))
    cands = explain_valid(cfg, table, rows, 5, spec)
    need = sorted(float(memory_only(apply_candidate(cfg, c), spec).must_fit_bytes) for c in cands)
    assert len(set(need)) >= 2, need
    usable = (need[len(need) // 2 - 1] + need[len(need) // 2]) / 2  # the sample straddles the border
    tuned_on, predicted_on = _with_capacity(spec, usable / (1 - MARGIN)), _with_capacity(spec, usable)
    est = surrogate.estimate(cfg, tuned_on, candidates_from_list(tuple(cands)).columns)
    base, kept = candidate_of(cfg), []
    for cand, est_need in zip(cands, est.must_fit_bytes):
        applied = apply_candidate(cfg, cand)
        predicted = api.predict_config(applied, predicted_on).memory
        tuned = evaluate(cfg, cand, tuned_on, api.predict_config, MARGIN, base)
        assert tuned.fits == (predicted.fits and predicted.host_fits), (job, cand.describe())
        assert (est_need <= usable) == predicted.fits, (job, cand.describe())  # the surrogate's pruning
        no_margin = evaluate(cfg, cand, predicted_on, api.predict_config, 0.0, base)
        assert no_margin.fits == predicted.fits, (job, cand.describe())
        kept.append(tuned.fits)
    assert any(kept) and not all(kept), (job, need)


def test_a_deepspeed_job_between_its_must_fit_bytes_and_its_peak_is_kept(tmp_path: Path) -> None:
    """A ZeRO-1 job's reserve holds the step's flat buffers in segments the allocator frees on demand: on a usable
    memory between its must-fit bytes and its peak, predict says it fits and tune lists it (before, tune compared the
    peak and dropped it)."""
    _, cfg, spec, _ = api.resolve_command(_deepspeed(tmp_path, 1), {}, cluster="dgx-h100",
                                          overrides=JobOverrides(model="llama2-7b"))
    mem = memory_only(cfg, spec)
    assert mem.must_fit_bytes < mem.peak_bytes_per_gpu
    usable = (mem.must_fit_bytes + mem.peak_bytes_per_gpu) / 2
    tuned = evaluate(cfg, candidate_of(cfg), _with_capacity(spec, usable / (1 - MARGIN)), api.predict_config, MARGIN,
                     candidate_of(cfg))
    assert tuned.fits and tuned.peak_bytes > usable and tuned.must_fit_bytes <= usable
