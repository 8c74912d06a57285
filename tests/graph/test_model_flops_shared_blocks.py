"""The step's model FLOPs sum each shared block once (H143): chunks with one layer mix share their blocks
(graph/build.build_chunk), so _model_flops sums a block's ops once and multiplies, with the same total."""

from llmperf_hook.api import load_cluster
from llmperf_hook.graph import build
from llmperf_hook.graph.sample_configs import gpt3_175b


def test_shared_blocks_are_summed_once_with_the_same_total(monkeypatch) -> None:
    cfg = gpt3_175b(tp=8, pp=16, vpp=2, dp=8, global_batch_size=1536, sequence_parallel=True)
    graph = build.build_graph(cfg, load_cluster("dgx-a100"))
    blocks = [b for s in graph.stages for c in s.chunks for b in c.blocks]
    distinct = list({id(b): b for b in blocks}.values())
    assert len(distinct) < len(blocks)
    per_microbatch = 0.0  # the definition: every block of every chunk, forward and backward, without recompute
    for b in blocks:
        flops = sum(build._model_op_flops(op) for op in b.fwd if op.phase == "fwd" and not op.is_comm)
        flops += sum(build._model_op_flops(op) for op in b.bwd if op.phase == "bwd" and not op.is_comm)
        per_microbatch += flops * b.count
    p = cfg.parallel
    assert graph.model_flops_per_step == per_microbatch * cfg.batch.num_microbatches * p.tp * p.cp * p.dp
    summed, own = [], build._model_op_flops
    monkeypatch.setattr(build, "_model_op_flops", lambda op: summed.append(op) or own(op))
    assert build._model_flops(graph.stages, cfg) == graph.model_flops_per_step
    ops_once = sum(1 for b in distinct for ops, phase in ((b.fwd, "fwd"), (b.bwd, "bwd"))
                   for op in ops if op.phase == phase and not op.is_comm)
    assert len(summed) == ops_once
