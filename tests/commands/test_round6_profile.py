"""Robustness round 6: `llmperf profile` names and the profiles `predict --hardware` loads, as a user breaks them
(a CPU profile named after a shipped GPU, a profile folder copied from other hardware, an edited fingerprint or
metadata): a clear exit 2, never a silently wrong number."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from llmperf_hook.commands.profile import command as profile_command
from llmperf_hook.errors import ProfileError, UsageError
from llmperf_hook.graph.op import Op
from llmperf_hook.predict.fitted import find_profile
from llmperf_hook.profile.profile_io import meta_sha256
from llmperf_hook.resources import configs_dir

SHIPPED = configs_dir() / "profiles"
GEMM = [Op("qkv", "gemm", "fwd", {"m": 4096, "n": 1536, "k": 4096}, dtype="bf16")]


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.mark.parametrize("name", ["h100-sxm5-80gb", "A100-SXM4-80GB", "a100-sxm4-40gb"])
def test_cpu_profile_may_not_take_a_shipped_gpu_name(_home: Path, name: str) -> None:
    out = CliRunner().invoke(profile_command, ["--device", "cpu", "--budget", "0.1", "--name", name])
    assert isinstance(out.exception, UsageError) and out.exception.exit_code == 2
    assert f"configs/hardware/{name.lower()}.yaml" in str(out.exception) and "--name my-cpu" in str(out.exception)
    assert not _home.exists()  # refused before anything was sampled or written


def _user_copy(home: Path, source: str, as_name: str) -> Path:
    folder = home / "profiles" / as_name
    shutil.copytree(SHIPPED / source, folder)
    return folder


def _edit(folder: Path, change) -> None:
    """Change profile.json and re-digest it (meta_sha256), so the check under test is the one that refuses it."""
    doc = json.loads((folder / "profile.json").read_text())
    change(doc)
    doc["meta_sha256"] = meta_sha256(doc)
    (folder / "profile.json").write_text(json.dumps(doc))


def test_profile_copied_under_another_name_is_refused(_home: Path) -> None:
    _user_copy(_home, "a100-sxm4-80gb", "my-gpu")
    with pytest.raises(ProfileError, match="fitted as 'a100-sxm4-80gb'.*NVIDIA A100-SXM4-80GB.*never used"):
        find_profile("my-gpu", "bf16")


def test_shipped_preset_name_with_another_gpus_fingerprint_is_refused(_home: Path) -> None:
    folder = _user_copy(_home, "a100-sxm4-80gb", "a100-sxm4-80gb")
    _edit(folder, lambda d: d["hardware"].update(device="NVIDIA H100 80GB HBM3"))
    with pytest.raises(ProfileError, match="measured on 'NVIDIA H100 80GB HBM3'"):
        find_profile("a100-sxm4-80gb", "bf16")
    _edit(folder, lambda d: d.update(hardware={"device": "Intel(R) Xeon(R)", "clock": "process_cpu"}))
    with pytest.raises(ProfileError, match="Intel"):
        find_profile("a100-sxm4-80gb", "bf16")
    _edit(folder, lambda d: d.update(hardware={"device": "NVIDIA A100-SXM4-80GB", "num_sms": "108"}))
    assert find_profile("a100-sxm4-80gb", "fp16").name == "lightgbm:a100-sxm4-80gb"  # its own GPU: used


def test_every_shipped_profile_passes_its_own_checks() -> None:
    for folder in SHIPPED.iterdir():
        if (folder / "profile.json").is_file():
            meta = json.loads((folder / "profile.json").read_text())
            dtype = next(m["dtype"] for m in meta["models"])
            assert find_profile(folder.name, dtype) is not None, folder.name


@pytest.mark.parametrize("change, match", [
    (lambda d: d.update(roofline="x"), "lacks or mistypes a field"),
    (lambda d: d.update(roofline=[1, 2]), "lacks or mistypes a field"),
    (lambda d: d["models"][0].update(train_ranges="x"), "unusable"),
])
def test_mistyped_metadata_is_a_profile_error(_home: Path, change, match: str) -> None:
    folder = _user_copy(_home, "h100-sxm5-80gb", "h100-sxm5-80gb")
    _edit(folder, change)
    with pytest.raises(ProfileError, match=match):
        prof = find_profile("h100-sxm5-80gb", "bf16")
        prof.predict_s(GEMM, None)


def test_edited_feature_list_names_both_lists(_home: Path) -> None:
    folder = _user_copy(_home, "h100-sxm5-80gb", "h100-sxm5-80gb")
    meta = json.loads((folder / "profile.json").read_text())
    index = next(i for i, m in enumerate(meta["models"]) if (m["op_class"], m["phase"], m["dtype"]) == ("gemm", "fwd", "bf16"))
    names = meta["models"][index]["feature_names"]
    _edit(folder, lambda d: d["models"][index].update(feature_names=names[::-1]))
    prof = find_profile("h100-sxm5-80gb", "bf16")
    with pytest.raises(ProfileError, match="lists features .* this llmperf computes .* gemm/fwd"):
        prof.predict_class_s("gemm", "fwd", "bf16", {k: np.array([float(v)]) for k, v in GEMM[0].dims.items()})


def test_gloo_comm_profile_may_not_take_a_shipped_cluster_name(_home: Path) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("on a GPU machine the collectives are NCCL's: the cluster's own name is allowed")
    out = CliRunner().invoke(profile_command, ["--comm", "--cluster-name", "DGX-H100"])
    assert isinstance(out.exception, UsageError) and "configs/clusters/dgx-h100.yaml" in str(out.exception)
    assert not _home.exists()


def test_comm_is_not_a_profile_name(_home: Path) -> None:
    out = CliRunner().invoke(profile_command, ["--device", "cpu", "--budget", "0.1", "--name", "Comm"])
    assert isinstance(out.exception, UsageError) and "profiles/comm/" in str(out.exception)
    assert not _home.exists()


def test_profile_killed_mid_run_leaves_a_consistent_store_that_resumes(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGKILL (no handler runs: the OOM killer, a node lost) while shapes are measured: every sample committed
    so far is intact and the same command measures only the rest."""
    import os
    import signal
    import sqlite3
    import subprocess
    import sys
    import time

    env = {**os.environ, "LLMPERF_HOME": str(tmp_path / "home"), "OMP_NUM_THREADS": "1"}
    args = [sys.executable, "-m", "llmperf_hook", "profile", "--device", "cpu", "--ops", "gemm,layernorm", "--name",
            "killed"]
    proc = subprocess.Popen([*args, "--budget", "2"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    store = tmp_path / "home" / "store.sqlite"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None and _stored(store) < 10:
        time.sleep(0.5)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    stored = _stored(store)
    assert stored >= 10
    with sqlite3.connect(store) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # the same fingerprint (threads) as the killed run; LLMPERF_HOME: _home
    again = CliRunner().invoke(profile_command, [*args[4:], "--budget", "0.1"])  # the resume, in this process
    assert again.exit_code == 0, (again.output[-2000:], again.exception)
    assert f"{stored} already stored" in again.output


def _stored(store: Path) -> int:
    import sqlite3

    try:
        with sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=1) as conn:
            return conn.execute("SELECT COUNT(*) FROM op_samples WHERE hardware = 'killed'").fetchone()[0]
    except sqlite3.Error:
        return 0


@pytest.mark.parametrize("budget", ["1e9", "1441", "inf"])
def test_a_budget_of_more_than_a_day_is_refused(_home: Path, budget: str) -> None:
    out = CliRunner().invoke(profile_command, ["--device", "cpu", "--budget", budget])
    assert isinstance(out.exception, UsageError) and f"--budget {float(budget):g} " in str(out.exception)
    assert "more than a day" in str(out.exception) and not _home.exists()
