"""Stage [4] output and the predictor interface every cost model implements."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Protocol, Sequence

from llmperf_hook.graph.op import Op
from llmperf_hook.hardware.spec import ClusterSpec


class OpClassPredictor(Protocol):
    """Predicts seconds for many ops of one op_class at once (vectorised: one call per class, not per op)."""

    name: str
    """Shown in reports, e.g. "roofline", "lightgbm:a100-sxm4-80gb", "alpha-beta:perlmutter"."""

    def supports(self, op_class: str, phase: str, dtype: str) -> bool: ...

    def predict_s(self, ops: Sequence[Op], cluster: ClusterSpec) -> Sequence[float]: ...


@dataclass(frozen=True)
class OpTimes:
    """Seconds per op (same order as the graph's ops) and which predictor produced each op class."""

    seconds: Mapping[str, float]
    """Keyed by a stable op id assigned by the graph."""
    predictor_by_class: Mapping[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
