"""GPU bytes of the states torch.optim keeps and the temporaries its multi-tensor step allocates, by the step a script
calls (schedule/optimizer_state.py num_optimizer_states, foreach_step_temporary_bytes_per_param): Adam(amsgrad=True)
keeps max_exp_avg_sq (a third state), SGD keeps a momentum_buffer only with momentum; the foreach amsgrad step copies
the square roots as plain Adam's does, foreach SGD with weight decay copies the gradients (torch 2.13
torch/optim/adam.py _multi_tensor_adam, sgd.py _multi_tensor_sgd). Each count is checked against torch itself: the
states a real step stores and the full-size tensors its foreach calls hold at once (CPU, foreach=True)."""

from __future__ import annotations

import json
import weakref
from pathlib import Path

import pytest

from llmperf_hook.frameworks.resolve import resolve_job
from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.graph.build import build_graph
from llmperf_hook.hardware.load import load_cluster
from llmperf_hook.schedule.memory import state_bytes, torch_foreach_step_bytes
from llmperf_hook.schedule.memory_cpu import cpu_step_temporary_bytes
from llmperf_hook.schedule.optimizer_state import (foreach_step_temporary_bytes_per_param, num_optimizer_states,
                                                   optimizer_bytes_per_param)

SHAPE = ["--no-pipeline-parallel", "--num-layers", "2", "--hidden-size", "256", "--num-attention-heads", "4",
         "--seq-length", "128", "--max-position-embeddings", "128", "--vocab-size", "1024", "--micro-batch-size", "1"]
ENV = {"PATH": "/usr/bin"}
ADAMW = "torch.optim.AdamW(model.parameters(), lr=1e-4)"
AMSGRAD = "torch.optim.AdamW(model.parameters(), lr=1e-4, amsgrad=True)"
AMSGRAD_FUSED = "torch.optim.Adam(model.parameters(), lr=1e-4, amsgrad=True, fused=True)"
ADAM_L2 = "torch.optim.Adam(model.parameters(), lr=1e-4, weight_decay=0.1)"
SGD = "torch.optim.SGD(model.parameters(), lr=0.1)"
SGD_DECAY = "torch.optim.SGD(model.parameters(), lr=0.1, weight_decay=1e-4)"
MOMENTUM = "torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)"
MOMENTUM_DECAY = "torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)"
NESTEROV_DECAY = "torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-4)"


def _plain_bf16(tmp_path: Path, optimizer: str) -> TrainingConfig:
    """A plain-torch script stepping torch.optim over its bf16 model (states in bf16, no master copy)."""
    script = tmp_path / "train.py"
    script.write_text(f"import torch\nmodel = torch.nn.Linear(4, 4).to(torch.bfloat16)\nopt = {optimizer}\n")
    return resolve_job(["python", str(script), *SHAPE, "--bf16"], ENV)[1]


def _client_zero1(tmp_path: Path, optimizer: str) -> TrainingConfig:
    """DeepSpeed ZeRO-1 stepping the script's torch.optim optimizer over its fp32 partition (master 4 B + states)."""
    script = tmp_path / "train.py"
    script.write_text("import deepspeed\nimport torch\nmodel = torch.nn.Linear(4, 4)\n"
                      f"opt = {optimizer}\nengine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt)\n")
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 1},
                              "bf16": {"enabled": True}, "zero_allow_untested_optimizer": True}))
    return resolve_job(["deepspeed", "--num_gpus", "1", str(script), "--deepspeed_config", str(ds), *SHAPE, "--bf16"],
                       ENV)[1]


@pytest.mark.parametrize(("optimizer", "plain_bf16", "zero1_fp32"), [
    (ADAMW, 2 * 2, 4 + 2 * 4),
    (AMSGRAD, 3 * 2, 4 + 3 * 4),  # was 4 / 12: max_exp_avg_sq not counted
    (AMSGRAD_FUSED, 3 * 2, 4 + 3 * 4),
    (SGD, 0, 4),  # was 2 / 8: a momentum buffer torch never creates
    (MOMENTUM, 2, 4 + 4),
])
def test_optimizer_state_bytes_by_the_step_called(tmp_path: Path, optimizer: str, plain_bf16: int,
                                                  zero1_fp32: int) -> None:
    assert optimizer_bytes_per_param(_plain_bf16(tmp_path, optimizer)) == plain_bf16
    cfg = _client_zero1(tmp_path, optimizer)
    assert optimizer_bytes_per_param(cfg) == zero1_fp32
    stage = build_graph(cfg, load_cluster("dgx-h100")).stages[0]
    assert state_bytes(cfg, stage, 1)["optimizer_states"] == pytest.approx(zero1_fp32 * stage.num_params)


