"""The embedding's and LM head's TP collectives in backward, without sequence parallelism (megatron-core 0.16.1):
VocabParallelEmbedding's all-reduce (reduce_from_tensor_model_parallel_region) has an identity backward; the LM
head is a ColumnParallelLinear whose T x h input gradient is all-reduced beside its weight-grad GEMM
(allreduce_dgrad), and the cross-entropy's all-reduces have no backward collective. Under SP the embedding's
reduce-scatter comes back as an all-gather and the head's all-gather as a reduce-scatter."""

from __future__ import annotations

import json
from pathlib import Path

from llmperf_hook.api import predict_command
from llmperf_hook.graph.build import build_graph
from llmperf_hook.graph.op import Op

SHAPE = ["--num-layers", "2", "--hidden-size", "4096", "--num-attention-heads", "32", "--seq-length", "2048",
         "--max-position-embeddings", "2048", "--micro-batch-size", "2", "--global-batch-size", "16",
         "--tensor-model-parallel-size", "8"]
TOKENS_BY_HIDDEN_BYTES = 2 * 2048 * 4096 * 2  # micro-batch x seq x hidden x 2 bytes (bf16 / fp16)


def _blocks(argv: list[str], env: dict[str, str] | None = None) -> dict[str, tuple[list[Op], list[Op]]]:
    pred = predict_command(argv, env or {}, cluster="dgx-a100")
    blocks = build_graph(pred.config, pred.cluster).stages[0].chunks[0].blocks
    return {b.name: (list(b.fwd), list(b.bwd)) for b in blocks if b.name in ("embedding", "head")}


def _tp_comms(ops: list[Op]) -> list[Op]:
    return [op for op in ops if op.collective is not None and op.collective.group == "tp"]


def _megatron_lm(*extra: str, env: dict[str, str] | None = None) -> dict[str, tuple[list[Op], list[Op]]]:
    return _blocks(["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", *SHAPE, "--bf16", *extra],
                   env or {"CUDA_DEVICE_MAX_CONNECTIONS": "1"})


def test_embedding_all_reduce_has_no_backward_and_the_head_all_reduces_its_grad_input_async() -> None:
    blocks = _megatron_lm()
    embed_fwd, embed_bwd = blocks["embedding"]
    assert [op.op_class for op in _tp_comms(embed_fwd)] == ["allreduce"]
    assert not _tp_comms(embed_bwd)  # _ReduceFromModelParallelRegion.backward returns grad_output
    head_bwd = blocks["head"][1]
    reduce, = _tp_comms(head_bwd)  # none for the cross-entropy's max / sum all-reduces
    assert (reduce.name, reduce.op_class, reduce.dims["bytes"]) == \
        ("head.lm_head.dgrad_allreduce", "allreduce", TOKENS_BY_HIDDEN_BYTES)
    assert (reduce.tags["overlap"], reduce.tags["window"]) == ("wgrad", "head.lm_head")
    names = [op.name for op in head_bwd]
    assert names.index("head.lm_head.dgrad_allreduce") == names.index("head.lm_head") + 1


def test_head_grad_input_all_reduce_is_serialized_where_kernels_may_leave_launch_order() -> None:
    reduce, = _tp_comms(_megatron_lm(env={"CUDA_DEVICE_MAX_CONNECTIONS": "8"})["head"][1])
    assert reduce.dims["bytes"] == TOKENS_BY_HIDDEN_BYTES and "overlap" not in reduce.tags


def test_megatron_deepspeed_all_reduces_the_head_grad_input_serialized(tmp_path: Path) -> None:
    # parallel_lm_logits: --deepspeed turns the async path off, copy_to_tensor_model_parallel_region all-reduces
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_batch_size": 16, "train_micro_batch_size_per_gpu": 2,
                              "fp16": {"enabled": True}, "zero_optimization": {"stage": 0}}))
    blocks = _blocks(["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", *SHAPE, "--fp16", "--deepspeed",
                      "--deepspeed_config", str(ds)], {"CUDA_DEVICE_MAX_CONNECTIONS": "1"})
    assert not _tp_comms(blocks["embedding"][1])
    reduce, = _tp_comms(blocks["head"][1])
    assert reduce.dims["bytes"] == TOKENS_BY_HIDDEN_BYTES and "overlap" not in reduce.tags


def test_sequence_parallel_embedding_gathers_and_head_reduce_scatters_in_backward() -> None:
    blocks = _megatron_lm("--sequence-parallel")
    assert [op.op_class for op in _tp_comms(blocks["embedding"][1])] == ["allgather"]
    assert sorted(op.op_class for op in _tp_comms(blocks["head"][1])) == ["allgather", "reducescatter"]
