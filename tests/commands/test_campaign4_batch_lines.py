"""Round-4 campaign: predict --batch line forms."""

from __future__ import annotations

import pytest

from llmperf_hook.commands.predict import parse_batch_line
from llmperf_hook.errors import LlmperfError, UsageError


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


def test_batch_without_cluster_does_not_size_gpu_per_node_launches(tmp_path) -> None:
    """The assumed default cluster must not size '--nproc-per-node gpu' in --batch either (a single command
    exits 2 asking for --nproc-per-node; a batch line used to be sized as 8 per node from dgx-h100)."""
    from llmperf_hook.api import prediction_json
    from llmperf_hook.commands.predict import predict_batch_line

    line = ("torchrun --nproc-per-node gpu pretrain_gpt.py --num-layers 4 --hidden-size 512 --num-attention-heads 8 "
            "--seq-length 512 --max-position-embeddings 512 --vocab-size 32000 --micro-batch-size 1 --global-batch-size 8")
    defaults = {"cluster": None, "hardware": None, "nnodes": None, "nproc_per_node": None, "model": None}
    with pytest.raises(LlmperfError, match="nproc"):
        predict_batch_line(line, defaults, {})
    predicted = predict_batch_line(line, {**defaults, "cluster": "perlmutter"}, {})
    assert predicted is not None and prediction_json(predicted[0])["config"]["world_size"] == 4  # perlmutter: 4 A100 per node
