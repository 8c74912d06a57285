"""Predicted vs measured single-GPU training steps on a real GPU (H100 SXM5 and H200 SXM, measured 2026-11-26..28).

    python benchmarks/bench_gpu_steps.py [measurements/h100-sxm5-80gb-2026-11-26 | measurements/h200-sxm-141gb-2026-11-26
                                          | measurements/h200-sxm-141gb-2026-11-28 (hold-out shapes) | ...]

The measurements are real DeepSpeed (ZeRO-0/1, bf16) and plain-torch steps of the testbed GPT on one GPU,
recorded by `llmperf run --instrument` (benchmarks/measure_gpu.sh; the folder's README has the environment).
For every run it prints the measured median step (warm-up and profiled steps excluded) and three predictions:

  analytic   the shipped hardware preset of the folder's GPU (op_samples_meta.json's hardware_name) with the
             roofline model (the fitted profile hidden), on the cluster preset of that GPU;
  profile    the same preset with the operator profile fitted from that folder's samples (configs/profiles);
  refined    the profile prediction after `llmperf refine` ingested ONE other run of the same framework
             (leave-one-out: every other run in turn; the mean over those choices is printed).

plus predicted vs measured peak memory, both less the CUDA context (torch's counters leave it out): the predicted
peak against the caching allocator's reserved peak (what nvidia-smi shows), and the predicted allocated bytes (the
peak less the allocator's reserve, schedule/allocator_reserve.py) against the allocated peak (what must fit: on a
failed cudaMalloc torch frees its cached blocks and retries, so reserved-but-free memory does not cause an
out-of-memory error). No calibration of the user's
$LLMPERF_HOME is used: each prediction runs against an empty temporary home.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DEFAULT_DIR = ROOT / "measurements" / "h100-sxm5-80gb-2026-11-26"
GPU_WORK_DIR = "/tmp/llmperf-gpu/"
"""The GPU scripts' work folder (benchmarks/gpu_prologue.sh's $W): a file a run's command named there (e.g. a
ds_config the script wrote) is saved beside the folder's runs/."""


@dataclass(frozen=True)
class Row:
    run: str
    argv: tuple[str, ...]
    framework: str
    measured_s: float
    measured_peak_bytes: int
    analytic_s: float
    profile_s: float
    predicted_peak_bytes: int
    prediction_json: dict
    measured_allocated_bytes: int = 0
    """The caching allocator's allocated peak (no cached free blocks, no CUDA context)."""

    @property
    def predicted_reserved_bytes(self) -> int:
        """The predicted peak less the CUDA context, which torch's counters leave out too."""
        return self.predicted_peak_bytes - int(self.prediction_json["memory"]["components"].get("cuda_context", 0))

    @property
    def predicted_tensor_bytes(self) -> int:
        """The predicted allocated bytes: the peak less the CUDA context and the allocator's reserve."""
        reserve = int(self.prediction_json["memory"]["components"].get("allocator_fragmentation", 0))
        return self.predicted_reserved_bytes - reserve


def device_presets(folder: Path) -> tuple[str, str]:
    """(hardware preset, cluster preset) of the folder's GPU: the samples' hardware name, and the shipped cluster
    whose nodes hold that GPU (api.home_cluster: the one predict assumes for --hardware alone)."""
    from llmperf_hook.api import home_cluster

    meta = folder / "op_samples_meta.json"
    if meta.exists():
        hardware = json.loads(meta.read_text())["hardware_name"]
    else:  # a folder of runs only: the hardware its launch predictions named
        predictions = sorted((folder / "runs").glob("*/prediction.json"))
        if not predictions:
            sys.exit(f"{folder}: neither op_samples_meta.json nor runs/*/prediction.json names the hardware")
        hardware = json.loads(predictions[0].read_text())["cluster"]["gpu"]
    cluster = home_cluster(hardware)
    if cluster is None:
        sys.exit(f"no cluster preset in configs/clusters has gpu: {hardware}")
    return hardware, cluster


def _analytic_hardware(tmp: Path, hardware: str) -> str:
    """The shipped preset under another name, so no fitted profile is found for it."""
    import yaml

    from llmperf_hook.resources import configs_dir

    doc = yaml.safe_load((configs_dir() / "hardware" / f"{hardware}.yaml").read_text())
    doc["name"] = f"analytic-{hardware}"  # another family: no sibling profile either
    path = tmp / f"analytic-{hardware}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def measure_rows(folder: Path, tmp: Path, hardware: str, cluster: str) -> list[Row]:
    from llmperf_hook.api import predict_command, prediction_json
    from llmperf_hook.refine.run_records import read_run_dir, summarize_job

    analytic_hw = _analytic_hardware(tmp, hardware)
    rows = []
    for run_dir in sorted(p for p in (folder / "runs").iterdir() if p.is_dir()):
        session = json.loads((run_dir / "session.json").read_text())
        run = read_run_dir(run_dir)
        job = summarize_job(run.records, str(session["job_id"]))
        argv = tuple(a.replace("examples/", str(ROOT / "examples") + "/").replace(GPU_WORK_DIR, f"{folder}/")
                     for a in session["argv"])
        env = {"PATH": os.environ.get("PATH", "")}
        analytic = predict_command(argv, env, cluster=cluster, hardware=analytic_hw)
        fitted = predict_command(argv, env, cluster=cluster, hardware=hardware)
        rows.append(Row(run_dir.name, argv, fitted.config.framework, float(job.step_time_s),
                        int(job.peak_memory_bytes or 0), analytic.estimate.step_time_s, fitted.estimate.step_time_s,
                        int(fitted.estimate.memory.peak_bytes_per_gpu), prediction_json(fitted),
                        max((int(r.get("gpu_peak_allocated_bytes") or 0) for r in run.records), default=0)))
    return rows


