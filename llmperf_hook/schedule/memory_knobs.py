"""Stage [5]: when a job does not fit, the knobs that free memory, how much each frees and whether the job then fits
(the exit-3 messages of `run --require-fit`).

Each knob is one change the user can make to the command, written in its framework's words, and each is priced
with the same memory model as the job (schedule/memory.py estimate_memory over graph/build.build_graph), so
"frees 12.3 GiB" is the difference of two predictions, not a rule of thumb:

  GPU   micro-batch size 1 (activations scale with it: Korthikanti et al. 2022, Sec. 4); full recompute of every
        layer (one 2sbh input kept per layer); sequence parallelism (the TP-replicated activations split, TP > 1);
        Megatron's distributed optimizer or the next ZeRO stage (state sharded over data-parallel ranks,
        Rajbhandari et al. 2020); tensor or pipeline parallelism doubled (weights and activations split).
  host  DeepSpeed: offload_optimizer / offload_param not offloaded, or at ZeRO-3 to nvme instead of cpu (ZeRO-1/2
        offload to CPU memory whatever the device says); Megatron-DeepSpeed: --checkpoint-in-cpu off; Megatron-LM:
        --optimizer-offload-fraction halved, or --optimizer-cpu-offload off, --cpu-offloading-num-layers halved;
        torch FSDP: no CPU offload.
  GPU   (Megatron-LM, beside tune's layout) --use-precision-aware-optimizer.

A layout knob is offered only where the framework accepts the layout it makes (tune/candidates.rule_masks: heads
and layers divisible, the global batch a multiple of micro-batch x DP, ...).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.hardware.spec import ClusterSpec
from llmperf_hook.provenance import SourceKind
from llmperf_hook.schedule.step_estimate import MemoryEstimate

if TYPE_CHECKING:
    from llmperf_hook.tune.candidate import Candidate

GiB = float(2**30)


@dataclass(frozen=True)
class KnobEffect:
    """One change to the command and the memory of the job with it."""

    knob: str
    """The change, in the framework's words (a flag or a ds_config key and its new value)."""
    freed_bytes: float
    """Bytes freed on the side that did not fit: peak per GPU, or host per node."""
    memory: MemoryEstimate

    @property
    def fits(self) -> bool:
        return self.memory.fits and self.memory.host_fits


def _memory(cfg: TrainingConfig, cluster: ClusterSpec) -> MemoryEstimate:
    from llmperf_hook.graph.build import build_graph  # stage [3]; imported here as memory.py does
    from llmperf_hook.schedule.memory import estimate_memory

    return estimate_memory(cfg, build_graph(cfg, cluster), cluster)


def _megatron(cfg: TrainingConfig) -> bool:
    return "megatron" in cfg.framework


def _layout_knobs(cfg: TrainingConfig) -> list[tuple[str, "Candidate"]]:
    """(words, tune Candidate) for the GPU knobs that change the layout, batch, recompute or sharding."""
    from llmperf_hook.tune.candidate import candidate_of

    base, p = candidate_of(cfg), cfg.parallel
    out: list[tuple[str, Candidate]] = []
    if base.micro_batch_size > 1:
        out.append((_micro_batch_words(cfg), dataclasses.replace(base, micro_batch_size=1)))
    if _megatron(cfg):
        if base.recompute != "full" or base.recompute_num_layers != 1:
            out.append(("--recompute-granularity full --recompute-method uniform --recompute-num-layers 1",
                        dataclasses.replace(base, recompute="full", recompute_num_layers=1)))
        if p.tp > 1 and not p.sequence_parallel:
            out.append(("--sequence-parallel", dataclasses.replace(base, sequence_parallel=True)))
        if not base.distributed_optimizer and base.zero_stage == 0 and "deepspeed" not in cfg.framework:
            out.append(("--use-distributed-optimizer", dataclasses.replace(base, distributed_optimizer=True)))
        out.append((f"--tensor-model-parallel-size {2 * p.tp}", dataclasses.replace(base, tp=2 * p.tp)))
        vpp = _virtual_stages_at_double_pp(cfg)
        if vpp:
            out.append((f"--pipeline-model-parallel-size {2 * p.pp}", dataclasses.replace(base, pp=2 * p.pp, vpp=vpp)))
    if "deepspeed" in cfg.framework and base.zero_stage < 3:
        out.append((f"zero_optimization.stage {base.zero_stage + 1}",
                    dataclasses.replace(base, zero_stage=base.zero_stage + 1)))
    return out


