"""A communication model gets the op profiles' treatment: no pickle beside it, checksum and every field checked."""

from __future__ import annotations

import json
import pickle
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from llmperf_hook.errors import ProfileError
from llmperf_hook.profile.comm_fit import CommSamples, fit_layout
from llmperf_hook.profile.comm_model import COMM_FILE, CommModel, _checksum, read_comm_model, write_comm_model
from llmperf_hook.resources import configs_dir

REPO = Path(__file__).resolve().parents[2]


def _model_dir(tmp_path: Path) -> Path:
    fit = fit_layout(CommSamples("allreduce", 1, 4, np.geomspace(1e3, 1e9, 60), np.geomspace(1e3, 1e9, 60) / 1e11 + 1e-5))
    write_comm_model(tmp_path / "c", CommModel("c", (fit,), {"samples": "synthetic"}))
    return tmp_path / "c"


@pytest.mark.parametrize("name, write", [
    ("fit_cache.pkl", lambda p: p.write_bytes(b"not even a pickle")),
    ("cache.bin", lambda p: p.write_bytes(pickle.dumps({"busbw": 1.0}, protocol=4))),
    ("sub/state", lambda p: p.write_bytes(pickle.dumps([1], protocol=2))),
    ("weights", lambda p: zipfile.ZipFile(p, "w").writestr("archive/data.pkl", b"\x80\x02")),
])
def test_a_pickle_beside_the_model_refuses_the_folder(tmp_path: Path, name: str, write) -> None:
    directory = _model_dir(tmp_path)
    assert read_comm_model(directory).layouts  # intact without it
    target = directory / name
    target.parent.mkdir(parents=True, exist_ok=True)
    write(target)
    with pytest.raises(ProfileError, match=r"Python pickle .*never loads a pickle.*Remove"):
        read_comm_model(directory)


def test_shipped_models_are_data_only_and_load() -> None:
    for directory in sorted((configs_dir() / "profiles" / "comm").iterdir()):
        assert read_comm_model(directory).layouts, directory


def _edit_and_reseal(directory: Path, edit) -> None:
    """A hand edit that also recomputes the checksum: the fields must still be checked one by one."""
    path = directory / COMM_FILE
    doc = json.loads(path.read_text())
    edit(doc["layouts"][0])
    doc["checksum"] = _checksum({k: doc[k] for k in ("cluster", "layouts", "provenance")})
    path.write_text(json.dumps(doc))


@pytest.mark.parametrize("edit", [
    lambda f: f.update(residual_knots_log2_bytes=list(reversed(f["residual_knots_log2_bytes"]))),
    lambda f: f.update(residual_knots_log2_bytes=[float("nan")] * len(f["residual_knots_log2_bytes"])),
    lambda f: f.update(busbw_bytes_per_s=-1.0),
    lambda f: f.update(alpha_s=float("inf")),
    lambda f: f.update(collective="broadcast"),
    lambda f: f.update(extra_field=1),
])
def test_fields_out_of_range_are_refused_even_with_a_matching_checksum(tmp_path: Path, edit) -> None:
    directory = _model_dir(tmp_path)
    _edit_and_reseal(directory, edit)
    with pytest.raises(ProfileError, match="missing or out of range"):
        read_comm_model(directory)


def test_predict_with_a_planted_pickle_in_the_users_comm_model_exits_2(tmp_path: Path) -> None:
    home = tmp_path / "home"
    user = home / "profiles" / "comm" / "perlmutter"
    shutil.copytree(configs_dir() / "profiles" / "comm" / "perlmutter", user)
    (user / "cache.bin").write_bytes(pickle.dumps({"a": 1}))
    argv = ["predict", "--cluster", "perlmutter", "--", "torchrun", "--nproc-per-node", "4", "pretrain_gpt.py",
            "--num-layers", "2", "--hidden-size", "1024", "--num-attention-heads", "16", "--seq-length", "1024",
            "--max-position-embeddings", "1024", "--micro-batch-size", "1", "--global-batch-size", "8", "--fp16"]
    env = {"PATH": "/usr/bin:/bin", "LLMPERF_HOME": str(home), "PYTHONPATH": str(REPO)}
    run = subprocess.run([sys.executable, "-m", "llmperf_hook", *argv], env=env, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 2, run.stderr
    assert "cache.bin, a Python pickle" in run.stderr and "Traceback" not in run.stderr
    (user / "cache.bin").unlink()
    assert subprocess.run([sys.executable, "-m", "llmperf_hook", *argv], env=env, capture_output=True,
                          timeout=120).returncode == 0


def test_interrupted_write_leaves_the_previous_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    directory = _model_dir(tmp_path)
    before = (directory / COMM_FILE).read_bytes()

    real_write = Path.write_text

    def full_disk(self: Path, data: str, *args, **kwargs) -> int:  # half the bytes land, then ENOSPC
        real_write(self, data[: len(data) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", full_disk)
    with pytest.raises(OSError):
        write_comm_model(directory, read_comm_model(directory))
    monkeypatch.undo()
    assert (directory / COMM_FILE).read_bytes() == before