@pytest.mark.parametrize(("optimizer", "temporary"), [
    (ADAMW, 2), (AMSGRAD, 2),  # amsgrad: was 0 (only "foreach" was matched)
    (AMSGRAD_FUSED, 0), (SGD, 0), (MOMENTUM, 0),
    (SGD_DECAY, 2), (MOMENTUM_DECAY, 2), (NESTEROV_DECAY, 2),  # was 0: the decayed gradients' copy
])
def test_foreach_step_temporaries_by_the_step_called(tmp_path: Path, optimizer: str, temporary: int) -> None:
    cfg = _plain_bf16(tmp_path, optimizer)
    assert foreach_step_temporary_bytes_per_param(cfg) == temporary
    stage = build_graph(cfg, load_cluster("dgx-h100")).stages[0]
    grads = state_bytes(cfg, stage, 1)["gradients"]
    assert torch_foreach_step_bytes(cfg, stage, 1) == (grads + temporary * stage.num_params if temporary else 0.0)


def _torch_step_counts(optimizer: str, foreach: bool = True) -> tuple[int, int]:
    """(state tensors per parameter a real step stores, most full-size tensors the second step's calls hold alive at
    once beyond the parameters, gradients and states), on a CPU with foreach=True (CUDA's default) or False (the
    single-tensor loop, a CPU's default)."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    model = torch.nn.Linear(64, 64, bias=False)
    if "fused" not in optimizer:
        optimizer = optimizer.replace("model.parameters()", f"model.parameters(), foreach={foreach}")
    opt = eval(optimizer, {"torch": torch, "model": model})  # the test's own literal calls
    numel = model.weight.numel()
    live, peak = [0], [0]

    class FullSizeOutputs(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            if not func._schema.name.endswith("_") and "out" not in kwargs:  # a new tensor (list), not out=...
                for t in out if isinstance(out, (list, tuple)) else [out]:
                    if isinstance(t, torch.Tensor) and t.numel() == numel:
                        live[0] += 1
                        peak[0] = max(peak[0], live[0])
                        weakref.finalize(t, lambda: live.__setitem__(0, live[0] - 1))
            return out

    for step in range(2):
        model.weight.grad = torch.randn_like(model.weight)
        if step:
            with FullSizeOutputs():
                opt.step()
        else:
            opt.step()
    states = sum(1 for v in opt.state[model.weight].values() if v.numel() == numel)
    return states, peak[0]


@pytest.mark.parametrize("optimizer", [ADAMW, AMSGRAD, AMSGRAD_FUSED, SGD, SGD_DECAY, MOMENTUM, MOMENTUM_DECAY,
                                       NESTEROV_DECAY])
def test_counts_agree_with_torch(tmp_path: Path, optimizer: str) -> None:
    """What the memory model counts is what torch's step stores and allocates (fused=True runs torch's CPU kernel of
    the same in-place signature)."""
    pytest.importorskip("torch")
    cfg = _plain_bf16(tmp_path, optimizer)
    states, temporaries = _torch_step_counts(optimizer)
    assert states == num_optimizer_states(cfg)
    assert temporaries == foreach_step_temporary_bytes_per_param(cfg) // 2


@pytest.mark.parametrize("optimizer", [ADAMW, AMSGRAD, ADAM_L2])
def test_cpu_step_temporaries_agree_with_torchs_single_tensor_loop(tmp_path: Path, optimizer: str) -> None:
    """On a CPU torch steps Adam's single-tensor loop, which DeepSpeed ZeRO-1/2 hands the flat fp32 partition
    (memory_cpu.cpu_step_temporary_bytes): amsgrad's torch.maximum(..., out=) is in place and its denominator holds the
    same two temporaries as plain Adam's (was counted none); Adam's L2 decay, grad = grad.add(param), holds a third
    until the iteration ends (was two) (adam.py _single_tensor_adam, torch 2.13)."""
    pytest.importorskip("torch")
    partition_params = 1000.0
    temporaries = _torch_step_counts(optimizer, foreach=False)[1]
    assert cpu_step_temporary_bytes(_client_zero1(tmp_path, optimizer), partition_params) == \
        4 * temporaries * partition_params
