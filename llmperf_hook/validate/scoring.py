"""Predicted vs measured: signed error per row, MAPE and worst rows per source, overall MAPE (pure)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class RowResult:
    """One measured run and what llmperf predicted for it."""

    row_id: str
    source_id: str
    source: str
    model: str
    layout: str
    """Short description: "tp8 pp12 dp4 mbs1 gbs1536 (384 GPUs)"."""
    measured_s: float | None
    """None only for a row whose measured time could not be read (then `error` says why)."""
    predicted_s: float | None
    """None when the prediction failed (see `error`)."""
    cluster: str
    """Cluster preset name or YAML path the prediction used."""
    argv: tuple[str, ...]
    """The launch command that was predicted."""
    fits: bool | None = None
    """The memory verdict of the prediction (None if unknown)."""
    error: str = ""
    """Why no prediction was made (the user-facing error message), "" when predicted."""
    notes: tuple[str, ...] = ()
    """Fill-in rules, dropped flags and cluster choice for this row."""

    @property
    def signed_error(self) -> float | None:
        """(predicted - measured) / measured: positive = predicted slower than measured."""
        if self.predicted_s is None or not self.measured_s:
            return None
        return (self.predicted_s - self.measured_s) / self.measured_s


@dataclass(frozen=True)
class SourceSummary:
    source_id: str
    source: str
    num_rows: int
    num_scored: int
    """Rows with a prediction (num_rows minus failures)."""
    mape: float | None
    """Mean absolute percentage error over the scored rows, as a fraction (0.05 = 5 %)."""
    bias: float | None
    """Mean signed error (fraction): > 0 means the model over-predicts this source's step times."""
    worst: tuple[RowResult, ...]
    """Scored rows with the largest absolute error, worst first."""


@dataclass(frozen=True)
class ValidationReport:
    rows: tuple[RowResult, ...]
    sources: tuple[SourceSummary, ...]
    overall_mape: float | None
    """MAPE over every scored row (dominated by the sources with most rows)."""
    mean_source_mape: float | None
    """Unweighted mean of the per-source MAPEs."""
    num_failed: int
    elapsed_s: float = 0.0
    """Wall time of the predictions."""
    warnings: tuple[str, ...] = ()
    """About the file as a whole (columns the schema does not know)."""


def mape(rows: Sequence[RowResult]) -> float | None:
    errors = [abs(r.signed_error) for r in rows if r.signed_error is not None]
    return sum(errors) / len(errors) if errors else None


def summarize_source(source_id: str, rows: Sequence[RowResult], num_worst: int) -> SourceSummary:
    scored = [r for r in rows if r.signed_error is not None]
    worst = sorted(scored, key=lambda r: -abs(r.signed_error or 0.0))[:num_worst]
    bias = sum(r.signed_error or 0.0 for r in scored) / len(scored) if scored else None
    return SourceSummary(source_id=source_id, source=rows[0].source if rows else "", num_rows=len(rows),
                         num_scored=len(scored), mape=mape(scored), bias=bias, worst=tuple(worst))


def score_rows(rows: Sequence[RowResult], num_worst: int = 3, elapsed_s: float = 0.0) -> ValidationReport:
    """Group by source (in order of first appearance) and compute the summaries."""
    by_source: dict[str, list[RowResult]] = {}
    for row in rows:
        by_source.setdefault(row.source_id, []).append(row)
    sources = tuple(summarize_source(sid, group, num_worst) for sid, group in by_source.items())
    source_mapes = [s.mape for s in sources if s.mape is not None]
    return ValidationReport(
        rows=tuple(rows),
        sources=sources,
        overall_mape=mape(rows),
        mean_source_mape=sum(source_mapes) / len(source_mapes) if source_mapes else None,
        num_failed=sum(1 for r in rows if r.predicted_s is None),
        elapsed_s=elapsed_s,
    )
