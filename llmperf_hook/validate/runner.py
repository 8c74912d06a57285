"""Predict every measured run through the same path as `llmperf predict --batch` and score the results.

Each run becomes a launch command (`launch_command.py`) and a cluster (`cluster_choice.py`); the command is
predicted by `llmperf_hook.api.predict_command` with an empty environment, so the caller's SLURM_* or
WORLD_SIZE variables cannot change what a row means. A row the framework would reject (or we cannot
resolve) is reported with its error and left out of the MAPE; the other rows go on.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

from llmperf_hook.errors import LlmperfError, UsageError
from llmperf_hook.validate.cluster_choice import ClusterChoice, choose_cluster, read_cluster_presets
from llmperf_hook.validate.launch_command import LaunchPlan, build_launch_plan
from llmperf_hook.validate.measured_run import MeasuredRun
from llmperf_hook.validate.scoring import RowResult, ValidationReport, score_rows


@dataclass(frozen=True)
class PredictedStep:
    step_time_s: float
    fits: bool | None = None
    warnings: tuple[str, ...] = ()


PredictFn = Callable[[Sequence[str], str], PredictedStep]
"""(launch argv, cluster name or YAML path) -> PredictedStep; raises LlmperfError for a rejected command."""


def predict_with_api(argv: Sequence[str], cluster: str) -> PredictedStep:
    """The production predictor: `api.predict_command` (stages [1]-[5]), as `llmperf predict` runs it."""
    from llmperf_hook import api  # stage wiring; imported here so `llmperf validate --help` stays light

    prediction = api.predict_command(list(argv), {}, cluster=cluster)
    estimate = prediction.estimate
    memory = getattr(estimate, "memory", None)
    fits = getattr(memory, "fits", None)
    warnings = tuple(prediction.warnings) + tuple(getattr(estimate, "warnings", ()) or ())
    return PredictedStep(step_time_s=float(estimate.step_time_s), fits=fits, warnings=tuple(dict.fromkeys(warnings)))


def validate_runs(runs: Sequence[MeasuredRun | RowResult], *, clusters_dir: Path, predict: PredictFn | None = None,
                  num_worst: int = 3, work_dir: Path | None = None) -> ValidationReport:
    """Predict (default: `predict_with_api`) and score `runs`; ds_configs and derived clusters go to `work_dir`
    (a temp dir if None, gone once the report is made: a derived cluster is then reported by what it is, not by its
    file's path)."""
    predict = predict or predict_with_api
    presets = read_cluster_presets(clusters_dir)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="llmperf-validate-") as tmp:
        out_dir = work_dir or Path(tmp)
        results = [run if isinstance(run, RowResult) else
                   predict_run(run, presets, out_dir, predict, keep_files=work_dir is not None) for run in runs]
    return score_rows(results, num_worst=num_worst, elapsed_s=time.perf_counter() - started)


def plan_run(run: MeasuredRun, presets: dict, out_dir: Path) -> tuple[LaunchPlan, ClusterChoice]:
    """The launch command and cluster of one run (also used to write `predict --batch` files). A row that names its
    cluster without a `gpus_per_node` cell runs on that cluster's hosts: 16 GPUs on dgx-h100 are 2 nodes of 8 (they
    were launched as one node of 16, every collective priced inside one NVLink domain)."""
    cluster = choose_cluster(run, presets, out_dir)
    if run.cluster or not run.gpus_per_node:
        from llmperf_hook import api  # stage wiring; imported here so `llmperf validate --help` stays light

        try:
            spec, _ = api.resolve_cluster(cluster.cluster, None)
        except LlmperfError as err:
            if not run.cluster:
                raise
            raise UsageError(f"row {run.row_id}: column `cluster` = {run.cluster!r}: {err}") from None
        if not run.gpus_per_node:
            run = replace(run, gpus_per_node=spec.host_gpus)
    return build_launch_plan(run, out_dir), cluster


