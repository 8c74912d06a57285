"""Stage [5]: compose op times into the step: per-pass durations, the pipeline simulation, then the
once-per-step gradient sync, optimizer and parameter gather, with a breakdown that sums to the step time.

Overlap rules (what a framework hides behind compute, and what it leaves exposed):
- in-layer communication is on the critical path (TP all-reduce / SP gathers, expert all-to-all), except TP
  communication under --tp-comm-overlap (Transformer Engine userbuffers) and ops tagged `overlap`
  (context-parallel KV exchange, ZeRO-3 prefetched gathers, ZeRO-2 reduce-scatter with overlap_comm), which
  hide behind the compute of their layer: exposed = max(0, comm - compute);
- sequence parallelism's backward re-gather and grad-input reduce-scatter (graph/backward.sp_column_backward) run
  beside the grad-input / weight-grad half of their column-parallel GEMM: exposed = max(comm - half, share x comm),
  share = the SMs the NCCL kernel takes from the GEMM (gemm_window_exposed_s); where the job's
  CUDA_DEVICE_MAX_CONNECTIONS is not 1 on a GPU before Blackwell (graph/launch_order.py) the graph leaves them
  untagged (graph/backward.sp_column_backward) and they are on the critical path like the other in-layer
  communication; without sequence parallelism, Megatron-LM's async grad-input all-reduce of each column-parallel
  linear (graph/backward.async_dgrad_backward, column_grad_allreduce) runs beside its weight-grad half the same way;
- data-parallel gradient sync runs after the stage's last backward, or, with --overlap-grad-reduce /
  overlap_comm, bucket by bucket during the last micro-batch's backward: exposed = max(comm - window, last
  bucket) (megatron/core/distributed/param_and_grad_buffer.py);
- the distributed-optimizer parameter all-gather follows the optimizer step, or hides behind the first
  forward of the next step with --overlap-param-gather;
- all stages meet before the optimizer (gradient-norm and found-inf reductions span the model-parallel group);
- DeepSpeed ZeRO-1/2's per-tensor step loop is issued by the host while the GPU still runs what the last backward
  left queued, which hides at most a full launch queue of the issue (step_bookkeeping_s), and nothing under
  overlap_comm, whose gradient epilogue synchronises the device first (_queued_at_step_s);
- pipeline send/recv: Megatron's wait on the dependency edge; DeepSpeed's PipelineEngine sends and receives with
  blocking calls at the start of each step of its lock-step schedule, on the stage's own stream
  (schedule.pipeline.simulate_lockstep).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.graph.ddp_buckets import grad_bucket_elems, last_bucket_elems
from llmperf_hook.graph.op import Op
from llmperf_hook.graph.op_graph import ChunkOps, OpBlock, OpGraph, StageGraph
from llmperf_hook.graph.zero3_hooks import ZERO3_HOOKS_OP
from llmperf_hook.predict.dispatch import op_id
from llmperf_hook.predict.host_issue import pass_host_s, queued_pass_s
from llmperf_hook.schedule.op_timeline import hidden_comm, op_events
from llmperf_hook.schedule.pipeline import PipelineResult, simulate_lockstep, simulate_pipeline_and_free
from llmperf_hook.schedule.step_estimate import StageTiming, TimelineEvent



@dataclass(frozen=True)
class PassCost:
    """One forward or backward pass of a chunk for one micro-batch."""

    total_s: float
    compute_s: float
    recompute_s: float
    exposed_comm_s: dict[str, float]
    host_wait_s: float = 0.0
    """Time the GPU waits for the host to issue ops (pass host-bound: ops x per-op host cost > GPU time)."""


def _comm_kind(op: Op) -> str:
    assert op.collective is not None
    if op.name.startswith("zero"):
        return "zero"
    if op.name.startswith(("moe.dispatch", "moe.combine")):  # the dispatcher's ETP gathers are EP traffic too
        return "ep"
    return {"dp_cp": "dp", "edp": "dp", "etp": "tp", "tp_ep": "ep"}.get(op.collective.group, op.collective.group)


COMM_PART = {"zero3_list_copy": "zero"}
"""Non-collective ops that are part of a collective's cost, reported on its line: the host loop and per-rank copies
of DeepSpeed < v0.6.0's ZeRO-3 list collectives (graph/zero3_legacy.py)."""


