"""Stage [4]: seconds for every op of an OpGraph, from the best available predictor per op class.

Order per op class: the fitted profile of the GPU (predict/fitted.find_profile; else a sibling GPU's,
predict/sibling_profile.py) when it supports the class,
phase and dtype, else the roofline (a profile's optimizer step in the bytes of the job's own Adam:
predict/optimizer_bytes.py); collectives: the cluster's fitted communication model
(find_comm_model) when present, else alpha-beta. Predictions are memoised on (predictor, cluster numbers,
op signature), so repeated layers, stages and `tune` candidates cost one prediction each. The predictor
object is part of the key: a refitted profile (fitted.find_profile returns a new object when the files
change) is never answered from an older profile's memo.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import astuple, replace
from typing import Sequence

from llmperf_hook.graph.op import COLLECTIVE_CLASSES, Op
from llmperf_hook.graph.op_graph import OpGraph
from llmperf_hook.hardware.spec import ClusterSpec
from llmperf_hook.predict import fitted
from llmperf_hook.predict.alpha_beta import AlphaBetaPredictor
from llmperf_hook.predict.cpu_framework import (apply_cpu_framework_cost, cost_label, find_cpu_framework_cost,
                                                missing_cost_warning, single_layout_peak_notes, timed_on_cpu,
                                                unsplit_engine_notes)
from llmperf_hook.predict.fp8_gemm import fp8_gemm_predictor
from llmperf_hook.predict.gemm_alignment import alignment_factor, alignment_warnings, learned_by_profile
from llmperf_hook.predict.op_times import OpClassPredictor, OpTimes
from llmperf_hook.predict.optimizer_bytes import scale_optimizer_times
from llmperf_hook.predict.roofline import RooflinePredictor, math_dtype, sustained_math_floor_s
from llmperf_hook.predict.sibling_profile import find_sibling_profile
from llmperf_hook.profile.features import GELU_EXACT, profile_class

ROOFLINE = RooflinePredictor()
ALPHA_BETA = AlphaBetaPredictor()
_CACHE: dict[tuple, float] = {}
_CACHE_LIMIT = 200_000


def clear_prediction_cache() -> None:
    """Forget memoised op times (after a profile was refitted in the same process)."""
    _CACHE.clear()


def op_id(op: Op) -> str:
    """Stable id of an op's cost-relevant signature: equal ids always have equal times (Op.cost_key, cached)."""
    return op.cost_key


def cluster_key(cluster: ClusterSpec) -> tuple:
    gpu = cluster.gpu
    return (cluster.name, gpu.name, tuple(sorted(gpu.peak_flop_per_s.items())), gpu.memory_bandwidth_bytes_per_s,
            gpu.gemm_efficiency, gpu.memory_efficiency, gpu.kernel_launch_s, gpu.gemm_ramp_s,
            gpu.attention_efficiency, cluster.gpus_per_node, astuple(cluster.intra_node), astuple(cluster.inter_node),
            cluster.nvme_read_bytes_per_s, cluster.nvme_write_bytes_per_s)


def choose_predictor(op: Op, profile: OpClassPredictor | None, comm_model: OpClassPredictor | None) -> OpClassPredictor:
    if op.op_class in COLLECTIVE_CLASSES:
        if comm_model is not None and comm_model.supports(op.op_class, op.phase, op.dtype):
            return comm_model
        return ALPHA_BETA
    if op.tags.get("offload", "none") != "none":
        return ROOFLINE  # a CPU-offloaded optimizer step runs on the host: never a GPU regressor's answer
    if profile is not None and profile.supports(op.op_class, op.phase, op.dtype) \
            and not (op.tags.get("kernel") == "fused" and op.op_class in unfused_classes(profile)):
        return profile
    if profile is not None and fp8_gemm_predictor(profile).supports(op.op_class, op.phase, op.dtype):
        return fp8_gemm_predictor(profile)
    return ROOFLINE


def unfused_classes(profile: OpClassPredictor) -> frozenset[str]:
    """Op classes whose regressor a profile fitted on torch composites (several kernels; `llmperf profile` writes
    them in provenance["unfused_classes"]): an op the framework runs as one fused kernel (graph/layer_ops.py
    fused_tag) is one memory pass, the roofline's, not that composite."""
    meta = getattr(profile, "meta", None)
    text = meta.provenance.get("unfused_classes", "") if meta is not None else ""
    return frozenset(c for c in text.split(",") if c)


