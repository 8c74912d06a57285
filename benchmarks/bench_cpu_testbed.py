"""Predicted vs measured step time of real DeepSpeed jobs on this machine's CPUs, before and after refinement.

    python benchmarks/bench_cpu_testbed.py [--home DIR] [--profile-budget 4] [--steps 26] [--repeats 5] [--calibrate 1,9]
    python benchmarks/bench_cpu_testbed.py --replay HOME/records/testbed-<time>.json

1. A CPU profile from `llmperf profile --device cpu --name cpu-testbed` (fp32 and bf16; reused when present in
   --home and usable by this llmperf, else refitted: the samples stay in the store). The profile carries the
   framework cost measured on this machine (profile/cpu_framework.py: per issued op, per byte, in-step operator
   scale, Adam per tensor, DeepSpeed engine per ZeRO stage, concurrent ranks); the cluster file's
   host_overhead_per_op_us is its per-op figure. And, with `llmperf profile --comm` under torchrun (2 ranks, gloo), the comm model of the cluster
   `cpu-testbed`, described by a cluster file written to --home/clusters/cpu-testbed.yaml (2 "GPUs" = 2 ranks of
   one thread each on this machine; gpu = the measured cpu-testbed hardware file).
2. Twelve testbed configurations (layers, hidden, sequence, micro-batch, ZeRO 0-3, 1-2 ranks, fp32/bf16), each
   launched for real with `deepspeed` (DS_ACCELERATOR=cpu, gloo, one thread per rank) through
   `llmperf run --instrument N --stop-after N`: the measured step time is the median of the timed steps of the
   slowest rank, as the hook recorded them (24 of the 26 steps; 8 of 10 before session 8, when the 8-step median's
   own sampling error, 0.012-0.065 in log by bootstrap over each run's steps, was ~40 % of the run-to-run
   variance). A run whose wall time exceeds its ranks' CPU time by more than
   QUIET_WALL_PER_CPU (other programs held the cores) is run again (--tries; the least contended run is kept,
   chosen on wall / CPU time alone, and flagged CONTENDED when none was quiet). These measurement runs refine
   into a throwaway store (--home/measure), so they never calibrate what is evaluated. With --repeats P (default
   5) the twelve are measured in P passes whose order is rotated (testbed_record.py: pass p starts at
   configuration p x 12 / P), and each configuration is scored on the median of its runs' medians: one
   configuration moves x1.06 (median) and up to x1.37 between runs minutes apart (session 11), which a mean of two
   passes scores. The spread (max / min) and load of each configuration's runs are printed beside its error, and
   the runs split into what a whole pass shared (the machine's state over minutes) and what a run had alone.
3. Before refinement: `llmperf_hook.api.predict_command` for each configuration on cluster cpu-testbed with an
   empty store (--home/eval); MAPE over the twelve.
4. Refinement: ONE configuration (--calibrate, index; several indices are each evaluated on the same measurements,
   each in a fresh evaluation store) is run through `llmperf run --instrument N` with the eval store in the
   middle pass, in its place of the rotation (its automatic `refine` fits the (hardware, cluster, framework)
   calibration; a run whose ranks waited for a core, wall > QUIET_WALL_PER_CPU x CPU time, is calibrated from its
   CPU time as a noisier reading, refine/contention.py; one try); its reference is the median of its OTHER runs,
   measured in the same rotation minutes before and after it; then every configuration is predicted again. The calibration knows what it saw (refine/shrinkage.py): the
   instrumented configuration gets its own ratio, the eleven others the shared part shrunk by empirical Bayes.
   The instrumented configuration's error is printed two ways: against its measurement runs of step 2 (the
   median of the passes, independent of the calibration run: THE TARGET USES THIS ONE) and against the
   calibration run's own steps (what the user sees in `llmperf refine`'s "predicted after"). The gap between
   them is this machine's run-to-run drift, which no calibration can remove. MAPE on the eleven others, beside
   what the one-run ratio applied in full to every configuration (refine before shrinkage) and session 7's
   shrinkage (10 % cross-cluster prior, op-level sd_config: k = 0.50) would have made of them.
   Each run's figures, and what was learnt from them session by session, are in
   benchmarks/results/cpu_testbed_history.md.
Machine load (1-minute load average) is recorded per run and printed; medians everywhere.
5. Every run's raw step times (each rank's wall and CPU time per step), load and the predictions saved at launch go
   to a JSON record (--record, default HOME/records/); `--replay FILE` scores a record again with this tree's
   refine, nothing run: every run of every configuration taken in turn as the one calibration run (12 x P
   choices), the distribution of the instrumented configuration's error and of the others' MAPE, and how often
   the others got worse than before refinement (testbed_replay.py).

Diagnostics: --spread-check R (run-to-run spread as launched and with DeepSpeed's --bind_cores_to_rank),
--drift-check R (the reference workload's reading against the step times: instrument/reference_speed.py),
--rescore LOG... (re-score saved outputs with the current priors). Their findings are in the history file.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from testbed_record import (RECORD_FORMAT, calibration_pass, load_record, mape, pass_effects, pct, rank_steps,
                            reference_runs, rotation, save_record)
from testbed_rescore import (last_calibration_run, read_log, record_from_log,  # noqa: F401 - tests read the parser here
                             rescore)

REPO = Path(__file__).resolve().parents[1]
TRAIN_GPT = REPO / "examples" / "cpu-testbed" / "train_gpt.py"
CLUSTER = "cpu-testbed"
TARGETS = {"before": 10.0, "instrumented": 3.0, "others": 8.0}
QUIET_WALL_PER_CPU = {1: 1.1, 2: 1.25}
"""Step wall / CPU time of the slowest rank above which a run counts as contended (other programs held the
cores): one rank computes all the time; two ranks also wait for each other in gloo: 1.03-1.17 in the
quietest runs on this machine (load ~1.5), 1.3-2.0 while another program held a core. The calibration run's
refine marks a run above the same limit contended (LLMPERF_REFINE_MAX_WALL_PER_CPU) and calibrates from its CPU
time (refine/contention.py)."""


@dataclass(frozen=True)
class TestbedConfig:
    layers: int
    hidden: int
    heads: int
    seq: int
    mbs: int
    zero: int
    ranks: int
    dtype: str
    accum: int = 1
    vocab: int = 1024
    bind: bool = False
    """Launch with DeepSpeed's --bind_cores_to_rank (numactl -C: each rank on its own cores; --bind-cores)."""

    def label(self) -> str:
        acc = f" ga{self.accum}" if self.accum > 1 else ""
        return (f"L{self.layers} h{self.hidden} s{self.seq} mbs{self.mbs}{acc} z{self.zero} "
                f"{self.ranks}r {self.dtype}" + (" bound" if self.bind else ""))

    def ds_config(self) -> dict:
        cfg = {"train_micro_batch_size_per_gpu": self.mbs, "gradient_accumulation_steps": self.accum,
               "train_batch_size": self.mbs * self.accum * self.ranks, "zero_optimization": {"stage": self.zero},
               "steps_per_print": 10 ** 9}
        if self.dtype == "bf16":
            cfg["bf16"] = {"enabled": True}
        return cfg

    def argv(self, ds_json: Path, port: int) -> list[str]:
        flags = ["--num-layers", self.layers, "--hidden-size", self.hidden, "--num-attention-heads", self.heads,
                 "--seq-length", self.seq, "--max-position-embeddings", self.seq, "--micro-batch-size", self.mbs,
                 "--global-batch-size", self.mbs * self.accum * self.ranks, "--vocab-size", self.vocab,
                 "--no-pipeline-parallel"]
        flags += ["--bf16"] if self.dtype == "bf16" else []
        bind = ["--bind_cores_to_rank"] if self.bind else []
        return ["deepspeed", "--num_gpus", str(self.ranks), *bind, "--master_port", str(port), str(TRAIN_GPT),
                "--deepspeed_config", str(ds_json), *map(str, flags), "--train-iters", "1000"]