SCOPED_OVERLAP = {"shared_experts": "moe.shared_"}
"""Side-stream communication that hides only behind some of its layer's compute: the MoE dispatch / combine
under --moe-shared-expert-overlap behind the shared experts' ops (token_dispatcher.py: shared fc1 runs during
the dispatch A2A, fc2 during the combine A2A)."""


def _scoped_exposed(ops: tuple[Op, ...], seconds: dict[str, float], scope: str) -> float:
    """Exposed time of the communication tagged overlap=`scope`: max(0, comm - compute of its window ops)."""
    prefix = SCOPED_OVERLAP[scope]
    comm_s = sum(seconds[op_id(op)] for op in ops if op.collective is not None and op.tags.get("overlap") == scope)
    window_s = sum(seconds[op_id(op)] for op in ops if op.collective is None and op.name.startswith(prefix))
    return max(0.0, comm_s - window_s)


GEMM_HALF_OVERLAP = {"dgrad": 0.5, "wgrad": 0.5}
"""Share of a GEMM's backward (dgrad + wgrad: two GEMMs of the forward's FLOPs, graph/backward.py) that hides the
collective tagged overlap=dgrad (the sequence-parallel re-gather runs during the grad-input GEMM) or
overlap=wgrad (the grad-input reduce-scatter, or without SP the async grad-input all-reduce, during the weight-grad
GEMM): graph/backward.sp_column_backward and async_dgrad_backward."""


def overlapped_exposed_s(comm_s: float, gemm_s: float, sm_share: float) -> float:
    """What a collective of `comm_s` launched beside a GEMM of `gemm_s` adds to the GEMM: the NCCL kernel holds
    `sm_share` of the SMs (graph/backward.nccl_sm_share), so while both run the GEMM advances at 1 - sm_share of its
    speed. If the collective ends first (comm_s (1 - share) <= gemm_s) the pair takes gemm_s + share x comm_s, else
    comm_s: exposed = max(comm_s - gemm_s, share x comm_s)."""
    return max(comm_s - gemm_s, sm_share * comm_s, 0.0)


def gemm_window_exposed_s(ops: tuple[Op, ...], seconds: dict[str, float]) -> float:
    """Exposed time of the collectives that hide behind one half of a GEMM's backward (GEMM_HALF_OVERLAP): each
    waits on its own GEMM half, so what the half does not cover stays on the critical path, and the half itself
    runs slower on the SMs the NCCL kernel leaves it (overlapped_exposed_s)."""
    gemm_bwd_s = {op.name: seconds[op_id(op)] for op in ops
                  if op.collective is None and op.phase == "bwd" and op.op_class == "gemm"}
    exposed = 0.0
    for op in ops:
        half = GEMM_HALF_OVERLAP.get(op.tags.get("overlap", "")) if op.collective is not None else None
        if half is not None:
            comm_s, window_s = seconds[op_id(op)], half * gemm_bwd_s.get(op.tags.get("window", ""), 0.0)
            exposed += overlapped_exposed_s(comm_s, window_s, float(op.tags.get("sm_share", 0.0)))
    return exposed


