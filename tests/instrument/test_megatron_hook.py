"""The Megatron hooks against Megatron-LM's per-iteration structure and megatron-core's real classes.

Megatron-LM (megatron/training/training.py) runs one iteration as `train_step(forward_step_func,
data_iterator, model, optimizer, opt_param_scheduler, config)`, called by `train()` through its module-global
name; train_step zeroes the grads, runs the forward-backward schedule over all micro-batches and calls
`optimizer.step()` once. Megatron-LM is not on PyPI, so a module with that structure is written as a
`megatron.training` namespace portion next to the installed megatron-core: the hook must patch it on import,
count one step per iteration (not per micro-batch, not the inner torch optimizer step), and leave `train()`
untouched. With megatron-core installed its real optimizer classes (what a custom megatron-core loop steps)
must be patched on import and restored after N steps; megatron-core's forward-backward schedule, attention
and MegatronOptimizer allocate CUDA tensors, so running them is a `gpu` test.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from instrument_helpers import read_records, steps_by_rank

from llmperf_hook.instrument.bootstrap import write_hook_dir
from llmperf_hook.instrument.config import HookConfig, write_hook_config
from llmperf_hook.instrument.session import build_child_env

TRAINING_PY = '''
"""Megatron-LM's iteration structure (megatron/training/training.py train / train_step)."""
def train_step(forward_step_func, data_iterator, model, optimizer, opt_param_scheduler, config):
    optimizer.zero_grad()
    losses = [forward_step_func(data_iterator, model[0]) for _ in range(config["num_microbatches"])]
    for loss in losses:
        (loss / len(losses)).backward()
    optimizer.step()
    return {"lm loss": sum(float(l) for l in losses)}, 0, None, 0


def train(forward_step_func, model, optimizer, opt_param_scheduler, train_data_iterator, config, train_iters):
    for iteration in range(train_iters):
        loss, skipped, grad_norm, zeros = train_step(forward_step_func, train_data_iterator, model, optimizer,
                                                     opt_param_scheduler, config)
        print(f"iteration {iteration} | lm loss {loss['lm loss']:.4f}", flush=True)
'''

DRIVER = '''
import sys, torch
torch.set_num_threads(1)
from megatron.training.training import train
USE_CORE = sys.argv[1] == "core"
if USE_CORE:  # megatron-core's real optimizer classes get patched on import, and restored after N steps
    import megatron.core.optimizer.optimizer as mo
    import megatron.core.optimizer.layer_wise_optimizer as lw
    wrapped = sorted(c.__name__ for m in (mo, lw) for c in vars(m).values()
                     if isinstance(c, type) and hasattr(vars(c).get("step"), "__llmperf_wrapped__"))
    print("megatron-core optimizers wrapped:", " ".join(wrapped))
model = torch.nn.Sequential(torch.nn.Embedding(128, 32), torch.nn.Linear(32, 128))

def data():
    while True:
        yield torch.randint(0, 128, (2, 17))

def forward_step(it, m):
    t = next(it)
    return torch.nn.functional.cross_entropy(m(t[:, :-1]).reshape(-1, 128), t[:, 1:].reshape(-1))

train(forward_step, [model], torch.optim.AdamW(model.parameters(), lr=1e-4), None, data(),
      {"num_microbatches": 3}, 5)
import megatron.training.training as mt
print("train_step restored:", not hasattr(mt.train_step, "__llmperf_wrapped__"))
if USE_CORE:
    print("megatron-core restored:", not any(hasattr(vars(c).get("step"), "__llmperf_wrapped__")
                                             for m in (mo, lw) for c in vars(m).values() if isinstance(c, type)))
