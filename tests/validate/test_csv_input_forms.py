"""CSV files as people write or export them: spaces after the commas, tab-separated exports, semicolon exports
(decimal comma) refused by name, an empty file, blank lines before the header. Found by the issue-5 acceptance audit."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmperf_hook.errors import UsageError
from llmperf_hook.validate.runs_csv import build_measured_run, read_runs_csv

HEADER = ("row_id,num_layers,hidden_size,num_attention_heads,seq_length,global_batch_size,tp,pp,num_gpus,"
          "iteration_time_s,cluster")
ROW = "r1,24,2048,16,2048,256,1,1,8,4.0,dgx-a100"


def test_spaces_after_commas_in_header_and_rows(tmp_path: Path) -> None:
    path = tmp_path / "runs.csv"
    path.write_text(HEADER.replace(",", ", ") + "\n" + ROW.replace(",", ", ").replace("256", '"1,024"') + "\n")
    rows = read_runs_csv(path)
    assert "num_layers" in rows[0] and rows[0]["global_batch_size"] == "1,024"
    run = build_measured_run(rows[0], 1)
    assert (run.num_layers, run.global_batch_size, run.cluster) == (24, 1024, "dgx-a100")


def test_tab_separated_export_is_read(tmp_path: Path) -> None:
    path = tmp_path / "runs.tsv"
    path.write_text(HEADER.replace(",", "\t") + "\n" + ROW.replace(",", "\t") + "\n")
    assert build_measured_run(read_runs_csv(path)[0], 1).hidden_size == 2048


def test_semicolon_export_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "runs.csv"
    path.write_text(HEADER.replace(",", ";") + "\n" + ROW.replace(",", ";").replace("4.0", "4,0") + "\n")
    with pytest.raises(UsageError, match="semicolons"):
        read_runs_csv(path)


@pytest.mark.parametrize("text", ["", "\n\n", "  \r\n"])
def test_empty_file_says_empty(tmp_path: Path, text: str) -> None:
    path = tmp_path / "runs.csv"
    path.write_text(text)
    with pytest.raises(UsageError, match="is empty"):
        read_runs_csv(path)


def test_blank_lines_before_the_header_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "runs.csv"
    path.write_text("\n\r\n" + HEADER + "\r\n" + ROW + "\r\n")
    assert read_runs_csv(path)[0]["row_id"] == "r1"