def block_pass(ops: tuple[Op, ...], seconds: dict[str, float], tp_overlap: bool) -> PassCost:
    compute = recompute = hidden = 0.0
    exposed: dict[str, float] = defaultdict(float)
    hidden_by_kind: dict[str, float] = defaultdict(float)
    scopes: set[str] = set()
    windowed = False
    for op in ops:
        t = seconds[op_id(op)]
        if op.collective is not None and op.tags.get("overlap") in GEMM_HALF_OVERLAP:
            windowed = True
        elif op.collective is None:
            if op.op_class in COMM_PART:
                exposed[COMM_PART[op.op_class]] += t
            elif op.phase == "recompute":
                recompute += t
            else:
                compute += t
        elif op.tags.get("overlap") in SCOPED_OVERLAP:
            scopes.add(op.tags["overlap"])
        elif hidden_comm(op, tp_overlap):
            hidden += t
            hidden_by_kind[_comm_kind(op)] += t
        else:
            exposed[_comm_kind(op)] += t
    leftover = max(0.0, hidden - (compute + recompute))
    for kind, t in hidden_by_kind.items():
        exposed[kind] += leftover * t / hidden if hidden else 0.0
    for scope in scopes:
        exposed["ep"] += _scoped_exposed(ops, seconds, scope)
    if windowed:
        exposed["tp"] += gemm_window_exposed_s(ops, seconds)
    total = compute + recompute + sum(exposed.values())
    return PassCost(total, compute, recompute, dict(exposed))


def chunk_pass(chunk: ChunkOps, seconds: dict[str, float], tp_overlap: bool, backward: bool,
               host_per_op_s: float = 0.0) -> PassCost:
    """A chunk's pass: GPU time of its blocks, lengthened where the host cannot issue kernels fast enough
    (each block is an in-order launch queue, `predict.host_issue.queued_pass_s`)."""
    total = compute = recompute = wait = 0.0
    exposed: dict[str, float] = defaultdict(float)
    side_stream = lambda op: hidden_comm(op, tp_overlap)  # noqa: E731
    for block in chunk.blocks:
        ops = block.bwd if backward else block.fwd
        cost = block_pass(ops, seconds, tp_overlap)
        queued = queued_pass_s(ops, lambda op: seconds[op_id(op)], host_per_op_s, side_stream) if host_per_op_s else 0.0
        wait += max(0.0, queued - cost.total_s) * block.count
        total += cost.total_s * block.count
        compute += cost.compute_s * block.count
        recompute += cost.recompute_s * block.count
        for kind, t in cost.exposed_comm_s.items():
            exposed[kind] += t * block.count
    return PassCost(total + wait, compute, recompute, dict(exposed), wait)


def backward_lead_s(chunk: ChunkOps, cost: PassCost, tp_overlap: bool, host_per_op_s: float) -> float:
    """GPU time of `chunk`'s backward pass (`cost`) still queued when the host has issued its last op: the pass's GPU
    time less its host issue (predict/host_issue.pass_host_s), 0 for a host-bound pass or without a host model."""
    if host_per_op_s <= 0.0:
        return 0.0
    side_stream = lambda op: hidden_comm(op, tp_overlap)  # noqa: E731
    host = sum(pass_host_s(block.bwd, host_per_op_s, side_stream) * block.count for block in chunk.blocks)
    return max(0.0, cost.total_s - host)


def _bucket_fraction(cfg: TrainingConfig, stage: StageGraph) -> float:
    """Share of the gradient reduction in its last bucket, which no backward is left to hide. DeepSpeed: one
    reduce_bucket_size of the buffer. Megatron's DDP (graph/ddp_buckets.py): the last bucket of the first chunk, the
    one holding its first parameters (the embedding on pipeline rank 0); a whole chunk where it is not bucketed."""
    params = stage.num_params
    if "deepspeed" in cfg.framework:
        return min(1.0, grad_bucket_elems(cfg, params) / max(1, params))
    return min(1.0, last_bucket_elems(cfg, stage.stage, stage.chunks) / max(1, params))


STEP_WORK_CLASSES = ("optimizer", "deepspeed_bookkeeping", "step_bookkeeping", "nvme_swap")
"""Step ops that run after the last backward, on the compute stream (Adam, DeepSpeed's and Megatron's bookkeeping
around it: graph/step_ops.py, graph/megatron_step.py; NVMe swaps)."""


