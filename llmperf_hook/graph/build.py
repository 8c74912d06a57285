"""Stage [3]: TrainingConfig + cluster shape -> OpGraph (ops per pipeline rank, chunk and micro-batch).

Repeated layers are built once and carried with a count, so a 96-layer, 1,024-GPU model is a few hundred ops.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace

from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.graph import layer_ops as lo
from llmperf_hook.graph import params as pc
from llmperf_hook.graph import vocab_ops as vo
from llmperf_hook.graph.backward import backward_block, nccl_sm_share
from llmperf_hook.graph.cpu_stages import cpu_stages
from llmperf_hook.graph.launch_order import launch_order_warnings, tp_launch_ordered
from llmperf_hook.graph.mla_ops import latent_scatter_backward
from llmperf_hook.graph.mtp_ops import mtp_depth_ops, mtp_head_ops
from llmperf_hook.graph.op import Op
from llmperf_hook.graph.op_graph import ChunkOps, OpBlock, OpGraph, StageGraph
from llmperf_hook.graph.placement import place_group
from llmperf_hook.graph.stages import chunk_layer_range
from llmperf_hook.graph.step_ops import build_step_ops, inter_node_ring_sm_share, main_grad_add_ops
from llmperf_hook.graph.zero_edge_ops import with_zero_edge_ops
from llmperf_hook.graph.zero_layer_ops import zero3_layer_comm
from llmperf_hook.hardware.spec import ClusterSpec


def build_context(cfg: TrainingConfig, gpus_per_node: int, nccl_sm_share: float = 0.0,
                  tp_comm_ordered: bool | None = None, nccl_inter_node_sm_share: float = 0.0) -> lo.LayerContext:
    """`tp_comm_ordered`: launch_order.tp_launch_ordered on the cluster's GPU; None = the job's setting alone."""
    p = cfg.parallel
    tokens = cfg.batch.micro_batch_size * cfg.model.seq_length // p.cp
    return lo.LayerContext(
        cfg=cfg,
        tokens=tokens,
        norm_tokens=tokens // p.tp if p.sequence_parallel else tokens,
        act_bytes=lo.DTYPE_BYTES[cfg.precision],
        dtype=cfg.precision,
        tp=place_group("tp", p.tp, p, gpus_per_node),
        cp=place_group("cp", p.cp, p, gpus_per_node),
        ep=place_group("ep", p.ep, p, gpus_per_node),
        gpus_per_node=gpus_per_node,
        nccl_sm_share=nccl_sm_share,
        nccl_inter_node_sm_share=nccl_inter_node_sm_share,
        tp_comm_ordered=cfg.tp_comm_ordered if tp_comm_ordered is None else tp_comm_ordered,
    )


def _block(name: str, fwd: list[Op], count: int, granularity: str, cfg: TrainingConfig | None = None) -> OpBlock:
    """`cfg` gives a selective recompute its --recompute-modules and whether Transformer Engine fuses the norms."""
    modules, te_norms = (cfg.recompute.modules, cfg.transformer_impl == "transformer_engine") if cfg else \
        (("core_attn",), False)
    return OpBlock(name=name, fwd=tuple(fwd), bwd=backward_block(fwd, granularity, modules, te_norms), count=count)


def _layer_blocks(cfg: TrainingConfig, ctx: lo.LayerContext, num_dense: int, num_moe: int,
                  num_recomputed: int, gpus_per_node: int) -> list[OpBlock]:
    """Transformer layer blocks of a chunk, split by kind and by whether full recompute covers them."""
    blocks: list[OpBlock] = []
    granularity = cfg.recompute.granularity
    for kind, count, params in (("dense_layer", num_dense, pc.layer_params(cfg, moe=False)),
                                ("moe_layer", num_moe, pc.layer_params(cfg, moe=True))):
        if count == 0:
            continue
        fwd = _layer_fwd(ctx, kind == "moe_layer")
        recomputed = min(count, num_recomputed) if granularity == "full" else 0
        for suffix, n, gran in (("", count - recomputed, "selective" if granularity == "selective" else "none"),
                                (".recomputed", recomputed, "full")):
            if n:
                gather_fwd, gather_bwd, reduce = zero3_layer_comm(cfg, params, gpus_per_node, gran == "full",
                                                                  kind == "moe_layer")
                block = _with_latent_scatter_backward(_block(kind + suffix, fwd, n, gran, cfg), ctx)
                bwd = gather_bwd + block.bwd + main_grad_add_ops(cfg, params) + reduce
                blocks.append(OpBlock(block.name, gather_fwd + block.fwd, bwd, n))
    return blocks


def _layer_fwd(ctx: lo.LayerContext, moe: bool) -> list[Op]:
    """Forward ops of one transformer layer: attention, then the dense MLP or the MoE block."""
    if not moe:
        return lo.attention_ops(ctx) + lo.mlp_ops(ctx)
    ops, experts_local = lo.moe_ops(ctx)
    return lo.attention_ops(ctx) + _repeat_experts(ops, experts_local)


def _with_latent_scatter_backward(block: OpBlock, ctx: lo.LayerContext) -> OpBlock:
    """The local-spec MLA latents' scatter backward (mla_ops.latent_scatter_backward), whose forward is a split: the
    graph lists the latent gathers first in the attention, so their backward follows the attention norm's."""
    gathers = latent_scatter_backward(ctx) if ctx.cfg.model.multi_latent_attention else ()
    return _after_backward_of(block, "attn.norm", gathers)


