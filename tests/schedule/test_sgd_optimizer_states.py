"""SGD's optimizer state and step as the framework really builds it (H212 item 2).

Megatron-LM --optimizer sgd is Transformer Engine's (else apex's) FusedSGD (core/optimizer/__init__.py, core_v0.16.1 to
HEAD): FusedSGD.get_momentums allocates a momentum_buffer for every parameter whatever --sgd-momentum, so momentum 0
still keeps one fp32 state; its multi_tensor_sgd kernel loads gradient, weight and buffer and stores the buffer only when
momentum != 0 (4 / 5 fp32 accesses). Before, the step was priced as the fused Adam's 28 B. A ds_config "optimizer":
{"type": "SGD"} makes DeepSpeed build torch.optim.SGD(**params) (engine.py _configure_basic_optimizer), whose momentum
defaults to 0 and which then stores no state (torch/optim/sgd.py _init_group): it was priced with one.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.resolve import JobOverrides, resolve_job
from llmperf_hook.graph.step_ops import adam_bytes_per_param
from llmperf_hook.schedule.optimizer_state import optimizer_bytes_per_param

MEGATRON = ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "8", "--hidden-size", "2048",
            "--num-attention-heads", "16", "--seq-length", "2048", "--max-position-embeddings", "2048",
            "--micro-batch-size", "1", "--global-batch-size", "64", "--vocab-size", "32000", "--bf16",
            "--optimizer", "sgd"]
TRAINER = ["deepspeed", "--num_gpus", "8", "run_clm.py", "--model_name_or_path", "meta-llama/Llama-2-7b-hf",
           "--do_train", "--output_dir", "out", "--per_device_train_batch_size", "4", "--block_size", "1024", "--bf16",
           "--deepspeed", "ds.json"]


@pytest.mark.parametrize(("flags", "state_bytes", "step_bytes", "warned"), [
    ([], 4 + 4, 5 * 4, False),  # --sgd-momentum default 0.9: fp32 master + buffer; FusedSGD 5 accesses
    (["--sgd-momentum", "0"], 4 + 4, 4 * 4, False),  # the buffer is still allocated, never stored to
    (["--sgd-momentum", "0", "--transformer-impl", "local"], 4 + 4, 4 * 4, True)])
def test_megatron_sgd_is_fused_sgd(flags: list[str], state_bytes: float, step_bytes: float, warned: bool) -> None:
    _, cfg = resolve_job([*MEGATRON, *flags], {})
    assert optimizer_bytes_per_param(cfg) == state_bytes
    assert adam_bytes_per_param(cfg)[0] == step_bytes
    assert any("torch.optim.SGD, which keeps none" in w for w in cfg.warnings) == warned


@pytest.mark.parametrize(("params", "state_bytes", "step_bytes"), [
    ({"lr": "auto"}, 4, 3 * 4),  # momentum 0: param.add_(grad), no buffer
    ({"lr": 0.1, "momentum": 0.9}, 4 + 4, 8 * 4),
    ({"lr": 0.1, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01}, 4 + 4, (11 + 3) * 4),
    ({"lr": 0.1, "fused": True}, 4, 3 * 4)])
def test_deepspeed_sgd_section_keeps_a_buffer_only_with_momentum(params: dict, state_bytes: float, step_bytes: float,
                                                                   tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ds.json").write_text(json.dumps({
        "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto", "bf16": {"enabled": "auto"},
        "zero_optimization": {"stage": 0}, "optimizer": {"type": "SGD", "params": params}}))
    _, cfg = resolve_job(TRAINER, {}, JobOverrides(model="llama2-7b"))
    assert optimizer_bytes_per_param(cfg) == state_bytes  # fp32 master (BF16_Optimizer) + the momentum buffer if any
    assert adam_bytes_per_param(cfg)[0] == step_bytes


@pytest.mark.parametrize(("given", "spelled"), [("sgd", "SGD"), ("Sgd", "SGD"), ("rmsprop", "RMSprop")])
def test_a_torch_optimizer_spelled_otherwise_is_refused_as_deepspeed_does(given: str, spelled: str, tmp_path: Path,
                                                                            monkeypatch) -> None:
    """DeepSpeed lower-cases only its own optimizer names (runtime/config.py: DEEPSPEED_OPTIMIZERS); any other type is
    getattr(torch.optim, type) as written, and _do_optimizer_sanity_check asserts "sgd is not a supported DeepSpeed
    Optimizer" for a lower-case "sgd". Adam / AdamW / Adagrad are DeepSpeed's names, any case."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ds.json").write_text(json.dumps({
        "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto", "bf16": {"enabled": "auto"},
        "zero_optimization": {"stage": 0}, "optimizer": {"type": given, "params": {"lr": 0.1}}}))
    with pytest.raises(ConfigError, match=f"not a supported DeepSpeed Optimizer.*\"type\": \"{spelled}\"") as err:
        resolve_job(TRAINER, {}, JobOverrides(model="llama2-7b"))
    assert err.value.exit_code == 2
    (tmp_path / "ds.json").write_text(json.dumps({
        "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto", "bf16": {"enabled": "auto"},
        "zero_optimization": {"stage": 0}, "optimizer": {"type": "ADAMW", "params": {"lr": 0.1}}}))
    assert resolve_job(TRAINER, {}, JobOverrides(model="llama2-7b"))[1].optimizer.name == "adam"
