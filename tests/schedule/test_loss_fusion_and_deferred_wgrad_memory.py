"""Two allocations of Megatron's last pipeline stage that Megatron-LM CI's golden values showed unpriced
(gpt3_mcore_te_tp2_pp2 on DGX H100, core_v0.16.1: 1.33 GiB allocated; with --cross-entropy-loss-fusion 1.71; with
--defer-embedding-wgrad-compute --wgrad-deferral-limit 2, 1.76), on the same shape (h 512, 12 layers, s 1024, b 4,
TP 2, PP 2, 4 micro-batches):

  native fused loss      one fp32 [s b, v/t] buffer more (activations.native_fused_loss_extra_bytes)
  deferred wgrad         min(limit or m, m - 1) x (16-bit logits gradient sbv/t + the output layer's input sbh)
                         (activations.deferred_embedding_wgrad_bytes), a component of the last stage only
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from llmperf_hook import api
from llmperf_hook.frameworks.flags import parse_flags
from llmperf_hook.frameworks.script_flags import SCRIPT_FLAGS, apply_memory_flags
from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.graph.build import build_graph
from llmperf_hook.hardware.load import load_cluster
from llmperf_hook.schedule import activations as act
from llmperf_hook.schedule.memory import stage_memory

S, B, H, TP = 1024, 4, 512, 2
CI_CASE = ["torchrun", "--nproc_per_node", "8", "pretrain_gpt.py", "--num-layers", "12", "--hidden-size", "512",
           "--num-attention-heads", "8", "--seq-length", "1024", "--max-position-embeddings", "1024",
           "--micro-batch-size", "4", "--global-batch-size", "32", "--tensor-model-parallel-size", "2",
           "--pipeline-model-parallel-size", "2", "--vocab-size", "50257", "--bf16"]
ENV = {"CUDA_DEVICE_MAX_CONNECTIONS": "1"}


def _resolve(*extra: str) -> TrainingConfig:
    job, cfg = api.resolve_command([*CI_CASE, *extra], ENV, cluster="dgx-h100")[:2]
    return apply_memory_flags(cfg, parse_flags(job.script_args, SCRIPT_FLAGS))


def _last_stage(cfg: TrainingConfig) -> dict[str, int]:
    cluster = load_cluster("dgx-h100")
    return stage_memory(cfg, build_graph(cfg, cluster).stages[-1], 8, cluster.gpu)


def _logits(cfg: TrainingConfig) -> float:
    return S * B * cfg.model.padded_vocab_size / TP


def test_native_fused_loss_holds_one_fp32_copy_of_the_logits_more() -> None:
    plain, fused = _resolve(), _resolve("--cross-entropy-loss-fusion")
    assert fused.cross_entropy_fusion_impl == "native"
    assert act.output_activation_bytes(fused) - act.output_activation_bytes(plain) == \
        pytest.approx(4 * _logits(plain))
    assert _last_stage(fused)["logits_and_loss"] - _last_stage(plain)["logits_and_loss"] == \
        pytest.approx(4 * _logits(plain), abs=1)
    te = replace(fused, cross_entropy_fusion_impl="te")
    assert act.native_fused_loss_extra_bytes(te) == 0.0  # Transformer Engine's loss writes into the logits


def test_deferred_wgrad_keeps_the_earlier_microbatches_logits_gradients_and_inputs() -> None:
    plain = _resolve()
    per_microbatch = 2 * _logits(plain) + 2 * S * B * H  # bf16 logits gradient + the output layer's bf16 input
    limited = _resolve("--defer-embedding-wgrad-compute", "--wgrad-deferral-limit", "2")
    assert limited.wgrad_deferral_limit == 2 and plain.wgrad_deferral_limit is None
    assert plain.batch.num_microbatches == 4
    assert act.deferred_embedding_wgrad_bytes(limited) == pytest.approx(2 * per_microbatch)
    unlimited = _resolve("--defer-embedding-wgrad-compute")  # limit 0: every micro-batch's, m - 1 at the last loss
    assert act.deferred_embedding_wgrad_bytes(unlimited) == pytest.approx(3 * per_microbatch)
    assert act.deferred_embedding_wgrad_bytes(plain) == 0.0


def test_deferred_wgrad_buffers_sit_on_the_last_stage_only() -> None:
    cfg = _resolve("--defer-embedding-wgrad-compute", "--wgrad-deferral-limit", "2")
    cluster = load_cluster("dgx-h100")
    first, last = (stage_memory(cfg, s, 8, cluster.gpu) for s in build_graph(cfg, cluster).stages)
    assert "deferred_embedding_wgrad" not in first
    assert last["deferred_embedding_wgrad"] == pytest.approx(act.deferred_embedding_wgrad_bytes(cfg), abs=1)
    assert sum(last.values()) - sum(_last_stage(_resolve()).values()) >= last["deferred_embedding_wgrad"] - 1


def test_multi_token_prediction_depths_do_not_repeat_the_fused_loss_backward_buffer() -> None:
    """Each MTP depth keeps its own loss's saved softmax, but the compiled backward's extra fp32 buffer exists for one
    loss's backward at a time: held once, in output_activation_bytes."""
    mtp = ("--mtp-num-layers", "2", "--position-embedding-type", "rope")
    plain, fused = _resolve(*mtp), _resolve(*mtp, "--cross-entropy-loss-fusion")
    assert act.mtp_activation_bytes(fused) == pytest.approx(act.mtp_activation_bytes(plain))
    extra = act.native_fused_loss_extra_bytes(fused)
    assert extra > 0
    assert act.output_activation_bytes(fused) - act.output_activation_bytes(plain) == pytest.approx(extra)
