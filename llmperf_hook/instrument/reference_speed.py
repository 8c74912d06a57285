"""How fast this machine's CPU is right now: a tiny fixed reference workload, timed the same way everywhere.

A shared or virtual machine's CPU speed may drift: on the 2-vCPU KVM machine of the CPU testbed the same
DeepSpeed step took 55.6 ms of CPU time in one run and 63.6 ms a minute later, with no steal time and wall time
equal to CPU time. A profile taken at one minute and a measurement at another would then disagree by the
drift, which is no model's error. The reference workload is meant to make such drift visible:
- `llmperf profile --device cpu` records readings with the profile (before sampling, around the framework
  measurement, at the end: `reference_speed.json` in the profile directory, and per dtype in
  framework_overhead.json): the machine speed the profile was taken at;
- the step hook of `llmperf run --instrument` takes one reading per rank of a CPU job right after its last
  recorded step (never inside a step, never on a GPU job), stored in the rank's `end` record (or `stop`, when
  --stop-after comes first); `llmperf refine` stores it with the run (refine_runs.reference_cpu_s). Until 28 Nov
  2026 it was read before step 0, which made the job's first iteration 230 ms longer (median of 3 runs at load
  6-7, the testbed's smallest GPT: bench_hook_overhead.py [4]);
- benchmarks/bench_cpu_testbed.py times it before and after every measured configuration and prints it beside
  the measurement, as a ratio to the profile's reading.

What it does NOT do, measured on 2026-11-26 (benchmarks/bench_cpu_testbed.py): track the run-to-run drift of
the testbed's step time reliably enough to correct anything by it.
- `--drift-check 10`, configurations 0 and 1 at load 3.5-5: step CPU time moved x1.17 / x1.20 between runs,
  the reference x1.08 (mostly its own +-3 % noise); correlation +0.20 / +0.06 (with the run's contention,
  step wall / CPU time: +0.45 / +0.84).
- `--drift-check 10 --drift-configs 6,7` on a quieter machine (load 1.0-3.5, wall = CPU time in 16 of 20 runs):
  step CPU time x1.14 / x1.24 (configuration 7: 63.3-75.5 ms with wall = CPU), reference correlation -0.08 /
  +0.06. Over these 40 runs normalising by the reading widened the run-to-run spread (stdev of log step CPU
  0.049 -> 0.056); the hook's in-job reading correlated better (+0.37; +0.54 over the quiet runs: the drift
  looks partly per process, e.g. where its memory landed) but normalising by it widened the spread further
  (0.074: its own noise and outliers).
- Across 5 full benchmark runs (56 measurements over ~50 minutes, load 2.3-5.8) it followed the slower trend
  partly: within-configuration correlation +0.52, spread 0.051 -> 0.044 normalised.
So the readings are recorded (profile, run meta records, store) and printed, and nothing is normalised by them.
The speed probe (instrument/speed_probe.py: the configuration's own GEMMs / layernorm / attention in fp32 and bf16,
timed by the profile's sampler code) does not track it either, measured on 2026-11-28 (H210, `--drift-check 8
--drift-configs 1,9 --steps 18`, 18:28-18:59, load 7.9-12.7 from other helpers' tests and benchmarks; rows and logs in
/work/notes/h210/): step CPU time moved x1.12 (configuration 1, fp32) / x1.15
(configuration 9, bf16). Read in the ranks after the last step, the probe of the configuration's dtype correlated
+0.56 (fp32) / +0.72 (bf16), above the hook's reference (+0.52 / +0.66) though not the best reading (the 1 MiB
copy +0.64 on configuration 1, the uncounted DRAM copy +0.82 on configuration 9), but it moved
x1.49 / x1.29 itself: normalising by it widened the spread (stdev of log step CPU 0.040 -> 0.105, 0.050 -> 0.061);
the probe read in the benchmark's process: 0.091 / 0.050. The slope of log step time on log probe is 0.2-0.4,
not 1, and even that slope fitted in-sample cut the spread by 15-40 % only (0.040 -> 0.033, 0.050 -> 0.035). The
drift under load was not dtype-specific (the in-job fp32 probe tracked the bf16 configuration best, +0.80). So the
probe is read only where LLMPERF_SPEED_PROBE asks for it (the drift check) and nothing is normalised by it.

The workload (WORKLOAD), one thread, fp32, process CPU time (the thread's own work, not the time it waited for
a core someone else held), each part the median of PART_REPS repetitions after one warm-up:
- `gemm_s`: 12 products of 256 x 256 matrices (compute-bound; 0.4 GFLOP);
- `sweep_s`: 8 copies of 1 MiB into 1 MiB (cache-resident traffic, as the activations of a small step);
- `dispatch_s`: 1000 tiny eager ops (torch's per-op dispatch, the dominant cost of small CPU training steps).
The reading is `cpu_s`, the sum of these three medians (~6 ms). Recorded beside it with `diagnostics`, not
counted: `dram_sweep_s`, a copy of 32 MiB into 32 MiB. In an earlier version it was counted, and moved 2.6-5.4 ms
between readings while another program ran on the other core, while four runs of testbed configuration 1 took
59.6-59.8 ms of CPU time per step: it measures the neighbours' memory traffic, not the speed the step sees.
A reading costs ~50 ms of CPU time (50-150 ms of wall time on a loaded machine). `speed_ratio` compares two readings
taken with the same number of concurrent copies (`concurrent`: ranks of the job on the machine running it at
once share caches and memory bandwidth).
With LLMPERF_SPEED_PROBE set (`hidden,heads,seq,mbs`), the hook's reading (and no other: not the profile's) also
times the speed probe of those GPT-layer shapes in fp32 and bf16 (instrument/speed_probe.py, at most PROBE_LIMIT_S
of wall time) into `extra.probe`, not counted in `cpu_s` or `wall_s`: it carries the probe from inside the ranks
(benchmarks/bench_cpu_testbed.py --drift-check sets it). Unset, nothing of the probe is imported or run.
torch is imported inside the functions only.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping, Sequence

WORKLOAD = "v2: 12x gemm 256^3 + 8x copy 1 MiB + 1000 tiny adds; fp32, 1 thread, process CPU time, median of 7"
"""Readings are comparable only when their WORKLOAD strings are equal."""
PART_REPS = 7
GEMM_N, GEMM_REPEAT = 256, 12
SWEEP_ELEMS, SWEEP_REPEAT = 1 << 18, 8
"""fp32 elements copied (1 MiB read + 1 MiB written), times."""
DRAM_SWEEP_ELEMS = 8 << 20
"""fp32 elements of the recorded, uncounted copy (32 MiB read + 32 MiB written)."""
COUNTED_PARTS = ("gemm_s", "sweep_s", "dispatch_s")
DISPATCH_OPS = 1000
HOOK_WHERE = "hook"
"""`where` of the step hook's reading (instrument/recorder.py): the only one that times the speed probe."""
PROBE_ENV = "LLMPERF_SPEED_PROBE"
"""`hidden,heads,seq,mbs`: the hook's reading also times the speed probe of those shapes (speed_probe.py). Unset,
the probe's module is not even imported."""


