"""accelerate config files as accelerate's BaseConfig.process_config loads them (commands/config/config_args.py at
huggingface/accelerate@16cb6eb): a legacy `fp16: true` key is a config-file mixed_precision fp16, which Accelerate's
DeepSpeedPlugin refuses beside a deepspeed_config_file (launch.py mp_from_config_flag, _deepspeed_config_checks);
a file without distributed_type is refused. Through the real CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf_hook.launch.parse import parse_launch
from tests.launch.cli_run import llmperf

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048, "intermediate_size": 5632,
         "num_attention_heads": 16, "num_key_value_heads": 4, "num_hidden_layers": 8, "vocab_size": 32000,
         "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "tie_word_embeddings": False}
SCRIPT = ["run_clm.py", "--model_name_or_path", "llama", "--per_device_train_batch_size", "2", "--block_size", "2048"]
DS = {"zero_optimization": {"stage": 2}, "train_micro_batch_size_per_gpu": "auto", "train_batch_size": "auto",
      "gradient_accumulation_steps": "auto"}


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "llama").mkdir()
    (tmp_path / "llama" / "config.json").write_text(json.dumps(LLAMA))
    (tmp_path / "ds.json").write_text(json.dumps(DS))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _config(workdir: Path, precision: str, ds_file: bool = True) -> list[str]:
    extra = "deepspeed_config:\n  deepspeed_config_file: ds.json\n" if ds_file else "deepspeed_config:\n  zero_stage: 2\n"
    (workdir / "acc.yaml").write_text(f"compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\n"
                                      f"num_machines: 1\nnum_processes: 8\n{precision}{extra}")
    return ["accelerate", "launch", "--config_file", "acc.yaml"]


@pytest.mark.parametrize("precision", ["fp16: true\n", "mixed_precision: fp16\n", "mixed_precision: 'no'\n"])
def test_a_config_file_precision_beside_deepspeed_config_file_is_refused(
        precision: str, workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = llmperf(capsys, "explain", "--", *_config(workdir, precision), *SCRIPT)
    assert out.code == 2 and "sets mixed_precision beside deepspeed_config_file ds.json" in out.err, out.err


@pytest.mark.parametrize("precision", ["fp16: false\n", "", "mixed_precision: null\n"])
def test_no_config_file_precision_is_accepted(precision: str, workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = llmperf(capsys, "explain", "--format", "json", "--", *_config(workdir, precision), *SCRIPT)
    assert out.code == 0, out.err


def test_the_command_line_precision_is_accepted_beside_the_file(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = llmperf(capsys, "explain", "--format", "json", "--", *_config(workdir, "fp16: true\n"),
                  "--mixed_precision", "fp16", *SCRIPT, "--fp16")
    assert out.code == 0, out.err


def test_legacy_fp16_is_the_exported_mixed_precision(workdir: Path) -> None:
    job = parse_launch([*_config(workdir, "fp16: true\n", ds_file=False), *SCRIPT], {})
    assert job.env["ACCELERATE_MIXED_PRECISION"] == "fp16"
    job = parse_launch([*_config(workdir, "fp16: true\nmixed_precision: bf16\n", ds_file=False), *SCRIPT], {})
    assert job.env["ACCELERATE_MIXED_PRECISION"] == "bf16"


def test_a_config_file_without_distributed_type(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (workdir / "acc.yaml").write_text("num_processes: 8\nmixed_precision: bf16\n")
    out = llmperf(capsys, "explain", "--", "accelerate", "launch", "--config_file", "acc.yaml", *SCRIPT)
    assert out.code == 2 and "has no distributed_type" in out.err, out.err
