"""--moe-layer-freq's list form (Megatron arguments.py moe_freq_type): which layers are MoE, and what is refused."""

from __future__ import annotations

import pytest

from llmperf_hook import api
from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.megatron_shape import moe_layer_pattern
from llmperf_hook.graph.params import is_moe_layer
from llmperf_hook.provenance import Source, SourceKind

ARGV = ("torchrun --nnodes 1 --nproc-per-node 8 pretrain_gpt.py --num-layers 8 --hidden-size 1024 "
        "--num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048 --vocab-size 32000 "
        "--micro-batch-size 1 --global-batch-size 16 --num-experts 8 --expert-model-parallel-size 8 --bf16").split()
WHERE = Source(SourceKind.ARGV, "--moe-layer-freq")


@pytest.mark.parametrize("text, expected", [
    ("([0]*2+[1]*6)", (0, 0, 1, 1, 1, 1, 1, 1)),
    ("([1]*3+[0]*1)*2", (1, 1, 1, 0, 1, 1, 1, 0)),
    ("[1,0,1,0,1,0,1,0]", (1, 0, 1, 0, 1, 0, 1, 0)),
])
def test_pattern_is_evaluated_as_megatron_does(text: str, expected: tuple[int, ...]) -> None:
    assert moe_layer_pattern(text, 8, WHERE) == expected


@pytest.mark.parametrize("text", ["([1]*3)", "[0]*9", "__import__('os')", "[1.5]*8", "[[1]]*8", "[1]*10**9"])
def test_bad_patterns_exit_2(text: str) -> None:
    with pytest.raises(ConfigError):
        moe_layer_pattern(text, 8, WHERE)


def _predict(freq: str) -> api.Prediction:
    return api.predict_command([*ARGV, "--moe-layer-freq", freq], {}, cluster="dgx-h100")


def test_dense_layers_of_the_pattern_are_dense_in_the_graph() -> None:
    every, half, pattern = _predict("1"), _predict("2"), _predict("([0]*2+[1]*6)")
    assert [is_moe_layer(pattern.config, i) for i in range(8)] == [False, False] + [True] * 6
    assert [is_moe_layer(half.config, i) for i in range(4)] == [True, False, True, False]
    assert all(is_moe_layer(every.config, i) for i in range(8))
    # 6 MoE layers of 8 cost between 4 (every second layer) and 8 (every layer).
    assert half.estimate.step_time_s < pattern.estimate.step_time_s < every.estimate.step_time_s


def test_pattern_longer_than_a_preset_model_exits_2() -> None:
    with pytest.raises(ConfigError, match="one entry per layer"):
        _predict("[1]*9")