CONFIGS = (
    TestbedConfig(2, 128, 4, 128, 2, 0, 1, "fp32"),
    TestbedConfig(2, 256, 4, 128, 2, 1, 2, "fp32"),
    TestbedConfig(4, 128, 4, 256, 1, 1, 2, "fp32"),
    TestbedConfig(2, 256, 8, 256, 2, 2, 2, "fp32"),
    TestbedConfig(1, 512, 8, 128, 2, 3, 2, "fp32"),
    TestbedConfig(4, 256, 4, 64, 4, 0, 2, "fp32"),
    TestbedConfig(2, 128, 4, 512, 1, 2, 1, "fp32"),
    TestbedConfig(3, 192, 4, 128, 4, 1, 1, "fp32"),
    TestbedConfig(2, 128, 4, 128, 2, 1, 2, "fp32", accum=2),
    TestbedConfig(2, 128, 4, 128, 2, 1, 2, "bf16"),
    TestbedConfig(2, 256, 4, 64, 2, 0, 1, "bf16"),
    TestbedConfig(1, 256, 4, 256, 1, 2, 2, "bf16"),
)


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


def refresh_framework_cost(home: Path, load_at_start: float) -> None:
    """Re-measure the profile's framework cost (profile/cpu_framework.write_framework_overhead, both dtypes,
    ~2 min quiet) when it was measured on a busy machine (its recorded 1-minute load above the core count, or not
    recorded: files before session 9; the 18:13 one was measured at load 4-6) or as one reading (format 2, before
    session 10: cpu_framework_readings.py) and the machine is quiet now; the replaced file's steps stay in its
    history (the shrinkage's step-time drift). "Now" is the load when the benchmark started (the comm refit
    before this raises it by itself)."""
    from llmperf_hook.profile.cpu_framework import FORMAT_VERSION

    path = home / "profiles" / CLUSTER / "framework_overhead.json"
    doc, cores, now = json.loads(path.read_text()), os.cpu_count() or 1, load_at_start
    # the load when its measurement began (its own children raise the later readings of the 1-minute average)
    load, current = (doc.get("loads_1m") or [doc.get("load_avg_1m")])[0], doc.get("format_version", 1) >= FORMAT_VERSION
    if load is not None and load <= cores and current:
        print(f"  framework cost measured at load {load:.2f} (<= {cores} cores): kept")
        return
    was = ("an unrecorded load" if load is None else f"load {load:.2f}") + ("" if current else " as one reading")
    if now > cores:
        print(f"  framework cost measured at {was}, but the machine is busy now (load {now:.2f} > {cores} "
              f"cores): kept; rerun when quieter to re-measure it")
        return
    print(f"  framework cost measured at {was}: re-measuring it now (load {now:.2f}) ...", flush=True)
    code = ("import sys\nfrom pathlib import Path\nfrom llmperf_hook.profile.cpu_framework import write_framework_overhead\n"
            f"write_framework_overhead(Path(sys.argv[1]), {CLUSTER!r}, sorted(sys.argv[2:]), 1)")
    with deepspeed_buffers_removed(29706):
        subprocess.run([sys.executable, "-c", code, str(path.parent), *doc["dtypes"]],
                       env=dict(base_env(home), MASTER_PORT="29706"), check=True, stdout=subprocess.DEVNULL)
    fresh = json.loads(path.read_text())
    print(f"  framework cost re-measured at load {fresh['load_avg_1m']:.2f} ({len(fresh.get('history', []))} earlier "
          f"measurement(s) of its steps kept)")


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