def _micro_batch_words(cfg: TrainingConfig) -> str:
    """Micro-batch size 1 in the words of the setting the job took it from (Megatron's flag, the script flag such
    as the Trainer's --per_device_train_batch_size, or the ds_config key)."""
    if _megatron(cfg):
        # Megatron-DeepSpeed: a ds_config's own micro-batch must agree with the flag, or the job is refused
        both = " and the ds_config's train_micro_batch_size_per_gpu 1" if cfg.framework == "megatron-deepspeed" else ""
        return f"--micro-batch-size 1{both}"
    source = cfg.sources.get("micro_batch_size")
    if source is not None and source.kind == SourceKind.ARGV and source.detail.startswith("-"):
        return f"{source.detail.split()[0]} 1"
    return "train_micro_batch_size_per_gpu 1" if "deepspeed" in cfg.framework else "micro-batch size 1 per GPU"


def _virtual_stages_at_double_pp(cfg: TrainingConfig) -> int:
    """Virtual stages per pipeline rank once --pipeline-model-parallel-size alone is doubled, as Megatron derives
    them (arguments.py): --num-virtual-stages-per-pipeline-rank stays; --num-layers-per-virtual-pipeline-stage keeps
    the chunk's layers, so the chunks per rank halve (0: an odd count that no longer divides, Megatron refuses)."""
    vpp = cfg.parallel.vpp
    source = cfg.sources.get("vpp")
    if vpp > 1 and "--num-layers-per-virtual-pipeline-stage" in (source.detail if source else ""):
        return vpp // 2 if vpp % 2 == 0 else 0
    return vpp


def _accepted(cfg: TrainingConfig, knobs: list[tuple[str, "Candidate"]]) -> list[tuple[str, "Candidate"]]:
    """The knobs whose layout the framework accepts (tune's rule masks: True = violates a rule)."""
    from llmperf_hook.tune.candidates import candidates_from_list, rule_masks

    if not knobs:
        return []
    table = candidates_from_list(tuple(c for _, c in knobs))
    masks = rule_masks(cfg, table.columns)
    return [k for i, k in enumerate(knobs) if not any(bool(m[i]) for m in masks.values())]