@dataclass(frozen=True)
class ReferenceReading:
    """One timing of the reference workload."""

    cpu_s: float
    """Sum of the parts' medians, process CPU seconds: the machine speed indicator (lower = faster)."""
    parts_s: Mapping[str, float]
    """{gemm_s, sweep_s, dispatch_s}: the median of each part (and dram_sweep_s, not in cpu_s, with diagnostics)."""
    wall_s: float
    """Wall seconds of the whole reading, repetitions included (for the record)."""
    time_unix_s: float
    """When the reading ended."""
    concurrent: int = 1
    """Copies of the workload running at once on this machine (ranks of a job on the node)."""
    load_avg_1m: float | None = None
    """1-minute load average when the reading ended."""
    workload: str = WORKLOAD
    """What was timed (module docstring)."""
    where: str = ""
    """Which moment it describes: `profile-start`, `framework-fp32-before`, `hook`, `before-run`, ..."""
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "parts_s": dict(self.parts_s), "extra": dict(self.extra)}


def reading_from_json(raw: Any) -> ReferenceReading | None:
    """A reading written by `to_json`, or None when `raw` is not one (older files, another workload version)."""
    if not isinstance(raw, Mapping) or raw.get("workload") != WORKLOAD:
        return None
    try:
        cpu_s = float(raw["cpu_s"])
        if not cpu_s > 0:
            return None
        return ReferenceReading(cpu_s, {str(k): float(v) for k, v in dict(raw.get("parts_s") or {}).items()},
                                float(raw.get("wall_s") or 0.0), float(raw.get("time_unix_s") or 0.0),
                                int(raw.get("concurrent") or 1), _float_or_none(raw.get("load_avg_1m")), WORKLOAD,
                                str(raw.get("where") or ""), dict(raw.get("extra") or {}))
    except (KeyError, TypeError, ValueError):
        return None


