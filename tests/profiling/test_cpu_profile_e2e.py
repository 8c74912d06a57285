"""`llmperf profile --device cpu` on a tiny budget: samples, resumes, fits, and `predict --hardware` uses it."""

import json
import os
import time
from pathlib import Path

import pytest

from llmperf_hook.cli import main
from tests.profiling.conftest import TINY_NAME, TinyProfile

pytest.importorskip("torch")

GPT = ["--", "torchrun", "--nproc-per-node", "1", "pretrain_gpt.py", "--num-layers", "2", "--hidden-size", "128",
       "--num-attention-heads", "4", "--seq-length", "128", "--max-position-embeddings", "128",
       "--micro-batch-size", "2", "--global-batch-size", "2", "--vocab-size", "1000"]


def _run(args: list[str], capsys: pytest.CaptureFixture) -> tuple[int, str]:
    try:
        main(args)
    except SystemExit as exc:
        code = int(exc.code or 0)
    out = capsys.readouterr()
    return code, out.out + out.err


def test_tiny_budget_profile_is_used_by_predict(tiny_profile: TinyProfile, tiny_home: Path,
                                                capsys: pytest.CaptureFixture) -> None:
    """The session's tiny profile (tests/profiling/conftest.py; its budget is asserted in test_profile_budget):
    fitted, resumable, and what predict --hardware uses."""
    assert tiny_profile.returncode == 0, tiny_profile.output[-3000:]
    meta = json.loads((tiny_home / "profiles" / TINY_NAME / "profile.json").read_text())
    fitted = {(m["op_class"], m["phase"], m["dtype"]) for m in meta["models"]}
    # Every class and direction asked for, however loaded the machine: each gets its first fit past the deadline
    # (sampler.warm_up keeps the process's first autograd call from refusing LayerNorm backward's under load).
    asked = {(c, p, "fp32") for c in ("gemm", "layernorm") for p in ("fwd", "bwd")}
    assert asked <= fitted, (sorted(asked - fitted), tiny_profile.output[-3000:])
    assert meta["provenance"]["peak_layouts"] == "nt,nn,tn"  # predict tells a peak of a @ b alone by its absence
    assert (tiny_home / "hardware" / f"{TINY_NAME}.yaml").is_file()
    # Resumable: a second run reuses every stored shape.
    code, out2 = _run(["profile", "--device", "cpu", "--budget", "0.1", "--ops", "gemm,layernorm",
                       "--name", TINY_NAME], capsys)
    assert code == 0 and "already stored" in out2 and " 0 already stored" not in out2, out2
    code, out3 = _run(["predict", "--format", "json", "--hardware", TINY_NAME, *GPT], capsys)
    assert code == 0, out3
    predictor = json.loads(out3[out3.index("{"):])["predictor"]
    assert predictor["gemm"] == f"lightgbm:{TINY_NAME}" and predictor["layernorm"] == f"lightgbm:{TINY_NAME}"
    assert predictor["gelu"] == "roofline"  # not sampled: the fallback is said per class


def test_bad_options_are_usage_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    code, out = _run(["profile", "--device", "cpu", "--ops", "gemm,warp_drive"], capsys)
    assert code == 2 and "warp_drive" in out and "Traceback" not in out
    code, out = _run(["profile", "--device", "cpu", "--budget", "0"], capsys)
    assert code == 2 and "--budget" in out
    for bad in (["--budget", "nan"], ["--budget", "inf"], ["--threads", "0"], ["--threads", "-2"],
                ["--threads", str(len(os.sched_getaffinity(0)) + 1)],  # oversubscribed: timed the OS's slicing
                ["--store", ""]):  # `--store $STORE` with STORE unset sampled into the default store
        code, out = _run(["profile", "--device", "cpu", *bad], capsys)  # nan ignored the budget, inf never ended,
        assert code == 2 and bad[0] in out and "internal error" not in out, out  # --threads 0: internal error
    for empty in ("", ",", " , "):  # an --ops naming nothing is a mistake, not "every class"
        code, out = _run(["profile", "--device", "cpu", "--ops", empty], capsys)
        assert code == 2 and "--ops" in out and "names no op class" in out and "Traceback" not in out
    code, out = _run(["profile", "--comm"], capsys)
    assert code == 2 and "--cluster-name" in out


