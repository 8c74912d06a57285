"""The CPU testbed's measurements (benchmarks/bench_cpu_testbed.py, steps 2-4): one configuration through
`llmperf run --instrument N --stop-after N`, rerun while its ranks waited for a core, the rotated passes with
the calibration runs, the predictions of the twelve, and the record's header."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from testbed_configs import CLUSTER, QUIET_WALL_PER_CPU, REPO, TestbedConfig
from testbed_record import RECORD_FORMAT, calibration_pass, pct, rank_steps, rotation, save_record
from testbed_setup import base_env, deepspeed_buffers_removed, llmperf, missing_dtypes, shared_home


def instrumented_run(cfg: TestbedConfig, home: Path, work: Path, steps: int, port: int,
                     extra_env: dict[str, str] | None = None) -> dict:
    """`llmperf run --instrument N --stop-after N` of one configuration; measured step time and load. `extra_env`
    reaches the ranks (--drift-check: LLMPERF_SPEED_PROBE, the speed probe read in the job, instrument/speed_probe.py)."""
    from llmperf_hook.refine.run_records import read_run_dir, summarize_job

    ds_json = work / "ds.json"
    work.mkdir(parents=True, exist_ok=True)
    ds_json.write_text(json.dumps(cfg.ds_config()))
    run_dir = work / "run"
    ref_before = reference_now("before-run")
    load, started = os.getloadavg()[0], time.time()
    # refine calibrates only from a run as quiet as the benchmark's measurements (refine_run.max_wall_per_cpu)
    env = dict(base_env(home), LLMPERF_REFINE_MAX_WALL_PER_CPU=str(QUIET_WALL_PER_CPU[min(cfg.ranks, 2)]),
               **(extra_env or {}))
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
            "steps": job.num_timed_steps, "step_times_s": list(job.step_times_s),
            "cpu_step_times_s": list(job.cpu_step_times_s), "job_id": job_id,
            "rank_steps": rank_steps(run.records, job_id), "hook_probe_s": hook_probe_s(run.records, job_id),
            "prediction": {k: prediction.get(k) for k in ("uncalibrated_step_time_s", "step_time_s", "breakdown", "config")},
            "refine": done.stderr[done.stderr.find("llmperf refine"):].strip()}


def hook_probe_s(records: Sequence[dict], job_id: str) -> dict[str, float]:
    """Per dtype, the median over the job's ranks of the speed probe their hook read after the last recorded step
    (its reference reading's extra.probe; {} when no rank read one: instrument/speed_probe.py)."""
    import statistics

    values: dict[str, list[float]] = {}
    for r in records:
        probe = ((r.get("reference") or {}).get("extra") or {}).get("probe") or {}
        if r.get("job_id") == job_id and r.get("kind") in ("end", "stop"):
            for dtype, s in (probe.get("probe_s") or {}).items():
                values.setdefault(dtype, []).append(float(s))
    return {dtype: statistics.median(v) for dtype, v in values.items()}


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


def predict_all(configs: Sequence[TestbedConfig], home: Path, work: Path) -> list[float]:
    """Uncalibrated or calibrated predictions, whatever the store of `home` holds (fresh process)."""
    return [d["predicted_s"] for d in predict_all_detail(configs, home, work)]


def predict_all_detail(configs: Sequence[TestbedConfig], home: Path, work: Path) -> list[dict]:
    """predict_all with each prediction's breakdown and resolved configuration (explain JSON: what refine reads
    from a run's prediction.json), for the record."""
    cmds = []
    for i, cfg in enumerate(configs):
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


def measure_rotation(configs: Sequence[TestbedConfig], home: Path, work: Path, record: dict, ref_profile: float,
                     args: Any, cal_homes: dict[int, Path], path: Path) -> None:
    """Steps 2 and 4 of the module docstring in one rotation (testbed_record.py): args.repeats passes over the
    twelve, the order rotated per pass; in the middle pass each instrumented configuration's run is its
    calibration run, into its own evaluation store (cal_homes), the others refine into the throwaway store. The
    runs go to record["runs"], saved to `path` after every pass (a run cut short can still be replayed)."""
    measure_home, runs, passes = shared_home(home, "measure"), record["runs"], max(args.repeats, 1)
    before = [c["predicted_s"] for c in record["configs"]]
    for p in range(passes):
        order = rotation(len(configs), passes, p)
        print(f"\n[measure] pass {p + 1} of {passes} (order {','.join(map(str, order))}): `llmperf run --instrument "
              f"{args.steps} --stop-after {args.steps}`")
        for pos, i in enumerate(order):
            t0, cfg = time.perf_counter(), configs[i]
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


def new_record(configs: Sequence[TestbedConfig], home: Path, args: Any, before_detail: list[dict],
               ref_profile: float) -> dict:
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
            "config_indices": args.configs or list(range(len(configs))),
            "bind_cores": bool(getattr(args, "bind_cores", False)),
            "framework_cost_missing": missing_dtypes(home / "profiles" / CLUSTER / FRAMEWORK_FILE),
            "priors": {"sd_shared": pri.sd_shared, "sd_config": pri.sd_config, "source": pri.source,
                       "sd_moment": pri.sd_moment, "sd_config_op": sd_config_prior(CLUSTER)[0],
                       # the inputs of refine's priors (shrinkage.priors_from_errors), for --replay with a later rule
                       "holdout_errors": errors, "holdout_terms": holdout_terms(doc, len(errors)),
                       "drift": drift[0], "drift_shifts": drift[1],
                       "source_file": str(home / "profiles" / CLUSTER / FRAMEWORK_FILE)},
            "configs": [{"index": i, "label": cfg.label(), **d} for i, (cfg, d) in enumerate(zip(configs, before_detail))],
            "runs": [], "calibrations": {}}