def predict_ops(ops: Sequence[Op], cluster: ClusterSpec, profile: OpClassPredictor | None,
                comm_model: OpClassPredictor | None, sustained_floor: bool = False
                ) -> tuple[dict[str, float], dict[str, str]]:
    """(seconds by op id, predictor name by op class) for `ops`; one vectorised call per predictor and class.
    `sustained_floor`: a profile's GEMM is never faster than the GPU's sustained matmul rate (a GPU training step;
    roofline.sustained_math_floor_s)."""
    ckey = cluster_key(cluster)
    seconds: dict[str, float] = {}
    used: dict[str, dict[str, list[str]]] = {}  # op class -> predictor name -> phases it answered
    pending: dict[tuple[int, str], list[tuple[str, Op]]] = defaultdict(list)
    predictors: dict[int, OpClassPredictor] = {}
    for op in ops:
        oid = op_id(op)
        if oid in seconds:
            continue
        if op.phase == "recompute":
            op = replace(op, phase="fwd")  # a recomputed forward costs what the forward costs
        op_class = op.op_class
        op, variant_note = gelu_variant(bf16_part_of_fp8_run(op), profile)
        predictor = choose_predictor(op, profile, comm_model)
        label = _label(predictor, op, profile)
        if variant_note and predictor is profile:
            label += f" ({variant_note})"
        phases = used.setdefault(op_class, {}).setdefault(label, [])
        if op.phase not in phases:
            phases.append(op.phase)
        cached = _CACHE.get((predictor.name, id(predictor), ckey, oid, sustained_floor))
        if cached is not None:
            seconds[oid] = cached
            continue
        seconds[oid] = 0.0
        predictors[id(predictor)] = predictor
        pending[(id(predictor), op.op_class)].append((oid, op))
    for (pid, _), items in pending.items():
        predictor = predictors[pid]
        batch = [op for _, op in items]
        values = scale_optimizer_times(batch, predictor.predict_s(batch, cluster), getattr(predictor, "meta", None))
        for (oid, op), value in zip(items, values):
            seconds[oid] = max(0.0, float(value))
            if sustained_floor and predictor is not ROOFLINE:  # isolated-kernel GEMM timings run above sustained
                seconds[oid] = max(seconds[oid], sustained_math_floor_s(op, cluster.gpu))
            factor = alignment_factor(op, cluster.gpu)  # an unaligned width on Hopper (gemm_alignment.py)
            if factor != 1.0 and not learned_by_profile(op, predictor):  # a profile fitted on them holds their cost
                seconds[oid] *= factor
            if len(_CACHE) < _CACHE_LIMIT:
                _CACHE[(predictor.name, pid, ckey, oid, sustained_floor)] = seconds[oid]
    return seconds, {op_class: predictor_label(names) for op_class, names in used.items()}


def _label(predictor: OpClassPredictor, op: Op, profile: OpClassPredictor | None) -> str:
    """The predictor's name, and for the roofline standing in for a class the profile was asked to sample but could
    not fit (a tiny --budget), why: "roofline (not fitted in my-cpu: 0 samples)"."""
    note = getattr(profile, "unfitted_note", None) if predictor is ROOFLINE else None
    reason = note(op.op_class, op.phase, op.dtype) if note is not None else None
    return predictor.name if reason is None else f"{predictor.name} ({reason})"


def predictor_label(names: dict[str, list[str]]) -> str:
    """A class's predictor as reports name it: one name, or each with the phases it answered when they differ (a
    profile that fitted gemm fwd but had too few bwd samples: "lightgbm:cpu (fwd) / roofline (bwd)"; the class
    was labelled by whichever op came last, "roofline", hiding the fitted half)."""
    if len(names) == 1:
        return next(iter(names))
    return " / ".join(f"{name} ({', '.join(phases)})" for name, phases in names.items())


def gelu_variant(op: Op, profile: OpClassPredictor | None) -> tuple[Op, str]:
    """(the op as `profile` prices it, a note when it is not its own variant's samples): a gelu op tagged exact
    (graph/layer_ops.GELU_TAG "none") by the profile's gelu_exact regressor, any other gelu op by its gelu (tanh) one.
    A profile without the job's variant (one sampled before gelu_exact existed, or a GPU's public samples) prices it
    by the other class's samples and says so; the tanh GELU costs 2-3.5x the exact one on an AVX2 CPU thread
    (frameworks/script_gelu.py)."""
    if op.op_class != "gelu" or profile is None:
        return op, ""
    exact = profile_class(op.op_class, op.tags) == GELU_EXACT
    own, other = (GELU_EXACT, "gelu") if exact else ("gelu", GELU_EXACT)
    if profile.supports(own, op.phase, op.dtype):
        return replace(op, op_class=own), ""
    if profile.supports(other, op.phase, op.dtype):
        # "the profile's gelu samples", not "the tanh GELU's": the shipped GPU profiles' public samples (GPT-NeoX's
        # activation, /work/shared/data/op-samples README) do not record which GELU they timed
        return replace(op, op_class=other), (f"{'exact' if exact else 'tanh'} GELU priced by the profile's {other} "
                                             f"samples: it has no {own} ones; `llmperf profile --ops {own}` on this "
                                             "hardware samples them")
    return op, ""


def bf16_part_of_fp8_run(op: Op) -> Op:
    """An op of an FP8 run that Transformer Engine executes in bf16 (everything but its FP8 linear GEMMs:
    roofline.math_dtype) is the bf16 op, so a bf16 operator profile prices it; FP8 GEMMs keep dtype fp8."""
    if op.dtype == "fp8" and op.op_class not in COLLECTIVE_CLASSES and math_dtype(op) == "bf16":
        return replace(op, dtype="bf16")
    return op


