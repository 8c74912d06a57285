"""Round-4 campaign: predict --batch line forms."""

from __future__ import annotations

import pytest

from llmperf_hook.commands.predict import parse_batch_line
from llmperf_hook.errors import UsageError


def test_a_bare_separator_before_the_command() -> None:
    assert parse_batch_line("-- torchrun --nproc-per-node 8 pretrain_gpt.py", {}) == (
        ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py"], {})


@pytest.mark.parametrize(("line", "fragment"), [
    ("--bogus 3 -- torchrun pretrain_gpt.py", "unknown llmperf option --bogus"),
    ("--format json -- torchrun pretrain_gpt.py", "unknown llmperf option --format"),
    ("--model llama2-7b deepspeed train.py", "separate them"),
])
def test_line_options_are_named(line: str, fragment: str) -> None:
    with pytest.raises(UsageError, match=fragment):
        parse_batch_line(line, {})


def test_predict_reads_gpus_per_node_from_the_given_cluster() -> None:
    from llmperf_hook import api

    argv = ["torchrun", "--nnodes", "2", "--nproc-per-node", "gpu", "pretrain_gpt.py", "--num-layers", "4",
            "--hidden-size", "512", "--num-attention-heads", "8", "--seq-length", "512", "--max-position-embeddings",
            "512", "--micro-batch-size", "1", "--vocab-size", "1000"]
    assert api.predict_command(argv, {}, cluster="perlmutter").job.world_size == 8  # 4 A100 per node
    with pytest.raises(UsageError, match="--cluster"):
        api.predict_command(argv, {})  # the assumed default cluster does not size the job
