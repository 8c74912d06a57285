"""CPU hardware: the framework's own work on the one thread that also computes (profile/cpu_framework.py).

A profile fitted by `llmperf profile --device cpu` carries `framework_overhead.json`, measured on that
machine: per issued op unit (`per_unit_s`), the in-step cost of the operators per second of their isolated
samples (`compute_scale`), and torch Adam's cost per parameter tensor and per parameter. Where it exists the
hardware is a CPU and, for every prediction on it:
- a compute op costs compute_scale * profile time + per_unit_s * units (host_issue.KERNELS_PER_PHASE)
  + per_byte_s * its modelled bytes: on
  a CPU host issue and compute are the same thread, so they add (the GPU launch-queue model, which lets the
  host run ahead of the device, does not apply; the CPU cluster file sets host_overhead_per_op_us 0);
- the optimizer step costs per_tensor_s * tensors + per_param_s * params, tensors from the op's
  `param_tensors` tag (graph/param_tensors.py: 1 for DeepSpeed's flattened ZeRO / bf16 optimizers);
- under DeepSpeed the optimizer op also carries the engine's measured per-step work for its ZeRO stage
  (deepspeed_step: per step + per parameter of the stage), and under ZeRO-2/3 its forward+backward share once more
  for every micro-batch after the first (_engine_microbatches: they reduce in every backward);
- with N ranks on the machine, compute and optimizer times are multiplied by the measured
  concurrency_slowdown[N] (ranks share cores, caches and memory bandwidth);
- collectives run on the same thread too (gloo, synchronous on CPU): nothing hides behind compute
  (`cpu_serial_graph` drops the overlap tags the GPU model uses for side streams);
- with more than one rank in a collective's group, gloo's transport threads spend CPU time on every byte the rank
  puts on the wire (profile/cpu_rank_transport.py: transport_per_byte_s, measured on a world-size-2 DeepSpeed
  engine against world size 1). graph/cpu_stages.py adds one step op, TRANSPORT_OP, carrying the stage's wire
  bytes per step (transport_wire_bytes: RING_FACTOR x message bytes of each collective, times its count per
  step); it is priced here as CPU work of the step (the "optimizer" part of the breakdown, not a collective: the
  comm model's collectives are the ranks' wait, which the testbed's wall beyond CPU time matches, while this is
  CPU time the one-rank terms do not hold). A file without the term (a profile measured before it existed, or one
  whose transport reading was left out) adds no such op: its predictions are those it gave before.
- where the profile measured the ranks' step-to-step jitter (rank_transport.step_jitter_cv, read on the same pair
  of ranks), a job whose collectives synchronise n > 1 ranks pays every non-collective part x (1 + cv x e_n): the
  step waits for the slowest rank (predict/rank_jitter.py; the cost-models line says "+rank-jitter").
No file (any GPU profile): nothing changes. Only json is read here; no torch.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Iterable, Mapping

from llmperf_hook.errors import ProfileError
from llmperf_hook.graph.op import Op
from llmperf_hook.predict.host_issue import KERNELS_PER_PHASE

FILE_NAME = "framework_overhead.json"
"""Written by profile/cpu_framework.py next to the profile's profile.json."""