@dataclass(frozen=True)
class StepOpsCost:
    grad_exposed_s: float
    embedding_s: float
    optimizer_s: float
    param_gather_exposed_s: float
    grad_total_s: float
    param_gather_total_s: float
    zero3_hooks_s: float = 0.0
    """Host time of ZeRO-3's module and gradient hooks (graph/zero3_hooks.py), inside optimizer_s for the step's
    timing and reported on its own breakdown line: the GPU waits for it in forward and backward."""
    step_host_s: float = 0.0
    """Host time of the step's own ops that the GPU waits for, inside optimizer_s and reported on its own breakdown
    line (`host_optimizer_step`): DeepSpeed's per-tensor syncs (the ops' host_s tag, graph/step_ops.py
    DEEPSPEED_HOST_S_PER_TENSOR) and the part of ZeRO-1/2's step-loop issue that outlasts its kernels
    (step_bookkeeping_s)."""


def step_ops_cost(stage: StageGraph, seconds: dict[str, float], cfg: TrainingConfig, bwd_window_s: float,
                  fwd_window_s: float, lead_s: float = 0.0, host_per_op_s: float = 0.0) -> StepOpsCost:
    """`lead_s`: GPU time of the last backward still queued when the host starts the step; `host_per_op_s`: the
    cluster's host cost of one modelled op (the step's per-tensor launches: step_bookkeeping_s)."""
    grad = gather = embed = opt = contention = hooks = host = 0.0
    grad_overlap = gather_overlap = False
    for op in stage.step_ops:
        t = seconds[op_id(op)]
        if op.op_class in STEP_WORK_CLASSES:  # the step's own work, not overlapped
            own = step_bookkeeping_s(op, t, lead_s, host_per_op_s) if "host_launches" in op.tags else t
            opt += own
            if op.name == ZERO3_HOOKS_OP:
                hooks += t
            else:  # the host wait the op's time holds (the roofline adds host_s), and an issue that outlasts it
                host += min(t, float(op.tags.get("host_s", 0.0))) + own - t
        elif op.name.startswith("embedding"):
            embed += t
        elif "param_allgather" in op.name:
            gather += t
            gather_overlap = op.tags.get("overlap") == "param_gather"
        else:
            grad += t
            grad_overlap = op.tags.get("overlap") == "grad_reduce"
            contention += float(op.tags.get("sm_share", 0.0)) * t
    grad_exposed = grad
    if grad_overlap:
        # The buckets before the last run beside the backward's GEMMs, which lose the SMs their NCCL kernels hold
        # (overlapped_exposed_s) and so end later; the last bucket is ready only then and has no GEMM left to slow.
        last = _bucket_fraction(cfg, stage)
        grad_exposed = max(grad - bwd_window_s, grad * last + contention * (1.0 - last))
    gather_exposed = max(0.0, gather - fwd_window_s) if gather_overlap else gather
    return StepOpsCost(grad_exposed, embed, opt, gather_exposed, grad, gather, hooks, host)


LAUNCH_QUEUE_DEPTH = 1000
"""Kernel launches a CUDA stream holds before the next launch waits for a kernel to finish: 'the buffer size is
about 1000 kernels' (NVIDIA developer forum / Stack Overflow 53970187: launches take 4-5 us until ~1,000 are pending,
then each waits for one to complete; OneFlow PR #890, closed, proposed syncing its streams at 1,024 for the same
reason). NVIDIA does not document the depth (cudaLimitDevRuntimePendingLaunchCount bounds device-side launches only):
a measured figure of other GPUs and drivers, not a specification. The host blocks on it: CUPTI's 'Command Buffer
Full' rows in the kernel tables (measurements/h200-sxm-141gb-2026-11-27/kernels/plain_bf16.txt: 159 per step)."""


