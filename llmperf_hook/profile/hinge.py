"""A hinge time normaliser, min(a + b * u, c + d * w), for op classes whose time is capped by a second quantity.

The GH200 embedding samples are the case: the forward rises with the gathered elements u = tokens x hidden (about
6.5 ps each) up to a plateau of about 108 us plus a pass over the table's w = vocab x hidden elements (at about
3.45 TB/s of fp16), flat in the tokens beyond it; the backward sits on that plateau at every token count (mp 1,
hidden 4,096: 230-250 us from 2,048 to 40,960 tokens, while its roofline grows 20x with the gradient rows it
reads). A roofline normaliser leaves the trees a staircase in log(tokens / vocab) to learn; this one leaves them
the residual of the two regimes. Where it is used is decided like the floor, on an inner split of the training
rows (build_profile.fit_with_floor): constants fitted on those rows only, never on a test split.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

Dims = Mapping[str, np.ndarray]


def _embedding_terms(d: Dims) -> np.ndarray:
    t, v, h = (np.asarray(d[k], dtype=np.float64) for k in ("tokens", "vocab", "hidden"))
    return np.column_stack([t * h, v * h])


HINGE_TERMS: Mapping[str, Callable[[Dims], np.ndarray]] = {"embedding": _embedding_terms}
"""Op classes offered the hinge, and their (u, w) columns: embedding u = tokens x hidden (the rows gathered or
scattered), w = vocab x hidden (the table)."""


def written_floor_s(terms: np.ndarray, bwd: bool, dtype_bytes: int, bandwidth_bytes_per_s: float) -> np.ndarray:
    """The time to move the op's own rows once at the datasheet bandwidth: the forward writes the gathered rows u;
    the backward reads the output gradient's u rows and writes the gradient table w (torch's embedding_backward,
    which Megatron's VocabParallelEmbedding uses), the larger of the two. The plateau is flat in u, so beyond the
    sampled tokens (40,960) the hinge alone would price an op below that (GH200, 65,536 tokens x 8,192 hidden from
    a 16,032-row table: forward plateau 183 us, output 1.07 GB = 268 us; backward at 1,048,576 tokens x 4,096
    hidden: plateau 228 us, its 8.6 GB of gradient rows 2.1 ms); the predictor never goes below it. 0.7 % of the
    GH200 forward and 0.6 % of the backward samples (the largest tokens x hidden at TP 16) are below 0.9x it, as
    their plateau suggests an artefact of the samples' timing, not a kernel faster than HBM."""
    elements = np.maximum(terms[:, 0], terms[:, 1]) if bwd else terms[:, 0]
    return elements * dtype_bytes / bandwidth_bytes_per_s


def priced_s(hinge: Hinge, terms: np.ndarray, ratio: np.ndarray, bwd: bool, dtype_bytes: int,
             bandwidth_bytes_per_s: float) -> np.ndarray:
    """Seconds a hinge model prices: the hinge times the regressor's ratio, never below written_floor_s. The one
    formula of the predictor (profile/predictor.py) and of the operator benchmark, so the benchmark scores what
    `predict` answers."""
    floor_s = written_floor_s(terms, bwd, dtype_bytes, bandwidth_bytes_per_s)
    return np.maximum(hinge.time_s(terms) * ratio, floor_s)


def hinge_terms(op_class: str, dims: Dims) -> np.ndarray | None:
    """[rows, 2] (u, w) of an op class offered the hinge, or None."""
    terms = HINGE_TERMS.get(op_class)
    return None if terms is None else terms(dims)


@dataclass(frozen=True)
class Hinge:
    """t = min(a_s + b_s * u, c_s + d_s * w): two fixed times and two per-element times."""

    a_s: float
    """Fixed time of the regime that grows with u (launch and tail)."""
    b_s: float
    """Seconds per element of u."""
    c_s: float
    """Fixed time of the plateau."""
    d_s: float
    """Seconds per element of w."""

    def time_s(self, terms: np.ndarray) -> np.ndarray:
        return np.minimum(self.a_s + self.b_s * terms[:, 0], self.c_s + self.d_s * terms[:, 1])

    def as_tuple(self) -> tuple[float, float, float, float]:
        return (self.a_s, self.b_s, self.c_s, self.d_s)

    @classmethod
    def from_sequence(cls, values) -> "Hinge":
        a, b, c, d = (float(v) for v in values)
        return cls(a, b, c, d)

    def valid(self) -> bool:
        values = self.as_tuple()
        return all(np.isfinite(v) and v > 0.0 for v in values) and self.a_s < 10.0 and self.c_s < 10.0


LOG_SCALE = 0.05
"""soft_l1 scale of the fit, on the log time ratio: residuals beyond 5 % count about linearly, so throttled repeats
(20 % slow) pull like an L1 fit, not an L2 one."""


def fit_hinge(terms: np.ndarray, t: np.ndarray) -> Hinge:
    """Robust least squares of log t on log min(a + b u, c + d w), parameters in log space, started from the
    samples' own scales (deterministic). Fixed times are bounded by 10x the slowest sample, so a regime the samples
    never reach gets a fixed time that never binds instead of an unbounded one."""
    from scipy.optimize import least_squares

    u, w = terms[:, 0], terms[:, 1]
    p0 = np.log([0.25 * t.min(), np.median(t / u), 0.5 * t.min(), np.median(t / w)])
    top = np.log([10.0 * t.max(), 10.0 * np.max(t / u), 10.0 * t.max(), 10.0 * np.max(t / w)])
    low = top - 60.0
    p0 = np.clip(p0, low + 1e-9, top - 1e-9)

    def residual(p: np.ndarray) -> np.ndarray:
        a, b, c, d = np.exp(p)
        return np.log(np.minimum(a + b * u, c + d * w) / t)

    fit = least_squares(residual, p0, bounds=(low, top), loss="soft_l1", f_scale=LOG_SCALE)
    return Hinge(*(float(v) for v in np.exp(fit.x)))