def shared_home(home: Path, name: str) -> Path:
    """A home with its own (empty) store that sees the profiles, hardware and cluster files of `home`."""
    sub = home / name
    if sub.exists():
        shutil.rmtree(sub)
    sub.mkdir(parents=True)
    for part in ("profiles", "hardware", "clusters"):
        (sub / part).symlink_to(home / part)
    return sub


def instrumented_run(cfg: TestbedConfig, home: Path, work: Path, steps: int, port: int) -> dict:
    """`llmperf run --instrument N --stop-after N` of one configuration; measured step time and load."""
    from llmperf_hook.refine.run_records import read_run_dir, summarize_job

    ds_json = work / "ds.json"
    work.mkdir(parents=True, exist_ok=True)
    ds_json.write_text(json.dumps(cfg.ds_config()))
    run_dir = work / "run"
    ref_before = reference_now("before-run")
    load, started = os.getloadavg()[0], time.time()
    # refine calibrates only from a run as quiet as the benchmark's measurements (refine_run.max_wall_per_cpu)
    env = dict(base_env(home), LLMPERF_REFINE_MAX_WALL_PER_CPU=str(QUIET_WALL_PER_CPU[min(cfg.ranks, 2)]))
    with deepspeed_buffers_removed(port):  # DeepSpeed never unlinks its /dev/shm all-reduce buffers
        done = llmperf(["run", "--cluster", CLUSTER, "--instrument", str(steps), "--stop-after", str(steps),
                        "--run-dir", str(run_dir), "--", *cfg.argv(ds_json, port)], env,
                       capture_output=True, cwd=str(work), timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"{cfg.label()}: exit {done.returncode}\n{done.stderr[-3000:]}")
    ref_after = reference_now("after-run")
    run = read_run_dir(run_dir)
    job_id = run.job_ids()[0]
    job = summarize_job(run.records, job_id)
    prediction = run.prediction_for(job_id) or {}
    return {"measured_s": job.step_time_s, "cpu_s": job.cpu_time_s, "load_before": load, "load_during": job.load_avg_1m,
            "hook_reference_s": job.reference_cpu_s, "ref_before_s": ref_before["cpu_s"], "ref_after_s": ref_after["cpu_s"],
            "ref_now_s": (ref_before["cpu_s"] + ref_after["cpu_s"]) / 2, "started_unix_s": started,
            "steps": job.num_timed_steps, "step_times_s": list(job.step_times_s), "job_id": job_id,
            "rank_steps": rank_steps(run.records, job_id),
            "prediction": {k: prediction.get(k) for k in ("uncalibrated_step_time_s", "step_time_s", "breakdown", "config")},
            "refine": done.stderr[done.stderr.find("llmperf refine"):].strip()}


def waited(cfg: TestbedConfig, m: dict) -> float:
    """How much the step's wall time exceeds its ranks' CPU time beyond what the job itself explains: 1 rank
    never waits (limit QUIET_WALL_PER_CPU[1]); 2 ranks wait for each other in gloo's collectives as well."""
    return (m["measured_s"] / m["cpu_s"] if m.get("cpu_s") else 1.0) / QUIET_WALL_PER_CPU[min(cfg.ranks, 2)]


def quiet_run(cfg: TestbedConfig, home: Path, work: Path, steps: int, port: int, tries: int) -> dict:
    """instrumented_run until the ranks did not wait for a core (waited() <= 1), at most `tries` runs; the
    run that waited least. The choice looks at wall / CPU time only, never at the prediction."""
    runs = []
    for attempt in range(1, tries + 1):
        runs.append(instrumented_run(cfg, home, work / f"try{attempt}", steps, port))
        if waited(cfg, runs[-1]) <= 1.0:
            break
    best = min(runs, key=lambda m: waited(cfg, m))
    return {**best, "tries": len(runs), "contended": waited(cfg, best) > 1.0}


def reference_now(where: str, diagnostics: bool = False) -> dict:
    """One reading of the reference workload in this process (instrument/reference_speed.py), alone."""
    from llmperf_hook.instrument.reference_speed import measure_reference

    return measure_reference(where, diagnostics=diagnostics).to_json()


def drift_check(home: Path, work: Path, indices: list[int], repeats: int, steps: int) -> None:
    """Does the reference track the testbed's step-time drift? The same configurations run `repeats` times,
    interleaved, the reference timed right before and after each run (with the uncounted DRAM copy); per
    configuration the Pearson correlation of log(step CPU time) with log(reference), for the counted reading
    and each part, and the run-to-run spread of the step CPU time raw and normalised (x reference of the first
    run / reference now)."""
    shutil.rmtree(work, ignore_errors=True)  # a reused run directory would hold an earlier job's records
    rows: dict[int, list[dict]] = {i: [] for i in indices}
    print(f"\n[drift check] configurations {indices}, {repeats} runs each, interleaved; reference before and after")
    for r in range(repeats):
        for i in indices:
            before = reference_now("before-run", True)
            m = instrumented_run(CONFIGS[i], home, work / f"d{i}-{r}", steps, 29600 + i)
            after = reference_now("after-run", True)
            parts = {k: (before["parts_s"][k] + after["parts_s"][k]) / 2 for k in before["parts_s"]}
            row = {**m, "ref": (before["cpu_s"] + after["cpu_s"]) / 2, **parts,
                   "change": abs(after["cpu_s"] - before["cpu_s"]) / before["cpu_s"]}
            rows[i].append(row)
            print(f"  run {r} config {i:2d}: step CPU {m['cpu_s'] * 1e3:7.2f} ms wall {m['measured_s'] * 1e3:7.2f} ms; "
                  f"reference {before['cpu_s'] * 1e3:.2f} -> {after['cpu_s'] * 1e3:.2f} ms (hook "
                  f"{(m['hook_reference_s'] or 0) * 1e3:.2f}; gemm {parts['gemm_s'] * 1e3:.2f}, sweep "
                  f"{parts['sweep_s'] * 1e3:.2f}, dispatch {parts['dispatch_s'] * 1e3:.2f}, DRAM copy (not counted) "
                  f"{parts['dram_sweep_s'] * 1e3:.2f}); load {m['load_before']:.2f}", flush=True)
    for i, data in rows.items():
        print_drift_summary(i, data)


