"""The table of `llmperf validate` is readable at 80 columns (it was 125-133 wide on dev.csv): per row, the
numbers and the model on one line, the layout under the model, wrapped at words; ids, sources and layouts are never
cut (a 48-character layout once lost its GPU count); wide (CJK) characters count two columns. Found by the issue-5
acceptance audit and the H99 audit."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import replace

from llmperf_hook.validate.render import render_rows_table, render_table
from llmperf_hook.validate.scoring import RowResult, score_rows

LONG_ERROR = ("tensor-model-parallel-size 3 (column `tp`) does not divide num-attention-heads 32 (column "
              "`num_attention_heads`) (Megatron requires heads % TP == 0). Valid TP for this model and world size: "
              "1, 2, 4, 8. Change column `tp`.")


def _row(row_id: str, model: str, layout: str, predicted: float | None = 5.5, error: str = "") -> RowResult:
    return RowResult(row_id=row_id, source_id="cluster-history", source="Our cluster's job history, 2024-2025 "
                     "(Slurm accounting and the jobs' own step-time logs)", model=model, layout=layout,
                     measured_s=5.0, predicted_s=predicted, cluster="dgx-a100", argv=(), error=error)


def _columns(text: str) -> int:
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


ROWS = (_row("run-2024-07-01", "GPT 1.3B", "tp1 pp1 dp16 mbs4 gbs512 rc-full zero2 (16 GPUs)"),
        _row("2", "モデル GPT 1.3B with a long name that goes on and on", "tp1 pp1 dp8 mbs1 gbs8 (8 GPUs)"),
        _row("3", "GPT 1T", "tp8 pp64 vpp2 cp2 dp1 mbs1 gbs512 sp rc-selective zero1 (2048 GPUs)"),
        _row("4", "", "tp3 pp1 dp2 mbs1 gbs8 (6 GPUs)", predicted=None, error=LONG_ERROR))


def test_rows_fit_80_columns_and_nothing_identifying_is_cut() -> None:
    for rows in (ROWS, tuple(replace(r, source_id="S01") for r in ROWS[1:])):  # long ids and sources; short ones
        lines = render_rows_table(rows)
        assert max(_columns(line) for line in lines) <= 80, "\n".join(lines)
        words = " ".join(lines).split()
        for row in rows:  # the layout is all there, wrapped at words
            assert " ".join(row.layout.split()) in " ".join(words), row.row_id
    assert "run-2024-07-01 cluster-history" in "\n".join(render_rows_table(ROWS))
    text = "\n".join(render_rows_table(tuple(replace(r, source_id="S01") for r in ROWS[1:])))
    assert re.search(r"^ +3 S01 +GPT 1T +5 +5\.5 +\+10\.0%$", text, re.M), text  # the error ends the row's line
    assert re.search(r"^ +4 S01 +tp3 pp1 dp2 mbs1 gbs8 \(6 GPUs\) +5 +- +FAILED$", text, re.M), text
    assert text.splitlines()[0].split()[-3:] == ["measured_s", "predicted_s", "error"]


def test_the_whole_report_fits_80_columns() -> None:
    report = score_rows(ROWS, num_worst=3)
    text = render_table(report)
    assert max(_columns(line) for line in text.splitlines()) <= 80, text
    assert "worst: row run-2024-07-01 GPT 1.3B measured 5 s, predicted 5.5 s (+10.0%)" in text
    assert "Change column `tp`." in " ".join(text.split())  # the failure's message is wrapped, not cut