def _float_or_none(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _median_cpu_s(fn: Callable[[], Any]) -> float:
    fn()
    times = []
    for _ in range(PART_REPS):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return statistics.median(times)


def _parts(diagnostics: bool) -> dict[str, Callable[[], Any]]:
    import torch

    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(GEMM_N, GEMM_N, generator=gen), torch.randn(GEMM_N, GEMM_N, generator=gen)
    src, dst = torch.full((SWEEP_ELEMS,), 1.5), torch.empty(SWEEP_ELEMS)
    x = torch.ones(64)

    def gemm() -> None:
        for _ in range(GEMM_REPEAT):
            torch.mm(a, b)

    def dispatch() -> None:
        y = x
        for _ in range(DISPATCH_OPS):
            y = y + 1.0

    def sweep() -> None:
        for _ in range(SWEEP_REPEAT):
            dst.copy_(src)

    parts = {"gemm_s": gemm, "sweep_s": sweep, "dispatch_s": dispatch}
    if diagnostics:
        big_src, big_dst = torch.full((DRAM_SWEEP_ELEMS,), 1.5), torch.empty(DRAM_SWEEP_ELEMS)
        parts["dram_sweep_s"] = lambda: big_dst.copy_(big_src)
    return parts


def measure_reference(where: str = "", concurrent: int = 1, diagnostics: bool = False) -> ReferenceReading:
    """Time the reference workload in this process on one torch thread (the job's thread count is restored);
    with `diagnostics` also the uncounted DRAM copy (module docstring)."""
    import torch

    threads = torch.get_num_threads()
    wall0 = time.perf_counter()
    try:
        if threads != 1:
            torch.set_num_threads(1)
        parts = {name: _median_cpu_s(fn) for name, fn in _parts(diagnostics).items()}
    finally:
        if threads != 1:
            torch.set_num_threads(threads)
    wall_s = time.perf_counter() - wall0
    return ReferenceReading(sum(parts[k] for k in COUNTED_PARTS), parts, wall_s, time.time(), concurrent,
                            os.getloadavg()[0], WORKLOAD, where, _hook_probe() if where == HOOK_WHERE else {})


def _hook_probe() -> dict[str, Any]:
    """{"probe": reading} when PROBE_ENV names a spec (speed_probe.probe_from_env: bounded, never raises), else {}."""
    text = os.environ.get(PROBE_ENV)
    if not text:
        return {}
    from llmperf_hook.instrument.speed_probe import probe_from_env

    return {"probe": probe_from_env({PROBE_ENV: text})}


def _child_code(start_unix_s: float, concurrent: int, where: str) -> str:
    return ("import json, time\nfrom llmperf_hook.instrument.reference_speed import measure_reference\n"
            f"time.sleep(max(0.0, {start_unix_s!r} - time.time()))\n"
            f"print(json.dumps(measure_reference({where!r}, {concurrent}).to_json()))")


def measure_reference_concurrent(copies: int, where: str = "", start_delay_s: float = 4.0) -> list[ReferenceReading]:
    """`copies` child processes (one thread each) that all start the workload at the same moment (after their
    imports): what one rank reads while the other ranks of a job on this machine read too."""
    start = time.time() + start_delay_s
    env = dict(os.environ, OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, "-c", _child_code(start, copies, where)], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True, env=env) for _ in range(copies)]
    out = []
    for proc in procs:
        text = proc.communicate(timeout=120)[0]
        ok = proc.returncode == 0 and text.strip()
        reading = reading_from_json(json.loads(text.strip().splitlines()[-1])) if ok else None
        if reading is not None:
            out.append(reading)
    return out


