"""An AMP loop's step is GradScaler.step(optimizer), also when the scaler skips optimizer.step() for inf gradients."""

from __future__ import annotations

import sys
from pathlib import Path

from instrument_helpers import read_records, run_session, steps_by_rank

from llmperf_hook.instrument.config import HookConfig
from llmperf_hook.instrument.frameworks import wrap_step
from llmperf_hook.instrument.recorder import StepRecorder

JOB = """
import torch
torch.set_num_threads(1)
model = torch.nn.Linear(8, 8)
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
critic = torch.nn.Linear(8, 1)
critic_opt = torch.optim.SGD(critic.parameters(), lr=1e-3)  # a second optimizer per iteration (a GAN's)
# a scale the scaled loss overflows at first: the scaler skips optimizer.step() and halves it, as fp16 loops do
scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 127, backoff_factor=2.0 ** -8)
skipped = 0
for i in range(8):
    x = torch.randn(4, 8)
    scaler.scale(model(x).pow(2).sum() * 1e3 + critic(x).sum()).backward()
    before = scaler.get_scale()
    scaler.step(opt)
    scaler.step(critic_opt)
    scaler.update()
    opt.zero_grad(); critic_opt.zero_grad()
    skipped += scaler.get_scale() < before
print("skipped", skipped)
"""


def test_skipped_optimizer_steps_are_steps_of_the_loop(tmp_path: Path, child_env: dict[str, str]) -> None:
    """8 iterations, the first few skipped by the scaler: 8 steps of --instrument 20 recorded, one per iteration
    (the lead optimizer's scaler.step, not the critic's). Before, only the iterations whose optimizer.step() ran were
    steps, each skipped one timed together with the next."""
    script = tmp_path / "job.py"
    script.write_text(JOB)
    done = run_session(tmp_path, child_env, [sys.executable, str(script)], steps=20)
    assert done.returncode == 0, done.stderr[-2000:]
    skipped = int(done.stdout.split("skipped ")[1])
    assert 1 <= skipped <= 4, done.stdout
    records = read_records(tmp_path / "run")
    assert steps_by_rank(records) == {0: list(range(8))}
    assert {r["framework"] for r in records if r["kind"] == "step"} == {"torch"}


def test_an_engine_step_owns_the_grad_scaler_steps_inside_it(tmp_path: Path) -> None:
    """DeepSpeed under torch_autocast calls GradScaler.step inside engine.step, once per ZeRO-3 sub-group: one step
    per engine.step, also after an AMP step of the script's own came first (with the scaler ranked as high as the
    engine, that first step kept the ownership and each sub-group's scaler step was a step: 7 records, not 4)."""
    rec = StepRecorder(HookConfig(run_dir=str(tmp_path), job_id="j", num_steps=10, num_warmup_steps=0,
                                  reference_speed=False))
    scaler_step = wrap_step(lambda: None, rec, "torch", layer="torch-amp")
    engine_step = wrap_step(lambda: (scaler_step(), scaler_step()), rec, "deepspeed")  # two sub-groups
    scaler_step()
    for _ in range(3):
        engine_step()
    rec.writer.close()
    assert steps_by_rank(read_records(tmp_path)) == {0: [0, 1, 2, 3]}
    assert rec._owner == "deepspeed"
