"""docs/validate.md is enough to write a CSV of one's own runs: it documents every column the schema reads or knows
and every key of the JSON report, `llmperf validate --help` points to it, and its three examples (a DGX H100
Megatron-Core run set by preset, a DeepSpeed ZeRO run set described by its columns, a cluster YAML of one's own) are
scored by the real predictor with no row failing. Found by the H99 audit (the schema was a paragraph of --help)."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from llmperf_hook.commands.validate import command
from llmperf_hook.validate.measured_run import OPTIONAL_COLUMNS, RECORD_COLUMNS, REQUIRED_COLUMNS
from llmperf_hook.validate.render import report_json
from llmperf_hook.validate.scoring import RowResult, score_rows
from json_keys import json_keys

DOC = Path(__file__).resolve().parents[2] / "docs" / "validate.md"


def test_every_column_is_documented() -> None:
    text = DOC.read_text(encoding="utf-8")
    missing = [c for c in (*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS, *RECORD_COLUMNS) if f"`{c}`" not in text]
    assert not missing


def test_every_json_key_is_documented() -> None:
    row = RowResult(row_id="r1", source_id="S1", source="s", model="m", layout="tp1 pp1 (1 GPUs)", measured_s=1.0,
                    predicted_s=1.1, cluster="dgx-h100", argv=("torchrun",))
    data = report_json(score_rows([row, replace(row, row_id="r2", predicted_s=None, error="bad")]))
    assert (data["overall"]["num_rows"], data["overall"]["num_scored"], data["overall"]["num_failed"]) == (2, 1, 1)
    keys = json_keys(data)
    text = DOC.read_text(encoding="utf-8")
    assert not [k for k in keys - {"S1"} if f"`{k}`" not in text]


def test_help_points_to_the_doc_and_states_the_failure_rule() -> None:
    out = CliRunner().invoke(command, ["--help"]).output
    assert "docs/validate.md" in out and "exit" in " ".join(out.split())


def _examples() -> tuple[list[str], str]:
    text = DOC.read_text(encoding="utf-8")
    return re.findall(r"```csv\n(.*?)```", text, re.S), re.findall(r"```yaml\n(.*?)```", text, re.S)[0]


@pytest.mark.parametrize("index", [0, 1, 2])
def test_the_docs_examples_are_scored(tmp_path: Path, index: int) -> None:
    csvs, cluster_yaml = _examples()
    assert len(csvs) == 3
    (tmp_path / "my-cluster.yaml").write_text(cluster_yaml, encoding="utf-8")
    path = tmp_path / "runs.csv"
    path.write_text(csvs[index], encoding="utf-8")
    result = CliRunner().invoke(command, [str(path), "--format", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["overall"]["num_failed"] == 0 and data["warnings"] == [], data
    assert all(r["predicted_s"] > 0 for r in data["rows"])
