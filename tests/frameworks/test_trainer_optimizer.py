"""The Hugging Face Trainer's --optim and --weight_decay set the optimizer step's bytes
(frameworks/trainer_optimizer.py): torch's foreach AdamW (72 B per fp32 parameter without decay, 80 with), the fused one (28), apex (28), SGD (12),
bitsandbytes' 8-bit AdamW (15); under DeepSpeed only when the ds_config has no optimizer section."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf_hook.graph.step_ops import adam_bytes_per_param
from tests.frameworks.helpers import script

HF = ["torchrun", "--nproc-per-node", "8", "train.py", "--model_name_or_path", "meta-llama/Llama-2-7b-hf",
      "--per_device_train_batch_size", "4", "--bf16"]


@pytest.mark.parametrize(("extra", "nbytes"), [
    ([], 28.0),  # default adamw_torch_fused (torch >= 2.8)
    (["--optim", "adamw_torch"], 72.0),  # --weight_decay defaults to 0.0: no decay pass
    (["--optim", "adamw_torch", "--weight_decay", "0.1"], 80.0),
    (["--optim", "adamw_hf", "--weight_decay", "0.1"], 80.0),
    (["--optim", "adamw_torch_fused", "--weight_decay", "0.1"], 28.0),
    (["--optim", "adamw_apex_fused"], 28.0),
    (["--optim", "sgd"], 12.0),
    (["--optim", "sgd", "--weight_decay", "0.1"], 24.0),  # _foreach_add(grads, params) first: read 2, write 1
    (["--optim", "adamw_bnb_8bit"], 15.0),
])
def test_optim_prices_its_step(extra: list[str], nbytes: float) -> None:
    cfg = script([*HF, *extra], model="llama2-7b")
    assert adam_bytes_per_param(cfg) == (nbytes, "fp32")


def test_sources_name_the_flag_or_the_default() -> None:
    cfg = script([*HF, "--optim", "adamw_torch"], model="llama2-7b")
    assert str(cfg.sources["torch_optimizer_impl"]) == "argv --optim"
    default = script(HF, model="llama2-7b")
    assert "adamw_torch_fused" in str(default.sources["torch_optimizer_impl"])


def test_unknown_optim_is_the_stated_assumption() -> None:
    cfg = script([*HF, "--optim", "adafactor"], model="llama2-7b")
    assert cfg.optimizer.torch_optimizer_impl == ""
    assert any("--optim adafactor" in w and "fused AdamW" in w for w in cfg.warnings)


def _hf_deepspeed(tmp_path: Path, **section: object):
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2},
                              "bf16": {"enabled": "auto"}, **section}))
    return script([*HF, "--deepspeed", str(ds), "--optim", "adamw_torch", "--weight_decay", "0.1"], model="llama2-7b")


def test_deepspeed_steps_the_trainers_optimizer_without_a_section(tmp_path: Path) -> None:
    assert adam_bytes_per_param(_hf_deepspeed(tmp_path)) == (80.0, "fp32")


def test_a_section_replaces_optim(tmp_path: Path) -> None:
    cfg = _hf_deepspeed(tmp_path, optimizer={"type": "AdamW", "params": {"lr": "auto"}})
    assert cfg.optimizer.torch_optimizer_impl == ""  # DeepSpeed's FusedAdam
    assert adam_bytes_per_param(cfg) == (28, "fp32")


def test_deepspeed_without_a_section_warns_of_an_optim_it_does_not_price(tmp_path: Path) -> None:
    """DeepSpeed steps the Trainer's Adafactor there (transformers deepspeed_optim_sched): priced as the fused Adam,
    and said so; a section replaces --optim, so it goes unsaid."""
    ds = tmp_path / "ds.json"
    for section in ({}, {"optimizer": {"type": "AdamW", "params": {"lr": "auto"}}}):
        ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2},
                                  "bf16": {"enabled": "auto"}, **section}))
        cfg = script([*HF, "--deepspeed", str(ds), "--optim", "adafactor"], model="llama2-7b")
        warned = [w for w in cfg.warnings if w.startswith("--optim adafactor") and "fused AdamW" in w]
        assert bool(warned) == (not section), cfg.warnings
