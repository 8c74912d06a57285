"""Issue 6's `llmperf refine [RUN_DIR]` contract through the real CLI: one real instrumented run of the CPU testbed
(predicted, so refine calibrates from it), refined again and again without counting it twice in the SQLite store,
after which `predict` says it used the calibration; run directories that are missing, empty or half written exit 2
with one error paragraph (a torn last line is skipped and said, the steps before it kept)."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
TRAIN_GPT = REPO / "examples" / "cpu-testbed" / "train_gpt.py"
SHAPE = ["--num-layers", "1", "--hidden-size", "32", "--num-attention-heads", "2", "--seq-length", "16",
         "--max-position-embeddings", "16", "--micro-batch-size", "2", "--vocab-size", "128"]
COMMAND = [sys.executable, str(TRAIN_GPT), *SHAPE, "--train-iters", "6"]
TABLES = ("step_observations", "refine_runs", "refine_steps", "calibrations", "refine_calibrations")


def _llmperf(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llmperf_hook", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=180)


@pytest.fixture(scope="module")
def instrumented(tmp_path_factory: pytest.TempPathFactory) -> dict:
    root = tmp_path_factory.mktemp("refine-contract")
    env = {**os.environ, "LLMPERF_HOME": str(root / "home"), "OMP_NUM_THREADS": "1",
           "PYTHONPATH": str(REPO) + (os.pathsep + os.environ["PYTHONPATH"] if os.environ.get("PYTHONPATH") else "")}
    proc = _llmperf(["run", "--instrument", "5", "--run-dir", str(root / "run"), "--", *COMMAND], env, root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"root": root, "env": env, "run": root / "run", "store": root / "home" / "store.sqlite", "proc": proc}


def _counts(store: Path) -> dict[str, int]:
    with sqlite3.connect(store) as conn:
        counts = {t: conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in TABLES}
        counts["num_runs"] = sum(r[0] for r in conn.execute("SELECT num_runs FROM calibrations"))
    return counts


def test_the_run_ended_refined_and_calibrated(instrumented: dict) -> None:
    err = instrumented["proc"].stderr
    assert "llmperf refine:" in err and "predicted before:" in err and "predicted after:" in err, err[-2000:]
    counts = _counts(instrumented["store"])
    assert counts["refine_runs"] == 1 and counts["calibrations"] == 1 and counts["num_runs"] == 1
    assert counts["step_observations"] >= 3


def test_refining_the_same_run_again_counts_nothing_twice(instrumented: dict) -> None:
    before = _counts(instrumented["store"])
    reports = []
    for _ in range(2):
        proc = _llmperf(["refine", "--format", "json", str(instrumented["run"])], instrumented["env"],
                        instrumented["root"])
        assert proc.returncode == 0, proc.stderr
        reports.append(json.loads(proc.stdout)["jobs"])
    assert _counts(instrumented["store"]) == before
    assert reports[0] == reports[1] and len(reports[0]) == 1
    job = reports[0][0]
    assert job["calibration"] is not None and job["predicted_before_s"] > 0 and job["predicted_after_s"] > 0
    assert job["predicted_after_s"] != job["predicted_before_s"]


def test_predict_afterwards_says_it_used_the_calibration(instrumented: dict) -> None:
    env, root = instrumented["env"], instrumented["root"]
    table = _llmperf(["predict", "--hardware", "cpu-local", "--", *COMMAND], env, root)
    assert table.returncode == 0, table.stderr
    text = table.stdout + table.stderr
    assert "calibration=x" in text and "calibrated on this exact configuration" in text, text[-2000:]
    doc = json.loads(_llmperf(["predict", "--hardware", "cpu-local", "--format", "json", "--", *COMMAND], env,
                              root).stdout)
    assert doc["uncalibrated_step_time_s"] > 0 and doc["step_time_s"] != doc["uncalibrated_step_time_s"]
    shutil.copytree(root / "home" / "hardware", root / "no-store" / "hardware", dirs_exist_ok=True)
    fresh = {**env, "LLMPERF_HOME": str(root / "no-store")}  # the same hardware without the store: uncalibrated
    other = json.loads(_llmperf(["predict", "--hardware", "cpu-local", "--format", "json", "--", *COMMAND], fresh,
                                root).stdout)
    assert other["step_time_s"] == pytest.approx(doc["uncalibrated_step_time_s"], rel=1e-6)


def _error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("llmperf: error: "), proc.stderr
    return lines[0]


def _half_written(kind: str, src: Path, dst: Path) -> None:
    if kind == "missing":
        return
    dst.mkdir()
    if kind == "session only":
        shutil.copy(src / "session.json", dst / "session.json")
        shutil.copytree(src / "jobs", dst / "jobs")
    elif kind == "empty rank file":
        (dst / "rank0.jsonl").write_text("")
    elif kind == "meta record only":  # the job started under the hook and died before its first step ended
        shutil.copytree(src / "jobs", dst / "jobs")
        meta = next(ln for ln in (src / "rank0.jsonl").read_text().splitlines() if '"kind":"meta"' in ln.replace(" ", ""))
        (dst / "rank0.jsonl").write_text(meta + "\n")
    elif kind == "garbage rank file":
        (dst / "rank0.jsonl").write_bytes(b"\x00\xff not json\n{\"kind\": \"step\", \"st")


@pytest.mark.parametrize("kind", ["missing", "empty", "session only", "empty rank file", "meta record only",
                                  "garbage rank file"])
def test_a_run_dir_without_usable_records_exits_2(instrumented: dict, tmp_path: Path, kind: str) -> None:
    target = tmp_path / "run"
    _half_written(kind, instrumented["run"], target)
    before = _counts(instrumented["store"])
    line = _error_line(_llmperf(["refine", str(target)], instrumented["env"], tmp_path))
    assert "run" in line and ("does not exist" in line if kind == "missing" else "no " in line), line
    assert _counts(instrumented["store"]) == before


def test_a_torn_last_line_is_skipped_and_said(instrumented: dict, tmp_path: Path) -> None:
    target = tmp_path / "run"
    shutil.copytree(instrumented["run"], target)
    rank = target / "rank0.jsonl"
    text = rank.read_text()
    rank.write_text(text[:-25])  # the last record cut mid-write (a rank killed while appending)
    proc = _llmperf(["refine", "--format", "json", str(target)], {**instrumented["env"],
                                                                  "LLMPERF_HOME": str(tmp_path / "home")}, tmp_path)
    assert proc.returncode == 0, proc.stderr
    (job,) = json.loads(proc.stdout)["jobs"]
    assert job["steps_by_rank"]["0"][:4] == [0, 1, 2, 3]
    assert any("malformed line" in note for note in job["notes"]), job["notes"]