def print_drift_summary(i: int, data: list[dict]) -> None:
    import math

    cpu = [math.log(d["cpu_s"]) for d in data]
    corr = {k: pearson(cpu, [math.log(d[k]) for d in data])
            for k in ("ref", "gemm_s", "sweep_s", "dispatch_s", "dram_sweep_s")}
    corr["contention (wall / CPU)"] = pearson(cpu, [math.log(d["measured_s"] / d["cpu_s"]) for d in data])
    hook = [d for d in data if d.get("hook_reference_s")]
    if len(hook) > 2:
        corr["hook reading"] = pearson([math.log(d["cpu_s"]) for d in hook], [math.log(d["hook_reference_s"]) for d in hook])
    ref = [math.log(d["ref"]) for d in data]
    norm = [c - x + ref[0] for c, x in zip(cpu, ref)]
    print(f"  config {i} ({CONFIGS[i].label()}), {len(data)} runs: corr(log step CPU, log x) for x = "
          + ", ".join(f"{k} {v:+.2f}" for k, v in corr.items())
          + f"; step CPU max/min raw {math.exp(max(cpu) - min(cpu)):.3f}, normalised {math.exp(max(norm) - min(norm)):.3f};"
          f" stdev of log raw {statistics.pstdev(cpu):.3f}, normalised {statistics.pstdev(norm):.3f}; reference "
          f"max/min {math.exp(max(ref) - min(ref)):.3f}, median change before->after {statistics.median(d['change'] for d in data):.1%}")


SHORT_TIMED_STEPS = 8
"""--spread-check scores each run also on its first 8 timed steps: what the earlier default --steps 10 timed."""


def spread_check(home: Path, work: Path, indices: list[int], rounds: int, steps: int) -> None:
    """The run-to-run spread of a configuration's measured step time as launched and with each rank bound to its
    own core (DeepSpeed --bind_cores_to_rank: numactl -C per local rank, OMP_NUM_THREADS = cores per rank), in
    `rounds` interleaved rounds (the order alternating); each run scored on its median over all timed steps and
    over the first SHORT_TIMED_STEPS, and the median of 2 and of 3 consecutive runs."""
    shutil.rmtree(work, ignore_errors=True)
    rows: dict[tuple[int, bool], list[dict]] = {(i, b): [] for i in indices for b in (False, True)}
    print(f"\n[spread check] configurations {indices}, {rounds} rounds, as launched and bound; {steps} steps per run")
    for r in range(rounds):
        for i in indices:
            for bind in ((False, True) if r % 2 == 0 else (True, False)):
                cfg = replace(CONFIGS[i], bind=bind)
                m = instrumented_run(cfg, home, work / f"s{i}-{int(bind)}-{r}", steps, 29600 + i + 20 * bind)
                rows[(i, bind)].append(m)
                print(f"  round {r} {cfg.label():40s} {m['measured_s'] * 1e3:8.2f} ms (first {SHORT_TIMED_STEPS}: "
                      f"{statistics.median(m['step_times_s'][:SHORT_TIMED_STEPS]) * 1e3:8.2f}) wall/CPU "
                      f"{m['measured_s'] / m['cpu_s']:.2f} load {m['load_before']:.2f}", flush=True)
    for (i, bind), runs in rows.items():
        label = replace(CONFIGS[i], bind=bind).label()
        full = [m["measured_s"] for m in runs]
        short = [statistics.median(m["step_times_s"][:SHORT_TIMED_STEPS]) for m in runs]
        pairs = [statistics.median(full[j:j + 2]) for j in range(0, len(full) - 1, 2)]
        triples = [statistics.median(full[j:j + 3]) for j in range(0, len(full) - 2, 3)]
        print(f"  {label:40s} sd of log step time: all timed steps {log_sd(full):.3f} (max/min x{max(full) / min(full):.3f}), "
              f"first {SHORT_TIMED_STEPS} {log_sd(short):.3f}, median of 2 runs {log_sd(pairs):.3f}, of 3 runs "
              f"{log_sd(triples):.3f}; median {statistics.median(full) * 1e3:.2f} ms")


def log_sd(values: list[float]) -> float:
    return statistics.stdev(math.log(v) for v in values) if len(values) > 1 else float("nan")


def pearson(x: list[float], y: list[float]) -> float:
    mx, my = statistics.mean(x), statistics.mean(y)
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y))
    sxx, syy = sum((a - mx) ** 2 for a in x), sum((b - my) ** 2 for b in y)
    return sxy / (sxx * syy) ** 0.5 if sxx > 0 and syy > 0 else float("nan")


