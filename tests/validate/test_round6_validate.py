"""Robustness round 6: `llmperf validate` as a user breaks it (non-finite cells, repeated row_ids, unknown
frameworks, zero GPUs, --worst, --write-batch into a used or unwritable folder, --format json on every error)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from llmperf_hook.commands.validate import BATCH_MARKER
from llmperf_hook.commands.validate import command as validate_command

from .validate_helpers import BASE_ROW, write_csv


def _invoke(*args: str):
    return CliRunner().invoke(validate_command, list(args))


def _code(result) -> int:
    """The exit code `llmperf` gives: an LlmperfError's own (cli.main maps it), else click's."""
    return getattr(result.exception, "exit_code", result.exit_code) if result.exception else result.exit_code


def _json(result) -> dict:
    return json.loads(result.stdout, parse_constant=lambda c: pytest.fail(f"{c} in JSON output"))


@pytest.mark.parametrize("cell", ["nan", "inf", "-inf", "NaN"])
def test_non_finite_step_time_fails_its_row_and_the_json_stays_strict(tmp_path: Path, cell: str) -> None:
    rows = [{**BASE_ROW, "row_id": "1", "iteration_time_s": cell}, {**BASE_ROW, "row_id": "2"}]
    out = _invoke("--format", "json", str(write_csv(tmp_path / "runs.csv", rows)))
    assert _code(out) == 0, out.output
    doc = _json(out)
    by_id = {r["row_id"]: r for r in doc["rows"]}
    assert "positive, finite" in by_id["1"]["error"] and by_id["1"]["measured_s"] is None
    assert by_id["2"]["error"] is None and doc["overall"]["num_failed"] == 1


def test_non_finite_bandwidth_fails_its_row(tmp_path: Path) -> None:
    rows = [{**BASE_ROW, "inter_node_bandwidth_GBps": "nan"}]
    out = _invoke("--format", "json", str(write_csv(tmp_path / "runs.csv", rows)))
    assert _code(out) == 2 and "inter_node_bandwidth_GBps" in _json(out)["rows"][0]["error"]


def test_repeated_row_id_fails_the_later_row_only(tmp_path: Path) -> None:
    rows = [{**BASE_ROW, "row_id": "7"}, {**BASE_ROW, "row_id": "7", "micro_batch_size": "2"}]
    doc = _json(_invoke("--format", "json", str(write_csv(tmp_path / "runs.csv", rows))))
    first, second = doc["rows"]
    assert first["error"] is None and first["predicted_s"] > 0
    assert "repeats the row_id of data row 1" in second["error"]


@pytest.mark.parametrize("cell, ok", [("JAX", False), ("PyTorch FSDP", False), ("NeMo 2.0", True),
                                      ("NeMo Megatron (2022)", True), ("", True)])
def test_framework_cell_naming_no_framework_fails_its_row(tmp_path: Path, cell: str, ok: bool) -> None:
    rows = [{**BASE_ROW, "framework": cell}, {**BASE_ROW, "row_id": "2"}]
    doc = _json(_invoke("--format", "json", str(write_csv(tmp_path / "runs.csv", rows))))
    error = doc["rows"][0]["error"]
    assert (error is None) if ok else (f"{cell!r} names no framework" in error)


@pytest.mark.parametrize("column", ["num_gpus", "tp", "pp", "cp"])
def test_zero_degree_or_gpu_count_is_named(tmp_path: Path, column: str) -> None:
    rows = [{**BASE_ROW, column: "0"}, {**BASE_ROW, "row_id": "2"}]
    doc = _json(_invoke("--format", "json", str(write_csv(tmp_path / "runs.csv", rows))))
    assert f"{column} = 0" in doc["rows"][0]["error"] and "at least 1" in doc["rows"][0]["error"]


def test_negative_worst_is_refused(tmp_path: Path) -> None:
    out = _invoke("--worst", "-1", str(write_csv(tmp_path / "runs.csv", [BASE_ROW])))
    assert _code(out) == 2 and "--worst" in out.output


@pytest.mark.parametrize("content", ["", "num_layers,hidden_size\n1,2\n", "\ufeff" + ",".join(BASE_ROW) + "\r\n",
                                     '"unterminated\n'])
def test_file_level_errors_still_print_one_json_object(tmp_path: Path, content: str) -> None:
    (tmp_path / "runs.csv").write_text(content, encoding="utf-8")
    out = _invoke("--format", "json", str(tmp_path / "runs.csv"))
    assert _code(out) == 2
    doc = _json(out)
    assert doc["exit_code"] == 2 and doc["error"] == str(out.exception)


def test_missing_file_prints_json_error(tmp_path: Path) -> None:
    out = _invoke("--format", "json", str(tmp_path / "absent.csv"))
    assert _code(out) == 2 and "does not exist" in _json(out)["error"]


def test_write_batch_never_replaces_a_users_file(tmp_path: Path) -> None:
    csv_path = write_csv(tmp_path / "runs.csv", [{**BASE_ROW, "gpu_type": "", "gpus_per_node": "",
                                                  "cluster": "dgx-a100"}])
    out_dir = tmp_path / "batch"
    out_dir.mkdir()
    theirs = out_dir / "commands-dgx-a100.txt"
    theirs.write_text("my own commands\n")
    out = _invoke("--write-batch", str(out_dir), str(csv_path))
    assert _code(out) == 2 and "commands-dgx-a100.txt" in str(out.exception) and "not written by" in str(out.exception)
    assert theirs.read_text() == "my own commands\n"
    theirs.unlink()
    for _ in range(2):  # its own file is replaced on the next run
        assert _code(_invoke("--write-batch", str(out_dir), str(csv_path))) == 0
    text = theirs.read_text()
    assert text.startswith(BATCH_MARKER + "\n") and text.count("torchrun") == 1


def test_write_batch_into_an_unwritable_place_is_bad_input(tmp_path: Path) -> None:
    (tmp_path / "a_file").write_text("x")
    csv_path = write_csv(tmp_path / "runs.csv", [BASE_ROW])
    out = _invoke("--format", "json", "--write-batch", str(tmp_path / "a_file" / "sub"), str(csv_path))
    assert _code(out) == 2 and "cannot write" in _json(out)["error"]


@pytest.mark.parametrize("column", ["num_attention_heads", "micro_batch_size", "vocab_size", "gpus_per_node", "vpp",
                                    "ep", "ffn_hidden_size", "num_query_groups"])
def test_a_written_zero_is_not_a_blank_cell(tmp_path: Path, column: str) -> None:
    rows = [{**BASE_ROW, column: "0"}, {**BASE_ROW, "row_id": "2"}]
    doc = _json(_invoke("--format", "json", str(write_csv(tmp_path / "runs.csv", rows))))
    assert f"`{column}` = '0' must be at least 1" in doc["rows"][0]["error"] and doc["rows"][1]["error"] is None


def test_rows_whose_cells_do_not_line_up_fail_and_blank_lines_are_skipped(tmp_path: Path) -> None:
    header = ",".join(BASE_ROW)
    good = ",".join(f'"{v}"' for v in BASE_ROW.values())
    unquoted = ",".join({**BASE_ROW, "row_id": "2", "model": "GPT, 22B"}.values())  # one comma too many
    cut = ",".join(list({**BASE_ROW, "row_id": "3"}.values())[:-3])
    (tmp_path / "runs.csv").write_text("\n".join([header, good, " , ,", unquoted, "   ", cut, ""]), encoding="utf-8")
    doc = _json(_invoke("--format", "json", str(tmp_path / "runs.csv")))
    rows = doc["rows"]
    assert len(rows) == 3 and rows[0]["error"] is None
    assert "1 cell(s) more than the header" in rows[1]["error"] and "quoted" in rows[1]["error"]
    assert "3 cell(s) fewer than the header" in rows[2]["error"]


def test_a_directory_as_file_or_a_file_as_batch_folder_is_json_too(tmp_path: Path) -> None:
    out = _invoke("--format", "json", str(tmp_path))
    assert _code(out) == 2 and "is a directory" in _json(out)["error"]
    (tmp_path / "taken").write_text("mine")
    out = _invoke("--format", "json", "--write-batch", str(tmp_path / "taken"), str(write_csv(tmp_path / "r.csv", [BASE_ROW])))
    assert _code(out) == 2 and "is a file" in _json(out)["error"] and (tmp_path / "taken").read_text() == "mine"