def test_sigterm_stops_cleanly_and_keeps_the_samples(tmp_path: Path) -> None:
    """A scheduler's SIGTERM (or Ctrl-C) mid-sampling: exit 143 with a line saying how to resume, no traceback,
    and the shapes measured so far in the store (it used to die silently with the progress bar half drawn)."""
    import os
    import signal
    import sqlite3
    import subprocess
    import sys

    env = {**os.environ, "LLMPERF_HOME": str(tmp_path), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "llmperf_hook", "profile", "--device", "cpu", "--budget", "0.5",
                             "--ops", "gemm", "--name", "cpu-term"], env=env, stderr=subprocess.PIPE, text=True)
    seen = ""
    while not seen.splitlines()[-1:] or not seen.splitlines()[-1].startswith("plan:"):  # sampling starts now
        line = proc.stderr.readline()
        assert line, seen  # (warnings of imported libraries may come first)
        seen += line
    time.sleep(3)
    proc.send_signal(signal.SIGTERM)
    err = seen + proc.stderr.read()
    assert proc.wait(timeout=60) == 143, err[-2000:]
    assert "stopped by SIGTERM" in err and "resume" in err and "Traceback" not in err
    with sqlite3.connect(tmp_path / "store.sqlite") as conn:
        assert conn.execute("SELECT COUNT(*) FROM op_samples WHERE hardware = 'cpu-term'").fetchone()[0] >= 1


def test_profile_of_another_machine_is_not_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture) -> None:
    """`llmperf profile --name X` where X's profile.json names another device (a shared $LLMPERF_HOME, a copied
    profile): exit 2 naming both, before sampling; it silently replaced the other machine's profile."""
    from llmperf_hook.profile.local_hardware import fingerprint
    from llmperf_hook.profile.sampler import _check_same_machine

    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    folder = tmp_path / "profiles" / "shared-cpu"
    folder.mkdir(parents=True)
    here = fingerprint("cpu", 1)
    (folder / "profile.json").write_text(json.dumps({"hardware": {**here, "device": "AMD EPYC 7763"}}))
    code, out = _run(["profile", "--device", "cpu", "--budget", "0.1", "--ops", "gemm", "--name", "shared-cpu"], capsys)
    assert code == 2 and "AMD EPYC 7763" in out and "--name" in out and "Traceback" not in out, out
    (folder / "profile.json").write_text(json.dumps({"hardware": here}))
    _check_same_machine("shared-cpu", here)  # the same machine: refitting is fine
    (folder / "profile.json").write_text(json.dumps({"hardware": {**here, "cuda": "12.1", "clock": "wall"}}))
    _check_same_machine("shared-cpu", {**here, "cuda": "12.4"})  # new software on the same device: fine too
    (folder / "profile.json").write_text("{truncated")
    _check_same_machine("shared-cpu", here)  # unreadable: re-created by this run


def test_operator_profile_under_torchrun_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture) -> None:
    """`torchrun --nproc-per-node 2 -m llmperf_hook profile` without --comm: both ranks sampled the same shapes at
    once, timing each other's load, and wrote the same profile."""
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    monkeypatch.setenv("WORLD_SIZE", "2")
    code, out = _run(["profile", "--device", "cpu", "--budget", "0.1", "--ops", "gemm"], capsys)
    assert code == 2 and "$WORLD_SIZE=2" in out and "--comm" in out and "Traceback" not in out, out
    assert not (tmp_path / "store.sqlite").exists()  # refused before any sampling


def test_a_hardware_file_the_user_wrote_is_not_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capsys: pytest.CaptureFixture) -> None:
    """`llmperf profile --name my-cpu` rewrote $LLMPERF_HOME/hardware/my-cpu.yaml whoever wrote it: a hand-written
    description of the machine was replaced by the measured peaks."""
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    mine = tmp_path / "hardware" / "my-cpu.yaml"
    mine.parent.mkdir()
    mine.write_text("name: my-cpu\npeak_TFLOPs: {fp32: 1.0}\nmemory_bandwidth_GBps: 100\nmemory_capacity_GiB: 64\n"
                    "description: our build server, datasheet figures\n")
    before = mine.read_text()
    code, out = _run(["profile", "--device", "cpu", "--budget", "0.1", "--ops", "gemm", "--name", "my-cpu"], capsys)
    assert code == 2 and str(mine) in out and "--name" in out and "Traceback" not in out, out
    assert mine.read_text() == before and not (tmp_path / "store.sqlite").exists()  # refused before sampling