def predict_all(home: Path, work: Path) -> list[float]:
    """Uncalibrated or calibrated predictions, whatever the store of `home` holds (fresh process)."""
    return [d["predicted_s"] for d in predict_all_detail(home, work)]


def predict_all_detail(home: Path, work: Path) -> list[dict]:
    """predict_all with each prediction's breakdown and resolved configuration (explain JSON: what refine reads
    from a run's prediction.json), for the record."""
    cmds = []
    for i, cfg in enumerate(CONFIGS):
        ds_json = work / f"c{i}" / "ds.json"
        ds_json.parent.mkdir(parents=True, exist_ok=True)
        ds_json.write_text(json.dumps(cfg.ds_config()))
        cmds.append(cfg.argv(ds_json, 29500))
    code = ("import json, os, sys\nfrom llmperf_hook.api import predict_command\n"
            "from llmperf_hook.frameworks import explain_json\ncmds = json.loads(sys.stdin.read())\nout = []\n"
            f"for c in cmds:\n    p = predict_command(c, os.environ, cluster={CLUSTER!r})\n"
            "    out.append({'predicted_s': p.estimate.step_time_s, 'breakdown': dict(p.estimate.breakdown), "
            "'config': explain_json(p.config, p.job)})\nprint(json.dumps(out, default=str))")
    out = subprocess.run([sys.executable, "-c", code], input=json.dumps(cmds), env=base_env(home),
                         capture_output=True, text=True, cwd=str(work))
    if out.returncode != 0:
        raise SystemExit(f"prediction failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--home", type=Path, default=Path.home() / ".cache" / "llmperf-cpu-testbed")
    ap.add_argument("--profile-budget", type=float, default=4.0, help="minutes per dtype when a profile is missing")
    ap.add_argument("--steps", type=int, default=26,
                    help="steps per instrumented run (the first 2 are warm-up; 24 timed: module docstring, drift)")
    ap.add_argument("--calibrate", type=lambda v: [int(i) for i in v.split(",")], default=[1],
                    help="index of the configuration to instrument; several (1,9) are each evaluated on the same "
                         "measurements, each in a fresh evaluation store")
    ap.add_argument("--tries", type=int, default=3, help="runs per configuration while its ranks wait for a core")
    ap.add_argument("--repeats", type=int, default=5,
                    help="measurement passes over the twelve, the order rotated per pass (testbed_record.py); each "
                         "configuration is scored on the median of its runs (the instrumented one's without its "
                         "calibration run, which takes its place in the middle pass)")
    ap.add_argument("--drift-check", type=int, default=0, metavar="R",
                    help="only check whether the reference tracks the step-time drift: R interleaved runs of "
                         "--drift-configs, no prediction")
    ap.add_argument("--drift-configs", default="0,1", help="configuration indices for --drift-check / --spread-check")
    ap.add_argument("--spread-check", type=int, default=0, metavar="R",
                    help="only measure the run-to-run spread: R rounds of --drift-configs, each launched as is and "
                         "with --bind_cores_to_rank (order alternating), scored on all timed steps and on the first 8")
    ap.add_argument("--rescore", nargs="+", type=Path, metavar="LOG",
                    help="only re-score the calibrations printed in earlier outputs of this benchmark with the "
                         "current shrinkage priors (nothing is run or refitted)")
    ap.add_argument("--replay", type=Path, metavar="FILE",
                    help="only score a record an earlier run saved (every raw step time, testbed_record.py) with the "
                         "current refine code: nothing is run")
    ap.add_argument("--replay-log", type=Path, metavar="LOG",
                    help="--replay of a printed output of this benchmark from before records (its measurement lines "
                         "and calibration runs; no step times), with this home's profile for the priors")
    ap.add_argument("--record", type=Path, metavar="FILE",
                    help="where to save the run's raw record (default HOME/records/testbed-<UTC time>.json)")
    ap.add_argument("--keep-framework-cost", action="store_true",
                    help="never re-measure the profile's framework cost (refresh_framework_cost)")
    ap.add_argument("--configs", type=lambda v: [int(i) for i in v.split(",")], metavar="LIST",
                    help="only these configurations (indices of CONFIGS; --calibrate then counts within them): a "
                         "functional check of the benchmark's path, not its measurement")
    ap.add_argument("--bind-cores", action="store_true",
                    help="launch every configuration with DeepSpeed's --bind_cores_to_rank (needs numactl)")
    args = ap.parse_args()
    global CONFIGS
    if args.replay:
        record = load_record(args.replay)
        CONFIGS = tuple(CONFIGS[i] for i in record.get("config_indices") or range(len(CONFIGS)))
        report_record(record)
        return
    home = args.home.expanduser().resolve()
    home.mkdir(parents=True, exist_ok=True)
    if args.rescore:
        rescore(home, args.rescore, CLUSTER, len(CONFIGS), TARGETS)
        return
    if args.replay_log:  # a printed output as a record: its configurations' breakdowns and priors from this home
        text, eval_home = read_log(args.replay_log), shared_home(home, "eval-replay")
        header = new_record(eval_home, args, predict_all_detail(eval_home, home / "work-replay"), 0.0)
        report_record(record_from_log(text, header))
        return
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; one thread per rank; home {home}")
    load_at_start = os.getloadavg()[0]
    ensure_profiles(home, args.profile_budget, load_at_start)
    if not args.keep_framework_cost:
        refresh_framework_cost(home, load_at_start)
    write_cluster(home)
    if args.drift_check:
        drift_check(shared_home(home, "drift"), home / "work-drift",
                    [int(i) for i in args.drift_configs.split(",")], args.drift_check, args.steps)
        return
    if args.spread_check:
        spread_check(shared_home(home, "spread"), home / "work-spread", [int(i) for i in args.drift_configs.split(",")],
                     args.spread_check, args.steps)
        return
    if args.bind_cores:
        CONFIGS = tuple(replace(c, bind=True) for c in CONFIGS)
    if args.configs:
        CONFIGS = tuple(CONFIGS[i] for i in args.configs)
    print_framework_cost(home)
    ref_profile = print_profile_reference(home)
    work = home / "work"
    shutil.rmtree(work, ignore_errors=True)
    eval_home = shared_home(home, "eval")
    record = new_record(eval_home, args, predict_all_detail(eval_home, work / "predict"), ref_profile)
    cal_homes = {k: shared_home(home, f"eval-c{k}") for k in args.calibrate}
    path = args.record or home / "records" / f"testbed-{record['created_utc']}.json"
    measure_rotation(home, work, record, ref_profile, args, cal_homes, path)
    for k, cal_home in cal_homes.items():  # each calibration in its own store: predict all twelve again from it
        record["calibrations"][str(k)] = {"after_s": predict_all(cal_home, work / f"predict-after{k}")}
    save_record(record, path)
    print(f"\nraw runs saved to {path} (replay: python benchmarks/bench_cpu_testbed.py --replay {path})")
    report_record(record)


