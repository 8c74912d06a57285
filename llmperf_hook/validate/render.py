"""ValidationReport -> the table users read, or JSON for scripts (schema 1)."""

from __future__ import annotations

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


MODEL_WIDTH = 22
"""Model names are cut to this many columns (they can be a sentence); ids and layouts are never cut."""


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


def render_rows_table(rows: tuple[RowResult, ...]) -> list[str]:
    """One line per row; the id, source and layout columns are as wide as their longest cell (a 48-character layout
    such as "tp1 pp1 dp16 mbs4 gbs512 rc-full zero2 (16 GPUs)" used to lose its GPU count)."""
    w_id = max([6] + [_width(r.row_id) for r in rows])
    w_src = max([6] + [_width(r.source_id) for r in rows])
    w_layout = max([44] + [_width(r.layout) for r in rows])
    header = (f"{_pad('row', w_id, True)} {_pad('source', w_src)} {_pad('model', MODEL_WIDTH)} "
              f"{_pad('layout', w_layout)} {'measured_s':>10} {'predicted_s':>11} {'error':>8}")
    lines = [header, "-" * len(header)]
    for r in rows:
        tail = _pct(r.signed_error, signed=True) if r.predicted_s is not None else "FAILED"
        model = _pad(_cut(r.model, MODEL_WIDTH), MODEL_WIDTH)
        lines.append(f"{_pad(r.row_id, w_id, True)} {_pad(r.source_id, w_src)} {model} {_pad(r.layout, w_layout)} "
                     f"{_seconds(r.measured_s):>10} {_seconds(r.predicted_s):>11} {tail:>8}")
    return lines


def render_source_lines(s: SourceSummary) -> list[str]:
    lines = [f"{s.source_id:<6} {s.num_scored:>4}/{s.num_rows:<4} MAPE {_pct(s.mape):>7}  bias {_pct(s.bias, True):>7}  {s.source[:70]}"]
    for r in s.worst:
        lines.append(f"{'':>8}worst: row {r.row_id} {r.model[:22]} {r.layout} "
                     f"measured {_seconds(r.measured_s)} s, predicted {_seconds(r.predicted_s)} s ({_pct(r.signed_error, True)})")
    return lines


def render_table(report: ValidationReport, show_rows: bool = True) -> str:
    lines: list[str] = []
    if show_rows:
        lines += render_rows_table(report.rows) + [""]
    lines.append("Per source (MAPE = mean |predicted - measured| / measured; bias = mean signed error, + = predicted slower)")
    for summary in report.sources:
        lines += render_source_lines(summary)
    scored = len(report.rows) - report.num_failed
    lines.append("")
    lines.append(f"Overall: MAPE {_pct(report.overall_mape)} over {scored} rows "
                 f"(mean of per-source MAPE {_pct(report.mean_source_mape)}); "
                 f"{report.num_failed} rows failed; {report.elapsed_s:.1f} s")
    filled = sum(1 for r in report.rows if any("blank" in note for note in r.notes))
    if filled:
        lines.append(f"  {filled} rows had blank cells filled by the schema's rules (listed per row in --format json)")
    by_error: dict[str, list[str]] = {}
    for r in report.rows:
        if r.predicted_s is None:
            by_error.setdefault(r.error, []).append(f"{r.row_id} ({r.source_id})")
    for error, row_ids in list(by_error.items())[:10]:
        more = f" and {len(row_ids) - 5} more" if len(row_ids) > 5 else ""
        lines.append(f"  {len(row_ids)} row(s) failed, rows {', '.join(row_ids[:5])}{more}: {error}")
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
                    "num_rows": len(report.rows), "num_failed": report.num_failed},
        "elapsed_s": report.elapsed_s,
        "warnings": list(report.warnings),
    }
