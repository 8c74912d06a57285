"""The stages wired together (DESIGN.md "Data flow"): launch command -> prediction.

    [1]+[2] frameworks.resolve.resolve_job   argv + env        -> ParsedJob, TrainingConfig
    [3]     graph.build.build_graph          TrainingConfig    -> OpGraph
    [4]     predict.dispatch.predict_op_times OpGraph          -> OpTimes (fitted profile, else roofline / alpha-beta)
    [5]     schedule.compose.compose_step    OpGraph + OpTimes -> step time, breakdown (pipeline simulated)
            schedule.memory.estimate_memory  OpGraph           -> MemoryEstimate
    [6]     report.*                         StepEstimate      -> table / JSON / trace

Default cluster when none is given: DEFAULT_CLUSTER (with a warning saying so).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping, Sequence

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.resolve import JobOverrides, resolve_job
from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.graph.build import GraphMemo, build_graph
from llmperf_hook.hardware.load import load_cluster, load_hardware
from llmperf_hook.hardware.spec import ClusterSpec, HardwareSpec
from llmperf_hook.launch.parsed_job import ParsedJob
from llmperf_hook.predict.dispatch import predict_op_times
from llmperf_hook.refine.calibration import calibrate_step, calibration_store_problem, find_calibration
from llmperf_hook.schedule.compose import compose_step
from llmperf_hook.schedule.memory import estimate_memory
from llmperf_hook.schedule.memory_fit import tight_fit_warning
from llmperf_hook.schedule.step_estimate import StepEstimate

__all__ = ["DEFAULT_CLUSTER", "Prediction", "load_cluster", "load_hardware", "predict_command", "predict_config",
           "prediction_json", "resolve_cluster", "resolve_command"]

DEFAULT_CLUSTER = "dgx-h100"
"""Cluster assumed when no --cluster is given and --hardware names no GPU of a shipped cluster (`home_cluster`): the
most common training system today."""
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Prediction:
    """Everything `llmperf predict` knows about one launch command."""

    job: ParsedJob
    config: TrainingConfig
    estimate: StepEstimate
    cluster: ClusterSpec
    warnings: tuple[str, ...] = field(default_factory=tuple)
    """Job, config and cluster-choice warnings (the estimate carries its own)."""


IMPLAUSIBLE_MFU = 0.75
"""Model FLOPs utilisation above which a prediction is flagged: the best published dense-model training runs reach
about 55 % (MegaScale, Jiang et al. NSDI 2024: 55.2 % for 175B on 12,288 A100s; PaLM 540B: 46.2 %, Chowdhery et al.
2022; Megatron-LM on H100: 47 %), so a predicted 75 % means an op priced far below its work (context-parallel
attention once gave 94 %)."""

MEASURED_PEAK_MFU = 1.0
"""The bound on hardware whose peak was measured (gemm_efficiency 1: `llmperf profile` and hardware/local_cpu.py
write the rate the device's own best GEMM reached, not a datasheet figure): all model FLOPs at that rate and nothing
else in the step. Published GPU runs say nothing about such a peak (a one-thread CPU job's big GEMMs run at it)."""


def mfu_bound(gpu: HardwareSpec) -> tuple[float, str]:
    """(MFU above which a prediction is flagged on `gpu`, what that bound is, for the warning)."""
    if gpu.gemm_efficiency >= 1.0:
        return MEASURED_PEAK_MFU, (f"100 % of {gpu.name}'s measured peak (the rate its best GEMM reached; no step "
                                   f"runs faster than its matrix multiplies alone)")
    return IMPLAUSIBLE_MFU, "what any published training run reaches (about 55 % at best)"


def predict_config(cfg: TrainingConfig, cluster: ClusterSpec, *, detail: bool = False,
                   graphs: GraphMemo | None = None) -> StepEstimate:
    """Stages [3]-[5] for one configuration: pure, memoised per op, a few milliseconds. `graphs`: graphs built
    for earlier configurations (predict --batch keeps one for the batch: graph/build.GraphMemo)."""
    graph = build_graph(cfg, cluster, graphs)
    times = predict_op_times(graph, cluster, cfg.precision, graphs.derived(graph) if graphs is not None else None)
    step = compose_step(graph, dict(times.seconds), cfg, detail=detail, host_per_op_s=cluster.host_overhead_per_op_s)
    memory = estimate_memory(cfg, graph, cluster)
    predictor = dict(times.predictor_by_class)
    warnings = list(times.warnings) + list(graph.warnings)
    if memory.tight:
        warnings.append(tight_fit_warning(memory, cfg))
    # refine/calibration.py: this configuration's own calibration if it was instrumented, else the shared one shrunk
    calibrated = calibrate_step(find_calibration(cluster.gpu.name, cluster.name, cfg.framework), cfg, step.step_time_s,
                                step.breakdown)
    store_problem = calibration_store_problem(cluster.gpu.name, cluster.name, cfg.framework)
    if store_problem:  # a damaged store drops the calibration: said, not silent
        warnings.append(store_problem)
    if calibrated is None:
        warnings += calibration_elsewhere_notes(cluster, cfg.framework)
    scale, step_s = (calibrated.scale, calibrated.step_time_s) if calibrated else (1.0, step.step_time_s)
    if calibrated is not None:
        predictor["calibration"] = calibrated.predictor_note
        warnings.append(calibrated.warning)
    breakdown = dict(step.breakdown)
    if calibrated is not None and step_s != step.step_time_s:
        breakdown["calibration"] = step_s - step.step_time_s
    mfu = graph.model_flops_per_step / (step_s * cfg.world_size * cluster.gpu.peak_for(cfg.precision))
    bound, beyond = mfu_bound(cluster.gpu)
    if mfu > bound:
        warnings.append(f"predicted MFU {100 * mfu:.0f} % is above {beyond}: a cost this job runs is likely not "
                        "modelled; please report the command as an llmperf bug, and do not rely on this step time")
    return StepEstimate(
        step_time_s=step_s,
        tokens_per_s=cfg.batch.global_batch_size * cfg.model.seq_length / step_s,
        mfu=mfu,
        breakdown=breakdown, stages=step.stages, memory=memory, predictor=predictor, warnings=tuple(warnings),
        model_flops_per_step=graph.model_flops_per_step, critical_stage=step.critical_stage,
        timeline=step.timeline, calibration_scale=scale,
    )


def calibration_elsewhere_notes(cluster: ClusterSpec, framework: str) -> tuple[str, ...]:
    """One line when hardware of the user's own has no calibration on `cluster` but has one under DEFAULT_CLUSTER:
    before 28 Nov 2026 (d37bfb6a) such hardware without --cluster was assumed on DEFAULT_CLUSTER, and `llmperf
    refine` stored its runs' calibration under that key (refine_run.calibration_key: the cluster of the prediction);
    now the cluster `llmperf profile --comm` measured is assumed, and that calibration is no longer applied."""
    hardware = cluster.gpu.name
    if cluster.name == DEFAULT_CLUSTER or home_cluster(hardware) is not None \
            or find_calibration(hardware, DEFAULT_CLUSTER, framework) is None:
        return ()
    return (f"{hardware} has a calibration from instrumented runs under {DEFAULT_CLUSTER} (the cluster assumed for "
            f"it without --cluster before 28 Nov 2026), none under {cluster.name}: this prediction is uncalibrated; "
            f"`--cluster {DEFAULT_CLUSTER}` applies the old one, and `llmperf refine` of a run on {cluster.name} "
            f"calibrates this cluster",)


def resolve_cluster(cluster: str | ClusterSpec | None, hardware: str | None) -> tuple[ClusterSpec, tuple[str, ...]]:
    """The cluster to predict on: given, or (with a warning) the shipped cluster of the `hardware` GPUs, else the
    cluster `llmperf profile --comm` measured for it, else DEFAULT_CLUSTER; `hardware` replaces its GPU.
    A name that is not a file is looked up lower-case (presets and `llmperf profile` names are lower-case:
    `--cluster DGX-A100` was 'not found')."""
    spec, notes, _ = assumed_cluster(cluster, hardware)
    return spec, notes


def assumed_cluster(cluster: str | ClusterSpec | None, hardware: str | None
                    ) -> tuple[ClusterSpec, tuple[str, ...], bool]:
    """resolve_cluster's (cluster, notes), and whether that cluster is a file `llmperf profile --comm` measured,
    assumed without --cluster (its gpus_per_node is the ranks that run had: resolve_command keeps a job's ranks
    per node on one node of it)."""
    cluster = _preset_name(cluster) if isinstance(cluster, str) else cluster
    hardware = _preset_name(hardware) if hardware else hardware
    if isinstance(cluster, ClusterSpec):
        return (replace(cluster, gpu=load_hardware(hardware)) if hardware else cluster), (), False
    if cluster:
        return load_cluster(cluster, hardware), (), False
    home = home_cluster(hardware) if hardware else None
    if home:
        note = (f"no --cluster given: assuming {home}, the shipped cluster of {hardware} GPUs (its nodes and "
                f"network); pass --cluster NAME|FILE for your system.")
        return load_cluster(home, hardware), (note,), False
    measured, elsewhere = _measured_files(hardware) if hardware else ([], [])
    files = measured or [path for path, _ in elsewhere]
    if files:  # this host's measurement first; another host's of this device is still nearer than DEFAULT_CLUSTER's
        others = (f" (the newest of {len(files)} for it: {', '.join(p.stem for p in files[1:])} too)"
                  if len(files) > 1 else "")
        note = (f"no --cluster given: assuming {files[0].stem}, the cluster `llmperf profile --comm` described for "
                f"{hardware} ({files[0]}){_other_hosts(elsewhere[0][1]) if not measured else ''}{others}; pass "
                "--cluster NAME|FILE for another.")
        return load_cluster(str(files[0]), hardware), (note,), True
    note = (f"no --cluster given: assuming {DEFAULT_CLUSTER} ({'GPU ' + hardware if hardware else 'its GPUs'}, "
            f"its network); pass --cluster NAME|FILE for your system.")
    return load_cluster(DEFAULT_CLUSTER, hardware), (note,), False


def _other_hosts(hosts: Sequence[str]) -> str:
    """Where a measured file assumed here came from: a container's hostname changes with each start (docker: the
    container id), and a cluster's other nodes were not in the comm run; the user may know better."""
    import socket

    return (f" on other hosts ({', '.join(hosts)}), not this one ({socket.gethostname()}): the nearest measured "
            "network of this device, if this host's differs run `llmperf profile --comm` here")


@lru_cache(maxsize=None)
def home_cluster(hardware: str) -> str | None:
    """The shipped cluster preset built of `hardware` GPUs (configs/clusters/*.yaml `gpu:`), the DGX one where
    several are (a100-sxm4-80gb: dgx-a100, not perlmutter or vtrain-a100); None for a GPU no preset holds. With
    --hardware alone the job runs on that GPU's own nodes: DEFAULT_CLUSTER's NVLink 4 (450 GB/s per direction) and
    host would be wrong for an A100 node (NVLink 3, 300 GB/s)."""
    from llmperf_hook.resources import configs_dir

    names = sorted(p.stem for p in _cluster_files_of(configs_dir() / "clusters", hardware))
    dgx = [n for n in names if n.startswith("dgx-")]
    return dgx[0] if dgx else names[0] if len(names) == 1 else None


def measured_clusters(hardware: str) -> list[Path]:
    """The user's own cluster files of `hardware` on this host, newest first (the one assumed, the others named in
    its note); [] when there is none. For hardware no shipped cluster holds (a CPU or GPU profile of the user's own):
    the measured network of that machine, not DEFAULT_CLUSTER's NVLink with the hardware swapped in.
    A file of $LLMPERF_HOME/clusters is `hardware`'s when its `gpu:` is that name, or when `llmperf profile --comm`
    recorded the device it ran on (`measured_on: {device, hosts}`, comm_sampler._ensure_cluster_yaml) and that is the
    device `hardware`'s fitted profile was measured on (a CPU profile named with --name; before, the file named only
    the default profile name, and such a profile never found its network). A file whose `measured_on.hosts` does not
    hold this host is another machine's network (two hosts of one CPU model sharing an $LLMPERF_HOME) and is not
    listed here (assumed_cluster still takes it, saying so, before DEFAULT_CLUSTER); files written before 28 Nov
    2026 name no hosts and are read as before."""
    return _measured_files(hardware)[0]


def _measured_files(hardware: str) -> tuple[list[Path], list[tuple[Path, tuple[str, ...]]]]:
    """(`hardware`'s cluster files measured here, newest first; those other hosts measured, with those hosts), one
    folder scan."""
    from llmperf_hook.resources import llmperf_home

    docs = _cluster_docs(llmperf_home() / "clusters")
    device = profile_device(hardware) if any(_measured_device(doc) for _, doc in docs) else None
    found = sorted(((path, doc) for path, doc in docs if str(doc.get("gpu", "")).lower() == hardware.lower()
                    or device is not None and _measured_device(doc) == device),
                   key=lambda item: (item[0].stat().st_mtime, item[0]), reverse=True)
    return ([path for path, doc in found if _measured_here(doc)],
            [(path, tuple(str(h) for h in doc["measured_on"]["hosts"])) for path, doc in found if not _measured_here(doc)])


def _cluster_docs(folder: Path) -> list[tuple[Path, dict[str, Any]]]:
    """The mappings of the cluster YAML files in `folder`; an unreadable file (not UTF-8 included) is skipped here and
    reported when it is named with --cluster. libyaml's safe loader (hardware/load.py SAFE_LOADER): the pure-Python
    one spent ~30 ms of every predict's process on the 11 shipped files, libyaml ~2 ms (H193)."""
    import yaml

    from llmperf_hook.hardware.load import SAFE_LOADER

    docs = []
    for path in folder.glob("*.y*ml"):
        try:
            doc = yaml.load(path.read_text(), Loader=SAFE_LOADER)
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
        if isinstance(doc, dict):
            docs.append((path, doc))
    return docs


def _measured_device(doc: Mapping[str, Any]) -> str | None:
    measured_on = doc.get("measured_on")
    return str(measured_on["device"]) if isinstance(measured_on, dict) and measured_on.get("device") else None


def _measured_here(doc: Mapping[str, Any]) -> bool:
    """Whether this machine measured the file's network (its host name, or its boot id: a container restarted under
    a new host name on the same machine, profile/machine_identity.py), or the file does not say (written before
    hosts were kept)."""
    import socket

    from llmperf_hook.profile.machine_identity import machine_id

    measured_on = doc.get("measured_on")
    hosts = measured_on.get("hosts") if isinstance(measured_on, dict) else None
    if not isinstance(hosts, list) or socket.gethostname() in [str(h) for h in hosts]:
        return True
    machines = measured_on.get("machines")
    return isinstance(machines, list) and machine_id() in [str(m) for m in machines]


def profile_device(hardware: str) -> str | None:
    """The `device` of `hardware`'s fitted profile fingerprint (profile/local_hardware.fingerprint: the CPU model, or
    torch's GPU name), None without a profile that says."""
    import json

    from llmperf_hook.predict.fitted import profile_dirs

    for directory in profile_dirs(hardware):
        try:
            device = (json.loads((directory / "profile.json").read_text()).get("hardware") or {}).get("device")
        except (OSError, ValueError, AttributeError):
            continue
        if device:
            return str(device)
    return None


def _cluster_files_of(folder: Path, hardware: str) -> list[Path]:
    """Cluster YAML files in `folder` whose `gpu:` is `hardware` (case-insensitive)."""
    return [path for path, doc in _cluster_docs(folder) if str(doc.get("gpu", "")).lower() == hardware.lower()]


def _preset_name(name: str) -> str:
    import os

    return name if os.path.exists(name) or os.sep in name or name.endswith((".yaml", ".yml")) else name.lower()


def resolve_command(argv: Sequence[str], env: Mapping[str, str], *, cluster: str | ClusterSpec | None = None,
                    hardware: str | None = None, overrides: JobOverrides = JobOverrides(), measured: bool = False
                    ) -> tuple[ParsedJob, TrainingConfig, ClusterSpec, tuple[str, ...]]:
    """Stages [1]-[2] against a cluster: (job, config, cluster, cluster notes). A cluster named here (not the
    assumed default) also says how many GPUs 'every GPU of the node' is (`--nproc-per-node gpu`: one host's GPUs);
    a caller passing a resolved ClusterSpec says so itself through `overrides.cluster_gpus_per_node`. What the
    cluster's GPUs cannot run (FP8 without FP8 tensor cores) exits 2 here. `measured`: a resolved ClusterSpec is the
    one assumed_cluster measured (predict --batch resolves each (cluster, hardware) once)."""
    spec, notes, assumed = assumed_cluster(cluster, hardware)
    measured = measured or assumed
    if isinstance(cluster, str) and cluster and overrides.cluster_gpus_per_node is None:
        overrides = replace(overrides, cluster_gpus_per_node=spec.host_gpus)
    job, cfg = resolve_job(list(argv), env, overrides)
    check_precision_support(cfg, spec)
    if job.nproc_per_node > spec.host_gpus and measured:
        notes += (f"{spec.name}'s {spec.gpus_per_node} per node are the ranks `llmperf profile --comm` ran there, "
                  f"not what the machine holds: the job's {job.nproc_per_node} ranks per node are placed on one node "
                  f"of it (pass --cluster NAME|FILE to place them otherwise)",)
        spec = replace(spec, gpus_per_node=job.nproc_per_node)
    elif job.nproc_per_node > spec.host_gpus:
        notes += (_oversubscribed_node_note(job, spec),)
    return job, cfg, spec, notes


def _oversubscribed_node_note(job: ParsedJob, spec: ClusterSpec) -> str:
    """More processes per node than the node has GPUs, on one node as on several: the graph places at most
    host_gpus ranks to a node (graph/build.ranks_per_node), so a one-node command is priced on nodes it never named.
    Each rank binds GPU local_rank (Megatron's initialize.py torch.cuda.set_device(args.local_rank), DeepSpeed's
    LOCAL_RANK), so a local rank >= the node's GPUs fails 'invalid device ordinal'."""
    nodes_placed = -(-job.world_size // spec.host_gpus)
    return (f"the command starts {job.nproc_per_node} processes per node ({job.nnodes} node(s)) but {spec.name} has "
            f"{spec.host_gpus} GPUs per node: placement assumes {spec.host_gpus} ranks per node ({nodes_placed} "
            f"nodes). Ranks of local rank {spec.host_gpus} or more on one node have no GPU to bind "
            f"(torch.cuda.set_device: invalid device ordinal); start at most {spec.host_gpus} per node.")


def predict_command(argv: Sequence[str], env: Mapping[str, str], *, cluster: str | ClusterSpec | None = None,
                    hardware: str | None = None, overrides: JobOverrides = JobOverrides(),
                    detail: bool = False, measured: bool = False, graphs: GraphMemo | None = None) -> Prediction:
    """Stages [1]-[5] for a launch command (without the leading `llmperf`); see resolve_command and predict_config."""
    job, cfg, spec, notes = resolve_command(argv, env, cluster=cluster, hardware=hardware, overrides=overrides,
                                            measured=measured)
    estimate = predict_config(cfg, spec, detail=detail, graphs=graphs)
    return Prediction(job=job, config=cfg, estimate=estimate, cluster=spec,
                      warnings=tuple(job.warnings) + tuple(cfg.warnings) + notes)


def check_precision_support(cfg: TrainingConfig, spec: ClusterSpec) -> None:
    """FP8 needs FP8 tensor cores: Transformer Engine's fp8_autocast asserts check_fp8_support, 'Device compute
    capability 8.9 or higher required for FP8 execution' (transformer_engine/pytorch/fp8.py), at the first forward.
    A GPU preset without an fp8 peak has none (A100 and older). The MXFP8 recipe needs Blackwell's block-scaled
    GEMMs."""
    if cfg.precision == "fp8" and "fp8" not in spec.gpu.peak_flop_per_s:
        raise ConfigError(f"FP8 training ({cfg.sources.get('precision', 'the command')}) on {spec.gpu.name} ({spec.name}): "
                          "Transformer Engine asserts 'Device compute capability 8.9 or higher required for FP8 "
                          "execution' at the first forward; this GPU has no FP8 tensor cores. Drop the FP8 flags (train "
                          "in bf16) or predict on an FP8 GPU (e.g. --cluster dgx-h100).")
    capability = spec.gpu.compute_capability  # 0: not NVIDIA or unknown, left to the user
    low, high, says = _RECIPE_CAPABILITY.get(cfg.fp8_recipe, (0.0, 99.0, ""))
    if cfg.precision == "fp8" and 0 < capability and not low <= capability < high:
        says = says if capability < high else "MXFP8 (for all gemm layouts) is not supported on 12.0+ architectures yet"
        raise ConfigError(f"--fp8-recipe {cfg.fp8_recipe} ({cfg.sources.get('fp8_recipe', 'argv')}) on {spec.gpu.name} "
                          f"({spec.name}, compute capability {capability:.1f}): Transformer Engine asserts '{says}' at the "
                          "first forward (fp8_autocast's check_recipe_support). Use --fp8-recipe delayed or tensorwise "
                          "here, or predict on a GPU that runs this recipe (mxfp8: Blackwell, e.g. --cluster dgx-b200).")


_RECIPE_CAPABILITY = {  # recipe: (lowest, first refused compute capability, TE's refusal): transformer_engine/pytorch
    # quantization.py _compute_mxfp8_support / _compute_fp8_block_scaling_support (fp8.py in older releases)
    "mxfp8": (10.0, 12.0, "Device compute capability 10.0 or higher required for MXFP8 execution"),
    "blockwise": (9.0, 99.0, "FP8 block scaled GEMM requires compute capability 9.0 or higher and CUDA >= 12.9"),
}


def config_json(pred: Prediction) -> dict[str, Any]:
    """The `config` object: issue 2's explain JSON of the resolved job."""
    from llmperf_hook.report.config_json import config_json as render

    return render(pred.config, pred.job)


def prediction_json(pred: Prediction) -> dict[str, Any]:
    """The JSON object of `llmperf predict --format json` (schema 1; keys documented in report/json_report.py)."""
    from llmperf_hook.report.json_report import render_prediction_json

    return render_prediction_json(pred, config_json(pred), SCHEMA_VERSION)