def measure_rotation(home: Path, work: Path, record: dict, ref_profile: float, args: Any,
                     cal_homes: dict[int, Path], path: Path) -> None:
    """Steps 2 and 4 of the module docstring in one rotation (testbed_record.py): args.repeats passes over the
    twelve, the order rotated per pass; in the middle pass each instrumented configuration's run is its
    calibration run, into its own evaluation store (cal_homes), the others refine into the throwaway store. The
    runs go to record["runs"], saved to `path` after every pass (a run cut short can still be replayed)."""
    measure_home, runs, passes = shared_home(home, "measure"), record["runs"], max(args.repeats, 1)
    before = [c["predicted_s"] for c in record["configs"]]
    for p in range(passes):
        order = rotation(len(CONFIGS), passes, p)
        print(f"\n[measure] pass {p + 1} of {passes} (order {','.join(map(str, order))}): `llmperf run --instrument "
              f"{args.steps} --stop-after {args.steps}`")
        for pos, i in enumerate(order):
            t0, cfg = time.perf_counter(), CONFIGS[i]
            if p == calibration_pass(passes) and i in cal_homes:  # one try: refine handles a contended run itself
                m = instrumented_run(cfg, cal_homes[i], work / f"calibrate{i}", args.steps, 29560 + i)
                m = {**m, "tries": 1, "contended": waited(cfg, m) > 1.0, "calibration": True, "store": cal_homes[i].name}
            else:
                m = {**quiet_run(cfg, measure_home, work / f"m{i}-{p}", args.steps, 29520 + i, args.tries),
                     "store": measure_home.name}
            runs.append({**m, "config": i, "pass": p, "position": pos})
            print(f"  {i:2d} {cfg.label():34s} measured {m['measured_s'] * 1e3:8.2f} ms (CPU {m['cpu_s'] * 1e3:7.2f} ms)  "
                  f"predicted {before[i] * 1e3:8.2f} ms ({pct(before[i], m['measured_s']):+6.1f} %)  load {m['load_before']:.2f}"
                  f"  reference x{m['ref_now_s'] / ref_profile:.3f} of the profile's (hook "
                  f"{(m['hook_reference_s'] or 0) * 1e3:.2f} ms)  {m['tries']} run(s){' CONTENDED' if m['contended'] else ''}"
                  f"{' CALIBRATION run into ' + m['store'] if m.get('calibration') else ''}"
                  f"  [{time.perf_counter() - t0:.0f} s]", flush=True)
        save_record(record, path)


def runs_text(m: dict) -> str:
    """'5 runs x1.062, load 1.21 (max 1.40)': how many runs a configuration's median took, their spread (max /
    min) and the load they ran at, printed beside its error."""
    loads = m.get("pass_loads") or [m["load_before"]]
    return (f"{len(m.get('pass_times_s', [0]))} runs x{m.get('pass_spread', 1.0):.3f}, load {statistics.median(loads):.2f}"
            f" (max {max(loads):.2f}){' CONTENDED' if m.get('contended') else ''}")


def print_measured(measured: list[dict], before: list[float]) -> None:
    """The twelve before refinement, each with the spread and load of its runs."""
    print("\n  #  configuration                      measured   before (err)        its runs: spread, load")
    for i, cfg in enumerate(CONFIGS):
        print(f" {i:2d}  {cfg.label():34s} {measured[i]['measured_s'] * 1e3:8.2f}  {before[i] * 1e3:8.2f} "
              f"({pct(before[i], measured[i]['measured_s']):+6.1f} %)  {runs_text(measured[i])}")
    print(f"MAPE before refinement (12 configs): {mape([pct(p, m['measured_s']) for p, m in zip(before, measured)]):.1f} % "
          f"(target <= {TARGETS['before']:.0f} %)")


