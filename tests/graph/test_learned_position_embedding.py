"""The learned position embedding (--position-embedding-type learned_absolute, Megatron's default; GPT-2/3 recipes)
as the ranks run it (megatron/core/models/common/embeddings/language_model_embedding.py): a lookup in a
max_position_embeddings x h table, its add into the word embedding after the word embedding's TP all-reduce, the
table's dense gradient in backward; under sequence parallelism the word embedding is all-reduced (not
reduce-scattered) so the add sees every token, then split, whose backward all-gathers the gradient."""

from __future__ import annotations

import pytest

from llmperf_hook.graph.build import build_graph
from llmperf_hook.graph.params import embedding_params
from llmperf_hook.hardware.load import load_cluster
from tests.frameworks.helpers import megatron

DGX = load_cluster("dgx-a100")
H, SEQ, POS = 1024, 2048, 4096
SHAPE = ["--num-layers", "2", "--hidden-size", str(H), "--num-attention-heads", "16", "--seq-length", str(SEQ),
         "--max-position-embeddings", str(POS), "--vocab-size", "50257", "--micro-batch-size", "2",
         "--global-batch-size", "2", "--tensor-model-parallel-size", "8", "--bf16"]
ROPE = ["--position-embedding-type", "rope"]


def _embedding(*args: str):
    cfg = megatron(*args, base=SHAPE)
    graph = build_graph(cfg, DGX)
    return cfg, next(b for b in graph.stages[0].chunks[0].blocks if b.name == "embedding")


def _named(ops, name: str) -> list:
    return [op for op in ops if op.name == name]


def test_position_lookup_and_add_are_ops_of_their_own() -> None:
    """T = 2 x 2048 tokens on every TP rank look up the whole 4,096-row table (a serial torch.nn.Embedding) and add
    it to the all-reduced word embedding (read 2, write 1); the add's backward runs no kernel, the lookup's writes
    the table's gradient."""
    _, block = _embedding()
    (lookup,) = _named(block.fwd, "embedding.position_lookup")
    assert (lookup.op_class, dict(lookup.dims)) == ("embedding", {"tokens": 2 * SEQ, "vocab": POS, "hidden": H})
    (add,) = _named(block.fwd, "embedding.position_add")
    assert (add.op_class, add.dims["elements"], add.bytes_moved) == ("residual_add", 2 * SEQ * H, 3 * 2 * SEQ * H * 2)
    names = [op.name for op in block.fwd]
    assert names.index("embedding.tp_reduce") < names.index("embedding.position_add")
    assert _named(block.bwd, "embedding.position_lookup") and not _named(block.bwd, "embedding.position_add")
    _, rope = _embedding(*ROPE)
    assert not [op for op in rope.fwd + rope.bwd if op.name.startswith("embedding.position")]


def test_the_table_has_max_position_embeddings_rows() -> None:
    """torch.nn.Embedding(max_sequence_length, hidden) with max_sequence_length = --max-position-embeddings, here
    twice the sequence length; whole on each TP rank in Megatron-LM."""
    cfg = megatron(base=SHAPE)
    word = cfg.model.padded_vocab_size // 8 * H
    assert embedding_params(cfg) == word + POS * H
    assert embedding_params(megatron(*ROPE, base=SHAPE)) == word


def test_sequence_parallel_all_reduces_then_gathers_the_gradient() -> None:
    """Learned positions under SP: reduce_scatter_embeddings is False, so VocabParallelEmbedding all-reduces the
    T x h output (backward: identity), and scatter_to_sequence_parallel_region's backward all-gathers T x h; RoPE
    keeps the reduce-scatter (backward all-gather)."""
    nbytes = 2 * SEQ * H * 2
    _, learned = _embedding("--sequence-parallel")
    assert [(op.op_class, op.dims["bytes"]) for op in learned.fwd if op.is_comm] == [("allreduce", nbytes)]
    assert [(op.op_class, op.dims["bytes"]) for op in learned.bwd if op.is_comm] == [("allgather", nbytes)]
    (dropout,) = _named(learned.fwd, "embedding.dropout")
    assert dropout.dims["elements"] == 2 * SEQ * H // 8  # on the rank's sequence shard after the split
    _, rope = _embedding("--sequence-parallel", *ROPE)
    assert [op.op_class for op in rope.fwd if op.is_comm] == ["reducescatter"]
    assert [op.op_class for op in rope.bwd if op.is_comm] == ["allgather"]


