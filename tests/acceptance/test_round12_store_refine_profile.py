"""Issues 4 and 6, round 12: the store (SQLite under $LLMPERF_HOME) damaged, replaced by a folder, held locked by
another writer for a moment, or $LLMPERF_HOME itself a file; `refine` on run folders that are a file or hold only
binary junk; `profile` asked for a device or budget it cannot honour; `run --instrument --dry-run` keeping the
user's PYTHONPATH and writing nothing; and the predict / tune path of DeepSpeed and Hugging Face jobs importing
neither torch nor deepspeed. Each bad input exits 2 with one message and leaves what the user wrote as it was."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.acceptance.cli import error_lines, run_cli

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "refine"))
from refine_helpers import write_run  # noqa: E402  (the refine tests' hand-written run folders)


def _refused(code: int, err: str, *words: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err and len(error_lines(err)) == 1, err
    for word in words:
        assert word in err, (word, err)


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """Two ranks of a DeepSpeed CPU job, one warm-up and three timed steps each (11 ms measured, 10 ms predicted)."""
    return write_run(tmp_path / "run", "job1", {0: [0.02, 0.011, 0.010, 0.012], 1: [0.02, 0.011, 0.010, 0.012]})


@pytest.mark.parametrize("damage", ["not-sqlite", "truncated"])
def test_refine_into_a_damaged_store_exits_2_and_keeps_the_file(damage: str, run_dir: Path, tmp_path: Path, capsys,
                                                               monkeypatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    store = home / "store.sqlite"
    monkeypatch.setenv("LLMPERF_HOME", str(home))
    if damage == "truncated":  # a real store cut short (a full disk, a copy that stopped)
        first = write_run(tmp_path / "first", "job0", {0: [0.02, 0.011, 0.010], 1: [0.02, 0.011, 0.010]})
        code, _, err = run_cli(["refine", str(first)], capsys)
        assert code == 0, err
        store.write_bytes(store.read_bytes()[:2048])
    else:
        store.write_text("this is my notes file, not a database\n" * 200)
    before = store.read_bytes()
    code, _, err = run_cli(["refine", str(run_dir)], capsys)
    _refused(code, err, str(store))
    assert store.read_bytes() == before


def test_store_path_that_is_a_folder_exits_2(run_dir: Path, tmp_path: Path, capsys, monkeypatch) -> None:
    (tmp_path / "home" / "store.sqlite").mkdir(parents=True)
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    code, _, err = run_cli(["refine", str(run_dir)], capsys)
    _refused(code, err, "store.sqlite")


@pytest.mark.parametrize("command", [["refine"], ["profile", "--device", "cpu", "--budget", "0.05", "--name", "x"]],
                         ids=["refine", "profile"])
def test_llmperf_home_that_is_a_file_exits_2(command: list[str], run_dir: Path, tmp_path: Path, capsys,
                                             monkeypatch) -> None:
    home = tmp_path / "home-is-a-file"
    home.write_text("mine")
    monkeypatch.setenv("LLMPERF_HOME", str(home))
    argv = [*command, str(run_dir)] if command == ["refine"] else command
    code, _, err = run_cli(argv, capsys)
    _refused(code, err, "LLMPERF_HOME")
    assert home.read_text() == "mine"


def test_refine_waits_for_another_writer_holding_the_store(run_dir: Path, tmp_path: Path, capsys,
                                                           monkeypatch) -> None:
    """Two jobs end at once: one refine holds the write lock while the other starts. SQLite's busy timeout makes the
    second wait (store/sqlite_store.py opens with timeout=30 s), not fail 'database is locked'."""
    home = tmp_path / "home"
    monkeypatch.setenv("LLMPERF_HOME", str(home))
    first = write_run(tmp_path / "first", "job0", {0: [0.02, 0.011, 0.010], 1: [0.02, 0.011, 0.010]})
    assert run_cli(["refine", str(first)], capsys)[0] == 0
    locked, release = threading.Event(), threading.Event()

    def hold() -> None:
        conn = sqlite3.connect(str(home / "store.sqlite"), isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")  # the write lock a refine takes (WAL: readers go on)
        locked.set()
        release.wait(10)
        time.sleep(1.5)
        conn.execute("COMMIT")
        conn.close()

    holder = threading.Thread(target=hold)
    holder.start()
    assert locked.wait(10)
    release.set()
    code, out, err = run_cli(["refine", str(run_dir)], capsys)
    holder.join()
    assert code == 0, err
    assert "job job1" in out and "predicted after" in out


@pytest.mark.parametrize("kind", ["a-file", "binary-junk"])
def test_refine_of_a_run_folder_that_is_no_run(kind: str, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    target = tmp_path / "run"
    if kind == "a-file":
        target.write_text("not a folder")
    else:
        target.mkdir()
        (target / "rank0.jsonl").write_bytes(b"\x00\x01\x02\xff\xfe junk\n{\"kind\": \"step\"\n")
    code, _, err = run_cli(["refine", str(target)], capsys)
    assert code == 2 and "Traceback" not in err, err
    assert "run" in err
    assert not (tmp_path / "home" / "store.sqlite").exists()  # nothing ingested, so no store made


@pytest.mark.parametrize("args,says", [(["--device", "cpu", "--budget", "0"], "--budget"),
                                       (["--device", "cpu", "--budget", "nan"], "--budget"),
                                       (["--device", "cpu", "--ops", "conv2d"], "conv2d")],
                         ids=["zero-budget", "nan-budget", "unknown-op"])
def test_profile_refuses_what_it_cannot_honour(args: list[str], says: str, tmp_path: Path, capsys,
                                               monkeypatch) -> None:
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    code, _, err = run_cli(["profile", *args], capsys)
    assert code == 2 and "Traceback" not in err and says in err, err
    assert not list(tmp_path.glob("**/*.json")), "nothing written before the options were checked"


def test_profile_cuda_without_a_gpu_exits_2(tmp_path: Path, capsys, monkeypatch) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device")
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    code, _, err = run_cli(["profile", "--device", "cuda", "--budget", "0.05"], capsys)
    _refused(code, err, "cuda")


def test_instrument_dry_run_keeps_pythonpath_and_writes_nothing(tmp_path: Path, capsys, monkeypatch) -> None:
    """Issue 6 item 1: the hook goes on PYTHONPATH in front of the user's entries, which stay; a dry run prints the
    command unchanged and creates no run folder."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PYTHONPATH", "/opt/my-site:/opt/other")
    (tmp_path / "ds.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "zero_optimization":
                                                  {"stage": 1}, "bf16": {"enabled": True}}))
    argv = ["deepspeed", "--num_gpus", "2", "train.py", "--deepspeed_config", "ds.json"]
    code, out, err = run_cli(["run", "--instrument", "3", "--dry-run", "--format", "json", "--model", "llama2-7b",
                              "--cluster", "dgx-h100", "--", *argv], capsys)
    assert code == 0, err
    plan = json.loads(out.strip().splitlines()[-1])
    assert plan["dry_run"] is True and plan["command"] == argv
    added = plan["environment_added"]
    assert added["PYTHONPATH"].endswith(":/opt/my-site:/opt/other") and "hook" in added["PYTHONPATH"]
    assert "LLMPERF_RUN_DIR" in added
    assert not (tmp_path / "llmperf-runs").exists()


