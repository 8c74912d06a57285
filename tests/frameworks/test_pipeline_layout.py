"""--pipeline-model-parallel-layout read, checked and priced as Megatron-Core does
(megatron/core/transformer/pipeline_parallel_layer_layout.py; arguments.py derives the virtual stages)."""

from __future__ import annotations

import pytest

from llmperf_hook.api import predict_command
from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.pipeline_layout import layout_layers_per_stage, layout_stages
from llmperf_hook.frameworks.resolve import resolve_job
from llmperf_hook.graph.stages import layers_per_virtual_stage

BASE = ("torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 8 --hidden-size 1024 --num-attention-heads 16 "
        "--seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 1 --global-batch-size 64 --bf16 "
        "--vocab-size 32000 --pipeline-model-parallel-size 4").split()


def _cfg(layout: str, *extra: str):
    return resolve_job([*BASE, "--pipeline-model-parallel-layout", layout, *extra], {})[1]


def test_megatron_unrolls_repeats_and_drops_commas() -> None:
    # parse_str_to_list's own example: "Ettt|(tt|)*29,m|L" -> [E t t t] + [t t] x 29 + [m] + [L]
    stages = layout_stages("Ettt|(tt|)*29,m|L")
    assert stages == ("Ettt", *["tt"] * 29, "m", "L") and layout_layers_per_stage("Et*3|t*2L") == (3, 2)


def test_each_chunk_gets_the_layers_the_layout_names() -> None:
    cfg = _cfg("Ettttt|t|t|tL")
    assert (cfg.parallel.vpp, layers_per_virtual_stage(cfg)) == (1, [5, 1, 1, 1])
    interleaved = _cfg("Et|t|t|t|t|t|t|tL")  # 8 stages at PP 4: two virtual stages, interleaved schedule
    assert (interleaved.parallel.vpp, interleaved.pipeline_schedule) == (2, "interleaved")


def test_an_unbalanced_layout_is_slower_than_a_balanced_one() -> None:
    balanced = predict_command([*BASE, "--pipeline-model-parallel-layout", "Ettt|tt|tt|tL"], {})
    skewed = predict_command([*BASE, "--pipeline-model-parallel-layout", "Ettttt|t|t|tL"], {})
    assert skewed.estimate.step_time_s > 1.2 * balanced.estimate.step_time_s


@pytest.mark.parametrize("layout, extra, quote", [
    ("Ettt|tt|tt|tx", (), "Invalid layer character"),
    ("Ett|tt|tt|ttL|", (), "divisible by pipeline_model_parallel_size"),
    ("tEtt|tt|tt|tL", (), "first layer must be embedding"),
    ("Ettt|tt|tt|Lt", (), "last layer must be loss"),
    ("Ett|tt|tt|tL", (), "must match num_layers"),
    ("Ettt|tt|tt|tmL", (), "must match mtp_num_layers"),
    ("Et|t|t|t|t|t|t|tL", ("--num-virtual-stages-per-pipeline-rank", "2"), "No more than one"),
    ("Ettt|tt|tt|tL", ("--decoder-first-pipeline-num-layers", "3"), "cannot be set with other pipeline layout"),
])
def test_megatron_refuses(layout: str, extra: tuple[str, ...], quote: str) -> None:
    with pytest.raises(ConfigError, match=quote):
        _cfg(layout, *extra)
