"""`llmperf explain [--format table|json] [--nnodes N] [--nproc-per-node N] [--model PRESET|FILE] -- <command>`:
the resolved job and training configuration, where every value came from, and one warning per setting that is
accepted but not modelled. Light: no torch, deepspeed, lightgbm or sklearn.
"""

from __future__ import annotations

import json
import os
from typing import Any

import click

from llmperf_hook.errors import UsageError


def render_table(data: dict[str, Any]) -> str:
    """Aligned `key  value  (source)` lines, then the warnings."""
    sources = data.get("sources", {})
    keys = [k for k in data if k not in ("sources", "warnings")]
    width = max(len(k) for k in keys)
    lines = []
    for key in keys:
        value = data[key]
        shown = "-" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
        origin = f"  ({sources[key]})" if key in sources else ""
        lines.append(f"{key:<{width}}  {shown}{origin}")
    for warning in data.get("warnings", []):
        lines.append(f"warning: {warning}")
    return "\n".join(lines)


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--nnodes", type=int, default=None, help="Nodes, for a command whose size comes from elsewhere.")
@click.option("--nproc-per-node", type=int, default=None, help="Processes (GPUs) per node, overriding the command.")
@click.option("--model", default=None, help="Model shape preset or file (for scripts without Megatron model flags).")
@click.argument("launch_command", nargs=-1, type=click.UNPROCESSED)
def command(fmt: str, nnodes: int | None, nproc_per_node: int | None, model: str | None, launch_command: tuple[str, ...]) -> None:
    """Print the resolved job and training configuration of a launch command, with the source of every value."""
    from llmperf_hook.frameworks.explain_data import explain_json
    from llmperf_hook.frameworks.resolve import JobOverrides, resolve_job
    from llmperf_hook.predict.gemm_alignment import config_alignment_warnings

    if not launch_command:
        raise UsageError("explain needs a launch command after `--`, e.g. `llmperf explain -- torchrun ... pretrain_gpt.py ...`.")
    job, cfg = resolve_job(list(launch_command), dict(os.environ), JobOverrides(nnodes, nproc_per_node, model))
    data = explain_json(cfg, job)
    data["warnings"] = [*data["warnings"], *config_alignment_warnings(cfg)]  # GPU-independent: explain knows none
    click.echo(json.dumps(data, indent=2) if fmt == "json" else render_table(data))
