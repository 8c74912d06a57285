"""End-to-end calibrations learned from instrumented runs, per (hardware, cluster, framework).

What the per-op models cannot see on a given cluster and framework (launcher and Python overhead per step,
the framework's bookkeeping, a slower-than-profiled interconnect, clock and thermal state) shows up as a
systematic ratio between measured and predicted step time. `fit_calibration` learns it from the runs
ingested by `llmperf refine`; the predictor applies it as

    step_time = step_time_scale * predicted_step_time + step_overhead_s

- one run, or runs that all predict about the same time: the scale only, the geometric mean of the
  measured/predicted ratios (least squares on log(measured/predicted), so a 2x over- and a 2x
  under-prediction weigh the same);
- three or more runs whose predictions span at least 1.5x: scale and a fixed per-step overhead by weighted
  least squares on relative error (weights 1/measured^2), kept only when it fits the runs better than the
  scale alone and both terms come out non-negative.
A calibration knows what it saw (refine/shrinkage.py): a configuration with instrumented runs of its own (same
fingerprint, refine/config_fingerprint.py) gets its own measured ratio (the posterior mean E[b + c_f] of its whole
step, refine/own_scales.py); every other configuration gets the shared fit above, shrunk toward 1 in log space by
the posterior weight k of the shared bias: step_time = predicted * ((scale * predicted + overhead) / predicted) ** k.
On a CPU, what multi-rank runs' ranks wait for each other (wall beyond CPU time) is fitted apart and goes to
multi-rank configurations without runs only (refine/peer_wait.py).
`find_calibration` is on the predict path: stdlib sqlite3 only, never raises (a broken store means None, and
`calibration_store_problem` says why, so the prediction can warn that its calibration was left out).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

MIN_RUNS_FOR_OVERHEAD = 3
MIN_SPREAD_FOR_OVERHEAD = 1.5


@dataclass(frozen=True)
class ConfigScale:
    """The calibration of one configuration that was instrumented."""

    fingerprint: str
    """refine/config_fingerprint.py."""
    step_time_scale: float
    """Posterior mean of its measured / predicted ratio, its whole step as one reading (refine/own_scales.py)."""
    measured_scale: float
    """Geometric mean of its runs' measured / predicted ratios."""
    num_runs: int
    """How many instrumented runs of this configuration."""
    label: str = ""
    """What the configuration is, for notes (config_fingerprint.describe_config)."""
    alpha: float = 0.0
    """Its weight K^-1 y in what configurations without runs get (refine/transfer.py; 0: none recorded)."""
    shares: tuple[tuple[str, float], ...] = ()
    """The cost terms' shares of its predicted step (refine/transfer.cost_shares; (): not recorded)."""
    wait_log_scale: float = 0.0
    """Of its log measured_scale, its quiet runs' mean wall beyond their ranks' CPU time and beyond the collectives
    their prediction priced (refine/peer_wait.py; 0: one rank, or contended runs only). For the notes:
    step_time_scale shrinks the whole step as one reading."""


