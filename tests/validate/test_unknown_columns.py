"""A header cell the schema does not know is named in a warning (with the schema column it is closest to), never
dropped in silence: `micro_batch` used to be ignored and the row priced at the blank micro-batch size 1. The columns
dev.csv carries for the reader (how the time was measured, memory size) are known and read for nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import pytest
from click.testing import CliRunner

from llmperf_hook.commands.validate import command
from llmperf_hook.validate import runner
from llmperf_hook.validate.runner import PredictedStep
from llmperf_hook.validate.runs_csv import unknown_column_warnings

from .validate_helpers import BASE_ROW, DEV_CSV, write_csv


def test_a_misspelled_column_is_named_with_the_schema_spelling() -> None:
    warnings = unknown_column_warnings(["row_id", "micro_batch", "sequence_paralel", "num_layers"])
    assert len(warnings) == 2
    assert "`micro_batch`" in warnings[0] and "`micro_batch_size`" in warnings[0] and "ignored" in warnings[0]
    assert "`sequence_parallel`" in warnings[1]


@pytest.mark.parametrize("column", ["intra_node_bandwidth_MBps", "inter_node_bandwidth_Gbit"])
def test_a_column_in_another_unit_is_to_be_converted_not_only_renamed(column: str) -> None:
    """Renamed alone, `intra_node_bandwidth_MBps`'s cells would be read as GB/s, 1000x the bandwidth."""
    (warning,) = unknown_column_warnings(["num_layers", column])
    assert "_GBps`" in warning and "convert its cells" in warning and "Rename the column" not in warning


def test_an_unrelated_column_is_listed_once() -> None:
    (warning,) = unknown_column_warnings(["num_layers", "job_id", "submitted_at"])
    assert "`job_id`" in warning and "`submitted_at`" in warning and "ignored" in warning


def test_dev_csv_columns_are_all_known() -> None:
    if not DEV_CSV.is_file():
        pytest.skip("../shared/validation/dev.csv not beside the checkout")
    header = DEV_CSV.read_text(encoding="utf-8").split("\n", 1)[0].split(",")
    assert unknown_column_warnings(header) == []


def _fake(argv: Sequence[str], cluster: str) -> PredictedStep:
    return PredictedStep(step_time_s=1.0)


def test_the_command_prints_the_warning_in_table_and_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           clusters_dir: Path) -> None:
    monkeypatch.setattr(runner, "predict_with_api", _fake)
    monkeypatch.setattr("llmperf_hook.resources.configs_dir", lambda: clusters_dir.parent)
    row = {k: v for k, v in BASE_ROW.items() if k != "micro_batch_size"}
    path = write_csv(tmp_path / "runs.csv", [{**row, "micro_batch": "4"}])
    table = CliRunner().invoke(command, [str(path)])
    assert table.exit_code == 0 and "`micro_batch_size`" in table.stderr
    data = json.loads(CliRunner().invoke(command, [str(path), "--format", "json"]).stdout)
    assert any("`micro_batch_size`" in w for w in data["warnings"])
