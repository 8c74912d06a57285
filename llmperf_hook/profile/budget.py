"""How `llmperf profile --budget MINUTES` spends its minutes: one wall-clock deadline for the whole command.

The budget is the user's limit for the command, from the moment it starts (the interpreter's start and the CLI's
imports before it, START_UP_S, are outside it) to its last line. Its phases run in this order, each ending where
the time kept for the phases after it begins:

    peaks -> sampling (design, then adaptive) -> fitting and writing -> [framework cost] -> end reading

- fitting and writing (`finish_s`): FINISH_SHARE of the budget, at least what fitting the classes that have
  enough samples takes (fit_seconds: the regressors' library import, the hardware file's other dtypes' peaks, a fit
  per class and direction), so sampling stops earlier as more classes become fittable. Fitting computes held-out
  errors only while its time lasts; every class is fitted (a resumed run keeps the models of its stored classes);
- the framework cost (CPU, --budget >= cpu_framework.MIN_BUDGET_MIN): cpu_framework.RESERVED_S, at most
  FRAMEWORK_SHARE of the budget with its concurrent end reading; a hard time box (children that do not start in it
  are left out, a reading stops at its end; cpu_framework_readings.py), what it left out stated in the output;
- the end reading of the machine's speed (`tail_s`, CPU): one reference workload, and with the framework cost the
  concurrent copies too (TAIL_S, TAIL_CONCURRENT_S).

What runs over a phase is taken from the next ones: a phase that finds its time spent does the least that leaves a
usable profile (every class with enough samples fitted; a framework file of the readings done) and says what it left
out. Two things run past the end, both said in the output: the first-fit shapes of a class asked for (--ops; with
--for and no --ops, a class the job runs: sampler._first_fit_classes) that has too few samples to fit
(sampler.SamplingDeadline, up to MIN_SAMPLES_TO_FIT shapes of at most FIRST_FIT_MAX_SAMPLE_S each, so a tiny budget
still leaves a regressor per class), and the fits of every class with enough samples (a
resumed run whose --budget is smaller than refitting its stored classes). Measured 28 Nov 2026, load 8-11 on 2
cores: --budget 0.5 with 3 classes took 22 s of its 30; --budget 0.4 --for a GPT job (27 classes and directions)
46 s of 24; --budget 0.01 with one class 16 s. With first fits for the job's classes only (17 of 27 for a
256-hidden GPT job, same day, load 4-6), --budget 0.4 --for took 18.6 s of 24 where the old rule took 25.6 s, run
after run; both 38.5 s from a cold start (LightGBM's first import, fitting 13 s over). Later that day at load 6-9,
--ops gemm,layernorm from a fresh home: --budget 0.2 took 25-33 s of 12, --budget 0.5 26-30 s of 30; at load 7 the
fixed costs alone are about 16 s (torch's import 6.0 s, the fp32 roofline 2.3 s, the bf16 and fp16 peaks 4.0 s,
LightGBM's import 4.0 s). The command's last lines say it: `time     budget 12 s, took 22 s: 10 s over, because ...`
with each phase's seconds (commands/profile._time_line)."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

START_UP_S = 1.0
"""Seconds before the budget's clock starts: the interpreter, click and llmperf's CLI imports (python -X importtime:
24 ms for llmperf_hook.cli, 27 Nov 15:56 at load 0.9); torch (4.3 s cold there) is imported inside the budget."""
FINISH_SHARE = 0.1
"""Share of the budget kept for fitting and writing at least (a long budget's groups hold hundreds of samples)."""
FIT_START_S = 5.0
"""The first fit's import of LightGBM and scikit-learn: 4.99 s for a fit that takes 0.05 s once imported (27 Nov
15:56, load 0.9)."""
PEAKS_S = 3.0
"""The hardware file's other dtypes' peaks on CPU: bf16 0.24 s, fp16 1.88 s (emulated; PEAK_GEMM_TARGET_S bounds
it), same measurement."""
FIT_S_PER_GROUP = 0.3
"""One regressor (class, direction, dtype) with its held-out error: 0.05-0.40 s for 8-32 samples, same measurement."""
FRAMEWORK_SHARE = 0.5
"""Most of the budget the framework cost (its concurrent end reading included) may take: 90 s of a 3-minute budget,
where its RESERVED_S (120 s) and the end reading's 20 s left the operators 4 s of sampling (2 regressors; 27 Nov
16:11, load 8-9). Fewer readings, said in the output, are what a small budget buys (cpu_framework_readings.py)."""
TAIL_S = 2.0
"""The end readings of the reference workload (instrument/reference_speed.py; after the framework cost and at the
end: 0.06 s each at load 0.9, several times that under load)."""
TAIL_CONCURRENT_S = 20.0
"""The concurrent copies of the end reading: two children that import torch and start together 4 s after
launch (start_delay_s): 15.4 s at load 0.9."""


@dataclass(frozen=True)
class ProfileBudget:
    """The phases' deadlines, in time.perf_counter() seconds."""

    start_s: float
    """When the command started."""
    total_s: float
    """--budget, in seconds."""
    framework_s: float
    """Seconds kept for the framework cost (0: not measured)."""
    tail_s: float
    """Seconds kept for the end reading."""
    cpu: bool = True
    """A CPU profile (its hardware file measures the other dtypes' peaks)."""

    @property
    def end_s(self) -> float:
        return self.start_s + self.total_s

    def finish_s(self, num_groups: int) -> float:
        """Seconds kept for fitting `num_groups` regressors and writing."""
        return max(fit_seconds(num_groups, self.cpu), FINISH_SHARE * self.total_s)

    def sampling_end_s(self, num_groups: int) -> float:
        """When sampling ends, with `num_groups` regressors to fit after it."""
        return self.end_s - self.tail_s - self.framework_s - self.finish_s(num_groups)

    @property
    def fit_end_s(self) -> float:
        return self.end_s - self.tail_s - self.framework_s

    @property
    def framework_end_s(self) -> float:
        return self.end_s - self.tail_s

    def left_s(self, until_s: float) -> float:
        """Seconds from now to `until_s` (negative once past)."""
        return until_s - time.perf_counter()


def fit_seconds(num_groups: int, cpu: bool) -> float:
    """Seconds fitting `num_groups` regressors takes, with the hardware file's other peaks (and LightGBM's import,
    unless this process has imported it already)."""
    start_s = 0.0 if "lightgbm" in sys.modules else FIT_START_S
    return start_s + (PEAKS_S if cpu else 0.0) + num_groups * FIT_S_PER_GROUP


def plan_budget(budget_min: float, start_s: float, framework_s: float, cpu: bool) -> ProfileBudget:
    """The phases of a --budget of `budget_min` minutes started at `start_s`; `framework_s` the framework cost's
    reservation (0 when not measured), cut to FRAMEWORK_SHARE of the budget."""
    total_s = budget_min * 60.0
    framework_s = min(framework_s, FRAMEWORK_SHARE * total_s)
    concurrent_s = min(TAIL_CONCURRENT_S, framework_s)  # the framework cost's own end reading, in its share
    tail_s = (TAIL_S + concurrent_s) if cpu else 0.0
    return ProfileBudget(start_s, total_s, framework_s - concurrent_s, tail_s, cpu)


def describe(budget: ProfileBudget, num_groups: int) -> str:
    """The split, for the plan line (said when sampling begins, `num_groups` regressors at most to fit). A budget
    that the fixed costs already spent says so rather than giving a window that ends before it starts."""
    started_s = time.perf_counter() - budget.start_s
    latest_s = budget.sampling_end_s(1) - budget.start_s  # sampling ends later the fewer regressors there are to fit
    earliest_s = max(budget.sampling_end_s(num_groups) - budget.start_s, started_s)
    if latest_s <= started_s:
        sampling = (f"no time left for sampling after {started_s:.0f} s of start-up, torch and the peaks and the "
                    f"fits' {budget.finish_s(1):.0f} s (each class asked for still gets the small shapes of a first "
                    f"fit, past the --budget)")
    else:
        window = _span(earliest_s, latest_s)
        sampling = (f"sampling from {started_s:.0f} s (start-up, torch, the peaks) until {window} s"
                    + (" (earlier as more classes become fittable)" if "-" in window else ""))
    parts = [sampling, f"fitting {_span(budget.finish_s(1), budget.finish_s(num_groups))} s (1-{num_groups} "
                       f"regressors)"]
    if budget.framework_s:
        parts.append(f"framework cost {budget.framework_s:.0f} s")
    if budget.tail_s:
        parts.append(f"end reading {budget.tail_s:.0f} s")
    return f"budget {budget.total_s:.0f} s: " + ", ".join(parts)


def _span(low_s: float, high_s: float) -> str:
    """"12" or "12-30": seconds, one figure when both round alike."""
    low, high = f"{low_s:.0f}", f"{high_s:.0f}"
    return low if low == high else f"{low}-{high}"