@dataclass(frozen=True)
class Calibration:
    hardware: str
    cluster: str
    framework: str
    step_time_scale: float
    """Measured / predicted step time, fitted on instrumented runs (1.0 = no correction): the shared fit,
    before the shrinkage of `shared_weight`."""
    num_runs: int
    """How many instrumented runs the fit used."""
    step_overhead_s: float = 0.0
    """Fixed seconds per step added after scaling (0 unless >= 3 configurations of different sizes support it)."""
    shared_weight: float = 1.0
    """Posterior weight k of the shared fit for a configuration without runs of its own (1 = in full, as a
    calibration stored before shrinkage existed)."""
    num_configs: int = 0
    """How many distinct configurations the runs were (0: not recorded, an older store)."""
    config_scales: tuple[ConfigScale, ...] = ()
    """The instrumented configurations' own calibrations."""
    sd_config: float = 0.0
    """Standard deviation of a configuration's own log-bias the shrinkage used (0: none)."""
    sd_run: float = 0.0
    """Run-to-run standard deviation of log step time the shrinkage used (0: none)."""
    sd_shared: float = 0.10
    """Prior standard deviation of the shared log-bias the shrinkage used (refine/shrinkage.variance_priors; a
    calibration stored before it was recorded used SD_SHARED_PRIOR, 0.10)."""
    sd_mix: float = 0.0
    """The part of sd_config carried between configurations by their cost mix (refine/transfer.py; 0: none)."""
    wait_log_scale: float = 0.0
    """mu_w: the multi-rank CPU runs' mean log(wall / CPU time) beyond the collectives their predictions priced,
    their ranks' wait for each other (refine/peer_wait.py; 0: none seen). Not in step_time_scale."""
    wait_weight: float = 0.0
    """k_w: the fraction of wait_log_scale a multi-rank configuration without runs of its own gets."""

    def peer_wait_factor(self, world_size: int | None) -> float:
        """What a configuration of `world_size` ranks without runs of its own waits for its peers beyond the
        CPU part of the calibration (1 for one rank: nobody to wait for)."""
        return math.exp(self.wait_weight * self.wait_log_scale) if (world_size or 1) > 1 else 1.0

    def own_scale(self, fingerprint: str | None) -> ConfigScale | None:
        """The configuration's own calibration, if it was instrumented."""
        return next((c for c in self.config_scales if fingerprint and c.fingerprint == fingerprint), None)

    def apply(self, predicted_step_time_s: float, fingerprint: str | None = None,
              shares: tuple[tuple[str, float], ...] = (), world_size: int | None = 1) -> float:
        """The calibrated step time for an uncalibrated prediction of the configuration `fingerprint`, whose cost
        terms' shares are `shares` (refine/transfer.cost_shares): the shared part, times what its similarity to
        the instrumented configurations carries over of their own biases (none without shares), times the
        peers' wait of a `world_size` > 1 configuration."""
        own = self.own_scale(fingerprint)
        if own is not None:
            return own.step_time_scale * predicted_step_time_s
        fitted = self.step_time_scale * predicted_step_time_s + self.step_overhead_s
        wait = self.peer_wait_factor(world_size)
        if self.shared_weight >= 1.0 or predicted_step_time_s <= 0 or fitted <= 0:
            return fitted * wait
        shared = predicted_step_time_s * (fitted / predicted_step_time_s) ** max(self.shared_weight, 0.0)
        return shared * math.exp(self.similar_log_scale(shares)) * wait

    def similar_log_scale(self, shares: tuple[tuple[str, float], ...]) -> float:
        """sd_mix^2 sum_f rho_f alpha_f (refine/transfer.py): the instrumented configurations' own biases,
        carried over as far as their cost mix resembles `shares` and cost terms carry biases at all."""
        from llmperf_hook.refine.transfer import correlation, covariance

        return sum(covariance(self.sd_config, self.sd_mix, correlation(c.shares, shares), False) * c.alpha
                   for c in self.config_scales)

    def describe(self, fingerprint: str | None = None) -> str:
        """Which calibration applies to `fingerprint`, in one sentence."""
        where = f"{self.framework} on {self.cluster} ({self.hardware})"
        own = self.own_scale(fingerprint)
        if own is not None:
            wait = (f"; of the measured, its ranks' wait for each other x{math.exp(own.wait_log_scale):.3f} beyond "
                    f"the collectives its prediction priced, which goes apart to multi-rank configurations without "
                    f"runs: refine/peer_wait.py"
                    if own.wait_log_scale else "")
            return (f"calibrated on this exact configuration: x{own.step_time_scale:.3f} from {own.num_runs} "
                    f"instrumented run(s) of it (measured x{own.measured_scale:.3f}, its whole step weighted as one "
                    f"reading against run-to-run spread {self.sd_run:.1%}: refine/own_scales.py{wait}) of {where}")
        extra = f" + {self.step_overhead_s * 1e3:.2f} ms" if self.step_overhead_s else ""
        if self.num_configs == 0:
            return f"calibrated x{self.step_time_scale:.3f}{extra} from {self.num_runs} instrumented run(s) of {where}"
        return (f"cluster calibration from {self.num_runs} run(s) of {self.num_configs} configuration(s), shrunk "
                f"{1 - self.shared_weight:.0%}: fitted x{self.step_time_scale:.3f}{extra} applied to the power "
                f"{self.shared_weight:.2f} (shared-bias prior {self.sd_shared:.1%}, configuration spread "
                f"{self.sd_config:.1%}, run spread {self.sd_run:.1%}) of {where}{self._wait_text()}")

    def _wait_text(self) -> str:
        if not self.wait_log_scale:
            return ""
        return (f"; multi-rank configurations also wait for their peers x{self.peer_wait_factor(2):.3f} (measured "
                f"wall / CPU time beyond the priced collectives x{math.exp(self.wait_log_scale):.3f}, kept "
                f"{self.wait_weight:.0%}: refine/peer_wait.py)")