PROBE = """
import json, sys
from llmperf_hook.cli import main
try:
    main(sys.argv[1:])
except SystemExit as ended:
    code = ended.code
print(json.dumps({"code": code, "heavy": sorted(m for m in ("torch", "deepspeed", "transformers", "accelerate")
                                                 if m in sys.modules)}), file=sys.stderr)
"""


@pytest.mark.parametrize("command", ["predict", "tune"])
def test_deepspeed_hf_predict_and_tune_import_neither_torch_nor_deepspeed(command: str, tmp_path: Path) -> None:
    """DESIGN.md: predict never imports torch or deepspeed. Here on the path no earlier light-import test took: an
    HF Trainer ZeRO-3 job with "auto" values and a local config.json (tune: the search over ZeRO stages)."""
    from tests.acceptance.test_round12_launch_lines import HF_AUTO, LLAMA_HF, RUN_CLM

    (tmp_path / "llama").mkdir()
    (tmp_path / "llama" / "config.json").write_text(json.dumps(LLAMA_HF))
    (tmp_path / "ds.json").write_text(json.dumps(HF_AUTO))
    argv = [command, "--cluster", "dgx-h100", "--", "deepspeed", "--num_gpus", "8", *RUN_CLM,
            "--per_device_train_batch_size", "2"]
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env={"PATH": "/usr/bin:/bin", "LLMPERF_HOME": str(tmp_path / "home"),
                                            "PYTHONPATH": str(REPO)})
    result = json.loads(done.stderr.strip().splitlines()[-1])
    assert result["code"] in (0, None), done.stderr
    assert result["heavy"] == [], result
