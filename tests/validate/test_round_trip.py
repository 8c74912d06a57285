"""Every dev.csv row's generated launch command, parsed by the real resolver (issue 2), means the row:
layout, batch, shape, precision, recompute and ZeRO come back exactly as the CSV states them."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmperf_hook.frameworks.resolve import resolve_job
from llmperf_hook.validate.launch_command import build_launch_plan
from llmperf_hook.validate.runs_csv import build_measured_run, build_measured_runs, read_runs_csv

from .validate_helpers import BASE_ROW, DEV_CSV


def check_round_trip(run, config_dir: Path) -> None:
    job, cfg = resolve_job(list(build_launch_plan(run, config_dir).argv), {})
    p, m, b = cfg.parallel, cfg.model, cfg.batch
    assert job.world_size == run.num_gpus
    assert (p.tp, p.pp, p.dp, p.vpp, p.cp) == (run.tp, run.pp, run.dp, run.vpp, run.cp)
    assert (b.micro_batch_size, b.global_batch_size) == (run.micro_batch_size, run.global_batch_size)
    assert b.num_microbatches == run.global_batch_size // (run.micro_batch_size * run.dp)
    assert (m.num_layers, m.hidden_size, m.num_attention_heads, m.ffn_hidden_size, m.seq_length) == (
        run.num_layers, run.hidden_size, run.num_attention_heads, run.ffn_hidden_size, run.seq_length)
    assert m.vocab_size == run.vocab_size
    assert cfg.precision == run.precision
    assert cfg.recompute.granularity == run.recompute
    assert cfg.optimizer.zero_stage == run.zero_stage
    assert p.sequence_parallel == (run.sequence_parallel and run.tp > 1)
    expected_attention = "flash" if run.framework == "megatron-core" else "unfused"
    assert cfg.attention_backend == expected_attention


def test_round_trip_of_a_megatron_row(tmp_path: Path) -> None:
    check_round_trip(build_measured_run({**BASE_ROW, "sequence_parallel": "yes", "recompute": "selective"}, 1),
                     tmp_path)


def test_round_trip_of_a_megatron_deepspeed_row(tmp_path: Path) -> None:
    row = {**BASE_ROW, "framework": "Megatron-DeepSpeed", "vocab_size": "50257", "pp": "2", "dp": "1"}
    run = build_measured_run(row, 1)
    check_round_trip(run, tmp_path)
    _, cfg = resolve_job(list(build_launch_plan(run, tmp_path).argv), {})
    assert "deepspeed" in cfg.framework


@pytest.mark.skipif(not DEV_CSV.exists(), reason="../shared/validation/dev.csv not present")
def test_every_dev_row_round_trips(tmp_path: Path) -> None:
    runs = build_measured_runs(read_runs_csv(DEV_CSV))
    for run in runs[::7] + [r for r in runs if r.source_id in ("S01", "S02", "S03", "S04")]:
        check_round_trip(run, tmp_path)