def step_bookkeeping_s(op: Op, gpu_s: float, lead_s: float, host_per_op_s: float) -> float:
    """Seconds after the backward's last kernel until DeepSpeed ZeRO-1/2's per-tensor step loop is done: the host
    issues its `host_launches` at `host_s_per_launch` each (graph/step_ops.py) through the launch queue while the GPU
    still runs `lead_s` of queued backward work (no synchronisation between them), and the GPU runs the loop's
    `gpu_s` of kernels as they come (predict/host_issue.py's in-order queue, taken whole). The host gains on the GPU
    only while the queue has room: in the lead it issues at most LAUNCH_QUEUE_DEPTH launches (each further one
    waits for a backward kernel to leave the queue), so the lead hides min(lead, depth x per-launch) of the issue.
    A device without a launch queue (host_per_op_s 0: the CPU cluster) runs the ops as they are issued: gpu_s."""
    if host_per_op_s <= 0.0:
        return gpu_s
    per_launch_s = float(op.tags["host_s_per_launch"])
    issue_s = float(op.tags["host_launches"]) * per_launch_s
    return max(gpu_s, issue_s - min(lead_s, LAUNCH_QUEUE_DEPTH * per_launch_s))


def _queued_at_step_s(cfg: TrainingConfig, stage: StageGraph, last_backward: PassCost, host_per_op_s: float) -> float:
    """GPU time still queued when the step starts: the last backward's lead, or none for DeepSpeed ZeRO-1/2 with
    overlap_comm, whose gradient epilogue ends the backward with a device synchronisation (stage_1_and_2.py
    independent_gradient_partition_epilogue: `if self.overlap_comm: get_accelerator().synchronize()`, reached from
    engine.allreduce_gradients at ZeRO-1 through reduce_gradients and at ZeRO-2 through
    overlapping_partition_gradients_reduce_epilogue). Only step_bookkeeping_s's ops use it: computed for the stages
    that hold one (the last backward is chunk 0's, the first chunk a rank's backward ends with)."""
    o = cfg.optimizer
    if (o.zero_stage in (1, 2) and o.overlap_grad_reduce) or not any("host_launches" in op.tags for op in stage.step_ops):
        return 0.0
    return backward_lead_s(stage.chunks[0], last_backward, cfg.optimizer.tp_comm_overlap, host_per_op_s)


@dataclass(frozen=True)
class ComposedStep:
    step_time_s: float
    breakdown: dict[str, float]
    stages: tuple[StageTiming, ...]
    critical_stage: int
    timeline: tuple[TimelineEvent, ...]


def compose_step(graph: OpGraph, seconds: dict[str, float], cfg: TrainingConfig, detail: bool = False,
                 host_per_op_s: float = 0.0) -> ComposedStep:
    """Simulate the step of `graph` with op `seconds` (by op id); `host_per_op_s` = host issue time per op."""
    tp_overlap = cfg.optimizer.tp_comm_overlap
    fwd, bwd = _chunk_passes(graph, seconds, tp_overlap, host_per_op_s)
    last_backward = [row[0] for row in bwd]  # before any partition gather is added: the pass's own queue
    p2p_s = seconds[op_id(graph.p2p)] if graph.p2p is not None else 0.0
    if graph.p2p_gather is not None:
        fwd, bwd = _with_partition_gathers(fwd, bwd, seconds[op_id(graph.p2p_gather)])
    m = graph.num_microbatches
    f_s = [[c.total_s for c in row] for row in fwd]
    b_s = [[c.total_s for c in row] for row in bwd]
    sim, sim_free = _simulate(cfg, f_s, b_s, p2p_s, m, detail)
    step_costs = [step_ops_cost(s, seconds, cfg, sum(b_s[i]), sum(f_s[i]),
                                _queued_at_step_s(cfg, s, last_backward[i], host_per_op_s), host_per_op_s)
                  for i, s in enumerate(graph.stages)]
    sync_end = [sim.end_s[i] + c.grad_exposed_s + c.embedding_s for i, c in enumerate(step_costs)]
    critical = max(range(len(sync_end)), key=lambda i: sync_end[i])
    optimizer_s = max(c.optimizer_s for c in step_costs)
    gather_s = max(c.param_gather_exposed_s for c in step_costs)
    step = sync_end[critical] + optimizer_s + gather_s
    breakdown = _breakdown(fwd[critical], bwd[critical], m, sim.end_s[critical], sim_free.end_s[critical],
                           sim.busy_s[critical], step_costs[critical], optimizer_s, gather_s)
    stages = tuple(_stage_timing(graph.stages[i], fwd[i], bwd[i], m, sim.end_s[i], sim.busy_s[i], step_costs[i])
                   for i in range(len(graph.stages)))
    timeline: tuple[TimelineEvent, ...] = ()
    if detail:
        timeline = _timeline(sim.events, sync_end, sim.end_s, step_costs, optimizer_s, gather_s)
        timeline += tuple(op_events(graph, seconds, sim.events, tp_overlap, host_per_op_s))
    return ComposedStep(step, breakdown, stages, critical, timeline)


