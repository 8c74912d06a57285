"""`llmperf validate FILE.csv`: predicted vs measured step time for measured runs, per row and per source."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import click

from llmperf_hook.errors import UsageError

SCHEMA_HELP = """\
FILE.csv has one row per measured run. Required columns: num_layers, hidden_size, seq_length,
global_batch_size, tp, pp, num_gpus, iteration_time_s (seconds per optimizer step), and the cluster: a
`cluster` column (preset name, or cluster YAML path, relative paths first beside the CSV) or `gpu_type` + `gpus_per_node` (with
`inter_node_network` text such as "InfiniBand HDR 200Gb/s x8 per node", or `inter_node_bandwidth_GBps` per
GPU, when the run spans nodes). Optional: row_id, source_id, source, model, num_attention_heads,
num_query_groups, ffn_hidden_size, vocab_size, micro_batch_size, vpp, cp, dp, ep, sequence_parallel,
recompute (full|selective|none), zero_stage_or_dist_opt, precision, framework (Megatron-LM,
Megatron-Core, Megatron-DeepSpeed, DeepSpeed), extra_args (launch flags), notes ("flags: ..." is read as
extra_args), intra_node_bandwidth_GBps, swiglu, normalization, position_embedding. A cell's value is its
first word ("full (use_checkpoint=true)" = full); blank cells take the framework default (rules printed
per row in --format json). The columns of ../shared/validation/dev.csv are this schema.
"""


@click.command(help="Compare predictions with measured runs from a CSV and print the errors.\n\n" + SCHEMA_HELP)
@click.argument("csv_file", metavar="FILE.csv", type=click.Path(dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--source", "sources", multiple=True, help="Only rows of this source_id (repeatable).")
@click.option("--worst", default=3, show_default=True, help="Worst rows listed per source.")
@click.option("--rows/--no-rows", default=True, show_default=True, help="Print the per-row table.")
@click.option("--write-batch", type=click.Path(file_okay=False), default=None,
              help="Also write the rows as launch commands (one file per cluster, for `llmperf predict --batch`) into this folder.")
def command(csv_file: str, fmt: str, sources: tuple[str, ...], worst: int, rows: bool, write_batch: str | None) -> None:
    from llmperf_hook.resources import configs_dir
    from llmperf_hook.validate.render import render_table, report_json
    from llmperf_hook.validate.runner import validate_runs
    from llmperf_hook.validate.runs_csv import build_runs_or_failures, read_runs_csv

    raw_rows = _read_csv(csv_file, read_runs_csv)
    if not raw_rows:
        raise UsageError(f"{csv_file} has a header but no rows: nothing to validate. Add one row per measured run.")
    runs = build_runs_or_failures(raw_rows, base_dir=Path(csv_file).resolve().parent)
    if sources:
        runs = [r for r in runs if r.source_id in sources]
        if not runs:
            raise UsageError(f"--source {', '.join(sources)}: no row of {csv_file} has that source_id.")
    if write_batch:
        from llmperf_hook.validate.scoring import RowResult

        write_batch_files([r for r in runs if not isinstance(r, RowResult)], Path(write_batch), configs_dir() / "clusters")
    report = validate_runs(runs, clusters_dir=configs_dir() / "clusters", num_worst=worst)
    if fmt == "json":
        click.echo(json.dumps(report_json(report), indent=1))
    else:
        click.echo(render_table(report, show_rows=rows))
    if report.rows and report.num_failed == len(report.rows):
        # The report above names each row's error; nothing was scored, so the input is unusable as given.
        raise UsageError(f"every row of {csv_file} failed ({report.num_failed}); nothing was scored. Fix the rows as "
                         "their errors above say.")


def _read_csv(csv_file: str, read_runs_csv) -> list[dict[str, str]]:
    """The CSV's rows; a file that is not UTF-8 text or not CSV is bad input (exit 2), not an internal error."""
    import csv

    try:
        return read_runs_csv(csv_file)
    except UnicodeDecodeError as err:
        raise UsageError(f"{csv_file} is not UTF-8 text (byte {err.start}: {err.reason}); export the measured runs as a "
                         "UTF-8 CSV.") from None
    except csv.Error as err:
        raise UsageError(f"{csv_file} is not a readable CSV ({err}); export the measured runs as a plain CSV.") from None


def write_batch_files(runs: list, out_dir: Path, clusters_dir: Path) -> None:
    """commands-<cluster>.txt per cluster (ds_configs beside them): `llmperf predict --cluster C --batch FILE`."""
    from llmperf_hook.validate.cluster_choice import read_cluster_presets
    from llmperf_hook.validate.runner import plan_run

    presets = read_cluster_presets(clusters_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    lines: dict[str, list[str]] = {}
    for run in runs:
        plan, cluster = plan_run(run, presets, out_dir)
        lines.setdefault(cluster.cluster, []).append(
            f"# row {run.row_id} ({run.source_id}) measured {run.iteration_time_s:g} s\n{shlex.join(plan.argv)}")
    for cluster, entries in lines.items():
        name = Path(cluster).stem if cluster.endswith(".yaml") else cluster
        (out_dir / f"commands-{name}.txt").write_text("\n".join(entries) + "\n", encoding="utf-8")
        click.echo(f"wrote {out_dir / f'commands-{name}.txt'} ({len(entries)} commands; "
                   f"llmperf predict --cluster {cluster} --batch FILE --format json)", err=True)