def _host_knobs(cfg: TrainingConfig) -> list[tuple[str, Callable[[TrainingConfig], TrainingConfig]]]:
    """(words, config edit) for the knobs that take state off the host."""
    o = cfg.optimizer

    def optimizer(**kw: object) -> Callable[[TrainingConfig], TrainingConfig]:
        return lambda c: dataclasses.replace(c, optimizer=dataclasses.replace(c.optimizer, **kw))

    out: list[tuple[str, Callable[[TrainingConfig], TrainingConfig]]] = []
    layers = cfg.recompute.cpu_offloading_num_layers
    if cfg.framework == "megatron" and cfg.recompute.cpu_offloading and layers > 0:
        out.append((f"--cpu-offloading-num-layers {layers // 2}", lambda c: dataclasses.replace(
            c, recompute=dataclasses.replace(c.recompute, cpu_offloading_num_layers=layers // 2))))
    if "deepspeed" not in cfg.framework:
        if o.offload_optimizer != "cpu":
            return out
        if not _megatron(cfg):  # torch FSDP's CPU offload: parameters, gradients and step together, all or nothing
            return [("no FSDP CPU offload (--fsdp without 'offload'; accelerate: fsdp_offload_params false)",
                     optimizer(offload_optimizer="none", offload_param="none"))]
        return out + [(f"--optimizer-offload-fraction {o.offload_optimizer_ratio / 2:g}",
                       optimizer(offload_optimizer_ratio=o.offload_optimizer_ratio / 2)),
                      ("no --optimizer-cpu-offload", optimizer(offload_optimizer="none", offload_optimizer_ratio=1.0))]
    for key in ("offload_optimizer", "offload_param"):
        if getattr(o, key) != "cpu":
            continue
        if o.zero_stage == 3:  # ZeRO-1/2 offload to CPU memory whatever the device says (stage_1_and_2.py)
            out.append((f"zero_optimization.{key}.device nvme", optimizer(**{key: "nvme"})))
        out.append((f"zero_optimization.{key}.device none", optimizer(**{key: "none"})))
    if cfg.recompute.checkpoint_in_cpu:
        out.append(("no --checkpoint-in-cpu", lambda c: dataclasses.replace(
            c, recompute=dataclasses.replace(c.recompute, checkpoint_in_cpu=False))))
    return out


def _gpu_edit_knobs(cfg: TrainingConfig) -> list[tuple[str, Callable[[TrainingConfig], TrainingConfig]]]:
    """(words, config edit) for the Megatron-LM GPU knobs outside tune's layout: the precision-aware optimizer with
    its default dtypes (lossless: fp32 master values kept as bf16 parameter + int16 remainder, 2 B per shard
    parameter freed; schedule/optimizer_state.py). Activation CPU offloading is not offered: its PCIe copies are
    not timed, and a knob must not hide what it costs."""
    o = cfg.optimizer
    if (cfg.framework == "megatron" and o.distributed_optimizer and o.name == "adam" and not o.precision_aware
            and cfg.precision in ("bf16", "fp8") and cfg.transformer_impl == "transformer_engine"):
        return [("--use-precision-aware-optimizer", lambda c: dataclasses.replace(
            c, optimizer=dataclasses.replace(c.optimizer, precision_aware=True)))]
    return []


def knob_effects(cfg: TrainingConfig, cluster: ClusterSpec, mem: MemoryEstimate) -> list[KnobEffect]:
    """The knobs for whichever side does not fit (the GPU first), most memory freed first."""
    from llmperf_hook.tune.candidate import apply_candidate

    gpu_side = not mem.fits
    if gpu_side:
        variants = [(words, apply_candidate(cfg, c)) for words, c in _accepted(cfg, _layout_knobs(cfg))]
        variants += [(words, edit(cfg)) for words, edit in _gpu_edit_knobs(cfg)]
    else:
        variants = [(words, edit(cfg)) for words, edit in _host_knobs(cfg)]
    effects = []
    for words, variant in variants:
        new = _memory(variant, cluster)
        freed = (mem.peak_bytes_per_gpu - new.peak_bytes_per_gpu if gpu_side
                 else mem.host_bytes_per_node - new.host_bytes_per_node)
        if freed > 0:
            effects.append(KnobEffect(words, float(freed), new))
    return sorted(effects, key=lambda e: (not e.fits, -e.freed_bytes))


def _verdict(effect: KnobEffect, gpu_side: bool) -> str:
    """The job's verdict after one knob: a knob that fixes the short side may leave the other short (no offload:
    the host fits, the optimizer state is back on the GPU)."""
    if effect.fits:
        return "fits, tight" if effect.memory.tight else "fits"  # schedule/memory_fit.py
    if not (effect.memory.fits if gpu_side else effect.memory.host_fits):
        return "still short"
    return "the host is then short" if gpu_side else "the GPU is then short"


def describe_knobs(cfg: TrainingConfig, cluster: ClusterSpec, mem: MemoryEstimate, limit: int = 3) -> str:
    """One sentence for an exit-3 message: the knobs that free the most, each with what it frees and the verdict
    after it; those that make the job fit come first."""
    effects = knob_effects(cfg, cluster, mem)[:limit]
    if not effects:
        return "No single knob llmperf can price frees memory here; see `llmperf tune`."
    gpu_side = not mem.fits
    what, unit = ("peak", "per rank" if cluster.gpu.device == "cpu" else "per GPU") if gpu_side else \
        ("host memory", "per node")
    parts = []
    for e in effects:
        after = e.memory.peak_bytes_per_gpu if gpu_side else e.memory.host_bytes_per_node
        parts.append(f"{e.knob} frees {e.freed_bytes / GiB:.1f} GiB {unit} ({what} then {after / GiB:.1f} GiB: "
                     f"{_verdict(e, gpu_side)})")
    return "Freed most by: " + "; ".join(parts) + " (each alone; `llmperf tune` searches them together)."
