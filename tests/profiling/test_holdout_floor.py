"""A profile's held-out error (profile.json holdout_mape, read by the shipped-model rule and refine's shrinkage)
divides by at least build_profile.MAPE_FLOOR_S: a timer glitch of a few nanoseconds cannot dominate the mean."""

import numpy as np

from llmperf_hook.profile.build_profile import MAPE_FLOOR_S, Samples, holdout_mape
from llmperf_hook.profile.features import RooflineConstants

RC = RooflineConstants(1e11, 1e10, 1, 4)


def _gemm(glitch_s: float | None) -> Samples:
    rng = np.random.default_rng(0)
    m, n, k = (rng.integers(16, 512, 200).astype(float) for _ in range(3))
    t = 2 * m * n * k / 5e10 + 2e-6
    if glitch_s is not None:
        t[::10] = glitch_s  # every tenth sample timed at (near) zero
    return Samples("gemm", "fwd", {"m": m, "n": n, "k": k}, t)


def test_near_zero_samples_do_not_dominate_the_held_out_error() -> None:
    clean = holdout_mape(_gemm(None), RC, "lightgbm")
    glitched = holdout_mape(_gemm(1e-12), RC, "lightgbm")
    assert clean is not None and clean < 0.2
    # Each glitched sample counts at most (its prediction) / MAPE_FLOOR_S: ~1e2, not ~1e8 as divided by 1e-12 s.
    assert glitched is not None and glitched < 2e-3 / MAPE_FLOOR_S
