"""Biases on the QKV projection only (ModelShape.add_qkv_bias: Megatron --add-qkv-bias, Qwen2's q/k/v) and learned
attention sinks (ModelShape.attention_sinks: Megatron --softmax-type learnable, gpt-oss): parameters, tensors, DDP
bucket tensors, ZeRO-3's bias adds and the unfused attention's sink ops."""

from __future__ import annotations

import json
from pathlib import Path

from llmperf_hook.api import resolve_command
from llmperf_hook.graph import params as pc
from llmperf_hook.graph.build import build_graph
from llmperf_hook.graph.ddp_buckets import attention_tensors as bucket_attention_tensors
from llmperf_hook.graph.param_tensors import attention_tensors
from llmperf_hook.hardware.load import load_cluster

MEGATRON = ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "4", "--hidden-size", "2048",
            "--num-attention-heads", "16", "--group-query-attention", "--num-query-groups", "4", "--seq-length", "2048",
            "--max-position-embeddings", "2048", "--vocab-size", "50304", "--micro-batch-size", "1",
            "--global-batch-size", "8", "--tensor-model-parallel-size", "2", "--bf16", "--swiglu",
            "--normalization", "RMSNorm", "--position-embedding-type", "rope"]
QWEN2 = {"model_type": "qwen2", "hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 4,
         "num_attention_heads": 16, "num_key_value_heads": 4, "vocab_size": 32000, "max_position_embeddings": 4096,
         "rms_norm_eps": 1e-6, "hidden_act": "silu"}


def _megatron(*extra: str):
    return resolve_command([*MEGATRON, *extra], {}, cluster="dgx-h100")[1]


def _trainer(tmp_path: Path, raw: dict, zero: int = 3):
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text(json.dumps(raw))
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"zero_optimization": {"stage": zero}, "bf16": {"enabled": True},
                              "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1}))
    argv = ["deepspeed", "--num_gpus", "8", "run_clm.py", "--model_name_or_path", str(model), "--block_size", "1024",
            "--deepspeed", str(ds), "--per_device_train_batch_size", "2", "--bf16"]
    return resolve_command(argv, {}, cluster="dgx-h100")[1]


def _fwd_ops(cfg, name: str) -> list:
    """The forward ops called `name`, once per layer that runs them (a block's ops repeat block.count times)."""
    graph = build_graph(cfg, load_cluster("dgx-h100"))
    return [op for chunk in graph.stages[0].chunks for block in chunk.blocks for op in block.fwd * block.count
            if op.name == name]


def test_add_qkv_bias_biases_the_fused_qkv_only() -> None:
    """attention.py: linear_qkv bias=add_bias_linear or add_qkv_bias; the projection keeps none under
    --disable-bias-linear. (16 + 2 x 4) x 128 QKV outputs over TP 2: 1,536 bias values a rank."""
    plain, qkv = _megatron("--disable-bias-linear"), _megatron("--disable-bias-linear", "--add-qkv-bias")
    assert (qkv.model.add_bias_linear, qkv.model.add_qkv_bias) == (False, True)
    assert pc.attention_params(qkv) - pc.attention_params(plain) == 1536
    assert pc.mlp_params(qkv) == pc.mlp_params(plain)
    assert attention_tensors(qkv) == attention_tensors(plain) + 1  # norm, QKV weight + bias, projection weight
    buckets = bucket_attention_tensors(qkv)
    assert buckets == bucket_attention_tensors(plain)[:2] + [1536] + bucket_attention_tensors(plain)[2:]


def test_add_qkv_bias_changes_nothing_when_every_linear_is_biased() -> None:
    """arguments.py sets add_qkv_bias whenever add_bias_linear is on (Megatron's default)."""
    biased, both = _megatron(), _megatron("--add-qkv-bias")
    assert pc.layer_params(both, False) == pc.layer_params(biased, False)
    assert attention_tensors(both) == attention_tensors(biased)


def test_zero3_splits_the_q_k_v_bias_adds(tmp_path: Path) -> None:
    """Qwen2 under ZeRO-3: LinearFunctionForZeroStage3 adds the q, k and v biases after the matmul; o_proj and the
    SwiGLU MLP have none. 2 x 1024 tokens x (1024 + 2 x 256) outputs a layer."""
    adds = _fwd_ops(_trainer(tmp_path, QWEN2), "zero3.linear_bias_add")
    assert len(adds) == 4 and {op.dims["elements"] for op in adds} == {2 * 1024 * 1536}
    assert not _fwd_ops(_trainer(tmp_path, {**QWEN2, "model_type": "llama"}), "zero3.linear_bias_add")
    # Llama with attention_bias and mlp_bias: every linear biased, o_proj's (1024) and the MLP's gate, up and down
    # (2 x 2816 + 1024) adds join
    llama = _trainer(tmp_path, {**QWEN2, "model_type": "llama", "attention_bias": True, "mlp_bias": True})
    elements = {2 * 1024 * (1536 + 1024 + 2 * 2816 + 1024)}
    assert {op.dims["elements"] for op in _fwd_ops(llama, "zero3.linear_bias_add")} == elements


def test_learnable_softmax_counts_a_sink_per_head_on_each_rank() -> None:
    """DotProductAttention.softmax_offset: num_attention_heads_per_partition values (16 heads / TP 2 = 8)."""
    plain, sinks = _megatron("--disable-bias-linear"), _megatron("--disable-bias-linear", "--softmax-type", "learnable")
    assert sinks.model.attention_sinks and not _megatron("--softmax-type", "off-by-one").model.attention_sinks
    assert pc.attention_params(sinks) - pc.attention_params(plain) == 8
    assert attention_tensors(sinks) == attention_tensors(plain) + 1
    assert bucket_attention_tensors(sinks)[-1] == 8


def test_sinks_take_the_torch_softmax_and_add_the_concat() -> None:
    """--attention-backend unfused: FusedScaleMaskSoftmax runs its kernel only without a softmax offset;
    SoftmaxOne's torch.cat reads the micro-batch's 8 heads x 2048 x 2048 scores and writes them one column wider."""
    args = ("--disable-bias-linear", "--attention-backend", "unfused")
    plain = _megatron(*args)
    sinks = _megatron(*args, "--softmax-type", "learnable")
    assert not _fwd_ops(plain, "attn.mask_fill")  # the fused kernel (16 / 2 x 1 batches, a multiple of 4)
    assert _fwd_ops(sinks, "attn.mask_fill")
    concat = _fwd_ops(sinks, "attn.sink_concat")
    scores = 8 * 2048 * 2048
    assert len(concat) == 4 and concat[0].dims == {"elements": scores}
    assert concat[0].bytes_moved == 2.0 * scores * 2
    assert not _fwd_ops(_megatron("--disable-bias-linear", "--softmax-type", "learnable"), "attn.sink_concat")
