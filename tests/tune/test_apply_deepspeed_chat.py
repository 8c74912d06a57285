"""DeepSpeed-Chat (issue h17 campaign): its config is built from argv, so explain reads the flags and tune --apply
rewrites them; the applied command resolves to the candidate."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from llmperf_hook.frameworks.resolve import JobOverrides, resolve_job
from llmperf_hook.tune.apply import plan_tuned_command
from llmperf_hook.tune.candidate import apply_candidate, candidate_of

SFT = ["deepspeed", "--num_gpus", "8", "main.py", "--data_path", "Dahoas/rm-static", "--model_name_or_path",
       "meta-llama/Llama-2-7b-hf", "--per_device_train_batch_size", "4", "--max_seq_len", "512",
       "--gradient_accumulation_steps", "2", "--zero_stage", "3", "--deepspeed", "--output_dir", "out"]
LLAMA = JobOverrides(model="llama2-7b")


def test_deepspeed_chat_flags_are_its_config() -> None:
    # Was: framework "torch", ZeRO 0, fp32 (the config main.py builds from these flags was not read).
    _, cfg = resolve_job(SFT, {}, LLAMA)
    assert (cfg.framework, cfg.optimizer.zero_stage, cfg.precision) == ("deepspeed", 3, "fp16")
    assert (cfg.batch.micro_batch_size, cfg.batch.num_microbatches, cfg.batch.global_batch_size) == (4, 2, 64)
    assert cfg.model.seq_length == 512 and cfg.optimizer.offload_optimizer == "none"
    _, off = resolve_job([*SFT, "--offload", "--dtype", "bf16"], {}, LLAMA)
    assert (off.optimizer.offload_optimizer, off.optimizer.offload_param, off.precision) == ("cpu", "cpu", "bf16")
    _, dflt = resolve_job([w for w in SFT if w not in ("--per_device_train_batch_size", "4", "--max_seq_len", "512")], {}, LLAMA)
    assert (dflt.batch.micro_batch_size, dflt.model.seq_length) == (16, 512)  # main.py defaults


def test_apply_rewrites_deepspeed_chat_flags() -> None:
    _, cfg = resolve_job(SFT, {}, LLAMA)
    new = replace(candidate_of(cfg), micro_batch_size=2, zero_stage=2)
    plan = plan_tuned_command(SFT, cfg, new, apply_candidate(cfg, new))
    assert not plan.new_files
    _, again = resolve_job(list(plan.argv), {}, LLAMA)
    assert (again.batch.micro_batch_size, again.batch.num_microbatches, again.optimizer.zero_stage) == (2, 4, 2)
    assert again.batch.global_batch_size == cfg.batch.global_batch_size