def _with_scatter_backward(block: OpBlock, ctx: lo.LayerContext, prefix: str = "") -> OpBlock:
    """Under SP with an all-reduced embedding its gradient is gathered over TP right after the embedding dropout's
    backward (vocab_ops.embedding_scatter_backward): a backward op with no forward collective. Without a dropout
    (--hidden-dropout 0: no op) it is the first backward of the embedding's ops."""
    gather = tuple(replace(op, name=prefix + op.name) for op in vo.embedding_scatter_backward(ctx))
    if not gather or any(op.name == prefix + "embedding.dropout" for op in block.bwd):
        return _after_backward_of(block, prefix + "embedding.dropout", gather)
    at = next(i for i, op in enumerate(block.bwd) if op.phase == "bwd" and op.name.startswith(prefix + "embedding."))
    return replace(block, bwd=block.bwd[:at] + gather + block.bwd[at:])


def _after_backward_of(block: OpBlock, name: str, ops: tuple[Op, ...]) -> OpBlock:
    """`ops` inserted into the block's backward right after op `name`'s backward (not after a full recompute's
    replay of its forward, which comes first: an MTP depth is recomputed)."""
    if not ops:
        return block
    at = next(i for i, op in enumerate(block.bwd) if op.name == name and op.phase == "bwd") + 1
    return replace(block, bwd=block.bwd[:at] + ops + block.bwd[at:])


def _mtp_blocks(cfg: TrainingConfig, ctx: lo.LayerContext) -> list[OpBlock]:
    """The MTP depths (graph/mtp_ops.py), after the decoder on the last chunk of the last pipeline stage: under
    full recompute Megatron checkpoints each depth's projection and layer (MultiTokenPredictionBlock
    _checkpointed_forward), not its loss head, so the head ops are a block of their own."""
    layer = _layer_fwd(ctx, pc.mtp_layer_is_moe(cfg))
    depths = cfg.model.mtp_num_layers
    depth = _block("mtp", mtp_depth_ops(ctx, layer), depths, cfg.recompute.granularity, cfg)
    return [_with_latent_scatter_backward(_with_scatter_backward(depth, ctx, "mtp."), ctx),
            _block("mtp_head", mtp_head_ops(ctx), depths, "none")]


def _repeat_experts(moe: list[Op], experts_local: int) -> list[Op]:
    """SequentialMLP: the local experts' GEMMs run one after another (a grouped GEMM comes with repeat 1)."""
    out: list[Op] = []
    for op in moe:
        out.extend([op] * (experts_local if op.name.startswith("moe.expert_") else 1))
    return out


def _recomputed_layers(cfg: TrainingConfig, chunk_layers: int) -> int:
    r = cfg.recompute
    if r.granularity != "full":
        return 0
    if r.method == "block" and r.num_layers is not None:
        return min(chunk_layers, r.num_layers)
    return chunk_layers


def _precision_spans(cfg: TrainingConfig, start: int, end: int) -> list[tuple[range, bool]]:
    """The chunk's layers [start, end) as runs of (layers, kept in bf16): an FP8 run under --first-last-layers-bf16
    runs global layers < bf16_layers_at_start and >= num_layers - bf16_layers_at_end outside the fp8 autocast
    (megatron/core/fp8_utils.py is_first_last_bf16_layer; transformer_block.py enters get_fp8_context per layer),
    so their linear GEMMs are bf16 GEMMs with no quantize in front."""
    if cfg.precision != "fp8":
        return [(range(start, end), False)]
    head = min(end, max(start, cfg.bf16_layers_at_start))
    tail = max(head, min(end, cfg.model.num_layers - cfg.bf16_layers_at_end))
    spans = [(range(start, head), True), (range(head, tail), False), (range(tail, end), True)]
    return [(layers, bf16) for layers, bf16 in spans if len(layers)]


