"""Parameter tensors each framework's model registers (graph/param_tensors.py), which ZeRO-3's hooks price one by one."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from llmperf_hook.api import resolve_command
from llmperf_hook.graph.build import build_graph
from llmperf_hook.graph.param_tensors import model_param_tensors

TRAIN = str(Path(__file__).resolve().parents[2] / "examples" / "cpu-testbed" / "train_gpt.py")


def _hf_config(tmp_path: Path, raw: dict, zero: int = 3) -> object:
    """A Trainer run (run_clm.py --deepspeed) of a local Hugging Face config: framework hf-deepspeed."""
    model = tmp_path / raw["model_type"]
    model.mkdir()
    (model / "config.json").write_text(json.dumps(raw))
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"zero_optimization": {"stage": zero}, "bf16": {"enabled": True},
                              "train_micro_batch_size_per_gpu": "auto", "train_batch_size": "auto"}))
    argv = ["deepspeed", "--num_gpus", "8", "run_clm.py", "--model_name_or_path", str(model),
            "--per_device_train_batch_size", "1", "--block_size", "1024", "--bf16", "--do_train",
            "--output_dir", str(tmp_path / "out"), "--deepspeed", str(ds)]
    return resolve_command(argv, {}, cluster="dgx-h100")[1]


def _tensors(cfg) -> int:
    return model_param_tensors(cfg, 0, cfg.model.num_layers)


LLAMA = {"model_type": "llama", "hidden_size": 1024, "intermediate_size": 2816, "num_attention_heads": 16,
         "num_key_value_heads": 8, "num_hidden_layers": 4, "vocab_size": 32000, "max_position_embeddings": 1024,
         "rms_norm_eps": 1e-5}


def test_hf_llama_keeps_q_k_v_and_gate_up_apart(tmp_path: Path) -> None:
    """modeling_llama.py: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj and two RMSNorms a layer (9,
    where Megatron fuses QKV and gate/up into 6); embed_tokens, the final norm and the untied lm_head."""
    cfg = _hf_config(tmp_path, LLAMA)
    assert cfg.framework == "hf-deepspeed"
    assert _tensors(cfg) == 4 * 9 + 3


def test_hf_gpt2_fuses_qkv_like_megatron(tmp_path: Path) -> None:
    """modeling_gpt2.py: ln_1, c_attn, c_proj, ln_2, c_fc, c_proj with biases (12 a layer); wte, wpe, ln_f; tied."""
    cfg = _hf_config(tmp_path, {"model_type": "gpt2", "n_embd": 768, "n_layer": 3, "n_head": 12, "vocab_size": 50257,
                                "n_positions": 1024})
    assert _tensors(cfg) == 3 * 12 + 1 + 1 + 2


def test_hf_mixtral_counts_router_and_fused_experts(tmp_path: Path) -> None:
    """transformers 5 modeling_mixtral.py: q, k, v, o, the router's weight, the experts' gate_up_proj and down_proj
    (one 3-D parameter each for all experts) and two RMSNorms: 9 a layer (Mixtral-8x7B: 32 x 9 + 3 = 291). The old
    count saw a dense Megatron layer (6) and no expert at all."""
    cfg = _hf_config(tmp_path, {**LLAMA, "model_type": "mixtral", "num_hidden_layers": 2, "num_local_experts": 8,
                                "num_experts_per_tok": 2})
    assert cfg.model.num_experts == 8
    assert _tensors(cfg) == 2 * 9 + 3


def _megatron(*extra: str):
    argv = ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "4", "--hidden-size", "1024",
            "--num-attention-heads", "16", "--seq-length", "1024", "--max-position-embeddings", "1024",
            "--micro-batch-size", "1", "--global-batch-size", "8", "--vocab-size", "32000", "--bf16", *extra]
    return resolve_command(argv, {}, cluster="dgx-h100")[1]


def test_megatron_dense_layer_biases_and_qk_norms() -> None:
    """Megatron-Core: linear_qkv, linear_proj, linear_fc1, linear_fc2 (+ a bias each unless --disable-bias-linear),
    the two norms TE fuses into linear_qkv / linear_fc1 (still parameters), q_layernorm and k_layernorm."""
    biased = _megatron("--position-embedding-type", "rope")
    assert _tensors(biased) == 4 * (8 + 2 * 2) + 1 + 2  # LayerNorm weight + bias; word embedding; final norm; tied
    plain = _megatron("--position-embedding-type", "rope", "--disable-bias-linear", "--normalization", "RMSNorm",
                      "--swiglu")
    assert _tensors(plain) == 4 * (4 + 2) + 1 + 1
    # llmperf reads --qk-layernorm only under MLA (a warning otherwise): the count follows the shape field
    qk = replace(plain, model=replace(plain.model, qk_layernorm=True))
    assert _tensors(qk) == 4 * (4 + 2 + 2) + 1 + 1


def test_megatron_moe_counts_every_local_expert() -> None:
    """An MoE layer on a rank: the pre-MLP norm, the router's weight and fc1 + fc2 of each of its num_experts / EP
    local experts (TE GroupedLinear registers weight0..weightN-1; SequentialMLP one MLP per expert)."""
    cfg = _megatron("--position-embedding-type", "rope", "--disable-bias-linear", "--normalization", "RMSNorm",
                    "--swiglu", "--num-experts", "8", "--expert-model-parallel-size", "2", "--moe-grouped-gemm")
    local = 8 // 2
    assert _tensors(cfg) == 4 * (2 + 1 + 1 + 1 + local * 2) + 1 + 1


def test_testbed_gpt_keeps_its_measured_count() -> None:
    """The CPU / GPU testbed GPT (examples/cpu-testbed/train_gpt.py): 148 tensors for 12 layers, the count behind the
    measured ZeRO-3 hook figure."""
    argv = ["deepspeed", "--num_gpus", "1", TRAIN, "--no-pipeline-parallel", "--num-layers", "12", "--hidden-size",
            "2048", "--num-attention-heads", "16", "--seq-length", "2048", "--max-position-embeddings", "2048",
            "--vocab-size", "50304", "--micro-batch-size", "4", "--bf16"]
    cfg = resolve_command(argv, {}, cluster="dgx-h100")[1]
    assert _tensors(cfg) == 148


def test_zero3_hooks_price_the_family_count(tmp_path: Path) -> None:
    """The ZeRO-3 hook op of a transformers Llama carries its 9-a-layer count."""
    cfg = _hf_config(tmp_path, LLAMA)
    from llmperf_hook.api import resolve_cluster

    graph = build_graph(cfg, resolve_cluster("dgx-h100", None)[0])
    (hooks,) = [op for op in graph.stages[0].step_ops if op.name == "zero3.module_hooks"]
    assert hooks.dims["param_tensors"] == 4 * 9 + 3


@pytest.mark.parametrize("extra", [[], ["--pipeline-model-parallel-size", "2"]])
def test_moe_layer_frequency_is_read_per_stage(extra: list[str]) -> None:
    """--moe-layer-freq 2: layers 0 and 2 are MoE; with two pipeline stages each holds one MoE and one dense layer."""
    cfg = _megatron("--position-embedding-type", "rope", "--disable-bias-linear", "--normalization", "RMSNorm",
                    "--swiglu", "--num-experts", "4", "--moe-layer-freq", "2", *extra)
    dense, moe = 2 + 1 + 2 + 1, 2 + 1 + 1 + 1 + 4 * 2
    pp = cfg.parallel.pp
    total = sum(model_param_tensors(cfg, s, cfg.model.num_layers // pp) for s in range(pp))
    assert total == 2 * dense + 2 * moe + 1 + 1 + (1 if pp > 1 else 0)  # pp > 1: the last stage's output layer


def test_legacy_grouped_mlp_holds_all_experts_in_two_weights() -> None:
    """Without Transformer Engine, --moe-grouped-gemm builds megatron-core 0.16.1's GroupedMLP: weight1 and weight2."""
    cfg = _megatron("--position-embedding-type", "rope", "--disable-bias-linear", "--normalization", "RMSNorm",
                    "--swiglu", "--num-experts", "8", "--expert-model-parallel-size", "2", "--moe-grouped-gemm",
                    "--transformer-impl", "local")
    assert cfg.transformer_impl == "local"
    assert _tensors(cfg) == 4 * (2 + 1 + 1 + 1 + 2) + 1 + 1


def test_megatron_moe_router_has_a_bias_with_biased_linears() -> None:
    """megatron-core 0.16.1 TopKRouter registers `bias` when add_bias_linear (moe/router.py): a biased MoE layer is
    the two LayerNorms (4), QKV and projection with biases (4), router weight + bias (2), 4 experts x fc1/fc2 with
    biases (16) = 26 tensors, what named_parameters() of such a GPTModel lists."""
    cfg = _megatron("--position-embedding-type", "rope", "--num-experts", "4")
    assert cfg.model.add_bias_linear and cfg.framework == "megatron"
    assert _tensors(cfg) == 4 * 26 + 1 + 2