def _chunk_passes(graph: OpGraph, seconds: dict[str, float], tp_overlap: bool,
                  host_per_op_s: float) -> tuple[list[list[PassCost]], list[list[PassCost]]]:
    """(forward, backward) PassCost per stage and chunk. A chunk's pass depends on its blocks alone, and chunks with
    the same layer mix share one blocks tuple (graph/build.build_chunk's memo): each distinct tuple is priced once
    (PassCost is frozen; its exposed dict is only read downstream)."""
    priced: dict[tuple[int, bool], PassCost] = {}

    def cost(chunk: ChunkOps, backward: bool) -> PassCost:
        key = (id(chunk.blocks), backward)  # the graph holds every tuple for the whole call: ids stay unique
        if key not in priced:
            priced[key] = chunk_pass(chunk, seconds, tp_overlap, backward, host_per_op_s)
        return priced[key]

    fwd = [[cost(c, False) for c in s.chunks] for s in graph.stages]
    bwd = [[cost(c, True) for c in s.chunks] for s in graph.stages]
    return fwd, bwd


def _simulate(cfg: TrainingConfig, f_s: list[list[float]], b_s: list[list[float]], p2p_s: float, m: int,
              detail: bool) -> tuple[PipelineResult, PipelineResult]:
    """(the step's schedule, the same with free send/recv): DeepSpeed's PipelineEngine as its lock-step of
    blocking exchanges (schedule.pipeline.simulate_lockstep; the engine has one chunk per stage), else
    Megatron's schedule with the send/recv on the dependency edge."""
    if cfg.deepspeed_pipeline_engine and len(f_s) > 1 and len(f_s[0]) == 1:
        fwd, bwd = [row[0] for row in f_s], [row[0] for row in b_s]
        sim = simulate_lockstep(fwd, bwd, p2p_s, m, record=detail)
        return sim, (simulate_lockstep(fwd, bwd, 0.0, m) if p2p_s > 0 else sim)
    return simulate_pipeline_and_free(f_s, b_s, p2p_s, m, record=detail, group_size=cfg.parallel.microbatch_group_size)


def _with_partition_gathers(fwd: list[list[PassCost]], bwd: list[list[PassCost]],
                            gather_s: float) -> tuple[list[list[PassCost]], list[list[PassCost]]]:
    """Passes with DeepSpeed's PipelineEngine rebuilding its 1/TP pipeline slices on the stage's own stream
    (deepspeed/runtime/pipe/engine.py): a forward after the first stage all-gathers the received activation
    (_exec_forward_pass, PartitionedTensor.full); a backward before the last stage all-gathers its own output,
    which it cleared after sending, and the received gradient (_exec_backward_pass). The engine has no
    interleaving, so each stage has one chunk."""
    last = len(fwd) - 1

    def add(cost: PassCost, n: int) -> PassCost:
        if n == 0:
            return cost
        exposed = dict(cost.exposed_comm_s)
        exposed["pp_gather"] = exposed.get("pp_gather", 0.0) + n * gather_s
        return PassCost(cost.total_s + n * gather_s, cost.compute_s, cost.recompute_s, exposed, cost.host_wait_s)

    fwd = [[add(c, int(i > 0)) for c in row] for i, row in enumerate(fwd)]
    bwd = [[add(c, 2 * int(i < last)) for c in row] for i, row in enumerate(bwd)]
    return fwd, bwd


