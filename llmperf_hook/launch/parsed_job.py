"""Stage [1] output: what the launcher will start."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from llmperf_hook.provenance import Source


@dataclass(frozen=True)
class ScriptFile:
    """A file a submitted batch script writes before its launch line (a here-document), known without running it."""

    text: str
    """The content the script writes, its variables expanded as bash would."""
    origin: str
    """Where the script writes it, for messages: `job.slurm line 142 (the here-document of ...)`."""
    command: str = ""
    """The command that writes it when that is not a here-document (`sed "s/.../" tmpl > ds_config.json`): its
    content is unknown until the command runs, so `text` is empty and the file on disk, if any, is read instead."""


@dataclass(frozen=True)
class ParsedJob:
    """The launch command understood: which launcher, how many processes where, and the training script."""

    launcher: str
    """"torchrun" | "torch.distributed.launch" | "deepspeed" | "accelerate" | "srun" | "mpirun" | "python" (single
    process)."""
    nnodes: int
    """Number of nodes (the maximum of an elastic MIN:MAX range)."""
    nproc_per_node: int
    """Processes (= GPUs) per node."""
    world_size: int
    """Total ranks; nnodes * nproc_per_node unless a hostfile/env gives uneven slots."""
    script: str
    """The training entry point (path of the .py, or `-m module`)."""
    script_args: tuple[str, ...]
    """Arguments after the script, normalised (one argv word per token)."""
    argv: tuple[str, ...]
    """The whole command as given, for `run` to exec unchanged."""
    env: Mapping[str, str] = field(default_factory=dict)
    """The environment variables that were read (only those)."""
    sources: Mapping[str, Source] = field(default_factory=dict)
    """Origin of nnodes, nproc_per_node, world_size, ... ."""
    warnings: tuple[str, ...] = ()
    """Accepted but not modelled launcher settings."""
    script_files: Mapping[str, ScriptFile] = field(default_factory=dict)
    """Files the submitted batch script writes before its launch line (sbatch job.slurm with `cat <<EOT > ds.json`),
    by normalised path: read in place of the disk, where they do not exist yet."""
    autotuning: str = ""
    """`deepspeed --autotuning tune|run` ("" = not given): DeepSpeed's autotuner runs experiments that set the
    ZeRO stage and micro batch themselves (deepspeed/autotuning/autotuner.py), so the ds_config is a template."""

    undecided: tuple[str, ...] = ()
    """Where the launch script ran a command only a condition llmperf could not decide runs (`line 12`, a sourced
    file's `FILE line 3`): it reads both branches, so the arguments may hold what no single run of bash gives, and a
    rule on flags two branches give is a warning, not a refusal."""
    undecided_options: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """For each of `undecided`, the options of the launch it may have set (launch/undecided_options.py)."""

    unknown_values: Mapping[str, str] = field(default_factory=dict)
    """The variables the launch script's launch line leaves unexpanded because only running the script gives their
    value (`batch_size=$(( global / dp_size ))` with dp_size from `nvidia-smi`), each with where it is set: a
    refusal quoting `$NAME` names that line (shell_variables.unknown_value_note)."""

    missing_arguments: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """The launch script's arguments its lines read that it was not given (`$3 at line 17`), each with the options
    whose value it gives: a refusal about one of those options names it (shell_positional.missing_arguments_note)."""

    elastic_min_nnodes: int | None = None
    """The fewest nodes an elastic range starts the job with (torchrun --nnodes 2:4 -> 2; `nnodes` is its maximum,
    the size predict and tune price); None: a fixed node count (or llmperf's --nnodes)."""
    elastic_node_counts: tuple[int, ...] = ()
    """The counts below `nnodes` a Slurm size string lets the job start at, smallest first (`-N 1,2,4` -> (1, 2));
    empty where every count from elastic_min_nnodes up may be the one (a MIN-MAX range)."""

    def undecided_setting(self, options: Iterable[str]) -> tuple[str, ...]:
        """The undecided lines that may have set one of `options` (`--mock-data`), in reading order: where a rule on
        those options softens to a warning."""
        wanted = set(options)
        return tuple(where for where in dict.fromkeys(self.undecided)
                     if wanted & self.undecided_options.get(where, frozenset()))

    def __post_init__(self) -> None:
        assert self.nnodes >= 1 and self.nproc_per_node >= 1 and self.world_size >= 1, self
