"""Issue 4, round 15: `llmperf profile` played as a user. One tiny real CPU profile (module fixture: --budget 0.2,
two op classes) and copies of its $LLMPERF_HOME: the refit a profile without its digest names keeps the measured
framework cost (the regressors are refitted from the same samples) and says so."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.acceptance.cli import error_lines, run_cli

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
NAME = "r15-cpu"
OPS = "gemm,layernorm"
GPT = ["torchrun", "--nproc-per-node", "1", "pretrain_gpt.py", "--num-layers", "2", "--hidden-size", "128",
       "--num-attention-heads", "4", "--seq-length", "128", "--max-position-embeddings", "128",
       "--micro-batch-size", "2", "--global-batch-size", "2", "--vocab-size", "1000"]
FRAMEWORK = {"format": "llmperf-cpu-framework-overhead", "format_version": 3, "device": "cpu",
             "dtypes": {"fp32": {"per_unit_s": 2e-5, "compute_scale": 1.2, "optimizer_per_tensor_s": 1e-5,
                                 "optimizer_per_param_s": 1e-9}}}
"""A framework file of the fields predict reads (a real one takes a 3-minute --budget)."""


@dataclass(frozen=True)
class Profiled:
    home: Path
    done: subprocess.CompletedProcess


def _env(home: Path) -> dict[str, str]:
    return {**os.environ, "LLMPERF_HOME": str(home), "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}


def _profile(home: Path, *args: str, timeout_s: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llmperf_hook", "profile", "--device", "cpu", *args],
                          env=_env(home), capture_output=True, text=True, timeout=timeout_s)


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> Profiled:
    home = tmp_path_factory.mktemp("r15") / "home"
    return Profiled(home, _profile(home, "--budget", "0.2", "--dtype", "fp32", "--ops", OPS, "--name", NAME))


@pytest.fixture
def home_copy(profiled: Profiled, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    assert profiled.done.returncode == 0, profiled.done.stderr[-3000:]
    home = Path(shutil.copytree(profiled.home, tmp_path / "home"))
    monkeypatch.setenv("LLMPERF_HOME", str(home))
    return home


def _step_s(capsys: pytest.CaptureFixture) -> float:
    code, out, err = run_cli(["predict", "--format", "json", "--hardware", NAME, "--", *GPT], capsys)
    assert code == 0, err
    return float(json.loads(out)["step_time_s"])


def test_the_refit_a_missing_digest_names_keeps_the_framework_cost(home_copy: Path,
                                                                   capsys: pytest.CaptureFixture) -> None:
    """Before, every refit under --budget 3 deleted framework_overhead.json ('stale now'), this one too: 0 shapes
    measured, every one reused, the regressors fitted from the samples the cost was measured against."""
    folder = home_copy / "profiles" / NAME
    (folder / "framework_overhead.json").write_text(json.dumps(FRAMEWORK))
    with_cost_s = _step_s(capsys)
    doc = json.loads((folder / "profile.json").read_text())
    del doc["meta_sha256"]
    (folder / "profile.json").write_text(json.dumps(doc))
    code, out, err = run_cli(["predict", "--hardware", NAME, "--", *GPT], capsys)
    assert code == 2 and len(error_lines(err)) == 1, err
    refit = err.split("`")[1]
    assert refit == f"llmperf profile --device cpu --dtype fp32 --ops {OPS} --budget 0.2 --name {NAME}", err
    done = _profile(home_copy, *refit.split()[4:])  # after `llmperf profile --device cpu`
    assert done.returncode == 0, done.stderr[-3000:]
    assert "measured 0 shapes" in done.stdout, done.stdout
    assert (f"note: framework cost kept ({folder / 'framework_overhead.json'}, fp32): this refit measured no new "
            f"shape for that dtype") in done.stdout, done.stdout
    assert json.loads((folder / "framework_overhead.json").read_text()) == FRAMEWORK
    assert _step_s(capsys) == pytest.approx(with_cost_s, rel=0.05)  # the peaks are measured again: not identical


@pytest.mark.parametrize("args, says", [
    (["--ops", "gemm", "layernorm", "rmsnorm"], "unexpected arguments 'layernorm rmsnorm': op classes are given as one "
                                                "comma-separated list, --ops gemm,layernorm,rmsnorm (no spaces)."),
    (["--ops", "gemm,", "layernorm"], "--ops gemm,layernorm (no spaces)."),
    (["--ops", "layer_norm,cross-entropy"], "--ops layer_norm,cross-entropy: unknown op class (layer_norm -> "
                                            "layernorm; cross-entropy -> cross_entropy); choose from gemm,"),
    (["--ops", "gemm,layernrom"], "--ops layernrom: unknown op class (layernrom -> layernorm); choose from"),
])
def test_mistyped_ops_say_what_was_meant(args: list[str], says: str, tmp_path: Path, capsys: pytest.CaptureFixture,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A space where --ops takes commas was 'unexpected arguments ...: to sample a job's shapes first, write
    `llmperf profile --for -- <launch command>`'; a near miss listed every class without saying which was meant."""
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    code, out, err = run_cli(["profile", "--device", "cpu", "--budget", "0.2", *args], capsys)
    assert code == 2 and out == "" and len(error_lines(err)) == 1, (code, out, err)
    assert says in err, err
    assert not (tmp_path / "store.sqlite").exists()


def _signed_then_edited() -> dict:
    """FRAMEWORK as llmperf writes it (signed), then compute_scale 1.2 -> 1.9: within what the writer produces, so
    only the digest tells."""
    from llmperf_hook.predict.cpu_framework import with_digest

    doc = with_digest(FRAMEWORK)
    return {**doc, "dtypes": {"fp32": {**doc["dtypes"]["fp32"], "compute_scale": 1.9}}}


@pytest.mark.parametrize("text, says", [
    ('{"dtypes": {"fp', "JSONDecodeError"),
    (json.dumps(_signed_then_edited()), "its content does not match its sha256"),
    ('{"dtypes": {"fp32": {"per_unit_s": "x"}}}', "could not convert string to float: 'x'"),
    (json.dumps({"dtypes": {"fp32": {**FRAMEWORK["dtypes"]["fp32"], "per_unit_s": -1}}}), "per_unit_s -1.0"),
    (json.dumps({"dtypes": {"fp32": {**FRAMEWORK["dtypes"]["fp32"], "compute_scale": 1e6}}}),
     "compute_scale 1000000.0 (outside 0.5-2)"),
    ('{"dtypes": {"fp32": {"per_unit_s": 2e-5, "compute_scale": 1.2, "optimizer_per_tensor_s": 1e-5, '
     '"optimizer_per_param_s": 1e-9, "concurrency_slowdown": {"2": NaN}}}}', "concurrency_slowdown.2 nan"),
])
def test_a_damaged_framework_file_exits_2_never_a_number(text: str, says: str, home_copy: Path,
                                                          capsys: pytest.CaptureFixture) -> None:
    """framework_overhead.json truncated or a field mistyped was 'internal error' (exit 1); a per-unit cost edited to
    -1 s predicted a 28,000-s step with exit 0."""
    (home_copy / "profiles" / NAME / "framework_overhead.json").write_text(text)
    code, out, err = run_cli(["predict", "--hardware", NAME, "--", *GPT], capsys)
    assert code == 2 and out == "" and len(error_lines(err)) == 1, (code, out, err)
    assert says in err and "framework_overhead.json is unusable" in err, err
    assert f"`llmperf profile --device cpu --dtype fp32 --budget 4 --name {NAME}`" in err, err
