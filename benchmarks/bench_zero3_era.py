"""The ZeRO-3 rows of dev.csv as their DeepSpeed release ran them: step time with and without the era's collectives.

    python benchmarks/bench_zero3_era.py [CSV]          # default: ../shared/validation/dev.csv

`llmperf validate` already writes a run's synchronous fetch into its ds_config (validate/framework_era.py). The
per-tensor list all-gathers and reduce-scatters of DeepSpeed < v0.5.5 / v0.6.0 have no ds_config key, so they
are OptimizerConfig fields (zero3_list_param_gather, zero3_per_tensor_grad_reduce) that
framework_era.era_optimizer_fields gives per run. This script predicts every DeepSpeed ZeRO-3 row of the CSV
through the same launch command and cluster as `llmperf validate`, once as parsed and once with the era's
fields applied (graph/zero3_legacy.py prices them), and prints both errors per row and the MAPE of those rows
and of their sources (the sources' other rows are unchanged by the fields).
"""

from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

from llmperf_hook.api import predict_command, predict_config  # noqa: E402
from llmperf_hook.resources import configs_dir  # noqa: E402
from llmperf_hook.validate.cluster_choice import read_cluster_presets  # noqa: E402
from llmperf_hook.validate.framework_era import era_optimizer_fields  # noqa: E402
from llmperf_hook.validate.runner import plan_run, validate_runs  # noqa: E402
from llmperf_hook.validate.runs_csv import build_measured_runs, read_runs_csv  # noqa: E402

DEFAULT_CSV = Path(__file__).resolve().parents[2] / "shared" / "validation" / "dev.csv"


def era_step_s(run, presets: dict, out_dir: Path) -> tuple[float, float, dict[str, bool]]:
    """(parsed step time, step time with the era's optimizer fields, the fields) of one run."""
    plan, choice = plan_run(run, presets, out_dir)
    pred = predict_command(list(plan.argv), {}, cluster=choice.cluster)
    fields = era_optimizer_fields(run.zero_stage, run.framework_text, run.source, run.source_location)
    cfg = replace(pred.config, optimizer=replace(pred.config.optimizer, **fields))
    return pred.estimate.step_time_s, predict_config(cfg, pred.cluster).step_time_s, fields


def main(csv_path: Path) -> None:
    runs = build_measured_runs(read_runs_csv(csv_path), base_dir=csv_path.parent)
    zero3 = [r for r in runs if r.zero_stage == 3 and era_optimizer_fields(r.zero_stage, r.framework_text, r.source,
                                                                           r.source_location)]
    presets = read_cluster_presets(configs_dir() / "clusters")
    errors_before: dict[str, list[float]] = {}
    errors_after: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="llmperf-zero3-era-") as tmp:
        print(f"{'row':>4} {'source':6} {'GPUs':>5} {'measured':>9} {'parsed':>9} {'era':>9} {'err':>7} {'err era':>8}")
        for run in zero3:
            before_s, after_s, fields = era_step_s(run, presets, Path(tmp))
            e0, e1 = before_s / run.iteration_time_s - 1, after_s / run.iteration_time_s - 1
            errors_before.setdefault(run.source_id, []).append(abs(e0))
            errors_after.setdefault(run.source_id, []).append(abs(e1))
            print(f"{run.row_id:>4} {run.source_id:6} {run.num_gpus:>5} {run.iteration_time_s:9.2f} {before_s:9.2f} "
                  f"{after_s:9.2f} {e0:+7.1%} {e1:+8.1%}  {sorted(fields)}")
        report = validate_runs([r for r in runs if r.source_id in errors_before], clusters_dir=configs_dir() / "clusters")
    for source, before in errors_before.items():
        after = errors_after[source]
        others = [abs(r.signed_error) for r in report.rows if r.source_id == source and r.predicted_s is not None
                  and r.row_id not in {z.row_id for z in zero3}]
        n = len(before) + len(others)
        print(f"{source}: ZeRO-3 rows MAPE {100 * sum(before) / len(before):.1f} % -> {100 * sum(after) / len(after):.1f} %; "
              f"source MAPE {100 * (sum(before) + sum(others)) / n:.2f} % -> {100 * (sum(after) + sum(others)) / n:.2f} %")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_CSV)