def _breakdown(fwd: list[PassCost], bwd: list[PassCost], m: int, end_s: float, end_free_s: float, busy_s: float,
               steps: StepOpsCost, optimizer_s: float, gather_s: float) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for cost in fwd + bwd:
        out["compute"] += cost.compute_s * m
        out["recompute"] += cost.recompute_s * m
        out["host_overhead"] += cost.host_wait_s * m
        for kind, t in cost.exposed_comm_s.items():
            out[f"comm_{kind}"] += t * m
    out["pipeline_p2p"] = max(0.0, end_s - end_free_s)
    out["pipeline_bubble"] = max(0.0, end_s - busy_s - out["pipeline_p2p"])
    out["comm_dp_grad"] += steps.grad_exposed_s
    out["comm_embedding_grad"] += steps.embedding_s
    out["host_zero3_hooks"] = min(steps.zero3_hooks_s, optimizer_s)
    out["host_optimizer_step"] = min(steps.step_host_s, optimizer_s - out["host_zero3_hooks"])
    out["optimizer"] = optimizer_s - out["host_zero3_hooks"] - out["host_optimizer_step"]
    out["comm_param_gather"] += gather_s
    return {k: v for k, v in out.items() if v > 0.0 or k in ("compute", "pipeline_bubble", "optimizer")}


def _stage_timing(stage: StageGraph, fwd: list[PassCost], bwd: list[PassCost], m: int, end_s: float,
                  busy_s: float, steps: StepOpsCost) -> StageTiming:
    exposed: dict[str, float] = defaultdict(float)
    for cost in fwd + bwd:
        for kind, t in cost.exposed_comm_s.items():
            exposed[kind] += t * m
    exposed["dp_grad"] += steps.grad_exposed_s
    exposed["param_gather"] += steps.param_gather_exposed_s
    exposed["embedding_grad"] += steps.embedding_s
    compute = sum((c.compute_s + c.recompute_s) * m for c in fwd + bwd)
    return StageTiming(stage=stage.stage, num_layers=stage.num_layers, fwd_s=sum(c.total_s for c in fwd),
                       bwd_s=sum(c.total_s for c in bwd), compute_s=compute,
                       exposed_comm_s={k: v for k, v in exposed.items() if v > 0}, pipeline_end_s=end_s,
                       idle_s=max(0.0, end_s - busy_s),
                       optimizer_s=steps.optimizer_s - steps.zero3_hooks_s - steps.step_host_s)


def _timeline(events: tuple, sync_end: list[float], end_s: tuple[float, ...], steps: list[StepOpsCost],
              optimizer_s: float, gather_s: float) -> tuple[TimelineEvent, ...]:
    out = [TimelineEvent(stage=r, name=k, start_s=s, end_s=e, chunk=c, microbatch=i) for r, k, c, i, s, e in events]
    opt_start = max(sync_end)
    for r, cost in enumerate(steps):
        if sync_end[r] > end_s[r]:
            out.append(TimelineEvent(r, "grad_sync", end_s[r], sync_end[r]))
        out.append(TimelineEvent(r, "optimizer", opt_start, opt_start + cost.optimizer_s))
        if cost.param_gather_exposed_s > 0:
            out.append(TimelineEvent(r, "param_gather", opt_start + optimizer_s,
                                     opt_start + optimizer_s + cost.param_gather_exposed_s))
    return tuple(out)
