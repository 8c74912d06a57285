"""An MTP depth's embedding at --hidden-dropout 0 (graph/vocab_ops.py embedding_ops: no dropout op, f3ec478): under
SP with learned positions (the word embedding all-reduced, then split to the sequence shards) the split's gradient
gather is the depth's first embedding backward, after the depth's layer backward and, under full recompute, after
the replay of its forward; without SP, or with RoPE (reduce-scattered embedding), no gather."""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmperf_hook.graph.build import build_graph
from llmperf_hook.graph.sample_configs import make_config
from llmperf_hook.hardware.load import load_cluster

DGX = load_cluster("dgx-a100")


def _mtp_backward(recompute: str, sp: bool, positions: str) -> list[tuple[str, str]]:
    cfg = make_config(num_layers=2, hidden_size=1024, num_attention_heads=16, tp=4, sequence_parallel=sp,
                      recompute=recompute, model_kw=dict(mtp_num_layers=2, position_embedding=positions))
    graph = build_graph(replace(cfg, hidden_dropout=0.0), DGX)
    mtp = next(b for b in graph.stages[-1].chunks[-1].blocks if b.name == "mtp")
    return [(op.name, op.phase) for op in mtp.bwd]


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_the_gather_opens_the_depths_embedding_backward(recompute: str) -> None:
    names = _mtp_backward(recompute, True, "learned_absolute")
    assert not [n for n in names if n[0] == "mtp.embedding.dropout"]
    at = names.index(("mtp.embedding.sp_scatter", "bwd"))
    embedding_bwd = [i for i, (name, phase) in enumerate(names) if name.startswith("mtp.embedding.") and phase == "bwd"]
    assert embedding_bwd[0] == at and names[at + 1] == ("mtp.embedding.position_lookup", "bwd")
    assert all(phase != "recompute" for _, phase in names[at:])
    assert any(phase == "bwd" and not name.startswith("mtp.embedding.") for name, phase in names[:at])


@pytest.mark.parametrize(("sp", "positions"), [(False, "learned_absolute"), (True, "rope")])
def test_no_gather_without_the_split(sp: bool, positions: str) -> None:
    assert not [n for n in _mtp_backward("none", sp, positions) if n[0] == "mtp.embedding.sp_scatter"]
