"""A Hugging Face Trainer --deepspeed file with train_batch_size but no gradient_accumulation_steps: explain refuses the
job once it accumulates (frameworks/deepspeed_job.check_trainer_accumulation: accelerate's DeepSpeedPlugin writes
gradient_accumulation_steps 1, and DeepSpeedConfig._batch_assertion fails), but tune proposed smaller micro-batches
with --gradient_accumulation_steps 2 and left the file as it was, so --apply wrote a command explain refuses (H212,
found while listing the per-job refusals tune did not re-run per candidate). The copy now says "auto"."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from llmperf_hook.frameworks.resolve import JobOverrides, resolve_job
from llmperf_hook.tune.apply import plan_tuned_command
from llmperf_hook.tune.candidate import apply_candidate, candidate_of

TRAINER = ["deepspeed", "--num_gpus", "8", "run_clm.py", "--model_name_or_path", "meta-llama/Llama-2-7b-hf",
           "--do_train", "--output_dir", "out", "--per_device_train_batch_size", "4", "--block_size", "1024", "--bf16",
           "--deepspeed", "ds.json"]


def test_an_accumulating_candidate_gets_an_auto_accumulation_in_its_copy(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    original = json.dumps({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
                           "zero_optimization": {"stage": 2}, "bf16": {"enabled": "auto"}})
    (tmp_path / "ds.json").write_text(original)
    model = JobOverrides(model="llama2-7b")
    _, cfg = resolve_job(TRAINER, {}, model)
    cand = dataclasses.replace(candidate_of(cfg), micro_batch_size=2)
    plan = plan_tuned_command(TRAINER, cfg, cand, apply_candidate(cfg, cand), tmp_path)
    (path, content), = plan.new_files.items()
    assert json.loads(content)["gradient_accumulation_steps"] == "auto"
    assert any("deepspeed.initialize asserts" in note for note in plan.notes), plan.notes
    Path(path).write_text(content)
    _, applied = resolve_job(list(plan.argv), {}, model)  # exit 2 before: 'train_batch_size is not equal to ...'
    assert (applied.batch.micro_batch_size, applied.batch.num_microbatches, applied.batch.global_batch_size) == (2, 2, 32)
    assert (tmp_path / "ds.json").read_text() == original
