"""Round-4 campaign: ds_config files read as the job reads them. DeepSpeed: hjson (deepspeed/runtime/config.py),
so a UTF-8 byte-order mark and hjson syntax are fine; the Hugging Face Trainer: json.load first (accelerate
HfDeepSpeedConfig), so only plain JSON."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmperf_hook.errors import ConfigError, UsageError
from llmperf_hook.frameworks.deepspeed_config import read_ds_config
from tests.frameworks.helpers import script

DS = ["deepspeed", "--num_gpus", "8", "train.py", "--deepspeed_config"]
HF = ["deepspeed", "--num_gpus", "8", "train.py", "--model_name_or_path", "x", "--per_device_train_batch_size", "4",
      "--bf16", "--deepspeed"]
PLAIN = '{"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 2}}'


def _write(tmp_path: Path, data: bytes) -> str:
    path = tmp_path / "ds.json"
    path.write_bytes(data)
    return str(path)


def test_byte_order_mark_is_read_by_deepspeed_not_by_the_hf_trainer(tmp_path: Path) -> None:
    path = _write(tmp_path, b"\xef\xbb\xbf" + PLAIN.encode())
    cfg = script([*DS, path], model="llama2-7b")
    assert (cfg.batch.global_batch_size, cfg.batch.micro_batch_size, cfg.optimizer.zero_stage) == (64, 2, 2)
    with pytest.raises(ConfigError, match="json.load"):
        script([*HF, path], model="llama2-7b")


def test_hf_trainer_refuses_comments(tmp_path: Path) -> None:
    path = _write(tmp_path, b'{"train_batch_size": "auto", // micro\n "train_micro_batch_size_per_gpu": "auto"}')
    with pytest.raises(ConfigError, match="plain JSON"):
        script([*HF, path], model="llama2-7b")


def test_a_directory_is_named_as_one(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="is a directory"):
        read_ds_config(str(tmp_path))


def test_hjson_syntax_deepspeed_accepts(tmp_path: Path) -> None:
    pytest.importorskip("hjson")
    path = _write(tmp_path, b"train_batch_size: 64\ntrain_micro_batch_size_per_gpu: 2\n")
    assert read_ds_config(path) == {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2}
    nested = _write(tmp_path, b"train_batch_size: 64\nzero_optimization:\n  stage: 2\n")
    with pytest.raises(ConfigError, match="YAML-style"):
        script([*DS, nested], model="llama2-7b")
    with pytest.raises(ConfigError, match="twice"):
        read_ds_config(_write(tmp_path, b"{a: 1, a: 2}"))


def test_auto_batch_outside_the_hf_trainer_says_who_fills_it(tmp_path: Path) -> None:
    path = _write(tmp_path, b'{"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", '
                            b'"gradient_accumulation_steps": "auto", "zero_optimization": {"stage": 3}}')
    with pytest.raises(ConfigError, match="Hugging Face Trainer"):
        script([*DS, path], model="llama2-7b")
    assert script([*HF, path], model="llama2-7b").batch.global_batch_size == 4 * 8


def test_batch_assertion_hint_counts_only_the_given_keys(tmp_path: Path) -> None:
    # train_batch_size alone: DeepSpeed derives micro = train // DP, so any multiple of DP passes.
    with pytest.raises(ConfigError, match="multiple of 8 "):
        script([*DS, _write(tmp_path, b'{"train_batch_size": 100}')], model="llama2-7b")
    assert script([*DS, _write(tmp_path, b'{"train_batch_size": 104}')], model="llama2-7b").batch.micro_batch_size == 13


@pytest.mark.parametrize("text", [b'{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 0}',
                                  b'{"train_batch_size": 64, "gradient_accumulation_steps": 0}',
                                  b'{"train_micro_batch_size_per_gpu": -2}'])
def test_zero_or_negative_batch_keys_exit_2(tmp_path: Path, text: bytes) -> None:
    # train_micro_batch_size_per_gpu 0 with train_batch_size was a ZeroDivisionError (internal error, exit 1).
    with pytest.raises(ConfigError, match="> 0"):
        script([*DS, _write(tmp_path, text)], model="llama2-7b")


def test_torch_autocast_section_sets_the_compute_precision(tmp_path: Path) -> None:
    # deepspeed/runtime/config.py get_torch_autocast_dtype (DeepSpeed 0.17+); torch.autocast's CUDA default is fp16.
    cfg = script([*DS, _write(tmp_path, b'{"train_micro_batch_size_per_gpu": 2, "torch_autocast": '
                                        b'{"enabled": true, "dtype": "bfloat16"}}')], model="llama2-7b")
    assert cfg.precision == "bf16" and any("torch_autocast" in w for w in cfg.warnings)
    cfg = script([*DS, _write(tmp_path, b'{"train_micro_batch_size_per_gpu": 2, "torch_autocast": {"enabled": true}}')],
                 model="llama2-7b")
    assert cfg.precision == "fp16"
    # DtypeEnum knows int8 (DeepSpeedConfig passes it); torch.autocast then disables itself on CUDA: fp32 (H216)
    cfg = script([*DS, _write(tmp_path, b'{"train_micro_batch_size_per_gpu": 2, "torch_autocast": '
                                        b'{"enabled": true, "dtype": "int8"}}')], model="llama2-7b")
    assert cfg.precision == "fp32"
    with pytest.raises(ConfigError, match="not a valid DtypeEnum"):  # DtypeEnum matches names exactly
        script([*DS, _write(tmp_path, b'{"train_micro_batch_size_per_gpu": 2, "torch_autocast": '
                                      b'{"enabled": true, "dtype": "BF16"}}')], model="llama2-7b")
    amp = _write(tmp_path, b'{"train_micro_batch_size_per_gpu": 2, "amp": {"enabled": true, "opt_level": "O1"}}')
    cfg = script([*DS, amp], model="llama2-7b", env={"LLMPERF_DEEPSPEED_VERSION": "0.19.6"})  # 0.19.8 refuses amp
    assert cfg.precision == "fp16" and any("amp computes" in w for w in cfg.warnings)


@pytest.mark.parametrize("keys", [
    {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": 2},
    {"train_batch_size": 64, "train_micro_batch_size_per_gpu": "auto"},
    {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": "auto"},
    {"train_batch_size": 64, "gradient_accumulation_steps": "auto"},
    {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4},
])
def test_an_auto_batch_key_is_filled_in_and_warned_about_as_deepspeed_would_stop(tmp_path: Path,
                                                                                keys: dict[str, object]) -> None:
    """deepspeed.initialize computes with an "auto" batch key (DeepSpeedConfig._configure_train_batch_size: TypeError);
    the Hugging Face Trainer and Accelerate fill it in, and so may a user's script before it calls initialize, which
    llmperf cannot see: the batch is resolved from the other keys (issue 2: "auto" values resolved where the other
    values fix them) with a warning exactly where the installed DeepSpeedConfig (the oracle; world 8 set by hand: it
    reads the world size of the process group, which a test has not started) would stop on the file as it is."""
    import json
    import os

    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    config = pytest.importorskip("deepspeed.runtime.config")
    real = config.DeepSpeedConfig.__new__(config.DeepSpeedConfig)
    real.world_size = 8
    real.train_batch_size = keys.get("train_batch_size")
    real.train_micro_batch_size_per_gpu = keys.get("train_micro_batch_size_per_gpu")
    real.gradient_accumulation_steps = keys.get("gradient_accumulation_steps")
    try:
        real._configure_train_batch_size()
        refused = False
    except TypeError:
        refused = True
    path = _write(tmp_path, json.dumps(keys).encode())
    cfg = script([*DS, path], model="llama2-7b")
    warned = [w for w in cfg.warnings if "deepspeed.initialize" in w and "TypeError" in w]
    assert bool(warned) == refused, cfg.warnings
    numbers = {k: v for k, v in keys.items() if v != "auto"}
    gbs = numbers.get("train_batch_size", cfg.batch.micro_batch_size * cfg.batch.num_microbatches * 8)
    assert cfg.batch.global_batch_size == gbs == cfg.batch.micro_batch_size * cfg.batch.num_microbatches * 8
    assert cfg.batch.micro_batch_size == numbers.get("train_micro_batch_size_per_gpu", cfg.batch.micro_batch_size)


def test_auto_batch_keys_that_fix_nothing_are_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, b'{"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto"}')
    with pytest.raises(ConfigError, match=r"nothing fixes the batch"):
        script([*DS, path], model="llama2-7b")


_MEGATRON_FLAGS = ["--num-layers", "2", "--hidden-size", "256", "--num-attention-heads", "4", "--seq-length", "128",
                   "--max-position-embeddings", "128", "--vocab-size", "1000", "--micro-batch-size", "2",
                   "--global-batch-size", "64", "--deepspeed", "--deepspeed_config"]
_AUTO_KEYS = [{"train_batch_size": "auto", "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": "auto"},
              {"train_batch_size": 64, "train_micro_batch_size_per_gpu": "auto"}]


@pytest.mark.parametrize("keys", _AUTO_KEYS)
def test_megatron_deepspeed_auto_batch_keys_are_megatrons_batch(tmp_path: Path, keys: dict[str, object]) -> None:
    """A user's own script taking Megatron-DeepSpeed's flags (it may fill the keys in): an "auto" batch key is priced
    as filled in from Megatron's --global-batch-size / --micro-batch-size (the other values that fix it), with the
    warning, not read as DeepSpeed's derivation from the remaining keys (train_batch_size "auto" with micro 2 was taken
    as 2 x 1 x DP 8 = 16, then refused as 'ds.json gives train_batch_size 16', a value the file does not hold)."""
    import json

    path = _write(tmp_path, json.dumps(keys).encode())
    cfg = script(["deepspeed", "--num_gpus", "8", "my_train.py", *_MEGATRON_FLAGS, path])
    assert (cfg.batch.global_batch_size, cfg.batch.micro_batch_size, cfg.batch.num_microbatches) == (64, 2, 4)
    assert any("\"auto\"" in w and "deepspeed.initialize" in w for w in cfg.warnings), cfg.warnings


@pytest.mark.parametrize("keys", _AUTO_KEYS)
def test_megatron_deepspeed_entry_point_refuses_auto_batch_keys(tmp_path: Path, keys: dict[str, object]) -> None:
    """Megatron-DeepSpeed's own pretrain_gpt.py hands the file to deepspeed.initialize as json.load reads it
    (megatron/training.py _create_ds_config_dict), and DeepSpeedConfig's batch arithmetic stops on "auto" (H199)."""
    import json

    path = _write(tmp_path, json.dumps(keys).encode())
    with pytest.raises(ConfigError, match=r"_create_ds_config_dict.*TypeError"):
        script(["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", *_MEGATRON_FLAGS, path])
