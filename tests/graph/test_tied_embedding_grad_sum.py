"""The tied word-embedding weight's two gradients per micro-batch (LM head wgrad + the lookup's dense gradient) are
summed by autograd when the embedding and the head share a rank (torch/csrc/autograd/input_buffer.cpp accumulate):
one pass over vocab/tp x hidden elements in the head's backward, only where both gradients are tensors."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from llmperf_hook.api import load_cluster, predict_command
from llmperf_hook.graph.build import build_graph
from llmperf_hook.graph.sample_configs import make_config
from llmperf_hook.predict.dispatch import op_id, predict_op_times

SHAPE = ["--num-layers", "4", "--hidden-size", "2048", "--num-attention-heads", "16", "--seq-length", "1024",
         "--max-position-embeddings", "1024", "--micro-batch-size", "2", "--global-batch-size", "8", "--fp16"]


def _megatron_deepspeed(tmp_path: Path, tp: int, pp: int) -> tuple:
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2,
                              "fp16": {"enabled": True}, "zero_optimization": {"stage": 0}}))
    argv = ["deepspeed", "--num_gpus", str(tp * pp), "pretrain_gpt.py", *SHAPE,
            "--tensor-model-parallel-size", str(tp), "--pipeline-model-parallel-size", str(pp),
            "--deepspeed", "--deepspeed_config", str(ds)]
    pred = predict_command(argv, {}, cluster="dgx-a100")
    assert pred.config.framework == "megatron-deepspeed"
    return pred.config, pred.cluster


def _sums(graph) -> list:
    return [op for s in graph.stages for c in s.chunks for b in c.blocks for op in b.bwd
            if op.name == "head.tied_grad_sum"]


@pytest.mark.parametrize("tp", [1, 2])
def test_one_stage_sums_the_two_gradients_of_the_padded_vocab_slice(tmp_path: Path, tp: int) -> None:
    cfg, cluster = _megatron_deepspeed(tmp_path, tp, 1)
    op, = _sums(build_graph(cfg, cluster))
    elements = cfg.model.padded_vocab_size // tp * 2048  # Megatron pads 50257 to 50304 (TP 1) / 50432 (TP 2)
    assert cfg.model.padded_vocab_size == {1: 50304, 2: 50432}[tp]
    assert op.dims == {"elements": elements} and op.phase == "bwd"
    assert op.bytes_moved == pytest.approx(3 * 2 * elements)  # read both fp16 gradients, write the sum


def test_the_sum_is_priced_as_one_memory_pass_and_untied_weights_have_none(tmp_path: Path) -> None:
    cfg, cluster = _megatron_deepspeed(tmp_path, 1, 1)
    graph = build_graph(cfg, cluster)
    op, = _sums(graph)
    seconds = predict_op_times(graph, cluster, cfg.precision).seconds[op_id(op)]
    gpu = cluster.gpu
    # 50304 x 2048 fp16 elements x 6 B = 618 MB: ~0.4 ms at the A100 preset's sustained HBM bandwidth
    assert seconds == pytest.approx(op.bytes_moved / (gpu.memory_bandwidth_bytes_per_s * gpu.memory_efficiency),
                                    rel=0.05)
    untied = replace(cfg, model=replace(cfg.model, untie_embeddings=True))
    assert not _sums(build_graph(untied, cluster))


def test_no_sum_when_the_embedding_and_head_sit_on_different_stages(tmp_path: Path) -> None:
    cfg, cluster = _megatron_deepspeed(tmp_path, 1, 2)
    assert not _sums(build_graph(cfg, cluster))


def test_megatron_with_fused_wgrad_accumulation_sums_a_zero_filled_dummy_gradient() -> None:
    # megatron-core: with the fusion the head returns get_dummy_wgrad(..., zero=True) for the shared weight at pp 1
    # (zero_out_wgrad): filled with zeros (one write), then summed with the lookup's gradient (read 2, write 1)
    cluster = load_cluster("dgx-a100")
    fused = make_config(num_layers=2, hidden_size=1024, num_attention_heads=16, seq_length=1024, precision="fp16")
    assert fused.framework == "megatron" and fused.gradient_accumulation_fusion
    elements = fused.model.padded_vocab_size * 1024
    op, = _sums(build_graph(fused, cluster))
    assert op.dims["elements"] == elements and op.bytes_moved == pytest.approx(4 * 2 * elements)
    assert op.flops == 0.0  # memory-bound, and no model FLOP: MFU's count stays Megatron's
    unfused, = _sums(build_graph(replace(fused, gradient_accumulation_fusion=False), cluster))
    assert unfused.bytes_moved == pytest.approx(3 * 2 * elements)


def _fused_gpt(**model_kw: object):
    return make_config(num_layers=2, hidden_size=1024, num_attention_heads=16, seq_length=1024, precision="fp16",
                       model_kw=model_kw or None)


def test_megatron_lm_before_2023_08_adds_no_head_gradient() -> None:
    """Before 28766b55fb the fused linear returned grad_weight = None: the shared weight's autograd gradient is the
    lookup's alone, nothing to sum; Aug-Nov 2023 an uninitialised dummy (torch.empty, no kernel) was summed."""
    cluster = load_cluster("dgx-a100")
    cfg = _fused_gpt()
    assert not _sums(build_graph(replace(cfg, fused_wgrad_return="none"), cluster))
    empty, = _sums(build_graph(replace(cfg, fused_wgrad_return="empty"), cluster))
    assert empty.bytes_moved == pytest.approx(3 * 2 * cfg.model.padded_vocab_size * 1024)
    # without the fusion the head's product is a tensor in any era
    assert _sums(build_graph(replace(cfg, fused_wgrad_return="none", gradient_accumulation_fusion=False), cluster))


def _grad_sums(graph) -> dict[str, list]:
    out: dict[str, list] = {}
    for s in graph.stages:
        for c in s.chunks:
            for b in c.blocks:
                for op in b.bwd:
                    if op.op_class == "grad_sum":
                        out.setdefault(op.name, []).append(op)
    return out


def test_mtp_depths_add_lookups_and_head_uses_of_the_vocabulary_weights() -> None:
    """With D MTP depths the shared weight is looked up 1 + D times and multiplies 1 + D times (the depths' shifted
    embeddings and their shared output layer): 2 + 2D gradients, 1 + 2D adds, plus the 1 + D zero-filled dummies of
    the fused heads at pp 1. Untied: the output layer 1 + D uses (D adds), the word embedding 1 + D (D adds)."""
    cluster = load_cluster("dgx-h100")
    tied = replace(_fused_gpt(), model=replace(_fused_gpt().model, mtp_num_layers=2))
    elements = tied.model.padded_vocab_size * 1024
    sums = _grad_sums(build_graph(tied, cluster))
    assert list(sums) == ["head.tied_grad_sum"] and len(sums["head.tied_grad_sum"]) == 5
    assert sum(op.bytes_moved for op in sums["head.tied_grad_sum"]) == pytest.approx((5 * 3 + 3) * 2 * elements)
    untied = replace(tied, model=replace(tied.model, untie_embeddings=True))
    sums = _grad_sums(build_graph(untied, cluster))
    assert {name: len(ops) for name, ops in sums.items()} == {"head.output_grad_sum": 2, "head.embedding_grad_sum": 2}
    assert all(op.bytes_moved == pytest.approx(3 * 2 * elements) for ops in sums.values() for op in ops)