def build_chunk(cfg: TrainingConfig, ctx: lo.LayerContext, stage: int, chunk: int, gpus_per_node: int,
                memo: dict[tuple, tuple[OpBlock, ...]] | None = None) -> ChunkOps:
    """A chunk's blocks; chunks with the same layer mix (and no embedding/head) share one built tuple via `memo`."""
    p = cfg.parallel
    start, end = chunk_layer_range(cfg, stage, chunk)
    num_moe = sum(1 for i in range(start, end) if pc.is_moe_layer(cfg, i))
    first, last = stage == 0 and chunk == 0, stage == p.pp - 1 and chunk == p.vpp - 1
    spans = _precision_spans(cfg, start, end)
    key = (first, last, end - start, num_moe, tuple((len(layers), bf16) for layers, bf16 in spans))
    if memo is not None and key in memo:
        return ChunkOps(stage=stage, chunk=chunk, num_layers=end - start, blocks=memo[key])
    blocks: list[OpBlock] = []
    if first:
        embedding = _with_scatter_backward(_block("embedding", vo.embedding_ops(ctx), 1, "none"), ctx)
        blocks.append(with_zero_edge_ops(cfg, embedding, stage, "embedding", gpus_per_node))
    recomputed = _recomputed_layers(cfg, end - start)
    for layers, bf16 in spans:  # full recompute ('block' method: the chunk's first layers) in layer order
        moe = sum(1 for i in layers if pc.is_moe_layer(cfg, i))
        span_ctx = replace(ctx, dtype="bf16") if bf16 else ctx
        blocks += _layer_blocks(cfg, span_ctx, len(layers) - moe, moe, min(recomputed, len(layers)), gpus_per_node)
        recomputed -= min(recomputed, len(layers))
    if last and cfg.model.mtp_num_layers:
        blocks += _mtp_blocks(cfg, ctx)
    if last:
        head = _block("head", vo.head_ops(ctx), 1, "none")
        # the vocabulary weights' gradient contributions (embedding, head, MTP depths) summed by autograd
        head = replace(head, bwd=head.bwd + vo.weight_grad_sum_ops(ctx, first))
        if not first:
            head = _with_microbatch_load(head)
        blocks.append(with_zero_edge_ops(cfg, head, stage, "head", gpus_per_node))
    if memo is not None:
        memo[key] = tuple(blocks)
    return ChunkOps(stage=stage, chunk=chunk, num_layers=end - start, blocks=tuple(blocks))


def _with_microbatch_load(head: OpBlock) -> OpBlock:
    """The head block of a last pipeline stage that is not the first: its forward pass carries the stage's
    micro-batch load (labels and loss mask: predict/host_issue.py MICROBATCH_LOAD_TAG)."""
    first_op = head.fwd[0]
    tagged = replace(first_op, tags={**first_op.tags, vo.MICROBATCH_LOAD_TAG: "1"})
    return replace(head, fwd=(tagged, *head.fwd[1:]))


def _chunk_params(cfg: TrainingConfig, chunk: ChunkOps) -> tuple[int, int]:
    """(all, expert) parameters of one rank for a chunk."""
    total = expert = 0
    for block in chunk.blocks:
        if block.name.startswith("dense_layer"):
            total += block.count * pc.layer_params(cfg, moe=False)
        elif block.name.startswith("moe_layer"):
            total += block.count * pc.layer_params(cfg, moe=True)
            expert += block.count * pc.expert_params(cfg)
        elif block.name == "embedding":
            total += pc.embedding_params(cfg)
        elif block.name == "head":
            total += pc.head_params(cfg)
        elif block.name == "mtp":
            total += pc.mtp_params(cfg)
            expert += block.count * pc.expert_params(cfg) if pc.mtp_layer_is_moe(cfg) else 0
    return total, expert


def build_stage(cfg: TrainingConfig, ctx: lo.LayerContext, stage: int, gpus_per_node: int,
                memo: dict[tuple, tuple[OpBlock, ...]] | None = None) -> StageGraph:
    chunks = tuple(build_chunk(cfg, ctx, stage, c, gpus_per_node, memo) for c in range(cfg.parallel.vpp))
    counts = [_chunk_params(cfg, c) for c in chunks]
    num_params, num_expert = sum(c[0] for c in counts), sum(c[1] for c in counts)
    num_layers = sum(c.num_layers for c in chunks)
    step_ops = build_step_ops(cfg, stage, num_params, num_expert, gpus_per_node, num_layers, chunks,
                              (ctx.nccl_sm_share, ctx.nccl_inter_node_sm_share))
    return StageGraph(stage=stage, chunks=chunks, step_ops=step_ops, num_params=num_params,
                      num_expert_params=num_expert, num_layers=num_layers)


