"""Shared pieces of the `predict` and `run` commands: the launch command after `--` and job overrides."""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from llmperf_hook.errors import UsageError

if TYPE_CHECKING:  # imported where used: `llmperf predict --help` and usage errors need no frameworks/ (~0.1 s)
    from llmperf_hook.frameworks.resolve import JobOverrides


def launch_argv(words: Sequence[str], verb: str) -> list[str]:
    """The launch command from click's UNPROCESSED arguments (a leading `--` dropped)."""
    argv = list(words[1:]) if words[:1] == ("--",) or list(words[:1]) == ["--"] else list(words)
    if not argv:
        raise UsageError(f"llmperf {verb} needs the launch command after `--`, e.g. `llmperf {verb} --cluster "
                         f"dgx-h100 -- torchrun --nproc-per-node 8 pretrain_gpt.py ...`.")
    return argv


def overrides(nnodes: int | None, nproc_per_node: int | None, model: str | None) -> JobOverrides:
    from llmperf_hook.frameworks.resolve import JobOverrides

    for name, value in (("--nnodes", nnodes), ("--nproc-per-node", nproc_per_node)):
        if value is not None and value < 1:
            raise UsageError(f"{name} {value} must be a positive integer (from the llmperf options).")
    return JobOverrides(nnodes=nnodes, nproc_per_node=nproc_per_node, model=model)
