"""A missing required column names the header cell that looks like it (`num_layer` for num_layers), and a cluster
that cannot be loaded is reported as the row's `cluster` cell. Found by the H99 audit."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmperf_hook.errors import UsageError
from llmperf_hook.resources import configs_dir
from llmperf_hook.validate.runner import validate_runs
from llmperf_hook.validate.runs_csv import build_runs_or_failures, check_columns, read_runs_csv


def test_a_misspelled_required_column_is_named() -> None:
    columns = ["row_id", "num_layer", "hidden_size", "seq_length", "global_batch_size", "tp", "pp", "num_gpus",
               "cluster", "iteration_time_s"]
    with pytest.raises(UsageError, match=r"missing column\(s\) num_layers \(the header has `num_layer`: a misspelling\?\)"):
        check_columns(columns, "runs.csv")


def test_a_time_column_in_another_unit_is_named_with_the_unit_rule() -> None:
    columns = ["row_id", "num_layers", "hidden_size", "seq_length", "global_batch_size", "tp", "pp", "num_gpus",
               "cluster", "iteration_time_ms"]
    with pytest.raises(UsageError, match=r"iteration_time_s \(the header has `iteration_time_ms`: the schema's column "
                                         r"is in the unit its name ends in; convert the cells"):
        check_columns(columns, "runs.csv")


def test_an_unknown_cluster_is_the_rows_cluster_cell(tmp_path: Path) -> None:
    path = tmp_path / "runs.csv"
    path.write_text("row_id,num_layers,hidden_size,seq_length,global_batch_size,tp,pp,num_gpus,cluster,"
                    "iteration_time_s\nr7,32,4096,2048,256,2,1,16,dgx-x999,3\n", encoding="utf-8")
    report = validate_runs(build_runs_or_failures(read_runs_csv(path)), clusters_dir=configs_dir() / "clusters")
    assert report.rows[0].error.startswith("row r7: column `cluster` = 'dgx-x999': cluster 'dgx-x999' not found")