def test_without_sequence_parallel_no_backward_collective() -> None:
    _, block = _embedding()
    assert [op.op_class for op in block.fwd if op.is_comm] == ["allreduce"]
    assert not [op for op in block.bwd if op.is_comm]


def test_megatron_deepspeed_all_reduces_whatever_the_positions(tmp_path) -> None:
    """Megatron-DeepSpeed's VocabParallelEmbedding always all-reduces (reduce_from_tensor_model_parallel_region) and
    its Embedding scatters to the sequence shards after the add (megatron/model/language_model.py)."""
    import json

    ds_config = tmp_path / "ds.json"
    ds_config.write_text(json.dumps({"train_batch_size": 2, "train_micro_batch_size_per_gpu": 2,
                                     "bf16": {"enabled": True}, "zero_optimization": {"stage": 0}}))
    cfg = megatron("--sequence-parallel", *ROPE, "--deepspeed", "--deepspeed_config", str(ds_config),
                   "--zero-stage", "0", "--no-pipeline-parallel", base=SHAPE)
    assert cfg.framework == "megatron-deepspeed"
    block = next(b for b in build_graph(cfg, DGX).stages[0].chunks[0].blocks if b.name == "embedding")
    assert [op.op_class for op in block.fwd if op.is_comm] == ["allreduce"]
    assert [op.op_class for op in block.bwd if op.is_comm] == ["allgather"]


@pytest.mark.parametrize("sp", [False, True])
def test_positions_lengthen_the_first_stage(sp: bool) -> None:
    from llmperf_hook.api import predict_config

    args = ["--sequence-parallel"] if sp else []
    learned = predict_config(megatron(*args, base=SHAPE), DGX).step_time_s
    no_positions = predict_config(megatron(*args, "--position-embedding-type", "none", base=SHAPE), DGX).step_time_s
    assert learned > no_positions


def test_a_recomputed_mtp_depth_gathers_its_embedding_gradient_after_the_dropout_backward() -> None:
    """Full recompute replays an MTP depth's embedding (phase recompute) before its backward: the SP scatter's
    gradient gather follows the dropout's backward, not its replay."""
    from llmperf_hook.graph.sample_configs import make_config

    cfg = make_config(num_layers=2, hidden_size=H, num_attention_heads=16, tp=4, sequence_parallel=True,
                      recompute="full", model_kw=dict(mtp_num_layers=1, position_embedding="learned_absolute"))
    mtp = next(b for b in build_graph(cfg, DGX).stages[0].chunks[0].blocks if b.name == "mtp")
    names = [(op.name, op.phase) for op in mtp.bwd]
    at = names.index(("mtp.embedding.sp_scatter", "bwd"))
    assert names[at - 1] == ("mtp.embedding.dropout", "bwd")
    assert all(phase != "recompute" for _, phase in names[at:])


def test_no_embedding_dropout_op_at_hidden_dropout_zero() -> None:
    """torch.nn.Dropout(0.0) returns its input (ATen _dropout_impl: p == 0), so --hidden-dropout 0 prices no
    embedding dropout; under SP the split's gradient gather is then the embedding's first backward op, before the
    position add's (no kernel) and the lookups'."""
    _, block = _embedding("--hidden-dropout", "0")
    assert not _named(block.fwd + block.bwd, "embedding.dropout")
    _, sp = _embedding("--hidden-dropout", "0", "--sequence-parallel")
    bwd = [op.name for op in sp.bwd if op.phase == "bwd"]
    assert bwd.index("embedding.sp_scatter") < bwd.index("embedding.position_lookup")
    assert bwd[0] == "embedding.sp_scatter"
    _, with_dropout = _embedding("--sequence-parallel")
    names = [op.name for op in with_dropout.bwd]
    assert names.index("embedding.sp_scatter") == names.index("embedding.dropout") + 1
