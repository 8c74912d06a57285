"""Candidates the applied command's `explain` would refuse at assemble time are pruned as invalid, with the refusal's
reason, never ranked (tune/assemble_rules.py): the checks assemble makes once the ZeRO stage, DeepSpeed's engine and
sequence parallelism are final, which neither validate_config nor the ds_config stage filter made.

Before: a Megatron-DeepSpeed job on DeepSpeed 0.16 with bf16 gradient accumulation, --no-pipeline-parallel and ZeRO-1
was offered ZeRO-0 rows at PP 1 that explain refuses ('Bfloat16 wrapper must use a gradient accumulation type of fp32',
engine.py _do_optimizer_sanity_check, 0.7.6-0.17.5)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from .helpers import run_cli

BF16_ACCUM = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 8, "bf16": {"enabled": True},
              "data_types": {"grad_accum_dtype": "bf16"}, "zero_optimization": {"stage": 1}}
CMD = ["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", "--num-layers", "24", "--hidden-size", "2048",
       "--num-attention-heads", "16", "--seq-length", "2048", "--max-position-embeddings", "2048",
       "--micro-batch-size", "1", "--global-batch-size", "64", "--tensor-model-parallel-size", "1",
       "--pipeline-model-parallel-size", "1", "--bf16", "--deepspeed", "--deepspeed_config", "ds.json",
       "--zero-stage", "1", "--no-pipeline-parallel", "--vocab-size", "50304"]


def _tune(tmp_path: Path, capsys, monkeypatch, ds: dict, space: str, env: dict[str, str]) -> tuple[int, dict, str]:
    monkeypatch.chdir(tmp_path)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    (tmp_path / "ds.json").write_text(json.dumps(ds))
    (tmp_path / "space.yaml").write_text(space)
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--top", "10", "--search", "space.yaml", "--format",
                              "json", "--apply", "--dry-run", "--", *CMD], capsys)
    return code, json.loads(out), err


def test_bf16_accumulation_without_zero_is_pruned_with_its_reason(tmp_path: Path, capsys, monkeypatch) -> None:
    code, data, err = _tune(tmp_path, capsys, monkeypatch, BF16_ACCUM, "zero_stage: [0, 1]\npipeline_parallel: [1, 2]\n",
                            {"LLMPERF_DEEPSPEED_VERSION": "0.16.0"})
    assert code == 0, err
    rules = data["search"]["invalid_by_rule"]
    name = "explain refuses: ds.json data_types.grad_accum_dtype 'bf16' with bf16 training and ZeRO stage 0"
    assert rules.get(name, 0) > 0, rules
    # the plain engine (PP 1, --no-pipeline-parallel kept) refuses ZeRO-0; the PipelineEngine takes it from 0.12.5
    assert all(row["zero_stage"] != 0 or row["pp"] > 1 for row in data["top"])
    code, _, err = run_cli(["explain", "--", *data["applied"]["argv"]], capsys)
    assert code == 0, err


def test_the_release_that_accepts_it_prunes_nothing(tmp_path: Path, capsys, monkeypatch) -> None:
    """DeepSpeed 0.17.6 accumulates bf16 without ZeRO (889f0ead2): the same space, no such rule, ZeRO-0 ranked."""
    code, data, err = _tune(tmp_path, capsys, monkeypatch, BF16_ACCUM, "zero_stage: [0]\npipeline_parallel: [1]\n",
                            {"LLMPERF_DEEPSPEED_VERSION": "0.17.6"})
    assert code == 0, err
    assert not any(k.startswith("explain refuses") for k in data["search"]["invalid_by_rule"])
    assert any(row["zero_stage"] == 0 for row in data["top"])


def test_hpz_groups_that_do_not_divide_the_world_refuse_zero3(tmp_path: Path, capsys, monkeypatch) -> None:
    """check_hpz: zero_hpz_partition_size 3 on 8 GPUs is harmless at ZeRO-1 and refused at ZeRO-3."""
    ds = {**BF16_ACCUM, "data_types": {}, "zero_optimization": {"stage": 1, "zero_hpz_partition_size": 3}}
    code, data, err = _tune(tmp_path, capsys, monkeypatch, ds, "zero_stage: [1, 3]\n", {})
    assert code == 0, err
    assert any("zero_hpz_partition_size 3 does not divide the world size 8" in k
               for k in data["search"]["invalid_by_rule"]), data["search"]["invalid_by_rule"]
    assert all(row["zero_stage"] != 3 for row in data["top"])


def test_sequence_parallel_needs_one_device_connection(tmp_path: Path, capsys, monkeypatch) -> None:
    """Megatron-DeepSpeed refuses --sequence-parallel unless CUDA_DEVICE_MAX_CONNECTIONS is 1."""
    ds = {**BF16_ACCUM, "data_types": {}}
    code, data, err = _tune(tmp_path, capsys, monkeypatch, ds, "sequence_parallel: [false, true]\n",
                            {"CUDA_DEVICE_MAX_CONNECTIONS": "8"})
    assert code == 0, err
    assert any(k.startswith("explain refuses: --sequence-parallel with CUDA_DEVICE_MAX_CONNECTIONS=8")
               for k in data["search"]["invalid_by_rule"])
    assert not any(row["sequence_parallel"] for row in data["top"])


def test_engine_column_is_the_priced_engine() -> None:
    """Each row's engine is candidate._pipeline_engine's: PP > 1 always; PP 1 keeps the command's unless ZeRO-2/3."""
    from llmperf_hook.tune.assemble_rules import _engine_column
    from llmperf_hook.tune.candidate import candidate_of

    from .helpers import gpt_config

    cfg = gpt_config(world=8, tp=1, pp=1, gbs=64, framework="megatron-deepspeed")
    cols = {"pp": np.array([1, 1, 1, 2, 2]), "zero": np.array([0, 1, 2, 0, 1])}
    for engine in (False, True):
        import dataclasses

        c = dataclasses.replace(cfg, deepspeed_pipeline_engine=engine)
        got = _engine_column(c, candidate_of(c), cols).tolist()
        assert got == [engine, engine, False, True, True]


def test_bench_tune_searches_with_the_assemble_masks() -> None:
    """benchmarks/bench_tune.py times the search as the CLI runs it, these masks included: its Megatron-DeepSpeed job
    under CUDA_DEVICE_MAX_CONNECTIONS=8 prunes every sequence-parallel row as explain refuses it."""
    from script_module import load_script

    bench = load_script(Path(__file__).resolve().parents[2] / "benchmarks" / "bench_tune.py")
    _, res, _ = bench.tune_once(bench.MEGATRON_DEEPSPEED_13B_64, "dgx-a100", None, {"CUDA_DEVICE_MAX_CONNECTIONS": "8"})
    refused = {k: n for k, n in res.invalid_by_rule.items() if k.startswith("explain refuses: --sequence-parallel")}
    assert refused and all(n > 0 for n in refused.values()), res.invalid_by_rule
    assert res.top and not any(ev.candidate.sequence_parallel for ev in res.top)