def report_record(record: dict) -> None:
    """Every score of a record (a fresh run's or --replay's): the twelve against their reference runs, each real
    calibration run of the rotation, and the replay of every choice of instrumented run (testbed_replay.py)."""
    from testbed_replay import report_replay

    before = [c["predicted_s"] for c in record["configs"]]
    measured = [median_pass(reference_runs(record, i)) for i in range(len(CONFIGS))]
    effects = pass_effects(record)
    print(f"\n[score] {effects['runs']} measurement runs in {effects['passes']} rotated passes: run-to-run log sd "
          f"{effects['sd_run']:.3f}, of which a whole pass shared sd {effects['sd_pass']:.3f} (the machine's state over "
          f"minutes) and each run alone {effects['sd_residual']:.3f}")
    print_measured(measured, before)
    for k, cal in sorted((int(k), v) for k, v in record.get("calibrations", {}).items()):
        run = next(r for r in record["runs"] if r["config"] == k and r.get("calibration"))
        print(f"\n[refine] configuration {k} ({CONFIGS[k].label()}) instrumented in pass {run['pass'] + 1} into "
              f"{run['store']} (the real `llmperf run --instrument` and its automatic refine, code {record.get('commit', '?')})")
        print("  " + run["refine"].replace("\n", "\n  "))
        report(measured, before, cal["after_s"], k, record["ref_profile_s"])
        report_instrumented(measured[k], run, before[k], cal["after_s"][k], k)
        report_full_scale(measured, before, run, k, record["priors"]["sd_config_op"])
    report_replay(record, measured, before)


def new_record(home: Path, args: Any, before_detail: list[dict], ref_profile: float) -> dict:
    """The record's header: machine, code, priors of the evaluation store's profile, the twelve predictions."""
    from llmperf_hook.profile.cpu_framework import FILE_NAME as FRAMEWORK_FILE
    from llmperf_hook.profile.cpu_framework import step_holdout_log_errors
    from llmperf_hook.refine.shrinkage import holdout_terms, sd_config_prior, step_drift_sd, variance_priors

    os.environ["LLMPERF_HOME"] = str(home)  # the priors of the profile every store here sees
    pri = variance_priors(CLUSTER)
    doc = json.loads((home / "profiles" / CLUSTER / FRAMEWORK_FILE).read_text())
    drift, errors = step_drift_sd(doc), step_holdout_log_errors(doc)
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return {"format": RECORD_FORMAT, "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "commit": commit.stdout.strip(), "cores": os.cpu_count(), "load_at_start": os.getloadavg()[0],
            "steps": args.steps, "passes": args.repeats, "ref_profile_s": ref_profile,
            "config_indices": args.configs or list(range(len(CONFIGS))),
            "priors": {"sd_shared": pri.sd_shared, "sd_config": pri.sd_config, "source": pri.source,
                       "sd_moment": pri.sd_moment, "sd_config_op": sd_config_prior(CLUSTER)[0],
                       # the inputs of refine's priors (shrinkage.priors_from_errors), for --replay with a later rule
                       "holdout_errors": errors, "holdout_terms": holdout_terms(doc, len(errors)),
                       "drift": drift[0], "drift_shifts": drift[1],
                       "source_file": str(home / "profiles" / CLUSTER / FRAMEWORK_FILE)},
            "configs": [{"index": i, "label": cfg.label(), **d} for i, (cfg, d) in enumerate(zip(CONFIGS, before_detail))],
            "runs": [], "calibrations": {}}


