"""frameworks/te_attention_rules.py: --attention-backend flash with --softmax-type learnable / off-by-one under
Transformer Engine (Megatron turns TE's fused and unfused backends off for flash, TE disables FlashAttention for any
softmax_type but vanilla), and unfused with context parallelism (TE disables UnfusedDotProductAttention under CP):
TE's DotProductAttention raises 'No dot product attention backend is available' at the first forward. The local
spec and the other backends take every softmax_type."""

from __future__ import annotations

import pytest

from llmperf_hook.api import resolve_command
from llmperf_hook.errors import ConfigError

MEGATRON = ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "4", "--hidden-size", "2048",
            "--num-attention-heads", "16", "--seq-length", "2048", "--max-position-embeddings", "2048",
            "--vocab-size", "50304", "--micro-batch-size", "1", "--global-batch-size", "8", "--bf16"]


def _cfg(*extra: str):
    return resolve_command([*MEGATRON, *extra], {}, cluster="dgx-h100")[1]


@pytest.mark.parametrize("softmax", ["learnable", "off-by-one"])
def test_flash_refuses_a_sink_softmax(softmax: str) -> None:
    with pytest.raises(ConfigError) as err:
        _cfg("--attention-backend", "flash", "--softmax-type", softmax)
    message = str(err.value)
    assert err.value.exit_code == 2
    assert f"--attention-backend flash with --softmax-type {softmax}" in message
    assert "No dot product attention backend is available" in message and "--attention-backend fused" in message


@pytest.mark.parametrize("extra", [("--attention-backend", "fused"), ("--attention-backend", "auto"),
                                   ("--attention-backend", "unfused"),
                                   ("--attention-backend", "flash", "--transformer-impl", "local")])
def test_backends_that_take_it_pass(extra: tuple[str, ...]) -> None:
    assert _cfg(*extra, "--softmax-type", "learnable").model.attention_sinks


def test_flash_with_the_vanilla_softmax_passes() -> None:
    assert _cfg("--attention-backend", "flash", "--softmax-type", "vanilla").attention_backend == "flash"


def test_unfused_with_context_parallelism_is_refused_under_te() -> None:
    """TE disables UnfusedDotProductAttention under context parallelism and Megatron's unfused backend turns the
    others off: no backend at the first forward."""
    with pytest.raises(ConfigError) as err:
        _cfg("--attention-backend", "unfused", "--context-parallel-size", "2")
    assert err.value.exit_code == 2
    assert "--attention-backend unfused with --context-parallel-size 2" in str(err.value)
    assert "No dot product attention backend is available" in str(err.value)
    assert _cfg("--attention-backend", "fused", "--context-parallel-size", "2").parallel.cp == 2
    assert _cfg("--attention-backend", "unfused").parallel.cp == 1
