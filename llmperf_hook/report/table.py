"""Stage [6]: the readable report of `llmperf predict` (default format)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from llmperf_hook.report.units import fmt_bytes, fmt_rate, fmt_seconds
from llmperf_hook.schedule.memory_fit import verdict_words

if TYPE_CHECKING:
    from llmperf_hook.api import Prediction
    from llmperf_hook.schedule.step_estimate import MemoryEstimate

BREAKDOWN_LABELS = {
    "compute": "compute (forward + backward)", "recompute": "activation recompute",
    "comm_tp": "tensor-parallel comm (exposed)", "comm_cp": "context-parallel comm (exposed)",
    "comm_ep": "expert all-to-all (exposed)", "comm_zero": "ZeRO gathers / reduces in layers (exposed)",
    "comm_dp": "data-parallel comm in layers (exposed)", "pipeline_p2p": "pipeline send/recv (exposed)",
    "comm_pp_gather": "pipeline slice all-gathers (DeepSpeed engine)",
    "pipeline_bubble": "pipeline bubble", "comm_dp_grad": "gradient sync (exposed)",
    "comm_embedding_grad": "tied-embedding grad all-reduce", "optimizer": "optimizer step",
    "comm_param_gather": "parameter all-gather (exposed)",
    "host_overhead": "waiting for the host to issue ops", "calibration": "calibration correction",
    "host_zero3_hooks": "ZeRO-3 fetch/release/grad hooks (host)",
    "host_optimizer_step": "optimizer step: host loop the GPU waits for",
}


def _config_line(pred: "Prediction") -> str:
    c = pred.config
    p, b = c.parallel, c.batch
    layout = f"TP{p.tp} PP{p.pp}" + (f" VPP{p.vpp}" if p.vpp > 1 else "") + (f" CP{p.cp}" if p.cp > 1 else "")
    layout += f" DP{p.dp}" + (f" EP{p.ep}" if p.ep > 1 else "") + (" SP" if p.sequence_parallel else "")
    zero = f", ZeRO-{c.optimizer.zero_stage}" if c.optimizer.zero_stage else ""
    dist = ", distributed optimizer" if c.optimizer.distributed_optimizer else ""
    return (f"{c.framework} on {c.world_size} GPUs ({pred.cluster.name}, {pred.cluster.gpu.name}): {layout}; "
            f"micro-batch {b.micro_batch_size}, global batch {b.global_batch_size} ({b.num_microbatches} "
            f"micro-batch{'es' if b.num_microbatches != 1 else ''} per rank); {c.precision}, "
            f"recompute {c.recompute.granularity}{zero}{dist}")


def _mfu_basis(pred: "Prediction") -> str:
    """What the MFU divides: the model's forward + backward FLOPs per GPU-second (recompute not counted) over the
    GPU's dense peak for the job's precision (api.predict_config: mfu = model FLOPs / (step x GPUs x peak))."""
    est, c = pred.estimate, pred.config
    achieved_flop_per_s = est.model_flops_per_step / (est.step_time_s * c.world_size) if est.step_time_s else 0.0
    gpu = pred.cluster.gpu
    peak_flop_per_s = gpu.peak_for(c.precision)
    # the dtype whose peak hardware/spec.py peak_for picked (fp8 falls back to bf16, bf16 to fp16)
    order = (c.precision, "bf16" if c.precision == "fp8" else c.precision, "fp16")
    dtype = next((k for k in order if gpu.peak_flop_per_s.get(k) == peak_flop_per_s), "highest")
    scale, unit = (1e12, "TFLOP/s") if peak_flop_per_s >= 1e12 else (1e9, "GFLOP/s")  # a CPU's peak is GFLOP/s
    return (f"({achieved_flop_per_s / scale:,.0f} model {unit} per GPU of the {peak_flop_per_s / scale:,.0f} {unit} "
            f"dense {dtype} peak; recompute not counted)")


def _host_memory_lines(mem: "MemoryEstimate") -> list[str]:
    """The host RAM per node the offloads pin, with its parts, and the verdict against the cluster's host RAM
    where its preset states it; nothing when nothing is offloaded."""
    if not mem.host_components:
        return []
    total = fmt_bytes(mem.host_bytes_per_node)
    if mem.host_capacity_bytes:
        verdict = "fits" if mem.host_fits else "DOES NOT FIT"
        line = f"  host memory/node {total} of {fmt_bytes(mem.host_capacity_bytes)}: {verdict}"
    else:
        line = f"  host memory/node {total} (the cluster preset states no host RAM: no verdict)"
    parts = ", ".join(f"{k.removeprefix('host_').replace('_', ' ')} {fmt_bytes(v)}"
                      for k, v in sorted(mem.host_components.items(), key=lambda kv: -kv[1]))
    return [line, f"                   ({parts})"]


def _fragmentation_note(mem: "MemoryEstimate") -> str:
    """Where the peak is over the GPU, whether the allocator's reserve covers the shortfall (schedule/memory_rule.py:
    what the job allocates must fit; PyTorch frees cached blocks and retries a failed allocation, and the reserve's
    fragmentation decides whether that finds room)."""
    if mem.headroom_bytes >= 0:
        return ""
    reserve = fmt_bytes(mem.peak_bytes_per_gpu - mem.must_fit_bytes)
    return (f", within its {reserve} of allocator reserve: PyTorch frees cached blocks and retries" if mem.fits
            else f", beyond its {reserve} of allocator reserve: what it allocates does not fit")


def _gpu_memory_lines(mem: "MemoryEstimate") -> list[str]:
    margin = "headroom" if mem.headroom_bytes >= 0 else "short by"
    return [f"  memory per GPU   {fmt_bytes(mem.peak_bytes_per_gpu)} of {fmt_bytes(mem.capacity_bytes)}: "
            f"{verdict_words(mem.fits, mem.tight)} ({margin} {fmt_bytes(abs(mem.headroom_bytes))}"
            f"{_fragmentation_note(mem)}; busiest stage {mem.stage})", *_host_memory_lines(mem)]


def _cpu_memory_lines(pred: "Prediction") -> list[str]:
    """A CPU job (schedule/memory_cpu.py): the busiest rank's resident memory, and the verdict of the busiest host's
    ranks (and what its offloads pin) against the host's RAM."""
    from llmperf_hook.schedule.memory_cpu import RESIDENT_PART, host_ranks_bytes

    mem = pred.estimate.memory
    ranks, ranks_sum = host_ranks_bytes(pred.config, mem.per_stage_peak_bytes)
    offload = f" + {fmt_bytes(mem.host_bytes_per_node)} offloaded" if mem.host_components else ""
    margin = "headroom" if mem.headroom_bytes >= 0 else "short by"
    return [f"  memory per rank  {fmt_bytes(mem.peak_bytes_per_gpu)} resident at its peak (busiest stage {mem.stage}; "
            f"{fmt_bytes(mem.components.get(RESIDENT_PART, 0))} of it the process before any tensor)",
            f"  memory per host  {ranks} rank{'s' if ranks != 1 else ''}{offload}: "
            f"{fmt_bytes(ranks_sum + mem.host_bytes_per_node)} of {fmt_bytes(mem.capacity_bytes)} RAM: "
            f"{verdict_words(mem.fits, mem.tight)} ({margin} {fmt_bytes(abs(mem.headroom_bytes))})"]


