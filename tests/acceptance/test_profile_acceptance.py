"""Issue 4 (`llmperf profile`, fitted profiles used by `predict`) through the real CLI, without sampling: the
profile a prediction uses is named per op class; a damaged profile in $LLMPERF_HOME (which takes precedence
over the shipped one of the same name) exits 2 with a clear message and no number; bad sampler options exit 2
before anything is measured; no pickle in the package."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from llmperf_hook.resources import configs_dir

from .cli import error_lines, run_cli

JOB = ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "4", "--hidden-size", "1024",
       "--num-attention-heads", "16", "--seq-length", "1024", "--max-position-embeddings", "1024",
       "--micro-batch-size", "1", "--global-batch-size", "64", "--bf16", "--vocab-size", "32000"]
PROFILE = "a100-sxm4-80gb"


def _predict(capsys) -> tuple[int, str, str]:
    return run_cli(["predict", "--cluster", "dgx-a100", "--format", "json", "--", *JOB], capsys)


def test_predict_names_the_fitted_profile_per_op_class(capsys) -> None:
    code, out, err = _predict(capsys)
    assert code == 0, err
    used = json.loads(out)["predictor"]
    assert used["gemm"] == f"lightgbm:{PROFILE}" and used["attention"] == f"lightgbm:{PROFILE}"
    assert all(v.startswith(("lightgbm:", "roofline", "alpha-beta")) for v in used.values()), used


def test_intact_copy_in_llmperf_home_is_used(tmp_path: Path, capsys, monkeypatch) -> None:
    _home_copy(tmp_path, monkeypatch)
    code, out, err = _predict(capsys)
    assert code == 0 and json.loads(out)["predictor"]["gemm"] == f"lightgbm:{PROFILE}", err


def _home_copy(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    copy = tmp_path / "profiles" / PROFILE
    shutil.copytree(configs_dir() / "profiles" / PROFILE, copy)
    return copy


def _damage_model(copy: Path) -> None:
    model = copy / "gemm.fwd.fp16.txt.gz"
    model.write_bytes(model.read_bytes()[:64])


def _damage_json(copy: Path) -> None:
    (copy / "profile.json").write_text('{"name": ')


def _drop_models_key(copy: Path) -> None:
    doc = json.loads((copy / "profile.json").read_text())
    del doc["models"]
    (copy / "profile.json").write_text(json.dumps(doc))


def _future_format(copy: Path) -> None:
    doc = json.loads((copy / "profile.json").read_text())
    doc["format_version"] = 99
    (copy / "profile.json").write_text(json.dumps(doc))


@pytest.mark.parametrize(("damage", "says"), [
    (_damage_model, "does not match its sha256"),
    (lambda copy: (copy / "gemm.fwd.fp16.txt.gz").unlink(), "cannot be read"),
    (_damage_json, "not valid JSON"),
    (_drop_models_key, "'models'"),
    (_future_format, "format_version 99"),
])
def test_damaged_profile_exits_2_and_predicts_nothing(tmp_path: Path, capsys, monkeypatch, damage, says) -> None:
    copy = _home_copy(tmp_path, monkeypatch)
    damage(copy)  # before this process first loads the copy: loaded profiles are cached per path
    code, out, err = _predict(capsys)
    assert code == 2 and out == "" and "Traceback" not in err
    lines = error_lines(err)
    assert len(lines) == 1 and str(copy) in lines[0] and says in lines[0], err


def test_profile_copied_under_another_name_is_refused(tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    shutil.copytree(configs_dir() / "profiles" / PROFILE, tmp_path / "profiles" / "my-gpu")
    hw = (configs_dir() / "hardware" / f"{PROFILE}.yaml").read_text()
    (tmp_path / "hardware").mkdir()
    (tmp_path / "hardware" / "my-gpu.yaml").write_text(re.sub(r"(?m)^name: .*$", "name: my-gpu", hw))
    code, out, err = run_cli(["predict", "--cluster", "dgx-a100", "--hardware", "my-gpu", "--", *JOB], capsys)
    assert code == 2 and out == ""
    assert f"fitted as '{PROFILE}'" in err and "never used" in err


@pytest.mark.parametrize(("args", "says"), [
    (["--ops", "gemm,nosuchop"], "--ops nosuchop: unknown op class"),
    (["--ops", ","], "names no op class"),
    (["--budget", "0"], "--budget 0.0"),
    (["--budget", "-1"], "--budget -1.0"),
    (["--comm", "--cluster-name", "c"], "must run under torchrun"),
    (["--for"], "--for needs the launch command"),
])
def test_bad_profile_options_exit_2_before_sampling(tmp_path: Path, capsys, monkeypatch, args, says) -> None:
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(var, raising=False)
    name = [] if "--comm" in args else ["--name", "t"]
    code, out, err = run_cli(["profile", "--device", "cpu", *name, *args], capsys)
    assert code == 2 and "Traceback" not in err
    lines = error_lines(err)
    assert len(lines) == 1 and says in lines[0], err
    assert not (tmp_path / "profiles" / "t").exists()


def test_no_pickle_in_the_package() -> None:
    package = Path(__file__).resolve().parents[2] / "llmperf_hook"
    code = re.compile(r"^\s*(import (c?pickle|joblib|dill)|from (c?pickle|joblib|dill) import)|torch\.load\(|"
                      r"np\.load\([^)]*allow_pickle\s*=\s*True", re.M)
    hits = [str(p) for p in package.rglob("*.py") if code.search(p.read_text(encoding="utf-8"))]
    assert hits == []
    shipped = [p for p in (configs_dir() / "profiles").rglob("*") if p.is_file()]
    assert shipped and not [p for p in shipped if p.suffix in (".pkl", ".pickle", ".joblib", ".pt")]