@dataclass(frozen=True)
class CalibratedStep:
    """What a calibration did to one prediction (api.predict_config)."""

    step_time_s: float
    """The calibrated step time."""
    scale: float
    """Calibrated / uncalibrated step time."""
    predictor_note: str
    """The `predictor["calibration"]` line."""
    warning: str
    """The sentence predict prints."""


def calibrate_step(calibration: Calibration | None, cfg: Any, step_time_s: float,
                   breakdown: Any = None) -> CalibratedStep | None:
    """The calibration for this configuration applied to an uncalibrated step time (whose breakdown by component
    gives its cost mix, refine/transfer.py); None without one. The configuration's fingerprint and mix are built
    only when the calibration has configurations of its own."""
    if calibration is None or calibration.step_time_scale <= 0 or step_time_s <= 0:
        return None
    fingerprint, shares, world_size = None, (), 1
    if calibration.config_scales or calibration.wait_weight:
        from llmperf_hook.refine.config_fingerprint import config_explain, fingerprint_from_config_json
        from llmperf_hook.refine.transfer import cost_shares

        explain = config_explain(cfg)
        fingerprint, shares = fingerprint_from_config_json(explain), cost_shares(breakdown, explain)
        world_size = int((explain or {}).get("world_size") or 1)
    calibrated = calibration.apply(step_time_s, fingerprint, shares, world_size)
    if not calibrated > 0:
        return None
    scale = calibrated / step_time_s
    own = calibration.own_scale(fingerprint)
    if own is not None:
        short = f"this exact configuration, {own.num_runs} run(s)"
    elif calibration.num_configs:
        short = (f"cluster calibration from {calibration.num_runs} run(s) of {calibration.num_configs} "
                 f"configuration(s), shrunk {1 - calibration.shared_weight:.0%}")
    else:
        short = f"{calibration.num_runs} instrumented run(s)"
    return CalibratedStep(calibrated, scale, f"x{scale:.3f} ({short})",
                          f"step time x{scale:.3f}: {calibration.describe(fingerprint)}.")


def fit_calibration(predicted_s: Sequence[float], measured_s: Sequence[float]) -> tuple[float, float]:
    """(step_time_scale, step_overhead_s) from paired uncalibrated predictions and measurements."""
    pairs = [(p, m) for p, m in zip(predicted_s, measured_s) if p > 0 and m > 0]
    if not pairs:
        raise ValueError("no run has both a positive predicted and a positive measured step time")
    scale = math.exp(sum(math.log(m / p) for p, m in pairs) / len(pairs))
    if len(pairs) < MIN_RUNS_FOR_OVERHEAD:
        return scale, 0.0
    preds = [p for p, _ in pairs]
    if max(preds) / min(preds) < MIN_SPREAD_FOR_OVERHEAD:
        return scale, 0.0
    affine = _weighted_affine(pairs)
    if affine is None:
        return scale, 0.0
    a, b = affine
    if _relative_sse(pairs, a, b) < _relative_sse(pairs, scale, 0.0):
        return a, b
    return scale, 0.0


def _weighted_affine(pairs: Sequence[tuple[float, float]]) -> tuple[float, float] | None:
    """Minimise sum(((a p + b - m) / m)^2): normal equations of a 2x2 weighted least-squares problem."""
    w = [1.0 / (m * m) for _, m in pairs]
    spp = sum(wi * p * p for wi, (p, _) in zip(w, pairs))
    sp = sum(wi * p for wi, (p, _) in zip(w, pairs))
    s1 = sum(w)
    spm = sum(wi * p * m for wi, (p, m) in zip(w, pairs))
    sm = sum(wi * m for wi, (_, m) in zip(w, pairs))
    det = spp * s1 - sp * sp
    if abs(det) < 1e-30 * max(spp * s1, 1e-300):
        return None
    a = (spm * s1 - sp * sm) / det
    b = (spp * sm - sp * spm) / det
    return (a, b) if a > 0 and b >= 0 else None


