"""The ds_config optimizer section (frameworks/deepspeed_optimizer.py): its type sets the optimizer states priced
(two fp32 states for Adam-like, one for SGD / Adagrad / Lion), ZeRO refuses an untested optimizer unless the config
allows it (engine.py _do_optimizer_sanity_check), and an optimizer the script passes to deepspeed.initialize
(Megatron-DeepSpeed's own, or one a plain script builds) makes the section moot and is checked itself."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llmperf_hook.errors import ConfigError
from tests.frameworks.helpers import script

DS = ["deepspeed", "--num_gpus", "8", "train.py", "--deepspeed_config"]
MEGATRON_DS = ["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", "--num-layers", "24", "--hidden-size", "2048",
               "--num-attention-heads", "16", "--seq-length", "2048", "--max-position-embeddings", "2048",
               "--vocab-size", "50257", "--micro-batch-size", "2", "--global-batch-size", "16", "--bf16",
               "--deepspeed", "--no-pipeline-parallel", "--deepspeed_config"]


def _ds(tmp_path: Path, optimizer: str, stage: int, **top: Any) -> str:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "bf16": {"enabled": True},
                                "optimizer": {"type": optimizer, "params": {"lr": 1e-4}},
                                "zero_optimization": {"stage": stage}, **top}))
    return str(path)


def test_one_state_optimizers_are_priced_with_one_state(tmp_path: Path) -> None:
    assert script([*DS, _ds(tmp_path, "SGD", 0)], model="llama2-7b").optimizer.name == "sgd"
    assert script([*DS, _ds(tmp_path, "Lion", 2)], model="llama2-7b").optimizer.name == "sgd"
    adamw = script([*DS, _ds(tmp_path, "AdamW", 2)], model="llama2-7b")
    assert adamw.optimizer.name == "adam" and "optimizer.type" in str(adamw.sources["optimizer_name"])


def test_zero_refuses_an_untested_optimizer_unless_allowed(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="untested ZeRO Optimizer"):
        script([*DS, _ds(tmp_path, "Lamb", 2)], model="llama2-7b")
    allowed = script([*DS, _ds(tmp_path, "Lamb", 2, zero_allow_untested_optimizer=True)], model="llama2-7b")
    assert allowed.optimizer.name == "adam"
    assert not any("zero_allow_untested_optimizer" in w for w in allowed.warnings)
    onebit = script([*DS, _ds(tmp_path, "OneBitAdam", 0)], model="llama2-7b")
    assert sum("1-bit" in w for w in onebit.warnings) == 1


def test_megatron_deepspeed_passes_its_own_optimizer(tmp_path: Path) -> None:
    cfg = script([*MEGATRON_DS, _ds(tmp_path, "Lamb", 1)])
    assert cfg.framework == "megatron-deepspeed" and cfg.optimizer.name == "adam"


def test_explain_shows_the_optimizer_and_reuse_distance_with_their_sources(tmp_path: Path) -> None:
    from llmperf_hook.frameworks.explain_data import explain_json

    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "optimizer": {"type": "Adagrad"},
                                "zero_optimization": {"stage": 3, "stage3_max_reuse_distance": 0}}))
    shown = explain_json(script([*DS, str(path)], model="llama2-7b"))
    assert (shown["optimizer_name"], shown["stage3_max_reuse_distance"]) == ("sgd", 0)
    assert "optimizer.type" in shown["sources"]["optimizer_name"]
    assert "stage3_max_reuse_distance" in shown["sources"]["stage3_max_reuse_distance"]
    assert "optimizer_name" not in explain_json(script([*DS, _ds(tmp_path, "AdamW", 0)], model="llama2-7b"))


def _train(tmp_path: Path, body: str) -> str:
    path = tmp_path / "train.py"
    path.write_text("import torch\nimport deepspeed\n" + body)
    return str(path)


def _run(tmp_path: Path, body: str, ds: str):
    return script(["deepspeed", "--num_gpus", "8", _train(tmp_path, body), "--deepspeed_config", ds],
                  model="llama2-7b")


def test_a_scripts_own_optimizer_overrides_the_section(tmp_path: Path) -> None:
    """deepspeed.initialize(optimizer=...) ignores the section: a Lamb section at ZeRO-2 is not refused when the
    script passes torch.optim.AdamW (through a name) or an optimizer built by its own factory."""
    body = ("opt = torch.optim.AdamW(model.parameters())\n"
            "engine, *_ = deepspeed.initialize(model=model, optimizer=opt)\n")
    cfg = _run(tmp_path, body, _ds(tmp_path, "Lamb", 2))
    assert cfg.optimizer.name == "adam" and "AdamW" in str(cfg.sources["optimizer_name"])
    assert sum("optimizer section: ignored" in w for w in cfg.warnings) == 1
    factory = "engine, *_ = deepspeed.initialize(args, model, build_optimizer(model))\n"
    assert _run(tmp_path, factory, _ds(tmp_path, "Lamb", 2)).optimizer.name == "adam"
    sgd = ("import deepspeed as ds\n"
           "engine, *_ = ds.initialize(model=model, optimizer=torch.optim.SGD(model.parameters()))\n")
    assert _run(tmp_path, sgd, _ds(tmp_path, "AdamW", 0)).optimizer.name == "sgd"


def test_zero_refuses_a_scripts_untested_optimizer(tmp_path: Path) -> None:
    body = "engine, *_ = deepspeed.initialize(model=model, optimizer=torch.optim.SGD(model.parameters()))\n"
    with pytest.raises(ConfigError, match="untested ZeRO Optimizer"):
        _run(tmp_path, body, _ds(tmp_path, "AdamW", 2))
    allowed = _run(tmp_path, body, _ds(tmp_path, "AdamW", 2, zero_allow_untested_optimizer=True))
    assert allowed.optimizer.name == "sgd"
    none_given = "engine, *_ = deepspeed.initialize(model=model, optimizer=None)\n"  # the section is built
    with pytest.raises(ConfigError, match="untested ZeRO Optimizer"):
        _run(tmp_path, none_given, _ds(tmp_path, "Lamb", 2))


def test_zero_offload_refuses_a_client_optimizer_other_than_deepspeeds_cpu_ones(tmp_path: Path) -> None:
    def ds(**top: Any) -> str:
        return _ds(tmp_path, "AdamW", 2, zero_optimization={"stage": 2, "offload_optimizer": {"device": "cpu"}}, **top)

    adamw = "engine, *_ = deepspeed.initialize(model=model, optimizer=torch.optim.AdamW(model.parameters()))\n"
    with pytest.raises(ConfigError, match="ZeRO-Offload with a client provided optimizer"):
        _run(tmp_path, adamw, ds())
    assert _run(tmp_path, adamw, ds(zero_force_ds_cpu_optimizer=False)).optimizer.name == "adam"
    cpu_adam = ("from deepspeed.ops.adam import DeepSpeedCPUAdam\n"
                "engine, *_ = deepspeed.initialize(model=model, optimizer=DeepSpeedCPUAdam(model.parameters()))\n")
    assert _run(tmp_path, cpu_adam, ds()).optimizer.offload_optimizer == "cpu"