def median_pass(runs: list[dict]) -> dict:
    """The passes of one configuration as one measurement: the median step time, CPU time and load (two passes:
    their means), the machine-speed readings of the middle run, CONTENDED when any pass was, the passes' spread."""
    ordered = sorted(runs, key=lambda m: m["measured_s"])
    times = [m["measured_s"] for m in ordered]
    cpu = [m["cpu_s"] for m in ordered if m.get("cpu_s")]
    return {**ordered[(len(ordered) - 1) // 2], "measured_s": statistics.median(times),
            "cpu_s": statistics.median(cpu) if cpu else None,
            "load_before": statistics.median(m["load_before"] for m in ordered),
            "contended": any(m["contended"] for m in ordered), "pass_times_s": times, "pass_spread": times[-1] / times[0],
            "pass_loads": [m["load_before"] for m in ordered]}


def report_instrumented(m: dict, cal: dict, before: float, after: float, k: int) -> None:
    """The instrumented configuration scored against its measurement (the target) and its calibration run."""
    spread = ", ".join(f"{t * 1e3:.2f}" for t in m["pass_times_s"])
    print(f"\ninstrumented config {k}: measurement passes {spread} ms (median {m['measured_s'] * 1e3:.2f}); its "
          f"calibration run {cal['measured_s'] * 1e3:.2f} ms ({pct(cal['measured_s'], m['measured_s']):+.1f} % from the "
          f"median: this machine's run-to-run drift)")
    print(f"  after refinement {after * 1e3:.2f} ms: {pct(after, m['measured_s']):+.1f} % against the measurement runs "
          f"(the target's figure), {pct(after, cal['measured_s']):+.1f} % against the calibration run's own steps "
          f"(what `llmperf refine` shows the user); before: {pct(before, m['measured_s']):+.1f} % / "
          f"{pct(before, cal['measured_s']):+.1f} %")


def report_full_scale(measured: list[dict], before: list[float], cal: dict, k: int, sd_op: float) -> None:
    """What earlier calibrations would have made of the same runs, beside the shrunk one: the one run's ratio
    applied in full to every configuration (sessions before 7), and session 7's shrinkage (the cross-cluster
    shared-bias prior SD_SHARED_PRIOR with the profile's op-level held-out error `sd_op` as sd_config)."""
    from llmperf_hook.refine.shrinkage import SD_RUN_PRIOR, SD_SHARED_PRIOR

    scale = cal["measured_s"] / before[k]
    full = [pct(p * scale, m["measured_s"]) for i, (p, m) in enumerate(zip(before, measured)) if i != k]
    k_old = SD_SHARED_PRIOR ** 2 / (SD_SHARED_PRIOR ** 2 + sd_op ** 2 + SD_RUN_PRIOR ** 2)
    old = [pct(p * scale ** k_old, m["measured_s"]) for i, (p, m) in enumerate(zip(before, measured)) if i != k]
    print(f"for comparison, the one-run ratio x{scale:.3f} applied in full to every configuration (refine before "
          f"shrinkage): MAPE of the other 11 {mape(full):.1f} %; with session 7's shrinkage (shared-bias prior "
          f"{SD_SHARED_PRIOR:.0%} across clusters, op-level sd_config {sd_op:.1%}: k = {k_old:.2f}): {mape(old):.1f} %")


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


def report(measured: list[dict], before: list[float], after: list[float], k: int, ref_profile: float) -> None:
    meas = [m["measured_s"] for m in measured]
    err_before = [pct(p, x) for p, x in zip(before, meas)]
    err_after = [pct(p, x) for p, x in zip(after, meas)]
    others = [e for i, e in enumerate(err_after) if i != k]
    print("\n  #  configuration                      measured   before (err)        after (err)        its runs: "
          "spread, load")
    for i, cfg in enumerate(CONFIGS):
        mark = " *" if i == k else "  "
        print(f" {i:2d}{mark}{cfg.label():34s} {meas[i] * 1e3:8.2f}  {before[i] * 1e3:8.2f} ({err_before[i]:+6.1f} %)"
              f"  {after[i] * 1e3:8.2f} ({err_after[i]:+6.1f} %)  {runs_text(measured[i])}")
    print(f"\nMAPE before refinement (12 configs): {mape(err_before):.1f} %  (target <= {TARGETS['before']:.0f} %)")
    print(f"after instrumenting config {k}: its error {abs(err_after[k]):.1f} %  "
          f"(target <= {TARGETS['instrumented']:.0f} %); MAPE of the other 11: {mape(others):.1f} %  "
          f"(target <= {TARGETS['others']:.0f} %; {mape([e for i, e in enumerate(err_before) if i != k]):.1f} % "
          f"before refinement)")
    ratios = [m["ref_now_s"] / ref_profile for m in measured]
    changes = [abs(m["ref_after_s"] - m["ref_before_s"]) / m["ref_before_s"] for m in measured]
    print(f"machine speed (reference workload, instrument/reference_speed.py): x{min(ratios):.3f}-x{max(ratios):.3f} "
          f"of the profile's over the measurements (median x{statistics.median(ratios):.3f}; >1 = slower); before -> "
          f"after a run: median {statistics.median(changes):.1%}, max {max(changes):.1%}; correlation of the "
          f"prediction error (before) with it: {pearson([math.log(r) for r in ratios], [math.log1p(e / 100) for e in err_before]):+.2f}")
    norm = [m["measured_s"] * ref_profile / m["ref_now_s"] for m in measured]  # measured x speed now / at profile
    n_before, n_after = [pct(p, x) for p, x in zip(before, norm)], [pct(p, x) for p, x in zip(after, norm)]
    print(f"diagnostic only (the reference does not reliably track the drift, see --drift-check): against measured x "
          f"reference at profile / reference now, MAPE before {mape(n_before):.1f} %, instrumented config "
          f"{abs(n_after[k]):.1f} %, other 11 {mape([e for i, e in enumerate(n_after) if i != k]):.1f} %")
    spreads = [m.get("pass_spread", 1.0) for m in measured]
    if len(measured[0].get("pass_times_s", ())) > 1:
        print(f"run-to-run drift between the measurement passes (max / min per configuration): median "
              f"x{statistics.median(spreads):.3f}, max x{max(spreads):.3f} (config {spreads.index(max(spreads))})")
    loads = [m["load_before"] for m in measured]
    print(f"machine load during the measurements: median {statistics.median(loads):.2f}, max {max(loads):.2f} "
          f"(1-minute load average, {os.cpu_count()} cores)")
    quiet = [i for i, m in enumerate(measured) if not m.get("contended")]
    print(f"configurations measured without contention (wall / CPU within {QUIET_WALL_PER_CPU}): {len(quiet)} of "
          f"{len(measured)}" + (f"; MAPE on them before {mape([err_before[i] for i in quiet]):.1f} %, after (not "
                                 f"instrumented) {mape([err_after[i] for i in quiet if i != k] or [0.0]):.1f} %"
                                 if quiet else ""))
    single = [(i, m["cpu_s"]) for i, (cfg, m) in enumerate(zip(CONFIGS, measured)) if cfg.ranks == 1 and m.get("cpu_s")]
    if single:
        cpu_err = [pct(before[i], c) for i, c in single]
        print(f"diagnostic, load-independent: MAPE of the uncalibrated prediction against per-step CPU time of the "
              f"{len(single)} one-rank configurations: {mape(cpu_err):.1f} % ({', '.join(f'{e:+.0f}' for e in cpu_err)})")
    every = [(i, m["cpu_s"]) for i, m in enumerate(measured) if m.get("cpu_s")]
    if every:
        cpu_err = [pct(before[i], c) for i, c in every]
        print(f"diagnostic: MAPE of the uncalibrated prediction against the per-step CPU time of the slowest rank, "
              f"all {len(every)} configurations (what a rank costs when it never waits for a core): "
              f"{mape(cpu_err):.1f} % ({', '.join(f'{e:+.0f}' for e in cpu_err)})")
    waits = [m["measured_s"] / m["cpu_s"] for m in measured if m.get("cpu_s")]
    print(f"wall / CPU time per step (1.0 = each rank had its core and never waited): median "
          f"{statistics.median(waits):.2f}, range {min(waits):.2f}-{max(waits):.2f}")


if __name__ == "__main__":
    main()