'''


def _has_megatron_core() -> bool:
    """Without importing it here: megatron.core pulls cProfile, and under pytest `profile` may resolve to a
    test folder of that name."""
    try:
        return importlib.util.find_spec("megatron.core") is not None
    except (ImportError, ValueError):
        return False


def _run(tmp_path: Path, env: dict[str, str], variant: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    portion = tmp_path / "megatron-lm" / "megatron" / "training"  # no megatron/__init__.py: a namespace portion
    portion.mkdir(parents=True)
    (portion / "__init__.py").write_text("")
    (portion / "training.py").write_text(textwrap.dedent(TRAINING_PY))
    (tmp_path / "driver.py").write_text(DRIVER)
    hook = write_hook_dir(tmp_path / "run" / "hook")
    write_hook_config(HookConfig(run_dir=str(tmp_path / "run"), job_id="mlm", num_steps=4, num_warmup_steps=1), hook)
    child = build_child_env(env, hook, tmp_path / "run")
    child["PYTHONPATH"] += f":{tmp_path / 'megatron-lm'}"
    done = subprocess.run([sys.executable, str(tmp_path / "driver.py"), variant], env=child, capture_output=True,
                          text=True, timeout=180)
    return done, read_records(tmp_path / "run")


def _check(done: subprocess.CompletedProcess, records: list[dict]) -> None:
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("iteration ") == 5 and "train_step restored: True" in done.stdout
    assert steps_by_rank(records) == {0: [0, 1, 2, 3]}  # one per iteration, not per micro-batch or torch step
    assert {r["framework"] for r in records if r["kind"] == "step"} == {"megatron"}
    assert "deepspeed" not in " ".join(str(r.get("deepspeed_version", "")) for r in records if r["kind"] == "meta")


def test_megatron_lm_train_step_is_the_step(tmp_path: Path, child_env: dict[str, str]) -> None:
    _check(*_run(tmp_path, child_env, "torch"))


def test_megatron_core_optimizers_patched_and_restored(tmp_path: Path, child_env: dict[str, str]) -> None:
    if not _has_megatron_core():
        pytest.skip("megatron-core not installed (pip install --no-deps megatron-core)")
    done, records = _run(tmp_path, child_env, "core")
    _check(done, records)
    wrapped = done.stdout.split("megatron-core optimizers wrapped:")[1].splitlines()[0].split()
    # LayerWiseDistributedOptimizer (Muon): its step ends with the parameters' all-gather after ChainedOptimizer's
    assert {"FP32Optimizer", "MixedPrecisionOptimizer", "ChainedOptimizer", "LayerWiseDistributedOptimizer"} \
        <= set(wrapped), wrapped
    assert "megatron-core restored: True" in done.stdout


@pytest.mark.gpu
def test_megatron_core_schedule_and_optimizer_on_gpu(tmp_path: Path, child_env: dict[str, str]) -> None:
    """Custom megatron-core loop on CUDA: get_forward_backward_func() + FP32Optimizer.step() is one step,
    owned by megatron-core (the torch optimizer inside is not counted twice)."""
    torch = pytest.importorskip("torch")
    if not _has_megatron_core() or not torch.cuda.is_available():
        pytest.skip("needs CUDA and megatron-core")
    script = tmp_path / "mcore_loop.py"
    script.write_text(textwrap.dedent('''
        import os, torch
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1"); os.environ.setdefault("MASTER_PORT", "29678")
        torch.distributed.init_process_group("nccl", rank=0, world_size=1)
        from megatron.core import parallel_state
        parallel_state.initialize_model_parallel(1, 1)
        from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed
        model_parallel_cuda_manual_seed(1234)  # GPU weight init forks the model-parallel CUDA RNG
        from megatron.core.models.gpt import GPTModel
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
        from megatron.core.optimizer import OptimizerConfig
        from megatron.core.optimizer.optimizer import FP32Optimizer
        from megatron.core.pipeline_parallel import get_forward_backward_func
        from megatron.core.transformer.transformer_config import TransformerConfig
        cfg = TransformerConfig(num_layers=1, hidden_size=64, num_attention_heads=4)
        model = GPTModel(config=cfg, transformer_layer_spec=get_gpt_layer_local_spec(), vocab_size=256,
                         max_sequence_length=32).cuda()
        opt = FP32Optimizer(torch.optim.AdamW(model.parameters(), lr=1e-4), OptimizerConfig(lr=1e-4), lambda o: None)
        def fwd(it, m):
            t = torch.randint(0, 256, (2, 33), device="cuda")
            pos = torch.arange(32, device="cuda").unsqueeze(0).expand(2, -1)
            out = m(t[:, :-1], pos, None, labels=t[:, 1:])
            return out, lambda o: (o.float().mean(), {"lm loss": o.float().mean()})
        fb = get_forward_backward_func()
        for i in range(6):
            opt.zero_grad()
            fb(forward_step_func=fwd, data_iterator=iter(()), model=[model], num_microbatches=2, seq_length=32,
               micro_batch_size=2, forward_only=False)
            opt.step()
    '''))
    hook = write_hook_dir(tmp_path / "run" / "hook")
    write_hook_config(HookConfig(run_dir=str(tmp_path / "run"), job_id="mcore", num_steps=4), hook)
    done = subprocess.run([sys.executable, str(script)], env=build_child_env(child_env, hook, tmp_path / "run"),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    records = read_records(tmp_path / "run")
    assert steps_by_rank(records) == {0: [0, 1, 2, 3]}
    assert {r["framework"] for r in records if r["kind"] == "step"} == {"megatron-core"}
    assert all(r["timer"] == "cuda_event" and r["gpu_peak_allocated_bytes"] > 0 for r in records if r["kind"] == "step")