@dataclass(frozen=True)
class CpuFrameworkCost:
    per_unit_s: float
    """Seconds of framework work per issued op unit (1 per forward op, 2 per backward op)."""
    compute_scale: float
    """In-step seconds of the operators per second of their isolated profile samples."""
    optimizer_per_tensor_s: float
    """Seconds per parameter tensor of torch's Adam(W) step loop."""
    optimizer_per_param_s: float
    """Seconds per fp32 parameter of the Adam(W) step."""
    per_byte_s: float = 0.0
    """Seconds of framework work per byte of the op's modelled traffic (copies and views around the op)."""
    concurrency_slowdown: Mapping[str, float] = field(default_factory=dict)
    """{ranks on the machine: factor}: a rank's compute while that many ranks run at once / alone."""
    deepspeed_step: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    """{ZeRO stage: (seconds per step, seconds per parameter)} of DeepSpeed's engine beyond the plain model."""
    transport_per_byte_s: float = 0.0
    """CPU seconds gloo's transport threads spend per byte a rank sends in a collective of 2+ ranks (0: not
    measured; profile/cpu_rank_transport.py)."""
    rank_jitter_cv: float = 0.0
    """A rank's step-to-step CPU time spread its peers do not share, per step time (0: not measured): a step of n
    synchronised ranks costs E[max of n] = 1 + cv x e_n of one rank's (predict/rank_jitter.py)."""
    deepspeed_fwd_bwd_share: Mapping[str, float | None] = field(default_factory=dict)
    """{ZeRO stage: share of the engine's measured extra done in forward+backward, not in engine.step()}
    (fwd_bwd_share): what a further micro-batch repeats under ZeRO-2/3 (_engine_microbatches); None (or no entry):
    the file did not time them apart, and the repetition is left out (unsplit_engine_notes says so)."""

    def straggler(self, synchronised_ranks: int) -> float:
        """predict/rank_jitter.straggler_factor of this machine's measured jitter (1 alone or unmeasured)."""
        from llmperf_hook.predict.rank_jitter import straggler_factor

        return straggler_factor(self.rank_jitter_cv, synchronised_ranks)

    def slowdown(self, ranks: int) -> float:
        """Measured factor for `ranks` concurrent ranks (the largest measured count beyond it; 1 alone)."""
        if ranks <= 1 or not self.concurrency_slowdown:
            return 1.0
        known = sorted(int(k) for k in self.concurrency_slowdown)
        key = max([k for k in known if k <= ranks] or known[:1])
        return float(self.concurrency_slowdown[str(key)])


DIGEST_KEY = "sha256"
"""The framework file's digest of its own content (framework_sha256), written with it since 28 Nov 2026."""


def framework_sha256(doc: Mapping) -> str:
    """sha256 of a framework file's content but its digest, as canonical JSON (sorted keys; floats as Python writes
    them, which read back exactly), as profile_io.meta_sha256 is of profile.json: a plausible hand edit (compute_scale
    1.2 -> 1.9, within what the writer produces) would otherwise change every CPU prediction without a word."""
    return hashlib.sha256(json.dumps({k: v for k, v in doc.items() if k != DIGEST_KEY}, sort_keys=True).encode()
                          ).hexdigest()


def with_digest(doc: Mapping) -> dict:
    """`doc` with its digest: what every writer of the file writes (cpu_framework_readings, profile_fit)."""
    return {**{k: v for k, v in doc.items() if k != DIGEST_KEY}, DIGEST_KEY: framework_sha256(doc)}


def digest_problem(doc: object) -> str | None:
    """Why the file's content is not what its writer wrote (its digest does not match), or None. A file without
    the digest (written before 28 Nov 2026, or planted by a script) is read as it is: its terms are still checked
    (_checked), and the next `llmperf profile --device cpu --budget 3` writes one with it."""
    if not isinstance(doc, dict) or DIGEST_KEY not in doc or doc[DIGEST_KEY] == framework_sha256(doc):
        return None
    return f"its content does not match its {DIGEST_KEY} (edited or corrupted after llmperf wrote it)"


@lru_cache(maxsize=16)
def _read(path: str, mtime_ns: int) -> dict:
    doc = json.loads(open(path).read())
    problem = digest_problem(doc)
    if problem:
        raise ValueError(problem)
    return doc