def find_operator_profile(cluster: ClusterSpec, dtype: str) -> OpClassPredictor | None:
    """The GPU's fitted profile for `dtype` (else a sibling GPU's); for an FP8 run, the bf16 one, which prices the
    ops TE runs in bf16 and, through predict/fp8_gemm.py, its FP8 GEMMs."""
    serves = "bf16" if dtype == "fp8" else dtype
    return fitted.find_profile(cluster.gpu.name, serves) or find_sibling_profile(cluster.gpu, serves)


def predict_op_times(graph: OpGraph, cluster: ClusterSpec, dtype: str, memo: dict | None = None) -> OpTimes:
    """Stage [4]: OpTimes for every op of `graph` on `cluster` (training precision `dtype`). `memo`: the OpTimes
    already found for this graph object (predict --batch: graph/build.GraphMemo.derived), by the predictors that
    priced it; a refitted profile is another object, so another key. Not for CPU hardware (its cost file is read
    each time)."""
    profile = find_operator_profile(cluster, dtype)
    comm_model = fitted.find_comm_model(cluster.name)
    cpu_cost = find_cpu_framework_cost(cluster.gpu.name, dtype)
    if memo is None or cpu_cost is not None:
        return _op_times(graph, cluster, dtype, profile, comm_model, cpu_cost)
    key = (id(profile), id(comm_model), dtype)  # the memo is one graph's: of one configuration and cluster
    hit = memo.get(key)
    if hit is not None and hit[0] is profile and hit[1] is comm_model:
        return hit[2]
    times = _op_times(graph, cluster, dtype, profile, comm_model, cpu_cost)
    memo[key] = (profile, comm_model, times)  # held, so their ids stay theirs
    return times


def _op_times(graph: OpGraph, cluster: ClusterSpec, dtype: str, profile: OpClassPredictor | None,
              comm_model: OpClassPredictor | None, cpu_cost: object) -> OpTimes:
    ops = graph.all_ops()
    cpu = cpu_cost is not None or timed_on_cpu(profile)  # the GPU's sustained floor is no CPU's (timed_on_cpu)
    seconds, used = predict_ops(ops, cluster, profile, comm_model, sustained_floor=not cpu)
    if cpu_cost is not None:  # CPU hardware: framework work adds to compute (predict/cpu_framework.py)
        seconds = apply_cpu_framework_cost(seconds, ops, cpu_cost, op_id)
        label = cost_label(cpu_cost, ops)
        used = {k: v if k in COLLECTIVE_CLASSES else v + label for k, v in used.items()}
    warnings: tuple[str, ...] = ()
    if profile is not None and hasattr(profile, "extrapolation_warnings"):
        priced = [gelu_variant(bf16_part_of_fp8_run(op), profile)[0] for op in ops]
        warnings = profile.extrapolation_warnings(
            [op for op in priced if choose_predictor(op, profile, None) is profile])
        if hasattr(profile, "meta"):  # a profile timed under another torch than this environment's
            from llmperf_hook.profile.profile_io import measured_under_notes

            warnings += measured_under_notes(profile.meta)
    if profile is None:
        warnings = (_no_profile_warning(cluster.gpu.name, dtype),)
    elif cpu and cpu_cost is None:
        warnings += (missing_cost_warning(cluster.gpu.name, dtype),)
    if cpu_cost is not None:
        warnings += unsplit_engine_notes(cpu_cost, ops, cluster.gpu.name, dtype)
    warnings += single_layout_peak_notes(profile, dtype)
    warnings += alignment_warnings(map(bf16_part_of_fp8_run, ops), cluster.gpu,
                                   lambda op: learned_by_profile(op, choose_predictor(op, profile, None)))
    if comm_model is not None and hasattr(comm_model, "extrapolation_warnings"):  # a fit outside its samples
        comm_ops = [op for op in ops if choose_predictor(op, None, comm_model) is comm_model]
        warnings += comm_model.extrapolation_warnings(comm_ops, cluster)
        used.update(comm_model.priced_by(comm_ops, cluster))  # the cluster's alpha-beta where it replaced the fit
    return OpTimes(seconds=seconds, predictor_by_class=dict(sorted(used.items())), warnings=warnings)


def _no_profile_warning(gpu: str, dtype: str) -> str:
    """Why compute ops use the roofline: no profile for this hardware, or one fitted in other dtypes only (an FP8
    run needs the bf16 models: find_operator_profile)."""
    served, need = fitted.served_dtypes(gpu), "bf16" if dtype == "fp8" else dtype
    if served:
        return (f"the fitted operator profile of {gpu} serves {', '.join(served)}, not {need}: compute ops use the "
                f"analytic roofline model (sample {need} on that device: `llmperf profile --dtype {need} --name "
                f"{gpu.lower()}`).")
    return (f"no fitted operator profile for {gpu} ({dtype}): compute ops use the analytic roofline model (run "
            f"`llmperf profile` on that device to fit one).")