def refined_errors(rows: list[Row], folder: Path, tmp: Path, hardware: str, cluster: str) -> dict[str, list[float]]:
    """{run: [relative errors after refining on each other run of its framework]} through refine_run."""
    from llmperf_hook.refine.refine_run import refine_run

    calibrations: dict[str, object] = {}
    for r in rows:  # ingest each run alone into its own store, with the current prediction as the launch one
        copy = tmp / "refine" / r.run
        shutil.copytree(folder / "runs" / r.run, copy)
        shutil.rmtree(copy / "jobs", ignore_errors=True)
        (copy / "prediction.json").write_text(json.dumps(r.prediction_json))
        report = refine_run(copy, hardware=hardware, cluster=cluster, store_file=tmp / "refine" / f"{r.run}.sqlite")
        calibrations[r.run] = report.jobs[0].calibration
    out: dict[str, list[float]] = {r.run: [] for r in rows}
    for r in rows:
        for other in rows:
            cal = calibrations[other.run]
            if other.run != r.run and other.framework == r.framework and cal is not None:
                out[r.run].append(cal.apply(r.profile_s) / r.measured_s - 1.0)
    return out


def _pct(x: float) -> str:
    return f"{x * 100:+6.1f}%"


def main() -> None:
    folder = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else DEFAULT_DIR
    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        os.environ["LLMPERF_HOME"] = str(tmp / "home")  # no user calibration or profile
        hardware, cluster = device_presets(folder)
        rows = measure_rows(folder, tmp, hardware, cluster)
        refined = refined_errors(rows, folder, tmp, hardware, cluster)
    where = folder.relative_to(ROOT) if folder.is_relative_to(ROOT) else folder
    print(f"{len(rows)} measured runs from {where} (hardware {hardware}, cluster {cluster})")
    print(f"{'run':4s} {'framework':18s} {'measured':>9s} {'analytic':>16s} {'profile':>16s} {'refined (LOO)':>14s}"
          f" {'reserved':>10s} {'pred-ctx':>16s} {'allocated':>10s} {'pred alloc':>17s}")
    errs: dict[str, list[float]] = {"analytic": [], "profile": [], "refined": [], "memory": [], "allocated": []}
    for r in rows:
        a, p = r.analytic_s / r.measured_s - 1, r.profile_s / r.measured_s - 1
        loo = statistics.mean(abs(e) for e in refined[r.run]) if refined[r.run] else None
        m = r.predicted_reserved_bytes / r.measured_peak_bytes - 1 if r.measured_peak_bytes else None
        errs["analytic"].append(abs(a))
        errs["profile"].append(abs(p))
        if loo is not None:
            errs["refined"].append(loo)
        if m is not None:
            errs["memory"].append(abs(m))
        alloc = r.measured_allocated_bytes
        ma = r.predicted_tensor_bytes / alloc - 1 if alloc else None
        if ma is not None:
            errs["allocated"].append(abs(ma))
        refined_text = f"   |e| {loo * 100:5.1f}%" if loo is not None else "-"
        memory_text = _pct(m) if m is not None else ""
        print(f"{r.run:4s} {r.framework:18s} {r.measured_s * 1e3:7.1f}ms {r.analytic_s * 1e3:7.1f}ms {_pct(a)} "
              f"{r.profile_s * 1e3:7.1f}ms {_pct(p)} {refined_text:>14s} {r.measured_peak_bytes / 2**30:10.2f}GiB "
              f"{r.predicted_reserved_bytes / 2**30:7.2f}GiB {memory_text} {alloc / 2**30:7.2f}GiB "
              f"{r.predicted_tensor_bytes / 2**30:7.2f}GiB {_pct(ma) if ma is not None else ''}")
    print()
    for name, values in errs.items():
        if values:
            label = "step time MAPE" if name not in ("memory", "allocated") else "peak memory MAPE"
            print(f"{label:17s} {name:9s} {statistics.mean(values) * 100:5.1f}%  (n={len(values)})")


if __name__ == "__main__":
    main()