def find_cpu_framework_cost(hardware_name: str, dtype: str) -> CpuFrameworkCost | None:
    """The measured CPU framework cost of this hardware's fitted profile for `dtype`, or None (not a CPU)."""
    from llmperf_hook.predict.fitted import profile_dirs

    for directory in profile_dirs(hardware_name):
        path = directory / FILE_NAME
        if (directory / "profile.json").is_file():
            if not path.is_file():
                return None
            try:
                entry = _read(str(path), path.stat().st_mtime_ns).get("dtypes", {}).get(dtype)
                return _checked(_cost(entry)) if entry else None
            except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
                raise ProfileError(f"{path} is unusable ({type(err).__name__}: {err}): the CPU framework cost of "
                                   f"profile {directory.name} is damaged or was edited, and a prediction would carry "
                                   f"it. Delete the file (predictions then price the operators alone, and say so) or "
                                   f"measure it again: `llmperf profile --device cpu --dtype {dtype} --budget 4 "
                                   f"--name {directory.name}`.") from err
    return None


def _cost(entry: Mapping) -> CpuFrameworkCost:
    return CpuFrameworkCost(float(entry["per_unit_s"]), float(entry["compute_scale"]),
                            float(entry["optimizer_per_tensor_s"]), float(entry["optimizer_per_param_s"]),
                            float(entry.get("per_byte_s", 0.0)),
                            {str(k): float(v) for k, v in entry.get("concurrency_slowdown", {}).items()},
                            {str(k): (float(v["per_step_s"]), float(v["per_param_s"]))
                             for k, v in entry.get("deepspeed_step", {}).items()},
                            float((entry.get("rank_transport") or {}).get("per_byte_s", 0.0)),
                            float((entry.get("rank_transport") or {}).get("step_jitter_cv", 0.0)),
                            {str(k): fwd_bwd_share(v) for k, v in entry.get("deepspeed_step", {}).items()})


def fwd_bwd_share(stage: Mapping) -> float | None:
    """The share of a ZeRO stage's engine extra that its reading measured in forward+backward: over the reading's
    samples ([params, engine fwd+bwd s, engine step s, modelled fwd+bwd s, modelled optimizer s],
    profile/cpu_engine_cost.deepspeed_terms) sum of max(0, fwd+bwd extra) / sum of both extras. Without samples,
    1 - partition_fraction (the per-parameter slope's share in the step). On the testbed's fp32 file (16:18) ZeRO-2
    0.50 (1 - f: 0.45), ZeRO-3 0.68 (0.51): the per-step constant sits mostly in forward+backward, which 1 - f does
    not see. None without either (a file from before the two were timed apart, 26 Nov 2026): 1 would repeat the
    step's own norm, update and copy back in every micro-batch."""
    rows = [[float(x) for x in r[:5]] for r in stage.get("samples") or ()
            if isinstance(r, (list, tuple)) and len(r) >= 5]
    extras = [(max(0.0, r[1] - r[3]), max(0.0, r[2] - r[4])) for r in rows if all(map(math.isfinite, r))]
    total = sum(a + b for a, b in extras)
    if total > 0:
        return sum(a for a, _ in extras) / total
    if "partition_fraction" not in stage:
        return None
    return 1.0 - min(1.0, max(0.0, float(stage["partition_fraction"])))


def _checked(cost: CpuFrameworkCost) -> CpuFrameworkCost:
    """`cost` when every term is what the writer can produce: finite and >= 0 (non-negative fits and clipped
    medians, profile/cpu_framework.py), slowdowns > 0, compute_scale within SCALE_BOUNDS (clipped there); else
    ValueError. An edited -1 s per unit gave a 28,000-s step, exit 0."""
    from llmperf_hook.profile.cpu_framework import SCALE_BOUNDS

    terms = {"per_unit_s": cost.per_unit_s, "optimizer_per_tensor_s": cost.optimizer_per_tensor_s,
             "optimizer_per_param_s": cost.optimizer_per_param_s, "per_byte_s": cost.per_byte_s,
             "rank_transport.per_byte_s": cost.transport_per_byte_s,
             "rank_transport.step_jitter_cv": cost.rank_jitter_cv,
             **{f"deepspeed_step.{k}": min(v) for k, v in cost.deepspeed_step.items()}}
    bad = [f"{k} {v!r}" for k, v in terms.items() if not (math.isfinite(v) and v >= 0)]
    bad += [f"concurrency_slowdown.{k} {v!r}" for k, v in cost.concurrency_slowdown.items()
            if not (math.isfinite(v) and v > 0)]
    if not SCALE_BOUNDS[0] <= cost.compute_scale <= SCALE_BOUNDS[1]:
        bad.append(f"compute_scale {cost.compute_scale!r} (outside {SCALE_BOUNDS[0]:g}-{SCALE_BOUNDS[1]:g})")
    if bad:
        raise ValueError(f"{', '.join(bad)}: not a value the measurement writes")
    return cost


