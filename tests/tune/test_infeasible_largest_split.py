"""An infeasible job exits 3 naming the largest configuration that fits, checked by predicting it: a Megatron-DeepSpeed
ZeRO job and a Megatron MoE job; and where nothing fits even at the largest TP/PP (or, where tune keeps TP and PP, at
ZeRO-3), the message says so and does not advise more TP/PP that does not exist (tune/infeasible.py)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from llmperf_hook import api
from llmperf_hook.commands.tune import _search

from .helpers import run_cli

DS = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
      "zero_optimization": {"stage": 1}}
SHAPE_70B = ["--num-layers", "80", "--hidden-size", "8192", "--num-attention-heads", "64", "--seq-length", "4096",
             "--max-position-embeddings", "4096", "--micro-batch-size", "1", "--global-batch-size", "8",
             "--vocab-size", "32000", "--bf16"]
MDS_ZERO = ["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", *SHAPE_70B, "--tensor-model-parallel-size", "1",
            "--pipeline-model-parallel-size", "1", "--deepspeed", "--deepspeed_config", "ds.json", "--zero-stage", "1"]
MOE = ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "32", "--hidden-size", "4096",
       "--num-attention-heads", "32", "--seq-length", "4096", "--max-position-embeddings", "4096",
       "--micro-batch-size", "1", "--global-batch-size", "64", "--num-experts", "64", "--moe-router-topk", "2",
       "--ffn-hidden-size", "14336", "--expert-model-parallel-size", "8", "--bf16", "--use-distributed-optimizer",
       "--vocab-size", "32000", "--swiglu"]


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ds.json").write_text(json.dumps(DS))
    return tmp_path


@pytest.mark.parametrize("argv", [MDS_ZERO, MOE], ids=["megatron-deepspeed-zero", "megatron-moe"])
def test_the_named_largest_configuration_fits_and_one_more_chunk_does_not(in_tmp: Path, capsys, argv) -> None:
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--format", "json", "--", *argv], capsys)
    assert code == 3, err
    data = json.loads(out)
    layers, layout = data["nearest"]["layers_that_fit"], data["nearest"]["layout"]
    assert layers and layers < int(argv[argv.index("--num-layers") + 1])
    assert f"{layout}, needs" in data["error"] and f"the largest model that would fit has {layers} layers" in data["error"]
    job, cfg, spec, _ = api.resolve_command(argv, {}, cluster="dgx-h100")
    result = _search(cfg, spec, None, 5, argv, job.script_args, job.script, job.env, job=job)[0]
    near = result.nearest
    assert near.candidate.describe() == layout
    usable = (1 - result.memory_margin) * spec.gpu.memory_capacity_bytes
    chunk = near.config.parallel.pp * near.config.parallel.vpp

    def need(num_layers: int) -> float:  # tune's memory rule: predict's must-fit bytes (schedule/memory_rule.py)
        shaped = dataclasses.replace(near.config, model=dataclasses.replace(near.config.model, num_layers=num_layers))
        return float(api.predict_config(shaped, spec).memory.must_fit_bytes)

    assert need(layers) <= usable < need(layers + chunk)


def test_nothing_fits_even_at_the_largest_tp_pp(in_tmp: Path, capsys) -> None:
    code, _, err = run_cli(["tune", "--cluster", "dgx-h100", "--", *MDS_ZERO], capsys)
    assert code == 3
    assert "Nothing fits even at the largest TP/PP" in err and "over all 8 GPUs, the most there are" in err
    assert "more TP/PP" not in err  # there is no larger split on 8 GPUs to widen the search to


def test_the_space_limit_is_named_and_widening_still_advised(in_tmp: Path, capsys) -> None:
    """GPT-3 175B on 8 GPUs with TP and PP narrowed to 1-2: the least-memory layout is TP 2 x PP 2, the space's most."""
    (in_tmp / "small.yaml").write_text("tensor_parallel: [1, 2]\npipeline_parallel: [1, 2]\n")
    gpt3 = ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "96", "--hidden-size", "12288",
            "--num-attention-heads", "96", "--seq-length", "2048", "--max-position-embeddings", "2048",
            "--micro-batch-size", "1", "--global-batch-size", "64", "--bf16", "--use-distributed-optimizer",
            "--vocab-size", "50257"]
    code, _, err = run_cli(["tune", "--cluster", "dgx-h100", "--search", "small.yaml", "--", *gpt3], capsys)
    assert code == 3
    assert "over 4 of the 8 GPUs, the largest TP x PP the search space allows" in err
    assert "widen the search (--search) with more TP/PP" in err


def test_a_script_whose_tp_pp_tune_keeps_says_zero3(in_tmp: Path, capsys) -> None:
    """A plain DeepSpeed script (TP and PP are its own code's): the largest sharding tune has is ZeRO-3."""
    code, _, err = run_cli(["tune", "--cluster", "dgx-h100", "--model", "llama2-70b", "--", "deepspeed", "--num_gpus",
                            "8", "train.py", "--deepspeed_config", "ds.json"], capsys)
    assert code == 3
    assert "Nothing fits even at ZeRO-3" in err and "over all 8 data-parallel GPUs" in err
    assert "largest TP/PP" not in err