def _relative_sse(pairs: Sequence[tuple[float, float]], a: float, b: float) -> float:
    return sum(((a * p + b - m) / m) ** 2 for p, m in pairs)


_MEMO: dict[tuple, tuple[Calibration | None, str | None]] = {}


def find_calibration(hardware: str, cluster: str, framework: str) -> Calibration | None:
    """The stored calibration for this key from $LLMPERF_HOME's store, or None."""
    return _lookup(hardware, cluster, framework)[0]


def calibration_store_problem(hardware: str, cluster: str, framework: str) -> str | None:
    """Why the store's calibrations could not be read (a damaged store, or a file that is no SQLite database), or
    None. A store without calibration tables yet, or one locked for a moment, is no problem: nothing was lost."""
    return _lookup(hardware, cluster, framework)[1]


def _lookup(hardware: str, cluster: str, framework: str) -> tuple[Calibration | None, str | None]:
    """(calibration, problem), memoised on the store files' identity (path, sizes, mtimes): `tune` and `validate`
    call this thousands of times, and opening SQLite costs ~20 ms; a refine that writes the store changes its mtime
    and so the key."""
    try:
        from llmperf_hook.store.location import default_store_path  # no sqlite3 import while there is no store

        db = default_store_path()
        if not db.is_file():
            return None, None
        # WAL mode: committed writes may sit in the -wal file until a checkpoint, so both files make the key.
        files = [db, db.with_name(db.name + "-wal")]
        identity = tuple((f.stat().st_size, f.stat().st_mtime_ns) if f.is_file() else None for f in files)
    except Exception:  # noqa: BLE001 - a missing or unreadable store never breaks a prediction
        return None, None
    key = (str(db), identity, hardware, cluster, framework)
    if key not in _MEMO:
        if len(_MEMO) > 1024:
            _MEMO.clear()
        _MEMO[key] = _load_calibration(hardware, cluster, framework)
    return _MEMO[key]


def _transfer_fields(rest: Sequence[Any]) -> tuple[float, tuple[tuple[str, float], ...], float]:
    """(alpha, shares, wait) from a refine_config_scales row's later columns (absent or NULL in an older store)."""
    from llmperf_hook.refine.observation_store import shares_from_json

    alpha = float(rest[0]) if rest and isinstance(rest[0], (int, float)) else 0.0
    wait = float(rest[2]) if len(rest) > 2 and isinstance(rest[2], (int, float)) else 0.0
    return alpha, shares_from_json(rest[1] if len(rest) > 1 else None), wait


def _load_calibration(hardware: str, cluster: str, framework: str) -> tuple[Calibration | None, str | None]:
    """Read-only: opening the store for writing (schema upkeep) would change its mtime and so defeat the memo of
    find_calibration, one SQLite open per prediction (a third of `predict --batch` time)."""
    import sqlite3

    from llmperf_hook.refine.observation_store import load_calibration_row, load_shrinkage, store_path

    try:
        conn = sqlite3.connect(f"{store_path().resolve().as_uri()}?mode=ro", uri=True)
    except Exception:  # noqa: BLE001 - a missing or locked store never breaks a prediction
        return None, None
    try:
        row = load_calibration_row(conn, hardware, cluster, framework)
        extra = load_shrinkage(conn, hardware, cluster, framework) if row is not None else {}
        scale, overhead, num_runs = row if row is not None else (0.0, 0.0, 0)
        scales = tuple(ConfigScale(str(f), float(s), float(m), int(n), str(label or ""), *_transfer_fields(rest))
                       for f, s, m, n, label, *rest in extra.pop("config_scales", ()) if f and s and s > 0)
        return (None if row is None else Calibration(hardware, cluster, framework, float(scale), int(num_runs),
                                                     float(overhead or 0.0), config_scales=scales, **extra)), None
    except sqlite3.OperationalError:  # no table yet, or locked for a moment: nothing stored was lost
        return None, None
    except sqlite3.DatabaseError as err:  # malformed, or not a SQLite file: refine's calibrations are unreadable
        return None, (f"the llmperf store {store_path()} cannot be read ({err}): predicted without any calibration "
                      f"`llmperf refine` stored there. Move the file away (the next refine starts a new store) or "
                      f"restore it")
    except Exception:  # noqa: BLE001 - a malformed row never breaks a prediction
        return None, None
    finally:
        conn.close()