def timed_on_cpu(profile: object) -> bool:
    """Whether an operator profile was fitted from samples timed on a CPU: its hardware fingerprint carries the CPU
    clock (profile/local_hardware.fingerprint; a GPU's names its SMs and CUDA instead). Such hardware is a CPU whether
    or not the framework cost of the dtype asked was measured: a GPU's sustained matmul floor
    (roofline.sustained_math_floor_s) never applies to it."""
    hardware = getattr(getattr(profile, "meta", None), "hardware", None)
    return isinstance(hardware, Mapping) and "clock" in hardware


def missing_cost_warning(hardware_name: str, dtype: str) -> str:
    """Why a CPU prediction has no framework terms: the profile's FILE_NAME lacks the dtype (its readings did not end
    within their time box, e.g. bf16 where the CPU has no bf16 GEMM kernel: cpu_framework_readings.time_box_notes) or
    is missing (a --budget under cpu_framework.MIN_BUDGET_MIN)."""
    return (f"the CPU profile {hardware_name} has no measured framework cost for {dtype} ({FILE_NAME}): the operators "
            f"are priced alone, without the framework's own work on the computing thread (per op issue, the optimizer "
            f"loop, DeepSpeed's engine step), and the step is likely predicted low; measure it with `llmperf profile "
            f"--device cpu --dtype {dtype} --budget 4 --name {hardware_name}` (its full box: "
            f"cpu_framework_readings.profile_remedy) on a quiet machine")


def single_layout_peak_notes(profile: object, dtype: str) -> tuple[str, ...]:
    """One line for a bf16 / fp16 prediction from a CPU profile whose peaks were a @ b alone (fitted before
    profile_fit wrote provenance["peak_layouts"], 28 Nov 2026): on a CPU without that dtype's GEMM kernel it is the
    slowest layout (profile/local_hardware.GEMM_LAYOUTS), so the MFU against its peak reads high, above 100 % for the
    CPU testbed's bf16 steps, and predict's MFU warning would blame a missing cost."""
    meta = getattr(profile, "meta", None)
    if dtype not in ("bf16", "fp16") or not timed_on_cpu(profile) or "peak_layouts" in getattr(meta, "provenance", ()):
        return ()
    return (f"the CPU profile {meta.name} measured its {dtype} peak with a @ b alone (llmperf before 28 Nov 2026): "
            f"where the CPU has no {dtype} GEMM kernel that is its slowest layout (bf16 on an AVX2-only EPYC: 1.3 "
            f"GFLOP/s, against 15 for a weight gradient's), so the MFU shown reads high against it (an MFU warning "
            f"is this, not the step); `llmperf profile --device cpu --dtype {dtype} --budget 4 --name {meta.name}` "
            f"measures the best of the layouts (the samples in the store are reused)",)


def op_seconds(op: Op, profile_s: float, cost: CpuFrameworkCost, ranks_on_machine: int = 1,
               synchronised_ranks: int = 1) -> float:
    """Seconds of `op` on the CPU thread (collectives unchanged: the comm model measured them under gloo)."""
    return sum(op_cost_parts(op, profile_s, cost, ranks_on_machine, synchronised_ranks).values())