def predict_run(run: MeasuredRun, presets: dict, out_dir: Path, predict: PredictFn,
                keep_files: bool = True) -> RowResult:
    """One row's prediction. `keep_files` False: `out_dir` is deleted after the run, so a derived cluster's file
    path would point nowhere and the result names the cluster by what it is (ClusterChoice.derived)."""
    base = dict(row_id=run.row_id, source_id=run.source_id, source=run.source, model=run.model,
                layout=describe_layout(run), measured_s=run.iteration_time_s)
    try:
        plan, cluster = plan_run(run, presets, out_dir)
    except LlmperfError as err:
        return RowResult(**base, predicted_s=None, cluster="", argv=(), error=str(err), notes=run.assumptions)
    notes = run.assumptions + plan.notes + cluster.notes
    shown, argv = cluster.cluster, plan.argv
    if not keep_files:
        if cluster.derived:
            shown = f"{cluster.derived}; its YAML is not kept (--write-batch FOLDER writes it there)"
        argv, written = temporary_files_shown(plan.argv, out_dir)
        notes += written
    try:
        step = predict(plan.argv, cluster.cluster)
    except LlmperfError as err:
        return RowResult(**base, predicted_s=None, cluster=shown, argv=argv,
                         error=row_error_text(str(err), out_dir, run.extra_args), notes=notes)
    except Exception as err:  # noqa: BLE001 - one row's internal error is reported on that row, the rest go on
        message = f"internal error: {type(err).__name__}: {err}"
        return RowResult(**base, predicted_s=None, cluster=shown, argv=argv, error=message, notes=notes)
    return RowResult(**base, predicted_s=step.step_time_s, cluster=shown, argv=argv,
                     fits=step.fits, notes=notes + step.warnings)


def temporary_files_shown(argv: Sequence[str], out_dir: Path) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(argv, notes) for a report that outlives `out_dir`: each ds_config validate wrote there is named by its file
    name in the command, and its content is given in a note, so the command can be run again (--write-batch FOLDER
    keeps the files themselves)."""
    prefix = str(out_dir) + os.sep
    notes = tuple(f"{Path(word).name} (its --deepspeed_config, not kept; --write-batch FOLDER keeps it): "
                  f"{json.dumps(json.loads(Path(word).read_text(encoding='utf-8')), separators=(',', ':'))}"
                  for word in argv if word.startswith(prefix) and word.endswith(".json"))
    return tuple(Path(w).name if w.startswith(prefix) else w for w in argv), notes


FLAG_COLUMNS = {
    "--num-layers": "num_layers", "--hidden-size": "hidden_size", "--num-attention-heads": "num_attention_heads",
    "--num-query-groups": "num_query_groups", "--ffn-hidden-size": "ffn_hidden_size", "--seq-length": "seq_length",
    "--vocab-size": "vocab_size", "--micro-batch-size": "micro_batch_size", "--global-batch-size": "global_batch_size",
    "--tensor-model-parallel-size": "tp", "--pipeline-model-parallel-size": "pp", "--context-parallel-size": "cp",
    "--expert-model-parallel-size": "ep", "--num-layers-per-virtual-pipeline-stage": "vpp",
    "--num-virtual-stages-per-pipeline-rank": "vpp",
}
"""Launch flags validate writes from a row's cells (launch_command.py), by the column each comes from."""


def row_error_text(message: str, out_dir: Path, extra_args: tuple[str, ...] = ()) -> str:
    """The framework's message in the CSV's words: the ds_config validate wrote for the row (a temporary file, gone
    when the report is read) named by the cells it came from, and the flags written from cells by their columns
    (a flag of the row's own extra_args keeps its name)."""
    written = r"(?:config file )?" + re.escape(str(out_dir)) + r"/ds_config-[0-9a-f]+\.json"
    message = re.sub(written, "the ds_config written for this row (from its ZeRO, precision and batch cells):", message)
    for flag, column in FLAG_COLUMNS.items():
        if flag not in extra_args:
            message = message.replace(f"(argv {flag})", f"(column `{column}`)")
            message = re.sub(rf"Change {re.escape(flag)}(?=[ .,])", f"Change column `{column}`", message)
    return message


def describe_layout(run: MeasuredRun) -> str:
    parts = [f"tp{run.tp}", f"pp{run.pp}"]
    if run.vpp > 1:
        parts.append(f"vpp{run.vpp}")
    if run.cp > 1:
        parts.append(f"cp{run.cp}")
    parts += [f"dp{run.dp}", f"mbs{run.micro_batch_size}", f"gbs{run.global_batch_size}"]
    if run.sequence_parallel:
        parts.append("sp")
    if run.recompute != "none":
        parts.append(f"rc-{run.recompute}")
    if run.zero_stage:
        parts.append(f"zero{run.zero_stage}")
    return " ".join(parts) + f" ({run.num_gpus} GPUs)"
