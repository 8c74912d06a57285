"""--apply on a command whose ds_config lives in a folder that cannot take the tuned copy (a read-only shared config
folder): exit 2 before the result reads as applied, with the one JSON object carrying the error that names the copy
and the fix, the user's config untouched and no copy anywhere. (Tests run as root, where a chmod'ed folder stays
writable, so the folder's refusal is the operating system's error raised at the exclusive create.)"""

from __future__ import annotations

import builtins
import json
from pathlib import Path

import pytest

import llmperf_hook.tune.apply as apply_mod

from .helpers import run_cli

DS = {"train_batch_size": 128, "train_micro_batch_size_per_gpu": 16, "zero_optimization": {"stage": 0},
      "bf16": {"enabled": True}}  # ZeRO-0 at micro-batch 16 does not fit a 7B model: the best layout changes the config


@pytest.fixture
def readonly(tmp_path: Path, monkeypatch) -> Path:
    folder = tmp_path / "shared-configs"
    folder.mkdir()
    (folder / "ds.json").write_text(json.dumps(DS))

    def refusing_open(file, mode="r", *args, **kwargs):
        if Path(file).parent == folder and any(m in mode for m in "wxa"):
            raise PermissionError(13, "Permission denied", str(file))
        return builtins.open(file, mode, *args, **kwargs)

    monkeypatch.setattr(apply_mod, "open", refusing_open, raising=False)
    return folder


@pytest.mark.parametrize("fmt", ["json", "table"])
def test_a_read_only_config_folder_exits_2_naming_the_copy(fmt: str, readonly: Path, tmp_path: Path, capsys,
                                                          monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    before = (readonly / "ds.json").read_bytes()
    argv = ["deepspeed", "--num_gpus", "8", "train.py", "--deepspeed", "--deepspeed_config", "shared-configs/ds.json"]
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--model", "llama2-7b", "--format", fmt, "--apply",
                              "--dry-run", "--", *argv], capsys)
    assert code == 2 and "Traceback" not in err
    assert "Permission denied" in err and "ds.llmperf-tuned.json" in err and "writable" in err
    assert "would run" not in err  # nothing reads as applied
    if fmt == "json":
        data = json.loads(out)  # one object, the result and the error
        assert data["exit_code"] == 2 and "ds.llmperf-tuned.json" in data["error"] and data["top"]
    assert (readonly / "ds.json").read_bytes() == before and sorted(p.name for p in readonly.iterdir()) == ["ds.json"]
