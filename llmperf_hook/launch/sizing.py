"""How big the launch is: nodes, processes per node and world size, each with its origin.

A launcher parser returns a `LaunchSize` whose counts may be unknown (`--nproc-per-node gpu`, a deepspeed
launch without a hostfile: "every GPU of this machine", which is not the machine the job will run on).
`finish_job` fills those from llmperf's overrides, then from the environment of the target node
(CUDA_VISIBLE_DEVICES, SLURM_GPUS_ON_NODE), then from the --cluster's GPUs per node, and otherwise asks for
`--nproc-per-node`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

from llmperf_hook.errors import UsageError
from llmperf_hook.launch.parsed_job import ParsedJob, ScriptFile
from llmperf_hook.provenance import Source, SourceKind


DEEPSPEED_VERSION_ENV = "LLMPERF_DEEPSPEED_VERSION"
"""llmperf's own job setting read from the job's environment: the DeepSpeed release that runs it
(frameworks/deepspeed_release.py)."""

TRANSFORMERS_VERSION_ENV = "LLMPERF_TRANSFORMERS_VERSION"
"""Likewise: the transformers release whose Hugging Face Trainer runs it (frameworks/transformers_release.py)."""

MAX_CONNECTIONS_ENV = "CUDA_DEVICE_MAX_CONNECTIONS"

PIN_MEMORY_BACKEND_ENV = "DS_PIN_MEMORY_BACKEND"

TE_SOFTMAX_FUSION_ENV = "NVTE_MASKED_SOFTMAX_FUSION"

PRICED_ENV = (DEEPSPEED_VERSION_ENV, TRANSFORMERS_VERSION_ENV, MAX_CONNECTIONS_ENV, PIN_MEMORY_BACKEND_ENV,
              TE_SOFTMAX_FUSION_ENV)
"""Variables of the launching environment the job inherits and the prediction reads: the DeepSpeed and transformers
releases, CUDA's hardware queue count, which decides whether Megatron's sequence-parallel collectives overlap their
GEMMs (frameworks/assemble.py), how DeepSpeed pins host memory (frameworks/deepspeed_release.native_pinned_memory), and
whether Transformer Engine's unfused attention may fuse its softmax (frameworks/step_flags.te_softmax_fusion)."""
INHERITED_ENV = ("ACCELERATE_GRADIENT_ACCUMULATION_STEPS",)
"""Variables of the launching environment the job inherits unless its launcher sets them: Accelerator.__init__ takes
its accumulation from this one over its own argument (frameworks/accelerate_plugin.accelerator_env_accumulation), and
`accelerate launch` starts from a copy of its environment, setting it only from its own --gradient_accumulation_steps
under DeepSpeed (utils/launch.py prepare_deepspeed_cmd_env: `current_env = os.environ.copy()`, then assigned)."""


@dataclass(frozen=True)
class Sized:
    value: int | None
    """The count, or None when only the machine that runs the job knows it."""
    source: Source
    unknown_reason: str = ""
    """Why value is None (shown in the error that asks for an override)."""
    env_may_tell: bool = True
    """Whether CUDA_VISIBLE_DEVICES / SLURM_GPUS_ON_NODE may fill an unknown value (deepspeed ignores
    CUDA_VISIBLE_DEVICES once --include/--exclude/--num_gpus/--num_nodes are given)."""
    of_node: Callable[[int], int] | None = None
    """The count as a function of the node's GPUs, where --cluster gives those (deepspeed --exclude localhost:0
    without a hostfile: the node's GPUs less the excluded ones)."""
    least: int | None = None
    """The fewest of an elastic range (torchrun --nnodes MIN:MAX), where `value` is its maximum: torchrun starts the
    job once MIN nodes joined the rendezvous (torch/distributed/run.py parse_min_max_nnodes -> min_nodes)."""
    listed: tuple[int, ...] | None = None
    """The counts a Slurm size string allows (`-N 1,4`), where not every one from `least` to `value`."""


@dataclass(frozen=True)
class LaunchSize:
    launcher: str
    nnodes: Sized
    nproc_per_node: Sized
    world_size: Sized | None
    """Set when the launcher states the total itself (uneven hostfile slots, srun -n, WORLD_SIZE)."""
    script: str
    script_args: tuple[str, ...]
    warnings: tuple[str, ...] = ()
    script_files: Mapping[str, ScriptFile] = field(default_factory=dict)
    """Files the batch script writes before its launch line (ParsedJob.script_files)."""
    autotuning: str = ""
    """deepspeed --autotuning tune|run (ParsedJob.autotuning)."""
    undecided: tuple[str, ...] = ()
    """ParsedJob.undecided: where the launch script ran commands on conditions llmperf could not decide."""
    undecided_options: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """ParsedJob.undecided_options."""
    unknown: Mapping[str, str] = field(default_factory=dict)
    """ParsedJob.unknown_values."""
    missing_arguments: Mapping[str, frozenset[str]] = field(default_factory=dict)
    """ParsedJob.missing_arguments."""


