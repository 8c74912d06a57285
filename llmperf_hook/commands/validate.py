"""`llmperf validate FILE.csv`: predicted vs measured step time for measured runs, per row and per source."""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import replace
from pathlib import Path

import click

from llmperf_hook.errors import LlmperfError, UsageError

SCHEMA_HELP = """\
FILE.csv (`-` reads standard input) has one row per measured run. Required columns: num_layers, hidden_size,
seq_length, global_batch_size, tp, pp, num_gpus, iteration_time_s (seconds per optimizer step), and the cluster: a
`cluster` column (preset name, or cluster YAML path, relative paths first beside the CSV) or `gpu_type` + `gpus_per_node` (with
`inter_node_network` text such as "InfiniBand HDR 200Gb/s x8 per node", or `inter_node_bandwidth_GBps` per
GPU, when the run spans nodes). Optional: row_id, source_id, source, model, num_attention_heads,
num_query_groups, ffn_hidden_size, vocab_size, micro_batch_size, vpp, cp, dp, ep, sequence_parallel,
recompute (full|selective|none), zero_stage_or_dist_opt, precision, framework (Megatron-LM,
Megatron-Core, Megatron-DeepSpeed, DeepSpeed; a Megatron-LM row dated before 2024, "Megatron-LM (2021)" or an
arXiv id in `source`, runs the papers' unfused attention, an undated one today's flash attention), extra_args (launch flags), notes ("flags: ..." is read as
extra_args), intra_node_bandwidth_GBps, swiglu, normalization, position_embedding. A cell's value is its
first word ("full (use_checkpoint=true)" = full); blank cells take the framework default (rules printed
per row in --format json). Units are in the column names (seconds, GB/s per GPU); a cell naming another unit is
refused. Every column's unit, allowed values and default, the JSON keys and the batch format: docs/validate.md.
A row that breaks a rule is reported FAILED with its message and the other rows are still scored: exit 0 when
at least one row was scored, 2 when none was (or the file cannot be read). An example in this schema ships with
the repository: `llmperf validate benchmarks/data/public_runs.csv` (80 public runs).
"""


@click.command(help="Compare predictions with measured runs from a CSV and print the errors.\n\n" + SCHEMA_HELP)
@click.argument("csv_file", metavar="FILE.csv")  # checked by read_runs_csv, so --format json reports it as JSON too
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--source", "sources", multiple=True, help="Only rows of this source_id (repeatable).")
@click.option("--worst", default=3, show_default=True, type=click.IntRange(min=0), help="Worst rows listed per source.")
@click.option("--rows/--no-rows", default=True, show_default=True, help="Print the per-row table.")
@click.option("--write-batch", default=None,
              help="Also write the rows as launch commands (one file per cluster, for `llmperf predict --batch`) into this folder.")
def command(csv_file: str, fmt: str, sources: tuple[str, ...], worst: int, rows: bool, write_batch: str | None) -> None:
    try:
        report = _validate(csv_file, sources, worst, write_batch)
    except LlmperfError as err:
        if fmt == "json":  # stdout stays one well-formed JSON object; the message goes to stderr as always
            click.echo(json.dumps({"schema": 1, "error": str(err), "exit_code": err.exit_code}, indent=1))
        raise
    for warning in report.warnings:
        click.echo(f"llmperf: warning: {warning}", err=True)
    if fmt == "json":
        from llmperf_hook.validate.render import report_json

        click.echo(json.dumps(finite_json(report_json(report)), indent=1, allow_nan=False))
    else:
        from llmperf_hook.validate.render import render_table

        click.echo(render_table(report, show_rows=rows))
    if report.rows and report.num_failed == len(report.rows):
        # The report above names each row's error; nothing was scored, so the input is unusable as given.
        from llmperf_hook.validate.runs_csv import csv_name

        raise UsageError(f"every row of {csv_name(csv_file)} failed ({report.num_failed}); nothing was scored. Fix "
                         "the rows as their errors above say.")


def finite_json(value):
    """JSON has no NaN or Infinity (json.dumps would write them, and strict readers refuse the file): null."""
    if isinstance(value, float) and value != value or value in (float("inf"), float("-inf")):
        return None
    if isinstance(value, dict):
        return {k: finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(v) for v in value]
    return value


