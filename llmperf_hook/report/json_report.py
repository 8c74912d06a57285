"""Stage [6]: the JSON object of `llmperf predict --format json` (one per command in --batch mode).

Schema 1 keys: schema, command, step_time_s, uncalibrated_step_time_s (before a refine calibration), tokens_per_s,
mfu, model_flops_per_step, memory
{peak_bytes_per_gpu, capacity_bytes, fits (the allocated bytes, the allocator's reserve left out, fit:
schedule/memory_rule.py, tune's rule too), tight (fits, by less than the fragmentation or the model's error band:
schedule/memory_fit.py), verdict ("fits" | "fits, tight" |
"DOES NOT FIT"), headroom_bytes (capacity - peak), fragmentation_bytes, stage, components, host {bytes_per_node,
capacity_bytes, fits, components}}, breakdown {component: s}
(sums to step_time_s; components: compute, recompute, host_overhead, host_zero3_hooks (DeepSpeed ZeRO-3's
parameter fetch / release and gradient hooks, host time the GPU waits for in forward and backward),
host_optimizer_step (the step's own host loop the GPU waits for: DeepSpeed's per-tensor syncs and launches), comm_tp,
comm_cp, comm_ep, comm_zero, comm_dp (exposed in-layer communication by kind), pipeline_bubble, pipeline_p2p,
comm_pp_gather, comm_dp_grad, comm_embedding_grad, optimizer, comm_param_gather, calibration), stages [{stage,
num_layers, fwd_s, bwd_s, compute_s, idle_s, exposed_comm_s, optimizer_s (without host_zero3_hooks and
host_optimizer_step)}],
critical_stage, cluster {name, gpu, gpus_per_node, nnodes}, config (explain JSON), warnings,
predictor {op class: cost model}.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from llmperf_hook.schedule.memory_fit import verdict_words

if TYPE_CHECKING:
    from llmperf_hook.api import Prediction
    from llmperf_hook.schedule.step_estimate import MemoryEstimate


def _r(x: float, digits: int = 6) -> float:
    return float(f"{x:.{digits}g}")


def _host_memory(mem: "MemoryEstimate") -> dict[str, Any]:
    """Host RAM per node the offloads pin; capacity and fits are null where the cluster preset does not state it."""
    known = mem.host_capacity_bytes > 0
    return {"bytes_per_node": int(mem.host_bytes_per_node),
            "capacity_bytes": int(mem.host_capacity_bytes) if known else None,
            "fits": bool(mem.host_fits) if known else None,
            "components": {k: int(v) for k, v in mem.host_components.items()}}


def _cpu_memory(pred: "Prediction") -> dict[str, Any]:
    """A CPU job's host verdict (schedule/memory_cpu.py): capacity_bytes is the host's RAM, headroom_bytes that less
    the host's ranks and offloads; peak_bytes_per_gpu is the busiest rank's resident memory."""
    from llmperf_hook.schedule.memory_cpu import host_ranks_bytes

    ranks, ranks_sum = host_ranks_bytes(pred.config, pred.estimate.memory.per_stage_peak_bytes)
    return {"device": "cpu", "ranks_per_host": ranks, "host_ranks_bytes": ranks_sum}


def render_prediction_json(pred: "Prediction", config: dict[str, Any], schema: int) -> dict[str, Any]:
    est, mem = pred.estimate, pred.estimate.memory
    return {
        "schema": schema,
        "command": list(pred.job.argv),
        "step_time_s": _r(est.step_time_s),
        # before any refine calibration (api.predict_config adds it as breakdown["calibration"])
        "uncalibrated_step_time_s": _r(est.step_time_s - est.breakdown.get("calibration", 0.0)),
        "tokens_per_s": _r(est.tokens_per_s),
        "mfu": _r(est.mfu, 4),
        "model_flops_per_step": _r(est.model_flops_per_step),
        "memory": {
            "peak_bytes_per_gpu": int(mem.peak_bytes_per_gpu), "capacity_bytes": int(mem.capacity_bytes),
            "fits": bool(mem.fits), "tight": bool(mem.tight), "verdict": verdict_words(mem.fits, mem.tight),
            "headroom_bytes": int(mem.headroom_bytes), "fragmentation_bytes": int(mem.fragmentation_bytes),
            "stage": mem.stage,
            "components": {k: int(v) for k, v in mem.components.items()},
            "host": _host_memory(mem),
            **(_cpu_memory(pred) if pred.cluster.gpu.device == "cpu" else {}),
        },
        "breakdown": {k: _r(v) for k, v in est.breakdown.items()},
        "stages": [{"stage": s.stage, "num_layers": s.num_layers, "fwd_s": _r(s.fwd_s), "bwd_s": _r(s.bwd_s),
                    "compute_s": _r(s.compute_s), "idle_s": _r(s.idle_s), "optimizer_s": _r(s.optimizer_s),
                    "exposed_comm_s": {k: _r(v) for k, v in s.exposed_comm_s.items()}} for s in est.stages],
        "critical_stage": est.critical_stage,
        "cluster": {"name": pred.cluster.name, "gpu": pred.cluster.gpu.name,
                    "gpus_per_node": pred.cluster.gpus_per_node, "nnodes": pred.job.nnodes},
        "config": config,
        "warnings": list(dict.fromkeys(list(pred.warnings) + list(est.warnings))),
        "predictor": dict(est.predictor),
    }
