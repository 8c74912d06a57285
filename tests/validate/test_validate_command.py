"""`llmperf validate FILE.csv`: table and JSON output, errors, with the predictor replaced by a stand-in
whose answer is a known function of the command (the real predictor is exercised in test_dev_accuracy)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Sequence

import pytest
from click.testing import CliRunner

from llmperf_hook.commands.validate import command
from llmperf_hook.errors import ConfigError, UsageError
from llmperf_hook.validate import runner
from llmperf_hook.validate.runner import PredictedStep

from .validate_helpers import BASE_ROW, write_csv


def fake_predict(argv: Sequence[str], cluster: str) -> PredictedStep:
    """Step time = 0.1 s per micro-batch-size unit; TP 3 is 'rejected by the framework'."""
    tp = int(argv[argv.index("--tensor-model-parallel-size") + 1])
    if tp == 3:
        raise ConfigError("tensor-model-parallel-size 3 does not divide num-attention-heads 64")
    return PredictedStep(step_time_s=0.5 * int(argv[argv.index("--micro-batch-size") + 1]), fits=True)


@pytest.fixture
def csv_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clusters_dir: Path) -> Path:
    monkeypatch.setattr(runner, "predict_with_api", fake_predict)
    monkeypatch.setattr("llmperf_hook.resources.configs_dir", lambda: clusters_dir.parent)
    rows = [
        {**BASE_ROW, "row_id": "1", "micro_batch_size": "4", "iteration_time_s": "2.0"},   # exact
        {**BASE_ROW, "row_id": "2", "micro_batch_size": "2", "iteration_time_s": "0.8"},   # +25 %
        {**BASE_ROW, "row_id": "3", "source_id": "S02", "micro_batch_size": "1", "iteration_time_s": "1.0"},  # -50 %
        {**BASE_ROW, "row_id": "4", "source_id": "S02", "tp": "3", "dp": "", "num_gpus": "6"},  # rejected
    ]
    return write_csv(tmp_path / "runs.csv", rows)


def test_table(csv_file: Path) -> None:
    out = CliRunner().invoke(command, [str(csv_file)])
    assert out.exit_code == 0, out.output
    assert "+25.0%" in out.output and "-50.0%" in out.output and "FAILED" in out.output
    assert re.search(r"S01 +2/2 +MAPE +12.5%", out.output)
    assert "worst: row 2" in out.output
    assert "Overall: MAPE 25.0% over 3 rows" in out.output and "1 rows failed" in out.output
    assert "1 row(s) failed, rows 4 (S02): tensor-model-parallel-size 3" in out.output


def test_json(csv_file: Path) -> None:
    out = CliRunner().invoke(command, [str(csv_file), "--format", "json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["schema"] == 1 and len(data["rows"]) == 4
    assert data["sources"]["S01"]["mape"] == pytest.approx(0.125)
    assert data["sources"]["S02"]["num_scored"] == 1
    assert data["rows"][1]["signed_error"] == pytest.approx(0.25)
    assert data["rows"][0]["command"].startswith("torchrun --nnodes 2 --nproc-per-node 8 pretrain_gpt.py")
    assert data["rows"][3]["error"].startswith("tensor-model-parallel-size 3")
    assert data["overall"]["num_failed"] == 1


def test_source_filter_and_no_rows(csv_file: Path) -> None:
    out = CliRunner().invoke(command, [str(csv_file), "--source", "S02", "--no-rows"])
    assert out.exit_code == 0 and "S01" not in out.output and "measured_s" not in out.output


def test_unknown_source_is_a_usage_error(csv_file: Path) -> None:
    from llmperf_hook.errors import UsageError
    out = CliRunner().invoke(command, [str(csv_file), "--source", "S99"])
    assert isinstance(out.exception, UsageError) and "S99" in str(out.exception)


def test_write_batch(csv_file: Path, tmp_path: Path) -> None:
    out_dir = tmp_path / "batch"
    out_dir.mkdir()
    result = CliRunner().invoke(command, [str(csv_file), "--write-batch", str(out_dir), "--no-rows"])
    assert result.exit_code == 0, result.output
    lines = (out_dir / "commands-dgx-a100.txt").read_text().splitlines()
    commands = [ln for ln in lines if ln and not ln.startswith("#")]
    assert len(commands) == 4
    assert all(c.startswith(f"--id {i} --cluster dgx-a100 -- torchrun ") for i, c in enumerate(commands, start=1))


def test_missing_column_exits_2_through_the_cli(tmp_path: Path) -> None:
    import subprocess
    import sys
    path = write_csv(tmp_path / "bad.csv", [{k: v for k, v in BASE_ROW.items() if k != "num_gpus"}])
    proc = subprocess.run([sys.executable, "-m", "llmperf_hook", "validate", str(path)], capture_output=True, text=True)
    assert proc.returncode == 2 and "num_gpus" in proc.stderr and "Traceback" not in proc.stderr


def test_every_row_failed_exits_2_after_the_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    clusters_dir: Path) -> None:
    monkeypatch.setattr(runner, "predict_with_api", fake_predict)
    monkeypatch.setattr("llmperf_hook.resources.configs_dir", lambda: clusters_dir.parent)
    bad = {**BASE_ROW, "tp": "3", "dp": "", "num_gpus": "6"}
    path = write_csv(tmp_path / "bad.csv", [{**bad, "row_id": "1"}, {**bad, "row_id": "2"}])
    out = CliRunner().invoke(command, [str(path)])
    assert isinstance(out.exception, UsageError) and out.exception.exit_code == 2  # cli.main turns it into exit 2
    assert "FAILED" in out.output and "nothing was scored" in str(out.exception)


def test_a_repeated_column_name_exits_2(tmp_path: Path, clusters_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("llmperf_hook.resources.configs_dir", lambda: clusters_dir.parent)
    path = write_csv(tmp_path / "runs.csv", [{**BASE_ROW, "row_id": "1", "iteration_time_s": "2.0"}])
    lines = path.read_text(encoding="utf-8").splitlines()
    path.write_text(lines[0] + ",tp\n" + lines[1] + ",4\n", encoding="utf-8")
    out = CliRunner().invoke(command, [str(path)])
    assert isinstance(out.exception, UsageError) and "'tp' appear more than once" in str(out.exception)


def test_dash_reads_standard_input(csv_file: Path) -> None:
    """`export_runs | llmperf validate -` (and `--format json`): it said "validation CSV '-' does not exist"."""
    out = CliRunner().invoke(command, ["-", "--format", "json"], input=csv_file.read_bytes())
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert [r["row_id"] for r in doc["rows"]] == ["1", "2", "3", "4"] and doc["overall"]["num_scored"] == 3
    out = CliRunner().invoke(command, ["-"], input=b"num_layers,hidden\xff\n")
    assert isinstance(out.exception, UsageError) and "standard input is not UTF-8" in str(out.exception)
    out = CliRunner().invoke(command, ["-"], input=b"")
    assert isinstance(out.exception, UsageError) and "'standard input' is empty" in str(out.exception)


def test_non_utf8_byte_is_located_by_line(csv_file: Path) -> None:
    """A Latin-1 'é' in row 3's notes: the message gave only a byte offset into the file."""
    text = csv_file.read_bytes().split(b"\n")
    text[3] = text[3].replace(b"test source", b"test sourc\xe9")
    csv_file.write_bytes(b"\n".join(text))
    out = CliRunner().invoke(command, [str(csv_file)])
    assert isinstance(out.exception, UsageError) and "line 4, byte" in str(out.exception)
    assert "iconv -f latin1 -t utf-8" in str(out.exception)
