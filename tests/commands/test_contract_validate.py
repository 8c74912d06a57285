"""Issue 5's `llmperf validate FILE.csv [--format table|json]` contract through the real CLI on CSV files as people
export them, beside tests/acceptance/test_validate_acceptance.py: headers in another letter case, every cell
quoted, quoted cells holding commas, doubled quotes and line breaks, Windows line endings with a byte-order mark,
columns the schema does not know; and files that cannot be read (not UTF-8, a column given twice in two cases,
missing columns) exit 2 with one error paragraph, as strict JSON too with --format json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

HEADER = ["row_id", "num_layers", "hidden_size", "num_attention_heads", "seq_length", "micro_batch_size",
          "global_batch_size", "tp", "pp", "num_gpus", "iteration_time_s", "cluster"]
ROW = ["r1", "24", "2048", "16", "2048", "4", "256", "2", "1", "8", "4.0", "dgx-a100"]


def _validate(path: Path, capsys, *options: str) -> tuple[int, str, str]:
    from llmperf_hook.cli import main

    with pytest.raises(SystemExit) as ex:
        main(["validate", str(path), *options])
    out, err = capsys.readouterr()
    return int(ex.value.code or 0), out, err


def _strict_json(text: str) -> dict:
    return json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in the JSON output"))


def _line(cells: list[str], quote_all: bool = False) -> str:
    return ",".join(f'"{c}"' if quote_all else c for c in cells)


def test_header_in_other_letter_case_reads_as_the_schema(tmp_path: Path, capsys) -> None:
    upper = [c.upper() if i % 2 else c.title() for i, c in enumerate(HEADER)]
    path = tmp_path / "runs.csv"
    path.write_text(_line(upper) + "\n" + _line(ROW) + "\n")
    code, out, err = _validate(path, capsys, "--format", "json")
    assert code == 0, err
    (row,) = _strict_json(out)["rows"]
    assert row["error"] is None and row["predicted_s"] > 0 and "--tensor-model-parallel-size 2" in row["command"]
    plain = tmp_path / "plain.csv"
    plain.write_text(_line(HEADER) + "\n" + _line(ROW) + "\n")
    assert _strict_json(_validate(plain, capsys, "--format", "json")[1])["rows"][0]["predicted_s"] == row["predicted_s"]


def test_quoted_cells_with_commas_quotes_and_line_breaks(tmp_path: Path, capsys) -> None:
    header = [*HEADER, "model", "notes", "exported_by"]
    notes = '"step 3, 4 and 5 averaged;\r\nsee ""run log"" page 2"'
    text = "\ufeff" + _line(header, quote_all=True) + "\r\n" + _line(ROW, quote_all=True) + ',"GPT, 1.3B",' + notes \
        + ',"Excel"\r\n'
    path = tmp_path / "runs.csv"
    path.write_bytes(text.encode("utf-8"))
    code, out, err = _validate(path, capsys, "--format", "json")
    assert code == 0, err
    doc = _strict_json(out)
    (row,) = doc["rows"]
    assert row["row_id"] == "r1" and row["model"] == "GPT, 1.3B" and row["error"] is None and row["predicted_s"] > 0
    assert doc["overall"]["num_rows"] == 1 and doc["overall"]["num_failed"] == 0
    code, out, _ = _validate(path, capsys)
    assert code == 0 and "r1" in out and "Overall: MAPE" in out


def test_json_is_one_strict_document_whatever_the_outcome(tmp_path: Path, capsys) -> None:
    bad = [*ROW[:3], "15", *ROW[4:]]  # 15 heads at TP 2: Megatron refuses it
    bad[0] = "r2"
    cases = {"scored": ([ROW], 0), "one failed": ([ROW, bad], 0), "all failed": ([bad], 2)}
    for name, (rows, expected) in cases.items():
        path = tmp_path / f"{name}.csv"
        path.write_text("\n".join([_line(HEADER), *map(_line, rows)]) + "\n")
        code, out, err = _validate(path, capsys, "--format", "json")
        assert code == expected, (name, err)
        doc = _strict_json(out)
        assert [r["row_id"] for r in doc["rows"]] == [r[0] for r in rows]
        assert doc["overall"]["num_failed"] == sum(r[0] == "r2" for r in rows)


@pytest.mark.parametrize("case, says", [
    ("latin-1", "UTF-8"),
    ("same column in two cases", "more than once"),
    ("missing columns", "missing column(s) tp"),
    ("header only", ""),
    ("empty", "empty"),
])
def test_unreadable_files_exit_2_with_one_paragraph(tmp_path: Path, capsys, case: str, says: str) -> None:
    path = tmp_path / "runs.csv"
    if case == "latin-1":
        path.write_bytes((_line([*HEADER, "model"]) + "\n" + _line([*ROW, "caf\xe9"]) + "\n").encode("latin-1"))
    elif case == "same column in two cases":
        path.write_text(_line([*HEADER, "TP"]) + "\n" + _line([*ROW, "1"]) + "\n")
    elif case == "missing columns":
        keep = [i for i, c in enumerate(HEADER) if c not in ("tp", "iteration_time_s")]
        path.write_text(_line([HEADER[i] for i in keep]) + "\n" + _line([ROW[i] for i in keep]) + "\n")
    elif case == "header only":
        path.write_text(_line(HEADER) + "\r\n")
    else:
        path.write_text("")
    code, out, err = _validate(path, capsys)
    assert code == 2 and out == "" and "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("llmperf: error: ") and says in lines[0], err
    if case == "missing columns":
        assert "iteration_time_s" in lines[0]
    code, out, _ = _validate(path, capsys, "--format", "json")
    doc = _strict_json(out)
    assert code == 2 and doc["exit_code"] == 2 and says in doc["error"]