def op_cost_parts(op: Op, profile_s: float, cost: CpuFrameworkCost, ranks_on_machine: int = 1,
                  synchronised_ranks: int = 1) -> dict[str, float]:
    """op_seconds by the term of the module docstring that prices it (their sum is op_seconds), for a breakdown of
    where a CPU step goes (benchmarks/testbed_op_breakdown.py): a compute op's "operators" (compute_scale x its
    profile time), "issue" (per op unit) and "traffic" (per byte); the optimizer op's "adam" (per tensor and per
    parameter), "engine" (DeepSpeed's ZeRO-stage step) and "engine_microbatches" (its forward+backward share again
    in each further micro-batch under ZeRO-2/3); TRANSPORT_OP's "transport"; a collective's "comm";
    beside every non-collective part of a job of several synchronised ranks, "jitter": what its share of the step
    costs beyond one rank's mean because the step waits for the slowest rank (predict/rank_jitter.py)."""
    if op.collective is not None:
        return {"comm": profile_s}
    parts = _rank_parts(op, profile_s, cost, ranks_on_machine)
    extra = cost.straggler(synchronised_ranks) - 1.0
    return {**parts, "jitter": extra * sum(parts.values())} if extra > 0 else parts


def _rank_parts(op: Op, profile_s: float, cost: CpuFrameworkCost, ranks_on_machine: int) -> dict[str, float]:
    """op_cost_parts of one rank at its mean step (no wait for its peers)."""
    if op.name == TRANSPORT_OP:
        return {"transport": cost.transport_per_byte_s * op.dims.get("wire_bytes", 0)}
    slowdown = cost.slowdown(ranks_on_machine)
    if op.op_class == "optimizer":
        tensors = int(op.tags.get("param_tensors", "1"))
        adam_s = tensors * cost.optimizer_per_tensor_s + op.dims.get("params", 0) * cost.optimizer_per_param_s
        per_step_s, per_param_s = cost.deepspeed_step.get(op.tags.get("deepspeed_zero", ""), (0.0, 0.0))
        parts = {"adam": slowdown * adam_s,
                 "engine": slowdown * (per_step_s + per_param_s * int(op.tags.get("engine_params", "0")))}
        return {**parts, **_engine_microbatches(op, cost, slowdown)}
    units = KERNELS_PER_PHASE.get(op.phase, 1)
    return {"operators": slowdown * cost.compute_scale * profile_s, "issue": slowdown * units * cost.per_unit_s,
            "traffic": slowdown * op.bytes_moved * cost.per_byte_s}


def _engine_microbatches(op: Op, cost: CpuFrameworkCost, slowdown: float) -> dict[str, float]:
    """{"engine_microbatches": s} where the engine's forward+backward work repeats in the step's further micro-batches
    (graph/cpu_stages.engine_further_microbatches: ZeRO-2/3); {} otherwise. The engine term was read at one micro-batch
    per step (profile/cpu_engine_cost.py); each further one pays its forward+backward share again (fwd_bwd_share) of
    the engine's measured extra on the stage's parameters (its hooks see every gradient, not the rank's partition)."""
    further = int(op.tags.get("engine_further_microbatches", "0"))
    zero = op.tags.get("deepspeed_zero", "")
    share = cost.deepspeed_fwd_bwd_share.get(zero)
    if further <= 0 or zero not in cost.deepspeed_step or share is None:
        return {}
    per_step_s, per_param_s = cost.deepspeed_step[zero]
    per_microbatch_s = share * (per_step_s + per_param_s * int(op.tags.get("engine_stage_params", "0")))
    return {"engine_microbatches": slowdown * further * per_microbatch_s}


