"""--apply never touches the precision choice (checked, not assumed): tune builds the applied command from the command's
own words and writes only the layout's flags and ds_config keys, so --fp16 / --bf16 (Megatron, the Trainer), a
ds_config's fp16 / bf16 sections and accelerate's --mixed_precision stay as the user wrote them: the applied command
never carries both, and explain resolves it to the precision of the user's command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .apply_corpus import GPT_1B, HF
from .helpers import run_cli

PRECISION_FLAGS = ("--fp16", "--bf16")
FP16_DS = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 8, "zero_optimization": {"stage": 0},
           "fp16": {"enabled": True, "loss_scale": 0, "initial_scale_power": 12}}
BF16_AUTO = {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto",
             "bf16": {"enabled": "auto"}, "fp16": {"enabled": "auto"}, "zero_optimization": {"stage": 0}}
FORMS: dict[str, tuple[list[str], dict, str | None]] = {
    "megatron --fp16": (["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", *GPT_1B, "--micro-batch-size", "64",
                         "--global-batch-size", "512", "--fp16"], {}, None),  # micro-batch 64 does not fit: it changes
    "megatron-deepspeed --fp16 + ds fp16": (["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", *GPT_1B,
                                             "--micro-batch-size", "8", "--global-batch-size", "64", "--fp16",
                                             "--deepspeed", "--deepspeed_config", "ds.json", "--zero-stage", "0"],
                                            {"ds.json": FP16_DS}, None),
    "deepspeed script, fp16 in its ds_config only": (["deepspeed", "--num_gpus", "8", "train.py", "--deepspeed_config",
                                                      "ds.json"], {"ds.json": FP16_DS}, "llama2-7b"),
    "trainer --bf16 + ds auto": (["deepspeed", "--num_gpus", "8", "run_clm.py", "--deepspeed", "ds.json",
                                  "--per_device_train_batch_size", "8", *HF], {"ds.json": BF16_AUTO}, "llama2-7b"),
    "accelerate --mixed_precision fp16": (["accelerate", "launch", "--use_deepspeed", "--num_processes", "8",
                                           "--zero_stage", "0", "--mixed_precision", "fp16", "run_clm.py",
                                           "--per_device_train_batch_size", "8",
                                           *[w for w in HF if w != "--bf16"], "--fp16"], {}, "llama2-7b"),
}


def _explain(argv: list[str], model: str | None, capsys) -> dict:
    code, out, err = run_cli(["explain", "--format", "json", *(["--model", model] if model else []), "--", *argv],
                             capsys)
    assert code == 0, err
    return json.loads(out)


def _sections(path: Path) -> dict:
    raw = json.loads(path.read_text())
    return {k: raw.get(k) for k in ("fp16", "bf16")}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_apply_keeps_the_precision_of_the_command(form: str, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    argv, files, model = FORMS[form]
    for name, content in files.items():
        (tmp_path / name).write_text(json.dumps(content))
    (tmp_path / "space.yaml").write_text("micro_batch_size: [1, 2]\nzero_stage: [1, 2, 3]\n")  # the layout must change
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--search", "space.yaml", "--format", "json",
                              *(["--model", model] if model else []), "--apply", "--dry-run", "--", *argv], capsys)
    assert code == 0, err
    data = json.loads(out)
    applied = data["applied"]["argv"]
    assert applied != argv  # a layout change was applied
    assert [w for w in applied if w in PRECISION_FLAGS] == [w for w in argv if w in PRECISION_FLAGS]
    assert not {c["key"] for row in data["top"] for c in row["changes"]} & {*PRECISION_FLAGS, "--mixed_precision",
                                                                              "fp16.enabled", "bf16.enabled"}
    for path in data["applied"]["new_files"]:
        assert _sections(Path(path)) == _sections(tmp_path / "ds.json")
    assert _explain(applied, model, capsys)["precision"] == _explain(argv, model, capsys)["precision"]
