"""Numbers in validation CSV cells: "1,024" is 1024 (a quoted cell with thousands separators), never its first
group; a comma that groups no thousands ("4,25") is refused as ambiguous. Found by the issue-5 acceptance audit."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmperf_hook.errors import UsageError
from llmperf_hook.validate.measured_run import number_token
from llmperf_hook.validate.runs_csv import build_measured_run, read_runs_csv

HEADER = ("row_id,num_layers,hidden_size,num_attention_heads,seq_length,global_batch_size,tp,pp,num_gpus,"
          "iteration_time_s,cluster")
ROW = "r1,24,2048,16,2048,256,1,1,8,4.0,dgx-a100"


@pytest.mark.parametrize(("cell", "expected"), [
    ("1,024", "1024"), ("1,234.5", "1234.5"), ("1,024 (approx.)", "1024"),
    ("50257 (vTrain default; not in csv)", "50257"), ("8", "8"), ("3.5", "3.5"), ("1e3", "1e3"),
])
def test_number_token_reads_thousands_separators(cell: str, expected: str) -> None:
    assert number_token(cell, "num_gpus", "row 1") == expected


@pytest.mark.parametrize("cell", ["4,25", "1,5", "1,0245"])
def test_a_comma_that_groups_no_thousands_is_refused(cell: str) -> None:
    with pytest.raises(UsageError, match="ambiguous.*decimal comma"):
        number_token(cell, "iteration_time_s", "row 1")


def test_quoted_thousands_are_the_whole_number_not_the_first_group(tmp_path: Path) -> None:
    path = tmp_path / "runs.csv"
    path.write_text(HEADER + '\nr1,24,2048,16,2048,"1,024",1,1,"1,024","1,234.5",dgx-a100\n')
    run = build_measured_run(read_runs_csv(path)[0], 1)
    assert (run.global_batch_size, run.num_gpus, run.iteration_time_s) == (1024, 1024, 1234.5)
