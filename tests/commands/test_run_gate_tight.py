"""`run --require-fit` and `predict` on a job that fits only tightly: exit 0 with the "fits, tight" warning while
the allocated bytes (peak less the allocator's reserve, schedule/memory_rule.py) fit the GPU; exit 3 once they do
not. A Megatron-LM job: its reserve is the 10 % residue over its transients."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from llmperf_hook.api import predict_command
from llmperf_hook.resources import configs_dir

GPT = ("torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 8 --hidden-size 2048 --num-attention-heads 16 "
       "--seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 4 --global-batch-size 64 --bf16 "
       "--vocab-size 50257").split()


def llmperf(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "llmperf_hook", *args], capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def peak_and_fragmentation() -> tuple[int, int]:
    mem = predict_command(GPT, {}, cluster="dgx-h100").estimate.memory
    assert mem.must_fit_bytes == mem.peak_bytes_per_gpu - mem.fragmentation_bytes < mem.peak_bytes_per_gpu
    return mem.peak_bytes_per_gpu, mem.fragmentation_bytes


def _h100_with(tmp_path: Path, capacity_bytes: float) -> str:
    """The shipped H100 preset with only its memory capacity changed."""
    text = (configs_dir() / "hardware" / "h100-sxm5-80gb.yaml").read_text()
    text, n = re.subn(r"^memory_capacity_GiB: .*$", f"memory_capacity_GiB: {capacity_bytes / 2**30!r}", text,
                      flags=re.M)
    assert n == 1
    path = tmp_path / "h100-capacity.yaml"
    path.write_text(text)
    return str(path)


def test_tight_fit_passes_the_gate(tmp_path: Path, peak_and_fragmentation: tuple[int, int]) -> None:
    peak, frag = peak_and_fragmentation
    hw = _h100_with(tmp_path, peak - frag / 2)  # the peak over the GPU, the allocated bytes under it
    gated = llmperf("run", "--cluster", "dgx-h100", "--hardware", hw, "--dry-run", "--require-fit", "--", *GPT)
    assert gated.returncode == 0, gated.stderr
    assert "fits, tight" in gated.stdout and "expandable_segments:True" in gated.stdout
    pred = llmperf("predict", "--cluster", "dgx-h100", "--hardware", hw, "--format", "json", "--", *GPT)
    assert pred.returncode == 0, pred.stderr
    mem = json.loads(pred.stdout)["memory"]
    assert mem["fits"] is True and mem["tight"] is True and -frag < mem["headroom_bytes"] < 0


def test_allocated_bytes_over_the_gpu_exit_3(tmp_path: Path, peak_and_fragmentation: tuple[int, int]) -> None:
    peak, frag = peak_and_fragmentation
    hw = _h100_with(tmp_path, peak - frag - 2**24)  # 16 MiB beyond the allocator's reserve
    gated = llmperf("run", "--cluster", "dgx-h100", "--hardware", hw, "--dry-run", "--require-fit", "--", *GPT)
    assert gated.returncode == 3 and "Traceback" not in gated.stderr
    assert f"more than its {frag / 2**30:.2f} GiB of allocator reserve: what it allocates" in gated.stderr
    pred = llmperf("predict", "--cluster", "dgx-h100", "--hardware", hw, "--", *GPT)
    assert pred.returncode == 0 and "DOES NOT FIT" in pred.stdout


def test_require_fit_help_says_a_tight_fit_passes() -> None:
    out = llmperf("run", "--help")
    assert out.returncode == 0 and "fits, tight" in out.stdout and "not refused" in out.stdout
