"""Property: the numbers tune prints for a candidate are the numbers `llmperf predict` gives for the command `--apply`
writes for it. For a sample of each job's top candidates (Megatron-LM dense and MoE, Megatron-DeepSpeed, DeepSpeed
ZeRO 0-3 under DeepSpeed's defaults, with use_multi_rank_bucket_allreduce false, reduce_scatter false, and a release
before 0.12.4), the rewritten command is resolved as `explain` resolves it (accepted) and predicted: same step time
and peak memory, to float noise; tuned again, the best applied command is its own best. A ZeRO-stage candidate priced with the ZeRO-1/2 bucket all-reduce of DeepSpeed's
defaults where the ds_config or the release says otherwise failed here (R14)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf_hook import api
from llmperf_hook.commands.tune import memory_only
from llmperf_hook.frameworks.resolve import JobOverrides
from llmperf_hook.frameworks.validation import validate_config
from llmperf_hook.tune.apply import plan_tuned_command, write_planned_files
from llmperf_hook.tune.candidates import generate_candidates
from llmperf_hook.tune.search import search_candidates
from llmperf_hook.tune.search_space import default_search_file, load_search_space, parse_search_space, read_search_file

from .test_tune_command import SMALL_MEGATRON

CLUSTER = "dgx-h100"
MOE = ["torchrun", "--nnodes", "2", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "8", "--hidden-size",
       "2048", "--ffn-hidden-size", "4096", "--num-attention-heads", "16", "--seq-length", "2048",
       "--max-position-embeddings", "2048", "--vocab-size", "32000", "--num-experts", "8", "--moe-router-topk", "2",
       "--moe-grouped-gemm", "--expert-model-parallel-size", "2", "--micro-batch-size", "1", "--global-batch-size",
       "128", "--use-distributed-optimizer", "--bf16"]
MDS = ["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", "--num-layers", "24", "--hidden-size", "2048",
       "--num-attention-heads", "16", "--seq-length", "2048", "--max-position-embeddings", "2048", "--vocab-size",
       "32000", "--micro-batch-size", "1", "--global-batch-size", "64", "--bf16", "--deepspeed", "--deepspeed_config",
       "ds.json", "--zero-stage", "1"]
DS_SCRIPT = ["deepspeed", "--num_gpus", "8", "train.py", "--deepspeed_config", "ds.json"]
HF_TRAINER = ["deepspeed", "--num_gpus", "8", "run_clm.py", "--model_name_or_path", "meta-llama/Meta-Llama-3-8B",
              "--deepspeed", "ds.json", "--per_device_train_batch_size", "1", "--gradient_accumulation_steps", "8",
              "--bf16", "True", "--output_dir", "out"]
HF_AUTO = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
"""The Trainer fills these from its own flags (the ds_config of most Hugging Face examples)."""
_SMALL_SPACE = {"micro_batch_size": [1, 2, 4], "recompute": ["none", "full"], "context_parallel": [1]}
JOBS = {  # name -> (argv, ds_config zero_optimization or None, --model preset, env, search space)
    "megatron": (SMALL_MEGATRON, None, None, {}, _SMALL_SPACE),
    "megatron-moe": (MOE, None, None, {}, {**_SMALL_SPACE, "tensor_parallel": [1, 2]}),
    "megatron-deepspeed": (MDS, {"stage": 1}, None, {}, {**_SMALL_SPACE, "tensor_parallel": [1, 2]}),
    "deepspeed-zero0": (DS_SCRIPT, {"stage": 0}, "llama2-7b", {}, None),
    "deepspeed-zero3": (DS_SCRIPT, {"stage": 3}, "llama2-7b", {}, None),
    "deepspeed-no-multi-rank": (DS_SCRIPT, {"stage": 0, "use_multi_rank_bucket_allreduce": False}, "llama2-7b", {},
                                None),
    "deepspeed-no-reduce-scatter": (DS_SCRIPT, {"stage": 3, "reduce_scatter": False}, "llama2-7b", {}, None),
    "deepspeed-0.10": (DS_SCRIPT, {"stage": 0}, "llama2-7b", {"LLMPERF_DEEPSPEED_VERSION": "0.10.0"}, None),
    "hf-trainer-zero2": (HF_TRAINER, {"stage": 2}, "llama3-8b", {}, None),
}


def _space(framework: str, narrowed: dict | None):
    if narrowed is None:
        return load_search_space(None, framework)
    defaults = read_search_file(default_search_file(framework))
    return parse_search_space({**defaults, **narrowed})


@pytest.mark.parametrize("name", sorted(JOBS))
def test_applied_command_predicts_what_tune_printed(name: str, tmp_path: Path, monkeypatch) -> None:
    argv, zero, model, env, narrowed = JOBS[name]
    monkeypatch.chdir(tmp_path)
    if zero is not None:
        batch = dict.fromkeys(HF_AUTO, "auto") if argv is HF_TRAINER else {"train_batch_size": 64,
                                                                            "train_micro_batch_size_per_gpu": 1}
        (tmp_path / "ds.json").write_text(json.dumps({**batch, "bf16": {"enabled": True}, "zero_optimization": zero}))
    overrides = JobOverrides(model=model)
    _, cfg, spec, _ = api.resolve_command(argv, env, cluster=CLUSTER, overrides=overrides)
    space = _space(cfg.framework, narrowed)
    result = _search(cfg, spec, space)
    assert len(result.top) >= 3, name
    if zero is not None:  # the DeepSpeed jobs must cover stage changes, the case that disagreed
        assert {ev.candidate.zero_stage for ev in result.top} != {cfg.optimizer.zero_stage}, name
    for rank, ev in enumerate(result.top):
        plan = plan_tuned_command(argv, cfg, ev.candidate, ev.config)
        write_planned_files(plan)
        _, applied, _, _ = api.resolve_command(list(plan.argv), env, cluster=CLUSTER, overrides=overrides)
        validate_config(applied)  # what explain refuses raises here
        est = api.predict_config(applied, spec)
        where = (name, rank, ev.candidate.describe(), plan.argv)
        assert est.step_time_s == pytest.approx(ev.step_time_s, rel=1e-9), where
        assert float(est.memory.peak_bytes_per_gpu) == pytest.approx(ev.peak_bytes, rel=1e-9), where
        if rank == 0:  # tuned again, the applied command is its own best: nothing left to change
            again = _search(applied, spec, space)
            assert again.top[0].candidate == again.baseline.candidate, (where, again.top[0].candidate.describe())
            assert again.top[0].step_time_s == pytest.approx(ev.step_time_s, rel=1e-9), where


def _search(cfg, spec, space):
    return search_candidates(cfg, spec, generate_candidates(cfg, space, spec.gpus_per_node), top_k=6,
                             margin=space.memory_margin, predict=api.predict_config, validate=validate_config,
                             memory=memory_only)