def render_prediction_table(pred: "Prediction") -> str:
    est, mem = pred.estimate, pred.estimate.memory
    on_cpu = pred.cluster.gpu.device == "cpu"
    lines = [
        _config_line(pred), "",
        f"  step time        {fmt_seconds(est.step_time_s)}",
        f"  throughput       {fmt_rate(est.tokens_per_s)} ({fmt_rate(est.tokens_per_s / pred.config.world_size)} per GPU)",
        f"  MFU              {est.mfu * 100:.1f} %  {_mfu_basis(pred)}",
        *(_cpu_memory_lines(pred) if on_cpu else _gpu_memory_lines(mem)),
        "", f"  where the step goes (critical stage {est.critical_stage}):",
    ]
    for key, seconds in sorted(est.breakdown.items(), key=lambda kv: -kv[1]):
        share = seconds / est.step_time_s * 100 if est.step_time_s else 0.0
        lines.append(f"    {BREAKDOWN_LABELS.get(key, key):<44} {fmt_seconds(seconds):>10}  {share:5.1f} %")
    lines += ["", "  memory of the busiest rank:"]
    for key, nbytes in sorted(mem.components.items(), key=lambda kv: -kv[1]):
        if nbytes > 0:
            lines.append(f"    {key:<44} {fmt_bytes(nbytes):>10}")
    if len(est.stages) > 1:
        lines += ["", "  per stage: layers  fwd/micro-batch  bwd/micro-batch  idle"]
        for s in est.stages:
            lines.append(f"    {s.stage:>3} {s.num_layers:>12} {fmt_seconds(s.fwd_s):>16} {fmt_seconds(s.bwd_s):>16} "
                         f"{fmt_seconds(s.idle_s):>10}")
    lines += ["", "  cost models: " + ", ".join(f"{k}={v}" for k, v in est.predictor.items())]
    for warning in dict.fromkeys(list(pred.warnings) + list(est.warnings)):
        lines.append(f"  warning: {warning}")
    return "\n".join(lines)