def median_cpu_s(readings: Sequence[ReferenceReading], concurrent: int = 1) -> float | None:
    """Median `cpu_s` of the readings taken with `concurrent` copies (None when there are none)."""
    values = [r.cpu_s for r in readings if r.concurrent == concurrent and r.workload == WORKLOAD]
    return statistics.median(values) if values else None


def speed_ratio(now_cpu_s: float, reference_cpu_s: float) -> float:
    """How much slower the machine is now than at the reference (1.10 = the workload takes 10 % longer now)."""
    return now_cpu_s / reference_cpu_s


def normalise_to_reference(measured_s: float, now_cpu_s: float, reference_cpu_s: float) -> float:
    """`measured_s` as it would have been at the reference's machine speed: measured x speed_now / speed_then
    (speed = 1 / the workload's time)."""
    return measured_s / speed_ratio(now_cpu_s, reference_cpu_s)


PROFILE_FILE_NAME = "reference_speed.json"
"""Written by `llmperf profile --device cpu` next to the profile's profile.json."""
PROFILE_FORMAT = "llmperf-reference-speed"


def readings_in(raw: Any) -> list[ReferenceReading]:
    """The readings of this workload in a JSON list (others skipped)."""
    return [r for r in (reading_from_json(x) for x in (raw if isinstance(raw, list) else [])) if r is not None]


def profile_reference_doc(readings: Sequence[ReferenceReading]) -> dict[str, Any]:
    """reference_speed.json: every reading and, per number of concurrent copies, their median `cpu_s`; the
    spread (largest / smallest alone) says how much the machine drifted while the profile was taken."""
    alone = [r.cpu_s for r in readings if r.concurrent == 1]
    return {"format": PROFILE_FORMAT, "workload": WORKLOAD,
            "measured_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "reference_cpu_s": {str(n): median_cpu_s(readings, n) for n in sorted({r.concurrent for r in readings})},
            "drift_during_profile": max(alone) / min(alone) if alone else None,
            "readings": [r.to_json() for r in readings]}


def profile_reference_cpu_s(doc: Any, concurrent: int = 1) -> float | None:
    """The profile's reference reading for `concurrent` copies (None when it has none for that count, or was
    written for another workload)."""
    if not isinstance(doc, Mapping) or doc.get("workload") != WORKLOAD:
        return None
    value = (doc.get("reference_cpu_s") or {}).get(str(concurrent))
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def read_profile_reference(hardware_name: str) -> dict[str, Any] | None:
    """reference_speed.json of the hardware's fitted profile ($LLMPERF_HOME first), or None."""
    from llmperf_hook.predict.fitted import profile_dirs

    for directory in profile_dirs(hardware_name):
        if (directory / "profile.json").is_file():
            try:
                doc = json.loads((directory / PROFILE_FILE_NAME).read_text())
            except (OSError, ValueError):
                return None
            return doc if isinstance(doc, dict) else None
    return None
