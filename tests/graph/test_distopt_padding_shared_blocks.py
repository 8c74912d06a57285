"""The distributed optimizer's padding of a rank is summed once per distinct chunk (H143): chunks of one layer mix
share their blocks (graph/build.build_chunk), and a chunk's padding follows its blocks and its bucket size (only the
first chunk of pipeline rank 0 is bucketed), so equal chunks are padded alike. Same total as every chunk's own sum."""

from llmperf_hook.api import load_cluster
from llmperf_hook.graph import ddp_buckets
from llmperf_hook.graph.build import build_graph
from llmperf_hook.graph.sample_configs import make_config


def _every_chunk(cfg, stage, chunks, dense_dp, expert_dp) -> int:
    """The definition: each chunk's buffers bucketed (the first chunk with the rank's bucket size), less the tensors."""
    size = ddp_buckets._first_chunk_bucket_elems(cfg, stage, [ddp_buckets.chunk_tensors(cfg, c) for c in chunks])
    total = 0
    for i, chunk in enumerate(chunks):
        for name, buffer in ddp_buckets.chunk_buffers(cfg, chunk):
            dp = expert_dp if name.startswith("expert") else dense_dp
            total += sum(ddp_buckets.distopt_buckets(buffer, size if i == 0 else None, dp)) - sum(buffer)
    return total


def test_equal_chunks_are_padded_once_with_the_same_total(monkeypatch) -> None:
    # sizes that are no multiple of 64 (hidden 2000, 125-wide heads, vocab 50257) over DP 3: every buffer is padded
    optimizer = dict(distributed_optimizer=True, overlap_grad_reduce=True)
    cfg = make_config(num_layers=24, hidden_size=2000, num_attention_heads=16, vocab_size=50257, tp=2, pp=4, vpp=3,
                      dp=3, global_batch_size=48, optimizer_kw=optimizer)
    graph = build_graph(cfg, load_cluster("dgx-a100"))
    expected = [_every_chunk(cfg, s.stage, s.chunks, 3, 3) for s in graph.stages]
    assert all(expected)
    walked, own = [], ddp_buckets.distopt_buckets
    monkeypatch.setattr(ddp_buckets, "distopt_buckets", lambda *args: walked.append(args) or own(*args))
    assert [ddp_buckets.distopt_padding_elems(cfg, s.stage, s.chunks, 3, 3) for s in graph.stages] == expected
    distinct = sum(len({id(c.blocks) for c in s.chunks}) for s in graph.stages)
    assert len(walked) == distinct < sum(len(s.chunks) for s in graph.stages)