def _validate(csv_file: str, sources: tuple[str, ...], worst: int, write_batch: str | None):
    from llmperf_hook.resources import configs_dir
    from llmperf_hook.validate.runner import validate_runs
    from llmperf_hook.validate.runs_csv import build_runs_or_failures, csv_name, read_runs_csv, unknown_column_warnings

    raw_rows = _read_csv(csv_file, read_runs_csv)
    if not raw_rows:
        raise UsageError(f"{csv_name(csv_file)} has a header but no rows: nothing to validate. Add one row per "
                         "measured run.")
    runs = build_runs_or_failures(raw_rows, base_dir=Path(csv_file).resolve().parent)
    if sources:
        runs = [r for r in runs if r.source_id in sources]
        if not runs:
            raise UsageError(f"--source {', '.join(sources)}: no row of {csv_name(csv_file)} has that source_id.")
    if write_batch:
        from llmperf_hook.validate.scoring import RowResult

        write_batch_files([r for r in runs if not isinstance(r, RowResult)], Path(write_batch), configs_dir() / "clusters")
    report = validate_runs(runs, clusters_dir=configs_dir() / "clusters", num_worst=worst)
    return replace(report, warnings=tuple(unknown_column_warnings([c for c in raw_rows[0] if c])))


def _read_csv(csv_file: str, read_runs_csv) -> list[dict[str, str]]:
    """The CSV's rows; a file that is not UTF-8 text or not CSV is bad input (exit 2), not an internal error."""
    import csv

    from llmperf_hook.validate.runs_csv import csv_name

    try:
        return read_runs_csv(csv_file)
    except UnicodeDecodeError as err:
        line = err.object[:err.start].count(b"\n") + 1
        raise UsageError(f"{csv_name(csv_file)} is not UTF-8 text (line {line}, byte {err.start}: {err.reason}, "
                         f"{err.object[err.start:err.start + 1]!r}; a Latin-1 or Windows-1252 export?); export the "
                         "measured runs as a UTF-8 CSV (or convert it: iconv -f latin1 -t utf-8).") from None
    except csv.Error as err:
        raise UsageError(f"{csv_name(csv_file)} is not a readable CSV ({err}); export the measured runs as a plain "
                         "CSV.") from None


def write_batch_files(runs: list, out_dir: Path, clusters_dir: Path) -> None:
    """commands-<cluster>.txt per cluster (ds_configs beside them), each line `--id ROW --cluster C -- <command>`:
    `llmperf predict --batch FILE` needs no --cluster."""
    from llmperf_hook.validate.cluster_choice import read_cluster_presets
    from llmperf_hook.validate.runner import plan_run

    presets = read_cluster_presets(clusters_dir)
    folder = out_dir.resolve()  # the batch reads relative paths from its own folder: written paths are relative to it
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"--write-batch {str(out_dir)!r} is a file; give a folder for the batch files (it is created "
                         "if missing).")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        lines: dict[str, list[str]] = {}
        for run in runs:
            plan, cluster = plan_run(run, presets, folder)
            words = ["--id", run.row_id, "--cluster", _beside(cluster.cluster, folder), "--",
                     *(_beside(word, folder) for word in plan.argv)]
            lines.setdefault(cluster.cluster, []).append(
                f"# row {run.row_id} ({run.source_id}) measured {run.iteration_time_s:g} s\n{shlex.join(words)}")
        files = {out_dir / f"commands-{Path(c).stem if c.endswith('.yaml') else c}.txt": c for c in lines}
        _refuse_foreign_files(files, out_dir)
        for path, cluster in files.items():
            path.write_text(BATCH_MARKER + "\n" + "\n".join(lines[cluster]) + "\n", encoding="utf-8")
            click.echo(f"wrote {path} ({len(lines[cluster])} commands; llmperf predict --batch {path} --format json; "
                       "each result carries its row's id)", err=True)
    except OSError as err:
        raise UsageError(f"--write-batch {str(out_dir)!r}: cannot write {err.filename or out_dir} ({err.strerror or err}). "
                         "Pass a writable folder (it is created if missing).") from None


def _beside(word: str, folder: Path) -> str:
    """A file validate wrote into the batch folder by its name there; another existing file by its absolute path
    (the batch reads relative paths from its own folder); any other word unchanged."""
    if word.startswith(str(folder) + os.sep):
        return os.path.relpath(word, folder)
    return os.path.abspath(word) if word.endswith((".yaml", ".yml")) and os.path.isfile(word) else word


BATCH_MARKER = "# written by llmperf validate --write-batch (a later run with the same folder replaces this file)"
"""First line of every batch file validate writes: only files that carry it are ever replaced."""


def _refuse_foreign_files(files: dict[Path, str], out_dir: Path) -> None:
    """A commands-<cluster>.txt already in the folder that validate did not write is the user's: never replaced."""
    theirs = []
    for path in files:
        try:
            first = path.read_text(encoding="utf-8", errors="replace").split("\n", 1)[0] if path.exists() else BATCH_MARKER
        except OSError:
            first = ""
        if path.exists() and (not path.is_file() or first != BATCH_MARKER):
            theirs.append(path.name)
    if theirs:
        raise UsageError(f"--write-batch {str(out_dir)!r}: {', '.join(theirs)} already exist(s) there and were not "
                         "written by llmperf validate, so they are left untouched and nothing was written. Pass an "
                         "empty or new folder, or move those files away.")
