"""ZeRO-3's split bias adds price every biased nn.Linear the model has (graph/zero_layer_ops.
zero3_biased_outputs_per_token): the MLP's biases also where the QKV has none (GPT-NeoX with attention_bias false) and
Llama's three MLP biases under mlp_bias; an MoE layer's experts and 2-D router add none."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from llmperf_hook.graph.build import build_graph
from llmperf_hook.graph.zero_layer_ops import zero3_bias_add_ops
from llmperf_hook.hardware.load import load_cluster
from tests.frameworks.helpers import hf_job

H, FFN, HEADS, KV, BLOCK, MICRO = 1024, 2816, 16, 4, 512, 2
NEOX = {"model_type": "gpt_neox", "num_hidden_layers": 4, "hidden_size": H, "num_attention_heads": HEADS,
        "intermediate_size": 4 * H, "max_position_embeddings": 2048, "vocab_size": 50432, "attention_bias": False}
LLAMA = {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": H, "num_attention_heads": HEADS,
         "num_key_value_heads": KV, "intermediate_size": FFN, "max_position_embeddings": 4096, "vocab_size": 32000,
         "rms_norm_eps": 1e-5}


def _zero3(tmp_path: Path, raw: dict):
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"zero_optimization": {"stage": 3}, "bf16": {"enabled": True},
                              "train_micro_batch_size_per_gpu": MICRO, "gradient_accumulation_steps": 1}))
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    cfg = hf_job(model, raw, 2, BLOCK, "--deepspeed", str(ds), "--per_device_train_batch_size", str(MICRO), "--bf16")
    assert cfg.optimizer.zero_stage == 3 and cfg.torch_linear_layers
    return cfg


def _elements(cfg, moe: bool = False) -> int:
    (op,) = zero3_bias_add_ops(cfg, moe)
    return op.dims["elements"] // (MICRO * BLOCK)


def test_gpt_neox_without_attention_bias_keeps_its_mlp_bias_adds(tmp_path: Path) -> None:
    """GPTNeoXAttention's query_key_value and dense follow attention_bias; GPTNeoXMLP's nn.Linears keep bias=True:
    dense_h_to_4h (4h) and dense_4h_to_h (h) per token, in every layer's forward."""
    cfg = _zero3(tmp_path, NEOX)
    assert not cfg.model.qkv_biased and cfg.model.mlp_biased
    assert _elements(cfg) == 4 * H + H
    graph = build_graph(cfg, load_cluster("dgx-h100"))
    adds = [op for chunk in graph.stages[0].chunks for block in chunk.blocks for op in block.fwd * block.count
            if op.name == "zero3.linear_bias_add"]
    assert len(adds) == 4


def test_gpt_neox_with_attention_bias_adds_every_linear(tmp_path: Path) -> None:
    assert _elements(_zero3(tmp_path, {**NEOX, "attention_bias": True})) == 3 * H + H + 4 * H + H


def test_llama_mlp_bias_adds_gate_up_and_down(tmp_path: Path) -> None:
    """LlamaMLP's gate_proj, up_proj (ffn each) and down_proj (h) take bias=config.mlp_bias, apart from attention."""
    assert _elements(_zero3(tmp_path, {**LLAMA, "mlp_bias": True})) == 2 * FFN + H
    qkv = (HEADS + 2 * KV) * (H // HEADS)
    both = _zero3(tmp_path, {**LLAMA, "attention_bias": True, "mlp_bias": True})
    assert _elements(both) == qkv + H + 2 * FFN + H
    assert not zero3_bias_add_ops(_zero3(tmp_path, LLAMA))


def test_an_moe_layer_adds_only_its_attention_biases(tmp_path: Path) -> None:
    """Experts are no nn.Linear in transformers' MoE blocks; the router's F.linear reads 2-D tokens (torch.addmm)."""
    cfg = _zero3(tmp_path, {**LLAMA, "attention_bias": True, "mlp_bias": True})
    qkv = (HEADS + 2 * KV) * (H // HEADS)
    assert _elements(cfg, moe=True) == qkv + H
    no_attention = replace(cfg, model=replace(cfg.model, add_bias_linear=False, mlp_bias=True))
    assert not zero3_bias_add_ops(no_attention, moe=True)
