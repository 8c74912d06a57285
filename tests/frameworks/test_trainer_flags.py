"""Hugging Face Trainer flags that change the step (frameworks/trainer_flags.py): the DDP bucket size is priced,
torch.compile, find_unused_parameters and a non-Adam --optim warn; under a ds_config none of them applies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.frameworks.helpers import script

HF = ["torchrun", "--nproc-per-node", "8", "train.py", "--model_name_or_path", "meta-llama/Llama-2-7b-hf", "--per_device_train_batch_size", "4"]


def test_ddp_bucket_cap_is_priced() -> None:
    cfg = script([*HF, "--ddp_bucket_cap_mb", "100"], model="llama2-7b")
    assert cfg.optimizer.grad_bucket_size_elems == 100 * 2**20 // 4
    assert str(cfg.sources["grad_bucket_size_elems"]) == "argv --ddp_bucket_cap_mb"
    assert script(HF, model="llama2-7b").optimizer.grad_bucket_size_elems == 25 * 2**20 // 4  # torch's default


@pytest.mark.parametrize("extra, expected", [
    (["--torch_compile"], "--torch_compile: torch.compile's fused kernels priced as eager"),
    (["--torch_compile", "True"], "--torch_compile: torch.compile's fused kernels"),
    (["--ddp_find_unused_parameters", "True"], "--ddp_find_unused_parameters True: DDP's search"),
    (["--optim", "adamw_bnb_8bit"], "--optim adamw_bnb_8bit: its optimizer states priced as AdamW's, its step from its "
                                    "kernel's arguments (15 B per fp32 parameter, not measured)"),
    (["--optim", "adafactor"], "--optim adafactor: its optimizer states"),
])
def test_trainer_flag_warns(extra: list[str], expected: str) -> None:
    warnings = script([*HF, *extra], model="llama2-7b").warnings
    assert any(w.startswith(expected) for w in warnings), warnings


@pytest.mark.parametrize("extra", [["--torch_compile", "False"], ["--ddp_find_unused_parameters", "False"],
                                   ["--optim", "adamw_torch"], ["--optim", "adamw_torch_fused"]])
def test_trainer_defaults_are_silent(extra: list[str]) -> None:
    assert not any(w.startswith(extra[0]) for w in script([*HF, *extra], model="llama2-7b").warnings)


def test_deepspeed_replaces_ddp_and_optim(tmp_path: Path) -> None:
    """--optim is replaced only by a ds_config optimizer section: without one DeepSpeed steps the Trainer's own
    (transformers deepspeed_optim_sched; tests/frameworks/test_trainer_optimizer.py)."""
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2},
                              "optimizer": {"type": "AdamW", "params": {"lr": "auto"}}}))
    cfg = script([*HF, "--deepspeed", str(ds), "--optim", "adafactor", "--ddp_bucket_cap_mb", "100"], model="llama2-7b")
    assert not any(w.startswith("--optim") for w in cfg.warnings)
    assert cfg.optimizer.grad_bucket_size_elems != 100 * 2**20 // 4
