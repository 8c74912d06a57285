"""The torch that timed a profile's samples: part of the hardware fingerprint (resume and fit keep to it), allowed to
change on the same machine, and named by predict when the installed torch differs."""

import json
from dataclasses import replace
from pathlib import Path

import pytest

from llmperf_hook.cli import main
from llmperf_hook.profile.profile_io import (installed_torch_version, measured_under_notes, read_model_text,
                                             read_profile_meta, write_profile)
from llmperf_hook.store import OpSampleRecord, dims_key, open_store

JOB = ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "4", "--hidden-size", "1024",
       "--num-attention-heads", "16", "--seq-length", "1024", "--max-position-embeddings", "1024",
       "--micro-batch-size", "1", "--global-batch-size", "64", "--vocab-size", "32000", "--bf16"]


def test_cpu_fingerprint_names_the_torch_that_times_the_kernels() -> None:
    torch = pytest.importorskip("torch")
    from llmperf_hook.profile.local_hardware import fingerprint

    assert fingerprint("cpu", 1)["torch"] == torch.__version__


def test_a_torch_upgrade_on_the_same_machine_may_refit_its_profile(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from llmperf_hook.profile.sampler import _check_same_machine

    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    here = {"device": "cpu-model", "machine": "x86_64", "threads": "1", "logical_cpus": "2", "torch": "2.13.0+cpu"}
    (tmp_path / "profiles" / "p").mkdir(parents=True)
    (tmp_path / "profiles" / "p" / "profile.json").write_text(json.dumps({"hardware": {**here, "torch": "2.12.0"}}))
    _check_same_machine("p", here)  # no UsageError: new software on the same device re-measures


def test_resume_skips_only_shapes_of_the_same_fingerprint(tmp_path: Path) -> None:
    gemm = {"m": 64, "n": 128, "k": 32}
    with open_store(tmp_path / "s.sqlite") as store:
        store.record_op_samples([OpSampleRecord("cpu-x", "fp32", "gemm", "fwd", gemm, 1e-4, "sampler", "torch-a"),
                                 OpSampleRecord("cpu-x", "fp32", "gemm", "bwd", gemm, 2e-4, "sampler", "torch-b")])
        assert store.sampled_keys("cpu-x", "fp32", fingerprint="torch-a") == {("gemm", "fwd", dims_key(gemm))}
        assert store.sampled_keys("cpu-x", "fp32", fingerprint="torch-c") == set()
        assert len(store.sampled_keys("cpu-x", "fp32")) == 2


def _user_profile(home: Path, torch_version: str) -> None:
    """The shipped A100 profile's GEMM models as a user profile whose samples were timed under `torch_version`."""
    from llmperf_hook.predict import fitted

    user, shipped = fitted.profile_dirs("a100-sxm4-80gb")
    meta = read_profile_meta(shipped)
    gemm = tuple(m for m in meta.models if m.op_class == "gemm")
    write_profile(user, replace(meta, models=gemm, hardware={**meta.hardware, "torch": torch_version}),
                  {m.file: read_model_text(shipped, m) for m in gemm})


def _warnings(capsys: pytest.CaptureFixture) -> list[str]:
    with pytest.raises(SystemExit) as exc:
        main(["predict", "--cluster", "dgx-a100", "--format", "json", "--", *JOB])
    assert not exc.value.code
    return json.loads(capsys.readouterr().out)["warnings"]


def test_predict_says_when_the_profile_was_measured_under_another_torch(tmp_path: Path, capsys,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    if installed_torch_version() is None:
        pytest.skip("no torch installed: the job's torch is unknown and nothing is said")
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    _user_profile(tmp_path, "1.13.1")
    said = [w for w in _warnings(capsys) if "measured under torch" in w]
    assert len(said) == 1 and "1.13.1" in said[0] and installed_torch_version() in said[0], said
    _user_profile(tmp_path, installed_torch_version().split("+")[0] + "+cu999")  # the same torch, a GPU build
    assert not [w for w in _warnings(capsys) if "measured under torch" in w]


def test_profiles_without_a_measuring_torch_say_nothing() -> None:
    from llmperf_hook.resources import configs_dir

    assert measured_under_notes(read_profile_meta(configs_dir() / "profiles" / "a100-sxm4-80gb")) == ()


def test_profiles_without_a_measuring_torch_do_not_look_up_the_installed_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """The package-metadata lookup costs tens of milliseconds of a whole predict: only a profile that names the
    torch it was measured under pays it."""
    from llmperf_hook.profile import profile_io
    from llmperf_hook.resources import configs_dir

    def refuse() -> None:
        raise AssertionError("looked up the installed torch")

    monkeypatch.setattr(profile_io, "installed_torch_version", refuse)
    assert measured_under_notes(read_profile_meta(configs_dir() / "profiles" / "a100-sxm4-80gb")) == ()
