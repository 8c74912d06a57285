"""The per-row table of `llmperf validate`: ids, sources and layouts are never cut (a 48-character layout
lost its GPU count), and wide (CJK) characters in a model name keep the columns aligned. Found by the issue-5
acceptance audit."""

from __future__ import annotations

import unicodedata

from llmperf_hook.validate.render import render_rows_table
from llmperf_hook.validate.scoring import RowResult


def _row(row_id: str, model: str, layout: str) -> RowResult:
    return RowResult(row_id=row_id, source_id="cluster-history", source="", model=model, layout=layout,
                     measured_s=5.0, predicted_s=5.5, cluster="dgx-a100", argv=())


def _columns(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def test_table_never_cuts_the_layout_or_the_ids() -> None:
    layout = "tp1 pp1 dp16 mbs4 gbs512 rc-full zero2 (16 GPUs)"
    lines = render_rows_table((_row("run-2024-07-01", "GPT 1.3B", layout),
                               _row("2", "モデル GPT 1.3B with a long name", "tp1 pp1 dp8 mbs1 gbs8 (8 GPUs)")))
    assert layout in lines[2] and "run-2024-07-01" in lines[2] and "cluster-history" in lines[2]
    # every line takes as many terminal columns as the header, wide (CJK) model characters counted twice
    assert {_columns(line) for line in lines} == {len(lines[0])}
    assert lines[0].split()[-3:] == ["measured_s", "predicted_s", "error"]
    assert all(line.endswith("+10.0%") for line in lines[2:])