def gpus_from_env(env: Mapping[str, str], used: dict[str, str]) -> Sized | None:
    """GPUs of a node as the job's own environment states them (the 'gpu'/'auto' count of torchrun)."""
    for var in ("SLURM_GPUS_ON_NODE", "SLURM_GPUS_PER_NODE"):
        text = env.get(var, "").split("(")[0].split(":")[-1]
        if text.isdigit() and int(text) > 0:
            used[var] = env[var]
            return Sized(int(text), Source(SourceKind.ENV, var))
    visible = env.get("CUDA_VISIBLE_DEVICES", "").strip()
    if visible and visible not in ("-1", "NoDevFiles"):
        used["CUDA_VISIBLE_DEVICES"] = visible
        return Sized(len([d for d in visible.split(",") if d.strip()]), Source(SourceKind.ENV, "CUDA_VISIBLE_DEVICES"))
    return None


def _require_positive(counts: dict[str, Sized | None]) -> None:
    for what, sized in counts.items():
        if sized is not None and sized.value is not None and sized.value < 1:
            raise UsageError(f"{what} {sized.value} from {sized.source} must be at least 1; fix that value "
                             "(or give llmperf --nnodes/--nproc-per-node).")


def _resolve_nproc(size: LaunchSize, override: int | None, env: Mapping[str, str], used: dict[str, str],
                   cluster_gpus: int | None = None) -> Sized:
    if override is not None:
        return Sized(override, Source(SourceKind.OVERRIDE, "--nproc-per-node"))
    if size.nproc_per_node.value is not None:
        return size.nproc_per_node
    from_env = gpus_from_env(env, used) if size.nproc_per_node.env_may_tell else None
    if from_env is not None:
        return from_env
    if cluster_gpus is not None and size.nproc_per_node.of_node is not None:
        return Sized(size.nproc_per_node.of_node(cluster_gpus),
                     Source(SourceKind.OVERRIDE, f"--cluster's {cluster_gpus} GPUs per node, less the "
                                                            f"{size.nproc_per_node.source}"))
    if cluster_gpus is not None and size.nproc_per_node.env_may_tell:
        return Sized(cluster_gpus, Source(SourceKind.OVERRIDE, "--cluster: its GPUs per node"))
    raise UsageError(
        f"cannot tell how many processes per node the {size.launcher} command starts: "
        f"{size.nproc_per_node.unknown_reason} ({size.nproc_per_node.source}), and that is a property of the machine "
        "the job runs on, not this one. Give it with llmperf's --nproc-per-node N"
        f"{' (or set CUDA_VISIBLE_DEVICES; predict and tune also read it from --cluster)' if size.nproc_per_node.env_may_tell else ''}."
    )


def finish_job(
    size: LaunchSize, argv: tuple[str, ...], env: Mapping[str, str], used: dict[str, str],
    nnodes_override: int | None = None, nproc_override: int | None = None, cluster_gpus: int | None = None,
) -> ParsedJob:
    """Apply llmperf's overrides (highest precedence) and build the ParsedJob; `cluster_gpus` sizes a launch that
    starts one process per GPU of the node when nothing else says how many that is."""
    for name, value in (("--nnodes", nnodes_override), ("--nproc-per-node", nproc_override)):
        if value is not None and value < 1:
            raise UsageError(f"llmperf {name} {value} must be at least 1.")
    nproc = _resolve_nproc(size, nproc_override, env, used, cluster_gpus)
    nnodes = Sized(nnodes_override, Source(SourceKind.OVERRIDE, "--nnodes")) if nnodes_override else size.nnodes
    assert nnodes.value is not None and nproc.value is not None
    _require_positive({"nodes": nnodes, "processes per node": nproc, "world size": size.world_size})
    overridden = nnodes_override is not None or nproc_override is not None
    if size.world_size is not None and size.world_size.value is not None and not overridden:
        world = size.world_size
    else:
        world = Sized(nnodes.value * nproc.value, Source(SourceKind.DERIVED, "nnodes * nproc_per_node"))
    assert world.value is not None
    elastic = nnodes.least is not None and nnodes.least < nnodes.value
    used.update({name: env[name] for name in PRICED_ENV if name in env})
    for name in INHERITED_ENV:  # what the launcher exported (in `used`) wins
        if name in env:
            used.setdefault(name, env[name])
    return ParsedJob(
        launcher=size.launcher, nnodes=nnodes.value, nproc_per_node=nproc.value, world_size=world.value,
        script=size.script, script_args=size.script_args, argv=argv, env=dict(used),
        sources={"nnodes": nnodes.source, "nproc_per_node": nproc.source, "world_size": world.source},
        warnings=size.warnings, script_files=size.script_files, autotuning=size.autotuning, undecided=size.undecided,
        undecided_options=size.undecided_options, unknown_values=size.unknown,
        missing_arguments=size.missing_arguments,
        elastic_min_nnodes=nnodes.least if elastic else None,
        elastic_node_counts=tuple(n for n in nnodes.listed if n < nnodes.value) if elastic and nnodes.listed else (),
    )
