"""What the CPU testbed benchmark runs on (benchmarks/bench_cpu_testbed.py, step 1): the CPU profile and comm
model of this machine, re-measured when stale, the cluster file, the homes each phase refines into, and the
environment and launcher of its jobs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Sequence

from testbed_configs import CLUSTER, DTYPES, REPO


def deepspeed_buffers_removed(port: int) -> Any:
    """tests/deepspeed_shm.py's context manager: the job's /dev/shm buffers go once it has ended."""
    sys.path.insert(0, str(REPO / "tests"))
    from deepspeed_shm import deepspeed_buffers_removed as removed

    return removed(port)


def base_env(home: Path) -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", DS_ACCELERATOR="cpu", LLMPERF_HOME=str(home), PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def llmperf(args: list[str], env: dict[str, str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llmperf_hook", *args], env=env, text=True, **kw)


def profile_usable(home: Path, dtype: str) -> str | None:
    """None when the CPU profile of `home` serves `dtype` with this llmperf's features and carries the measured
    framework overhead; else why not (then `llmperf profile` refits it from the stored samples)."""
    path = home / "profiles" / CLUSTER / "framework_overhead.json"
    if (home / "profiles" / CLUSTER / "profile.json").is_file():  # the speed the profile was taken at
        from llmperf_hook.instrument.reference_speed import PROFILE_FILE_NAME, profile_reference_cpu_s

        try:
            doc = json.loads((home / "profiles" / CLUSTER / PROFILE_FILE_NAME).read_text())
        except (OSError, ValueError):
            doc = None
        if profile_reference_cpu_s(doc, 1) is None:
            return "no machine-speed reference recorded with the profile (instrument/reference_speed.py)"
    if path.is_file():  # measured by a method whose steps differ (wall-time samples, correlated fit): profile again
        from llmperf_hook.profile.cpu_framework import STEP_VERSIONS

        if json.loads(path.read_text()).get("format_version", 1) < min(STEP_VERSIONS):
            return "framework cost measured by an older method"
    code = ("import sys\nfrom llmperf_hook.predict.fitted import find_profile\n"
            "from llmperf_hook.predict.cpu_framework import find_cpu_framework_cost\n"
            f"p = find_profile({CLUSTER!r}, {dtype!r})\n"
            "sys.exit(0 if p is not None and find_cpu_framework_cost(" f"{CLUSTER!r}, {dtype!r}) else 3)")
    done = subprocess.run([sys.executable, "-c", code], env=base_env(home), capture_output=True, text=True)
    if done.returncode == 0:
        return None
    return done.stderr.strip().splitlines()[-1][:160] if done.stderr.strip() else "missing, or no framework overhead"


def ensure_profiles(home: Path, budget_min: float, load_at_start: float) -> None:
    env = base_env(home)
    for dtype in ("fp32", "bf16"):
        why = profile_usable(home, dtype)
        if why is None:
            print(f"  CPU profile {CLUSTER} ({dtype}): reused from {home / 'profiles' / CLUSTER}")
            continue
        print(f"  CPU profile {CLUSTER} ({dtype}): {why}; llmperf profile --device cpu --budget {budget_min} ...",
              flush=True)
        if dtype == "fp32":  # this benchmark's own home: a stale profile (other machine or method) is re-created
            shutil.rmtree(home / "profiles" / CLUSTER, ignore_errors=True)
        port = {"fp32": 29704, "bf16": 29705}[dtype]  # MASTER_PORT of its DeepSpeed engine measurement
        with deepspeed_buffers_removed(port):
            llmperf(["profile", "--device", "cpu", "--budget", str(budget_min), "--dtype", dtype, "--name", CLUSTER],
                    dict(env, MASTER_PORT=str(port)), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    comm = home / "profiles" / "comm" / CLUSTER / "comm_model.json"
    rounds = json.loads(comm.read_text()).get("provenance", {}).get("rounds") if comm.is_file() else None
    quiet = load_at_start <= (os.cpu_count() or 1)
    if comm.is_file() and rounds is None and not quiet:
        print(f"  comm model: fitted from one round per size, but the machine is busy now (load "
              f"{load_at_start:.2f}): reused from {comm}; rerun when quieter to refit it")
    elif not comm.is_file() or rounds is None:  # one trimmed mean per size (before session 9): refitted
        print("  comm model: torchrun --nproc-per-node 2 -m llmperf_hook profile --comm (interleaved rounds) ...",
              flush=True)
        subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
                        "29711", "-m", "llmperf_hook", "profile", "--comm", "--cluster-name", CLUSTER,
                        "--max-bytes", str(2 ** 25)], env=env, check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    else:
        print(f"  comm model: reused from {comm}")


FRAMEWORK_BOX_S = 240.0
"""Seconds per dtype the testbed gives its re-measurement of the framework cost. Not `llmperf profile --budget`'s
time box (cpu_framework.RESERVED_S, 120 s for both dtypes, sized for a profile command a user waits for): in 60 s a
dtype's DeepSpeed child has ~21 s to build its 16 engines (10 s at load 0.7, 23 s at load 6) and the rank-transport
children none (they need 45 s left), so the 21:20 file of 27 Nov had neither term for either dtype and the testbed
predicted its twelve 4-52 % low (MAPE 27.8 %; the 06:58 file, complete, 8.9 % on the same runs). A quiet machine
ends after cpu_framework_readings.MAX_READINGS readings, ~2 min per dtype; this bounds a loaded one."""

MAX_WALL_PER_CPU = 1.5
"""Largest median wall / CPU time of a file's in-process readings the testbed accepts. Above it the measuring process
shared its core with other programs for most of the time, and CPU time is not load-independent on this 2-vCPU guest:
per reading, compute_scale rose with it (bf16, 27 Nov: wall / CPU 1.0 -> 0.72-0.77, 2.6-5.4 -> 0.77-1.03) and the
reference rows' CPU time was x1.35 (bf16) / x1.18 (fp32) at load 9-12 against load 1.3-2 (/work/notes/h156.md);
quiet readings read 1.00-1.22."""


def framework_cost_gaps(path: Path, dtypes: Sequence[str]) -> list[str]:
    """What the framework cost file at `path` lacks for the testbed (cpu_framework_readings.time_box_notes: a dtype
    not measured, fewer than MIN_READINGS readings, the engine, concurrency or rank-transport term left out; and
    readings that mostly waited for a core, MAX_WALL_PER_CPU); [] when complete."""
    import statistics

    from llmperf_hook.profile.cpu_framework_readings import time_box_notes

    remedy = (f"this benchmark re-measures it in {FRAMEWORK_BOX_S:.0f} s per dtype when the load at its start is "
              f"<= the core count ({os.cpu_count() or 1}): rerun it when the machine is quieter")
    gaps = time_box_notes(path, dtypes, remedy)  # every dtype "not measured" when no file was written
    doc = json.loads(path.read_text()) if path.is_file() else {}
    for dtype, entry in sorted((doc.get("dtypes") or {}).items()):
        waits = [w for w in entry.get("reading_wall_per_cpu") or () if w]
        if waits and statistics.median(waits) > MAX_WALL_PER_CPU:
            gaps.append(f"framework cost {dtype}: its readings waited for a core (median wall / CPU time "
                        f"{statistics.median(waits):.2f} > {MAX_WALL_PER_CPU}): their CPU times are inflated by the "
                        f"other programs' use of the shared caches")
    return gaps


def missing_dtypes(path: Path) -> list[str]:
    """The dtypes the configurations train in (DTYPES) that the framework cost file at `path` lacks altogether."""
    held = (json.loads(path.read_text()).get("dtypes") or {}) if path.is_file() else {}
    return [dtype for dtype in DTYPES if dtype not in held]


def missing_dtype_caveats(path: Path) -> list[str]:
    """One line per dtype of DTYPES the file lacks: its configurations are scored on the operator profile alone. Not a
    stop: on an AVX2-only EPYC one bf16 reading takes ~2.5-3 min of CPU (torch's bf16 GEMM fallback, no oneDNN
    kernel), so no re-measurement in FRAMEWORK_BOX_S gets the MIN_READINGS a file needs, and a benchmark that stopped
    on it would never score here (/work/notes/h174.md, r65.md)."""
    return [f"framework cost {dtype}: not in {path.name} (no {dtype} reading ended within its box on this machine): "
            f"the {dtype} configurations are scored on the operator profile alone, without the framework's terms "
            f"(likely low); --remeasure-framework-cost on a quiet machine tries again, {FRAMEWORK_BOX_S:.0f} s a dtype"
            for dtype in missing_dtypes(path)]


def refresh_framework_cost(home: Path, load_at_start: float, remeasure: bool = False) -> None:
    """Re-measure the profile's framework cost (profile/cpu_framework.write_framework_overhead, both dtypes, in
    FRAMEWORK_BOX_S each) when it was measured on a busy machine (its recorded 1-minute load above the core count, or
    not recorded: files before session 9; the 18:13 one was measured at load 4-6), by older code (format before
    FORMAT_VERSION, a per-op-unit reading without its isolated ops: cpu_framework.isolated_difference_s, or engines
    measured all in one process: cpu_engine_cost.ENGINE_METHOD) or with a
    gap (framework_cost_gaps), and the machine is quiet now; the replaced file's steps stay in its history (the
    shrinkage's step-time drift). A dtype of DTYPES the file lacks is re-measured with the others when the machine is
    quiet (a dtype whose steps are slow here is read on cpu_reading_plan.py's light plan, which fits the box: bf16 on
    this AVX2-only EPYC, whose full readings did not) or when `remeasure` (--remeasure-framework-cost) asks; on a busy
    machine it is no gap (missing_dtype_caveats), and a re-measurement that still lacks it stops only when asked for.
    "Now" is the load when the benchmark started (the comm refit before this raises it
    by itself). A file with a gap stops the benchmark when the machine is too busy to re-measure it, and so does a
    re-measured file that still has one: its predictions would leave a term out (or carry a busy machine's CPU
    times), and scoring them measures the gap, not the model."""
    from llmperf_hook.profile.cpu_engine_cost import ENGINE_METHOD
    from llmperf_hook.profile.cpu_framework import FORMAT_VERSION
    from llmperf_hook.profile.cpu_framework_readings import put_back_replaced

    path = home / "profiles" / CLUSTER / "framework_overhead.json"
    doc, cores, now = json.loads(path.read_text()), os.cpu_count() or 1, load_at_start
    held = sorted(doc["dtypes"])
    dtypes = sorted(set(held) | (set(DTYPES) if remeasure or now <= cores else set()))
    # the load when its measurement began (its own children raise the later readings of the 1-minute average)
    load = (doc.get("loads_1m") or [doc.get("load_avg_1m")])[0]
    gaps = framework_cost_gaps(path, dtypes)
    # this code's per-op-unit reading (paired steps against their isolated ops) leaves tiny_isolated_diff_s, and its
    # engine reading (one process per engine: the page faults a real job pays) engine_method
    current = doc.get("format_version", 1) >= FORMAT_VERSION and not gaps and all(
        entry.get("tiny_isolated_diff_s") for entry in doc["dtypes"].values()) \
        and doc.get("engine_method") == ENGINE_METHOD
    if load is not None and load <= cores and current and not remeasure:
        print(f"  framework cost measured at load {load:.2f} (<= {cores} cores): kept")
        return
    was = ("an unrecorded load" if load is None else f"load {load:.2f}") + ("" if current else " by older code"
                                                                             " or without every term")
    lacking = [dt for dt in dtypes if dt not in held]
    was += f" (no {' or '.join(lacking)} entry)" if lacking else ""
    if doc.get("engine_method") != ENGINE_METHOD:  # the bf16 steps it predicts are ~15 % low (/work/notes/h159.md)
        was += " (its DeepSpeed engines measured all in one process, without the page faults a real job pays)"
    if now > cores:
        busy = f"framework cost measured at {was}, but the machine is busy now (load {now:.2f} > {cores} cores)"
        if gaps or remeasure:  # its predictions would leave a term out: the score would measure the gap (21:18 run)
            why = "--remeasure-framework-cost asks for a re-measurement" if remeasure else \
                "the file has gaps a re-measurement would fill"
            raise SystemExit(f"{busy}, and {why}; rerun when quieter" + "".join("\n  " + g for g in gaps))
        print(f"  {busy}: kept; rerun when quieter to re-measure it")
        return
    was += " (--remeasure-framework-cost)" if remeasure else ""
    print(f"  framework cost measured at {was}: re-measuring it now (load {now:.2f}, up to {FRAMEWORK_BOX_S:.0f} s "
          f"per dtype) ...", flush=True)
    code = ("import sys, time\nfrom pathlib import Path\n"
            "from llmperf_hook.profile.cpu_framework import write_framework_overhead\n"
            f"write_framework_overhead(Path(sys.argv[1]), {CLUSTER!r}, sys.argv[2:], 1, "
            f"time.perf_counter() + {FRAMEWORK_BOX_S} * len(sys.argv[2:]), keep_earlier=True)")
    with deepspeed_buffers_removed(29706):
        done = subprocess.run([sys.executable, "-c", code, str(path.parent), *dtypes],
                              env=dict(base_env(home), MASTER_PORT="29706"), stdout=subprocess.DEVNULL)
    if done.returncode != 0:  # killed or failed mid-way: write_framework_overhead had moved the earlier file aside
        put_back_replaced(path)
        there = json.loads(path.read_text()).get("measured_utc") if path.is_file() else None
        raise SystemExit(f"the framework cost re-measurement exited with status {done.returncode} (its error is "
                         f"above); {path} is " + (f"the file measured {there}" if there else "missing")
                         + " (the earlier one was measured " + str(doc.get("measured_utc")) + "): rerun when quieter")
    fresh = json.loads(path.read_text())
    if fresh.get("measured_utc") == doc.get("measured_utc"):  # no reading of any dtype ended in its box
        raise SystemExit(f"the framework cost re-measurement got no reading of any dtype within its "
                         f"{FRAMEWORK_BOX_S:.0f} s per dtype (the machine got busy); the earlier file (measured "
                         f"{doc.get('measured_utc')}, {was}) is kept as it was: rerun when quieter")
    print(f"  framework cost re-measured at load {fresh['load_avg_1m']:.2f} ({len(fresh.get('history', []))} "
          f"earlier measurement(s) of its steps kept)")
    still_missing = [] if remeasure else missing_dtypes(path)  # unasked, a dtype still missing is scored with a caveat
    gaps = framework_cost_gaps(path, [dt for dt in dtypes if dt in held or dt not in still_missing])
    if gaps:
        raise SystemExit("the re-measured framework cost is incomplete or measured while its process waited for a "
                         "core, so the testbed's predictions would not be the model's:\n  " + "\n  ".join(gaps)
                         + f"\n(file: {path}; the machine was too busy for the {FRAMEWORK_BOX_S:.0f} s per dtype of "
                         f"FRAMEWORK_BOX_S: rerun when quieter)")


def write_cluster(home: Path) -> Path:
    """Two ranks on this machine; gloo through shared memory/loopback (the comm model, when fitted, replaces
    the alpha-beta numbers: bandwidth ~2 GB/s and ~50 us per collective are order-of-magnitude fallbacks).
    host_overhead_per_op_us is the CPU profile's measured framework time per issued op (the least over its
    dtypes): on a CPU that time is already inside every op (predict/cpu_framework.py), so the launch queue of
    predict/host_issue.py never finds the host behind and adds nothing (no double count)."""
    per_unit_us = min(v["per_unit_s"] for v in json.loads((home / "profiles" / CLUSTER / "framework_overhead.json")
                                                           .read_text())["dtypes"].values()) * 1e6
    path = home / "clusters" / f"{CLUSTER}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"name: {CLUSTER}\ngpu: {CLUSTER}\ngpus_per_node: 2\nintra_node_bandwidth_GBps: 2\n"
                    f"inter_node_bandwidth_GBps: 1\nintra_node_latency_us: 50\n"
                    f"host_overhead_per_op_us: {max(per_unit_us, 1e-3):.3f}\n"
                    f"description: this machine, 2 ranks of one thread (DeepSpeed on CPU, gloo)\n")
    return path


def print_framework_cost(home: Path) -> None:
    from llmperf_hook.profile.cpu_framework_readings import describe_spread

    doc = json.loads((home / "profiles" / CLUSTER / "framework_overhead.json").read_text())
    print(f"  framework cost measured {doc['measured_utc']} (profile/cpu_framework.py):")
    spread = describe_spread(doc)
    if spread:
        print("    " + spread.replace("\n", "\n    "))
    for dtype, v in sorted(doc["dtypes"].items()):
        ds = ", ".join(f"z{z} {d['per_step_s'] * 1e3:.1f} ms + {d['per_param_s'] * 1e9:.1f} ns/param"
                       + (f" ({d['partition_fraction']:.0%} on the partition)" if d.get("partition_fraction") else "")
                       for z, d in sorted(v.get("deepspeed_step", {}).items()))
        print(f"    {dtype}: {v['per_unit_s'] * 1e6:.1f} us/op unit, {v.get('per_byte_s', 0) * 1e12:.0f} ps/byte, "
              f"ops x{v['compute_scale']:.2f}, Adam {v['optimizer_per_tensor_s'] * 1e6:.0f} us/tensor + "
              f"{v['optimizer_per_param_s'] * 1e9:.1f} ns/param, 2 ranks x"
              f"{v.get('concurrency_slowdown', {}).get('2', 1.0):.2f}; DeepSpeed {ds}")
    for caveat in missing_dtype_caveats(home / "profiles" / CLUSTER / "framework_overhead.json"):
        print(f"  {caveat}")


def print_profile_reference(home: Path) -> float:
    """The profile's machine-speed reading alone (reference_speed.json), printed with its readings' spread."""
    from llmperf_hook.instrument.reference_speed import PROFILE_FILE_NAME, profile_reference_cpu_s, readings_in

    doc = json.loads((home / "profiles" / CLUSTER / PROFILE_FILE_NAME).read_text())
    ref = profile_reference_cpu_s(doc, 1)
    readings = readings_in(doc.get("readings"))
    print(f"  machine speed while profiling ({doc['measured_utc']}): reference {ref * 1e3:.2f} ms alone (median of "
          f"{sum(r.concurrent == 1 for r in readings)} readings, drift x{doc['drift_during_profile']:.3f} during the "
          f"profile), " + ", ".join(f"{n} at once {v * 1e3:.2f} ms" for n, v in doc["reference_cpu_s"].items() if n != "1"))
    return ref


def shared_home(home: Path, name: str) -> Path:
    """A home with its own (empty) store that sees the profiles, hardware and cluster files of `home`."""
    sub = home / name
    if sub.exists():
        shutil.rmtree(sub)
    sub.mkdir(parents=True)
    for part in ("profiles", "hardware", "clusters"):
        (sub / part).symlink_to(home / part)
    return sub
