"""A CPU run whose ranks waited for a core: what refine calibrates from, and how much that reading is worth.

On a CPU a rank's step wall time is its CPU time, plus the time it waited for a peer in a collective, plus the
time it was runnable but another program held the core. The last part is the machine's load at that moment,
not the cluster: a calibration from the wall time of a contended run would learn the load. The step's CPU
time does not contain it, and moves far less with the load. Measured on this 2-core machine, 26 Nov 2026: testbed
configurations 0, 1, 9 of benchmarks/bench_cpu_testbed.py run beside two busy loops or other helpers' jobs
(20:08-20:20, load 2-12), and config 1's --spread-check runs (17:51-17:56, load 6.5-8.5), against the same
configurations' quiet runs of 19:35-19:39 (load 1.0-1.4, wall/CPU 1.00 for one rank, 1.06-1.17 for two):

    config 0 (1 rank fp32)    quiet CPU 15.4 ms; at wall/CPU 2.0-6.9: CPU 16.8-20.1 ms (wall 34-139 ms)
    config 1 (2 ranks ZeRO-1) quiet CPU 59.5 ms; at wall/CPU 2.0-8.7: CPU 60.7-67.1 ms (wall 121-581 ms)
    config 9 (2 ranks bf16)   quiet CPU 34.8 ms; at wall/CPU 2.1-9.3: CPU 38.2-41.1 ms (wall 85-378 ms)

Over the 19 contended runs the step CPU time was log +0.020 .. +0.266 above the quiet one (median +0.068, standard
deviation 0.068), unrelated to how contended beyond wall/CPU 2; the wall time was 2-9x. So a contended run is
calibrated from its step CPU time, never its wall time: the slowest rank's median CPU time per step, less the
contention's median share (CPU_INFLATION_LOG), times the wall / CPU ratio a quiet run of as many ranks has (the
part of a quiet step spent waiting for peers: 1 for one rank; for several, the median of the store's
uncontended runs of the same (hardware, cluster, framework) and rank count, else the middle of [1, the
contention limit]). Its observation variance in the shrinkage (refine/shrinkage.py) adds, to the run-to-run
spread every run has, the contention share's spread (CPU_INFLATION_SD) and that quiet ratio's (the store's
quiet runs', or the uniform's over the interval); both terms ramp in from wall/CPU 1 to 2 (ramp). With the
quiet ratio from the store a contended run weighs about a third of a quiet one; without, less. Pure functions;
refine_run.py applies them.

The median's own sampling error (shrinkage.median_sampling_sd) is that of the reading used, the CPU times per
step (the wall times of a contended run scatter with the load, 2-9x). CPU_INFLATION_SD is a spread of 19 runs'
medians, so it already holds a median's sampling error: a contended run adds only the part of its own that the
contention spread does not cover (sampling_sd_beyond_contention), else that error is counted twice.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence

CPU_INFLATION_LOG = 0.068
"""Median log growth of a contended rank's step CPU time over a quiet run's (module docstring, 19 runs)."""
CPU_INFLATION_SD = 0.068
"""Standard deviation of that growth over the same 19 runs."""
MIN_SD = 1e-3


@dataclass(frozen=True)
class ContendedStep:
    """What refine calibrates from for a contended CPU run."""

    wall_per_cpu: float
    """The run's slowest-rank step wall time / its CPU time."""
    cpu_time_s: float
    """Median over the timed steps of the slowest rank's CPU time."""
    quiet_wall_per_cpu: float
    """The wall / CPU ratio of a quiet run of as many ranks (peer waits), applied to the CPU time."""
    quiet_source: str
    """Where quiet_wall_per_cpu came from, for the note."""
    step_time_s: float
    """cpu_time_s x quiet_wall_per_cpu: the quiet-equivalent step time the calibration uses."""
    observation_sd: float
    """Extra log standard deviation of this reading, added in quadrature to the run-to-run spread."""


def contended_step(wall_per_cpu: float, cpu_time_s: float, world_size: int, limit: float,
                   quiet_ratios: Sequence[float] = ()) -> ContendedStep:
    """The module docstring's reading of a run with wall / CPU `wall_per_cpu` above `limit`; `quiet_ratios`
    are the wall / CPU ratios of the store's uncontended runs of the same key and rank count."""
    ratio, ratio_sd, source = quiet_wall_per_cpu(world_size, limit, quiet_ratios)
    share = ramp(wall_per_cpu)
    sd = max(math.hypot(share * CPU_INFLATION_SD, ratio_sd), MIN_SD)
    quiet_cpu_s = cpu_time_s * math.exp(-share * CPU_INFLATION_LOG)
    return ContendedStep(wall_per_cpu, cpu_time_s, ratio, source, quiet_cpu_s * ratio, sd)


def sampling_sd_beyond_contention(step: ContendedStep, cpu_sampling_sd: float) -> float:
    """The sampling sd of the run's median CPU time (`cpu_sampling_sd`) less, in quadrature, the contention spread
    applied to it (ramp x CPU_INFLATION_SD: measured over runs' medians, it holds such an error): the run's
    reading then carries max(sampling, contention spread)^2, not their sum; an unusually scattered run still
    weighs less."""
    covered = ramp(step.wall_per_cpu) * CPU_INFLATION_SD
    return math.sqrt(max(0.0, cpu_sampling_sd ** 2 - covered ** 2))


def ramp(wall_per_cpu: float) -> float:
    """How much of the measured contention effect applies: 0 at wall/CPU 1, in full from 2 (where the module
    docstring's runs start), log-linear between."""
    return min(1.0, max(0.0, math.log(max(wall_per_cpu, 1.0)) / math.log(2.0)))


def quiet_wall_per_cpu(world_size: int, limit: float, quiet_ratios: Sequence[float] = ()) -> tuple[float, float, str]:
    """(ratio, its log sd, source): one rank never waits for a peer; several wait as the store's quiet runs
    did (median, spread of their logs), else anywhere in [1, limit] (log-uniform: middle, width / sqrt(12))."""
    if world_size <= 1:
        return 1.0, 0.0, "one rank waits for no peer"
    usable = [r for r in quiet_ratios if 0.5 < r <= limit]
    if usable:
        logs = [math.log(r) for r in usable]
        sd = statistics.stdev(logs) if len(logs) > 1 else math.log(limit) / math.sqrt(12.0)
        return (statistics.median(usable), sd,
                f"the median wall / CPU of {len(usable)} uncontended {world_size}-rank run(s) in the store")
    width = math.log(max(limit, 1.0))
    return (math.exp(width / 2), width / math.sqrt(12.0),
            f"no uncontended {world_size}-rank run in the store: the middle of [1, {limit:g}]")


def describe(step: ContendedStep, limit: float, load_text: str) -> str:
    """The note refine prints for a contended run."""
    return (f"contended run: step wall time {step.wall_per_cpu:.2f}x the ranks' CPU time (> {limit:g}: they "
            f"waited for a core{load_text}). Calibrated from the CPU time per step instead of the wall time: "
            f"{step.cpu_time_s * 1e3:.2f} ms, less {ramp(step.wall_per_cpu) * CPU_INFLATION_LOG:.1%} the contention "
            f"adds to it, x{step.quiet_wall_per_cpu:.3f} ({step.quiet_source}) = "
            f"{step.step_time_s * 1e3:.2f} ms, weighted as a noisier reading (observation sd +{step.observation_sd:.1%} "
            f"in quadrature with the run-to-run spread: refine/contention.py); a quieter rerun weighs more")