def unsplit_engine_notes(cost: CpuFrameworkCost, ops: Iterable[Op], hardware_name: str, dtype: str) -> tuple[str, ...]:
    """One line where a ZeRO-2/3 job accumulates gradients but the file cannot say what of the engine's work a
    further micro-batch repeats (fwd_bwd_share None): _engine_microbatches left it out, the step is likely low."""
    accumulating = {op.tags.get("deepspeed_zero", "") for op in ops
                    if int(op.tags.get("engine_further_microbatches", "0")) > 0}
    zeros = sorted(z for z in accumulating if z in cost.deepspeed_step and cost.deepspeed_fwd_bwd_share.get(z) is None)
    return tuple(f"the CPU profile {hardware_name}'s {FILE_NAME} ({dtype}) timed DeepSpeed's ZeRO-{z} engine as one "
                 f"total, not its forward+backward apart from engine.step(): the engine work ZeRO-{z} repeats in every "
                 f"further micro-batch (its gradient reduction in each backward) is left out, and the step is likely "
                 f"predicted low; measure the file again: `llmperf profile --device cpu --dtype {dtype} --budget 4 "
                 f"--name {hardware_name}`" for z in zeros)


TRANSPORT_OP = "gloo_transport"
"""The step op of a CPU job's transport CPU (module docstring); class deepspeed_bookkeeping: the step's own work."""


def transport_wire_bytes(op: Op, count: int = 1) -> float:
    """Bytes one rank puts on the wire for `count` calls of collective `op` (RING_FACTOR x message bytes, nccl-tests'
    bus-bandwidth convention: predict/alpha_beta.py); 0 for a group of one rank or a non-collective."""
    from llmperf_hook.predict.alpha_beta import RING_FACTOR

    if op.collective is None or op.collective.group_size < 2 or op.op_class not in RING_FACTOR:
        return 0.0
    return count * RING_FACTOR[op.op_class](op.collective.group_size) * op.dims.get("bytes", 0)


def ranks_on_machine(ops: Iterable[Op]) -> int:
    """Ranks of the job that share one machine: the most any collective group places on a node (1 alone)."""
    return max((op.collective.ranks_per_node * max(1, op.collective.groups_sharing_node) for op in ops
                if op.collective is not None), default=1)


def synchronised_ranks(ops: Iterable[Op]) -> int:
    """Ranks a step waits for at its collectives (1 without any): every rank its groups link it to, not only its
    largest group. At TP 2 x DP 2 a rank waits for its TP peer inside the step, and for its DP peer, which waited
    for its own TP peer: the step ends at the slowest of the four. So the product of the largest tensor-, data (with
    context)- and pipeline-parallel groups, at least the largest group (expert groups lie inside them). A pipeline
    of more than two stages counts two: its ops join adjacent stages only, and do not say how many there are."""
    largest: dict[str, int] = {}
    for op in ops:
        if op.collective is not None:
            largest[op.collective.group] = max(largest.get(op.collective.group, 1), op.collective.group_size)
    data = largest.get("dp_cp") or largest.get("dp", 1) * largest.get("cp", 1)
    return max(largest.get("tp", 1) * data * largest.get("pp", 1), *largest.values(), 1)


def apply_cpu_framework_cost(seconds: dict[str, float], ops: Iterable[Op], cost: CpuFrameworkCost,
                             op_id) -> dict[str, float]:
    """`seconds` (by op id) with the CPU framework cost of each op added (each op id once)."""
    ops = list(ops)
    ranks, synced = ranks_on_machine(ops), synchronised_ranks(ops)
    out = dict(seconds)
    done: set[str] = set()
    for op in ops:
        oid = op_id(op)
        if oid in done:
            continue
        done.add(oid)
        out[oid] = op_seconds(op, seconds[oid], cost, ranks, synced)
    return out


def cost_label(cost: CpuFrameworkCost, ops: Iterable[Op]) -> str:
    """What the cost-models line adds to a CPU-priced class: "+cpu-framework", and the straggler factor where the
    profile measured the ranks' jitter and the job synchronises several ranks."""
    factor = cost.straggler(synchronised_ranks(ops))
    return "+cpu-framework" + (f"+rank-jitter x{factor:.3f}" if factor > 1.0 else "")


def cpu_serial_op(op: Op) -> Op:
    """`op` without a side-stream overlap tag: on a CPU every collective blocks the computing thread."""
    if "overlap" not in op.tags:
        return op
    return replace(op, tags={k: v for k, v in op.tags.items() if k != "overlap"})