def _p2p_ops(cfg: TrainingConfig, ctx: lo.LayerContext, gpus_per_node: int) -> tuple[Op | None, Op | None]:
    """(send/recv between adjacent stages, all-gather that rebuilds a partitioned send) per micro-batch."""
    p = cfg.parallel
    if p.pp == 1:
        return None, None
    # Megatron sends [s/cp (/tp under SP), b, h] between stages (megatron/core/pipeline_parallel/p2p_communication.py).
    nbytes = ctx.norm_tokens * cfg.model.hidden_size * ctx.act_bytes
    pair = place_group("pp", p.pp, p, gpus_per_node)
    coll = type(pair)(group="pp", group_size=2, ranks_per_node=min(2, pair.ranks_per_node),
                      groups_sharing_node=pair.groups_sharing_node)
    if not (cfg.deepspeed_pipeline_engine and cfg.deepspeed_pipe_partitioned and p.tp > 1):
        return Op("pp.send_recv", "p2p", "fwd", {"bytes": nbytes}, dtype=cfg.precision, collective=coll), None
    # DeepSpeed's PipelineEngine with model parallelism sends each activation and its gradient as a
    # PartitionedTensor: every TP rank sends its 1/TP slice, the receiver rebuilds the whole tensor with an
    # all-gather over its TP group before computing (deepspeed/runtime/pipe/engine.py is_pipe_partitioned /
    # is_grad_partitioned: model-parallel size > 1 and the ds_config's pipeline.pipe_partitioned / grad_partitioned,
    # true by default; runtime/utils.py PartitionedTensor.full).
    send = Op("pp.send_recv", "p2p", "fwd", {"bytes": -(-nbytes // p.tp)}, dtype=cfg.precision, collective=coll)
    gather = lo.comm("pp.partition_allgather", "allgather", nbytes, ctx.tp, ctx)
    return send, gather


def _model_op_flops(op: Op) -> float:
    """The model's FLOPs of an op: a kernel that pads the head dimension (attention_core_ops.flash_head_dim) executes
    more than the model asks for, and MFU counts the model's share."""
    model_d = op.tags.get("model_head_dim")
    return op.flops * int(model_d) / op.dims["head_dim"] if model_d else op.flops


def _model_flops(stages: tuple[StageGraph, ...], cfg: TrainingConfig) -> float:
    """Forward + backward FLOPs of the step over all ranks, without recompute."""
    p = cfg.parallel
    per_microbatch = 0.0
    block_flops: dict[int, float] = {}  # chunks with one layer mix share their blocks (build_chunk): sum each once
    for stage in stages:
        for chunk in stage.chunks:
            for block in chunk.blocks:
                if id(block) not in block_flops:
                    flops = sum(_model_op_flops(op) for op in block.fwd if op.phase == "fwd" and not op.is_comm)
                    flops += sum(_model_op_flops(op) for op in block.bwd if op.phase == "bwd" and not op.is_comm)
                    block_flops[id(block)] = flops
                per_microbatch += block_flops[id(block)] * block.count
    return per_microbatch * cfg.batch.num_microbatches * p.tp * p.cp * p.dp


def ranks_per_node(cfg: TrainingConfig, cluster: ClusterSpec) -> int:
    """Ranks that share a node (the intra-node tier): the launch's processes per host, at most the node's GPUs (a
    job that starts 4 processes on 8-GPU nodes spreads a TP-8 group over two nodes); on a multi-host NVLink domain
    (GB200 NVL72) the processes of all its hosts (ClusterSpec.ranks_per_fabric)."""
    return cluster.ranks_per_fabric(cfg.nproc_per_node)


def build_graph(cfg: TrainingConfig, cluster: ClusterSpec, memo: GraphMemo | None = None) -> OpGraph:
    """The per-rank operator graph of one training step of `cfg` placed on `cluster`. `memo`: graphs already built
    for equal configurations (predict --batch: a repeated command's graph is built once, and its ops keep their
    cached cost keys); only the CPU-hardware adaptation, which reads the profile's files, runs again."""
    graph = memo.get(cfg, cluster) if memo is not None else None
    if graph is None:
        graph = _accelerator_graph(cfg, cluster)
        if memo is not None:
            memo.put(cfg, cluster, graph)
    stages = cpu_stages(cfg, cluster, graph.stages)  # CPU hardware: one thread computes and communicates
    if stages is graph.stages:
        return graph
    return replace(graph, stages=stages, model_flops_per_step=_model_flops(stages, cfg))


def _accelerator_graph(cfg: TrainingConfig, cluster: ClusterSpec) -> OpGraph:
    """build_graph before the CPU adaptation: a function of `cfg` and `cluster` alone (it reads no file)."""
    gpus_per_node = ranks_per_node(cfg, cluster)
    # The SM share is the GPU's, not the node fabric's: NCCL's ring search (src/graph/search.cc, 2026-06) gives a
    # 4-GPU NVLink mesh of SXM parts the NVSwitch node's channels. Perlmutter / HGX A100 4-GPU: 4 NVLink3 links of
    # 20 GB/s per GPU pair (80 GB/s a directed pair, 240 GB/s a GPU = system->totalBw); at the first sm80 speed,
    # 40 GB/s, each directed pair carries 2 channels and K4's six directed Hamiltonian rings use each pair twice:
    # 6 channels x 40 = totalBw, the search's stop; ncclTopoDupChannels doubles (bwIntra 40 >= 25), ncclTopoPostset
    # doubles (connect.cc): 24, as on a DGX A100. HGX H100 4-GPU (6 links of 20.6 GB/s per pair, first sm90 speed
    # 60): 6 rings again, doubled twice: 24.
    ctx = build_context(cfg, gpus_per_node, nccl_sm_share(cluster.gpu), tp_launch_ordered(cfg, cluster.gpu),
                        inter_node_ring_sm_share(cluster))
    memo: dict[tuple, tuple[OpBlock, ...]] = {}
    stages = tuple(build_stage(cfg, ctx, s, gpus_per_node, memo) for s in range(cfg.parallel.pp))
    b = cfg.batch
    p2p, p2p_gather = _p2p_ops(cfg, ctx, gpus_per_node)
    return OpGraph(
        stages=stages,
        p2p=p2p,
        p2p_gather=p2p_gather,
        num_microbatches=b.num_microbatches,
        vpp=cfg.parallel.vpp,
        model_flops_per_step=_model_flops(stages, cfg),
        tokens_per_step=b.global_batch_size * cfg.model.seq_length,
        warnings=launch_order_warnings(cfg, cluster.gpu),
    )


class GraphMemo:
    """Graphs built so far, by configuration and cluster: `_accelerator_graph` is pure, so equal inputs build equal
    graphs. Looked up by the configuration's hashable parts, then compared whole (`sources` is a dict, no key);
    beyond `limit` graphs the oldest is dropped, with what was derived from it (`derived`). The limit counts graphs,
    not keys: commands that differ only outside the key (dropout, recompute, environment) share one key."""

    def __init__(self, limit: int = 64) -> None:
        self._graphs: dict[tuple, list[tuple[TrainingConfig, ClusterSpec, OpGraph]]] = {}
        self._order: deque[tuple] = deque()  # each held graph's key, oldest first
        self._derived: dict[int, dict] = {}
        self._limit = limit

    @staticmethod
    def _key(cfg: TrainingConfig, cluster: ClusterSpec) -> tuple:
        return cfg.model, cfg.parallel, cfg.batch, cfg.precision, cluster.name, cluster.gpu.name

    def get(self, cfg: TrainingConfig, cluster: ClusterSpec) -> OpGraph | None:
        return next((graph for c, k, graph in self._graphs.get(self._key(cfg, cluster), ())
                     if c == cfg and k == cluster), None)

    def put(self, cfg: TrainingConfig, cluster: ClusterSpec, graph: OpGraph) -> None:
        if len(self._order) >= self._limit:  # the oldest graph is the first of its key's list
            oldest = self._order.popleft()
            _, _, dropped = self._graphs[oldest].pop(0)
            self._derived.pop(id(dropped))
            if not self._graphs[oldest]:
                del self._graphs[oldest]
        key = self._key(cfg, cluster)
        self._graphs.setdefault(key, []).append((cfg, cluster, graph))
        self._order.append(key)
        self._derived[id(graph)] = {}

    def derived(self, graph: OpGraph) -> dict | None:
        """The results its users derived from `graph` (predict/dispatch.py: its op times), while the memo holds it
        (which keeps its id that graph's); None for a graph it does not hold (a CPU adaptation of one)."""
        return self._derived.get(id(graph))
