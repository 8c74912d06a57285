"""Which jobs' linears ZeRO-3 runs through zero3_linear_wrap, splitting the bias add out of the GEMM
(TrainingConfig.torch_linear_layers, set by deepspeed_release.zero3_splits_bias): not GPT-2's Conv1D, not with
zero_optimization.memory_efficient_linear false, and before DeepSpeed v0.19.4 (617061d6b, #8189) not for a model
that a plain script builds outside zero.Init."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf_hook.frameworks.deepspeed_config import parse_ds_config
from llmperf_hook.frameworks.resolve import resolve_job
from llmperf_hook.graph.zero_layer_ops import zero3_bias_add_ops

LLAMA = {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 1024, "num_attention_heads": 16,
         "intermediate_size": 2816, "max_position_embeddings": 4096, "vocab_size": 32000, "rms_norm_eps": 1e-5,
         "attention_bias": True}
GPT2 = {"model_type": "gpt2", "n_layer": 4, "n_embd": 1024, "n_head": 16, "n_positions": 1024, "vocab_size": 50257}


def _ds(tmp_path: Path, **zero: object) -> str:
    path = tmp_path / "ds.json"
    path.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
                                "zero_optimization": {"stage": 3, **zero}}))
    return str(path)


def _model(tmp_path: Path, raw: dict) -> str:
    folder = tmp_path / "model"
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(raw))
    return str(folder)


def _trainer(tmp_path: Path, raw: dict, env: dict | None = None, **zero: object):
    argv = ["deepspeed", "--num_gpus", "2", "run_clm.py", "--model_name_or_path", _model(tmp_path, raw),
            "--block_size", "512", "--deepspeed", _ds(tmp_path, **zero), "--per_device_train_batch_size", "1"]
    return resolve_job(argv, env or {})[1]


def _plain(tmp_path: Path, source: str, env: dict):
    script = tmp_path / "train.py"
    script.write_text(source)
    argv = ["deepspeed", "--num_gpus", "2", str(script), "--model_name_or_path", _model(tmp_path, LLAMA),
            "--max_seq_length", "512", "--deepspeed_config", _ds(tmp_path)]
    return resolve_job(argv, env)[1]


def test_trainer_llama_splits_the_bias(tmp_path: Path) -> None:
    cfg = _trainer(tmp_path, LLAMA)
    assert cfg.torch_linear_layers and zero3_bias_add_ops(cfg)


def test_gpt2_conv1d_keeps_addmm(tmp_path: Path) -> None:
    """transformers' Conv1D calls torch.addmm itself, never F.linear."""
    cfg = _trainer(tmp_path, GPT2)
    assert not cfg.torch_linear_layers and not zero3_bias_add_ops(cfg)


@pytest.mark.parametrize("value, splits", [(False, False), ("false", False), (True, True), ("auto", True)])
def test_memory_efficient_linear(tmp_path: Path, value: object, splits: bool) -> None:
    """false: zero.Init never installs zero3_linear_wrap (partition_parameters.py); "auto" is dropped to true."""
    assert _trainer(tmp_path, LLAMA, memory_efficient_linear=value).torch_linear_layers is splits


def test_memory_efficient_linear_warning_says_what_false_does() -> None:
    raw = {"train_batch_size": 8, "zero_optimization": {"stage": 3, "memory_efficient_linear": False}}
    (warning,) = [w for w in parse_ds_config(raw, "ds.json").warnings if "memory_efficient_linear" in w]
    assert "leaves torch.nn.functional.linear in place" in warning and "fused bias" in warning


PLAIN = "import deepspeed\nmodel = build()\nengine, *_ = deepspeed.initialize(model=model)\n"
INSIDE = ("import deepspeed\nwith deepspeed.zero.Init():\n    model = build()\n"
          "engine, *_ = deepspeed.initialize(model=model)\n")


@pytest.mark.parametrize("source, release, splits", [
    (PLAIN, "0.19.3", False),  # only zero.Init patched F.linear before 617061d6b
    (PLAIN, "0.19.4", True),  # deepspeed.initialize installs the wrapper since
    (INSIDE, "0.19.3", True),  # built inside zero.Init: the patch persists after the context
    (PLAIN, None, True),  # no release given: the installed DeepSpeed (>= 0.19.4 here) or today's
])
def test_plain_script_release(tmp_path: Path, source: str, release: str | None, splits: bool) -> None:
    env = {"LLMPERF_DEEPSPEED_VERSION": release} if release else {}
    assert _plain(tmp_path, source, env).torch_linear_layers is splits


def test_trainer_builds_inside_zero_init_on_old_releases(tmp_path: Path) -> None:
    """The HF Trainer's HfDeepSpeedConfig makes from_pretrained build under zero.Init, whatever the release."""
    assert _trainer(tmp_path, LLAMA, {"LLMPERF_DEEPSPEED_VERSION": "0.19.3"}).torch_linear_layers


def _missing_script(tmp_path: Path, stage: int, release: str):
    argv = ["deepspeed", "--num_gpus", "2", str(tmp_path / "absent.py"), "--model_name_or_path", _model(tmp_path, LLAMA),
            "--max_seq_length", "512", "--deepspeed_config", _ds(tmp_path, stage=stage)]
    return resolve_job(argv, {"LLMPERF_DEEPSPEED_VERSION": release})[1]


def test_unreadable_script_states_the_assumption(tmp_path: Path) -> None:
    """Before v0.19.4 a script llmperf cannot read is assumed to build its model outside zero.Init (fused bias), and
    the warning says so; a release that wraps every model, or a job that is not ZeRO-3, needs no such assumption."""
    cfg = _missing_script(tmp_path, 3, "0.19.3")
    (warning,) = [w for w in cfg.warnings if "zero3_linear_wrap" in w]
    assert not cfg.torch_linear_layers and "absent.py" in warning and "assumed built outside" in warning
    assert not [w for w in _missing_script(tmp_path, 3, "0.19.4").warnings if "zero3_linear_wrap" in w]
    assert not [w for w in _missing_script(tmp_path, 2, "0.19.3").warnings if "zero3_linear_wrap" in w]
