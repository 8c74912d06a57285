"""Robustness campaign 2: a row that breaks the schema's or the framework's rules is reported on its row and the
other rows are still predicted (a tp that does not divide num_gpus, or a blank iteration_time_s, aborted the
whole `llmperf validate` with exit 2)."""

from __future__ import annotations

import json

import pytest

from llmperf_hook.cli import main

from .validate_helpers import BASE_ROW, write_csv


def test_bad_rows_are_reported_per_row_and_the_rest_predicted(tmp_path, capsys):
    rows = [BASE_ROW, {**BASE_ROW, "row_id": "2", "tp": "3"}, {**BASE_ROW, "row_id": "3", "iteration_time_s": ""},
            {**BASE_ROW, "row_id": "4", "num_attention_heads": "7"}, {**BASE_ROW, "row_id": "5"}]
    path = write_csv(tmp_path / "runs.csv", rows)
    with pytest.raises(SystemExit) as ex:
        main(["validate", "--format", "json", str(path)])
    out = json.loads(capsys.readouterr().out)
    assert int(ex.value.code or 0) == 0
    by_id = {r["row_id"]: r for r in out["rows"]}
    assert list(by_id) == ["1", "2", "3", "4", "5"]
    assert by_id["1"]["predicted_s"] and by_id["5"]["predicted_s"]
    assert "tp*pp*cp" in by_id["2"]["error"] and by_id["2"]["predicted_s"] is None
    assert "iteration_time_s" in by_id["3"]["error"] and by_id["3"]["measured_s"] is None
    assert "num-attention-heads 7" in by_id["4"]["error"]
    assert (out["overall"]["num_rows"], out["overall"]["num_failed"]) == (5, 3)


def test_bad_row_in_the_table(tmp_path, capsys):
    path = write_csv(tmp_path / "runs.csv", [BASE_ROW, {**BASE_ROW, "row_id": "9", "tp": "5"}])
    with pytest.raises(SystemExit) as ex:
        main(["validate", str(path)])
    out = capsys.readouterr().out
    assert int(ex.value.code or 0) == 0
    assert "FAILED" in out and "row 9" in out and "Traceback" not in out


def test_a_header_without_rows_is_a_usage_error(tmp_path, capsys):
    path = tmp_path / "runs.csv"
    path.write_text(",".join(BASE_ROW) + "\r\n")
    with pytest.raises(SystemExit) as ex:
        main(["validate", str(path)])
    assert int(ex.value.code) == 2 and "no rows" in capsys.readouterr().err
