"""ValidationReport -> the table users read, or JSON for scripts (schema 1)."""

from __future__ import annotations

import re
import shlex
import unicodedata
from typing import Any

from llmperf_hook.validate.scoring import RowResult, SourceSummary, ValidationReport


def _pct(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value * 100:+.1f}%" if signed else f"{value * 100:.1f}%"


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}"


TABLE_WIDTH = 80
"""Terminal columns the table is laid out for: a terminal's default width (ids are never cut, so a row id longer
than the table leaves room for goes past it)."""
MIN_DESCRIPTION_WIDTH = 12
"""The model column keeps at least this many columns (its name is cut to fit; ids and sources are never cut)."""


def _width(text: str) -> int:
    """Terminal columns of `text`: East Asian wide and full-width characters take two."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _cut(text: str, width: int) -> str:
    while _width(text) > width:
        text = text[:-1]
    return text


def _pad(text: str, width: int, right: bool = False) -> str:
    fill = " " * max(0, width - _width(text))
    return fill + text if right else text + fill


LAYOUT_WORD = r"\(\d+ GPUs\)|\S+"
"""A layout wraps between its words, never inside its "(16 GPUs)"."""


def _wrap(text: str, width: int, word_pattern: str = r"\S+") -> list[str]:
    """Words of `text` in lines of at most `width` columns (a longer word, a path or a flag, on its own line, whole)."""
    lines: list[str] = []
    for word in re.findall(word_pattern, text):
        if lines and _width(lines[-1]) + 1 + _width(word) <= width:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines or [""]


def _fill(text: str, indent: str = "    ") -> list[str]:
    """A free-text line wrapped to the table's width, continuation lines indented."""
    lead = text[:len(text) - len(text.lstrip())]
    first, *rest = _wrap(text, TABLE_WIDTH - len(lead))
    return [lead + first, *(lead + indent + line for line in _wrap(" ".join(rest), TABLE_WIDTH - len(lead + indent))
                            if rest)]


def render_rows_table(rows: tuple[RowResult, ...]) -> list[str]:
    """One line per row, model and numbers, error last, and the row's layout on the line under it (wrapped at
    words), so the table fits TABLE_WIDTH columns: ids, sources and layouts are never cut, the model is cut to fit."""
    w_id = max([6] + [_width(r.row_id) for r in rows])
    w_src = max([6] + [_width(r.source_id) for r in rows])
    indent = w_id + 1 + w_src + 1
    numbers = f" {'measured_s':>10} {'predicted_s':>11} {'error':>8}"
    w_desc = max(MIN_DESCRIPTION_WIDTH, TABLE_WIDTH - indent - len(numbers))
    header = f"{_pad('row', w_id, True)} {_pad('source', w_src)} {_pad('model / layout', w_desc)}{numbers}"
    lines = [header, "-" * len(header)]
    for r in rows:
        tail = _pct(r.signed_error, signed=True) if r.predicted_s is not None else "FAILED"
        layout = _wrap(r.layout, max(MIN_DESCRIPTION_WIDTH, TABLE_WIDTH - indent), LAYOUT_WORD)
        first = _cut(r.model.strip(), w_desc) if r.model.strip() or _width(r.layout) > w_desc else layout.pop(0)
        lines.append(f"{_pad(r.row_id, w_id, True)} {_pad(r.source_id, w_src)} {_pad(first, w_desc)} "
                     f"{_seconds(r.measured_s):>10} {_seconds(r.predicted_s):>11} {tail:>8}")
        lines += [" " * indent + text for text in layout]
    return lines


def render_source_lines(s: SourceSummary) -> list[str]:
    head = f"{s.source_id:<6} {s.num_scored:>4}/{s.num_rows:<4} MAPE {_pct(s.mape):>7}  bias {_pct(s.bias, True):>7}  "
    lines = [head + _cut(s.source, max(0, TABLE_WIDTH - _width(head)))]
    for r in s.worst:
        numbers = (f" measured {_seconds(r.measured_s)} s, predicted {_seconds(r.predicted_s)} s "
                   f"({_pct(r.signed_error, True)})")
        start = f"  worst: row {r.row_id} "
        model = _cut(r.model.strip(), max(0, TABLE_WIDTH - _width(start) - _width(numbers)))
        lines.append(start + model + numbers)
        lines += ["         " + text for text in _wrap(r.layout, TABLE_WIDTH - 9, LAYOUT_WORD)]
    return lines


def render_table(report: ValidationReport, show_rows: bool = True) -> str:
    lines: list[str] = []
    if show_rows:
        lines += render_rows_table(report.rows) + [""]
    lines += _fill("Per source (MAPE = mean |predicted - measured| / measured; bias = mean signed error, + = predicted "
                   "slower)")
    for summary in report.sources:
        lines += render_source_lines(summary)
    scored = len(report.rows) - report.num_failed
    lines.append("")
    lines += _fill(f"Overall: MAPE {_pct(report.overall_mape)} over {scored} rows (mean of per-source MAPE "
                   f"{_pct(report.mean_source_mape)}); {report.num_failed} rows failed; {report.elapsed_s:.1f} s")
    filled = sum(1 for r in report.rows if any("blank" in note for note in r.notes))
    if filled:
        lines += _fill(f"  {filled} rows had blank cells filled by the schema's rules (listed per row in --format "
                       "json)")
    by_error: dict[str, list[str]] = {}
    for r in report.rows:
        if r.predicted_s is None:
            by_error.setdefault(r.error, []).append(f"{r.row_id} ({r.source_id})")
    for error, row_ids in list(by_error.items())[:10]:
        more = f" and {len(row_ids) - 5} more" if len(row_ids) > 5 else ""
        lines += _fill(f"  {len(row_ids)} row(s) failed, rows {', '.join(row_ids[:5])}{more}: {error}")
    if len(by_error) > 10:
        lines.append(f"  ... and {len(by_error) - 10} more distinct errors (see --format json)")
    return "\n".join(lines)


def row_json(r: RowResult) -> dict[str, Any]:
    return {
        "row_id": r.row_id, "source_id": r.source_id, "model": r.model, "layout": r.layout,
        "measured_s": r.measured_s, "predicted_s": r.predicted_s, "signed_error": r.signed_error,
        "fits": r.fits, "cluster": r.cluster, "command": shlex.join(r.argv) if r.argv else "",
        "notes": list(r.notes), "error": r.error or None,
    }


def report_json(report: ValidationReport) -> dict[str, Any]:
    return {
        "schema": 1,
        "rows": [row_json(r) for r in report.rows],
        "sources": {
            s.source_id: {"source": s.source, "num_rows": s.num_rows, "num_scored": s.num_scored,
                          "mape": s.mape, "bias": s.bias, "worst_rows": [r.row_id for r in s.worst]}
            for s in report.sources
        },
        "overall": {"mape": report.overall_mape, "mean_source_mape": report.mean_source_mape,
                    "num_rows": len(report.rows), "num_scored": len(report.rows) - report.num_failed,
                    "num_failed": report.num_failed},
        "elapsed_s": report.elapsed_s,
        "warnings": list(report.warnings),
    }
