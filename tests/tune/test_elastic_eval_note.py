"""The elastic line's advice for Megatron-LM core_v0.18.0 and later under --decrease-batch-size-if-needed alone
(tune/elastic._release_eval_note, H212 07fe03d9): an --eval-global-batch-size every count of the range splits at
micro-batch 1, a multiple of the counts' GPU numbers' least common multiple. Over a wide range that multiple is no
batch anyone runs (64:128 nodes of 8: a 57-digit number), and the line said it as advice."""

from __future__ import annotations

import pytest

from llmperf_hook.launch.parse import parse_launch
from llmperf_hook.tune.elastic import elastic_note

MEGATRON = ("pretrain_gpt.py --num-layers 8 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 "
            "--max-position-embeddings 1024 --micro-batch-size 1 --global-batch-size 512 --vocab-size 32000 --bf16 "
            "--decrease-batch-size-if-needed").split()


@pytest.mark.parametrize(("nnodes", "said"), [
    ("1:4", "add --eval-global-batch-size with a multiple of 96 (every count splits it at micro-batch 1)"),
    ("64:128", "no eval batch one would run splits every count (the smallest that does, the least common multiple "
               "of their GPU numbers, has 57 digits): on those releases narrow the range"),
])
def test_the_eval_batch_advice_is_one_a_job_can_take(nnodes: str, said: str) -> None:
    job = parse_launch(["torchrun", "--nnodes", nnodes, "--nproc-per-node", "8", *MEGATRON], {}, None, None)
    note = elastic_note(job)
    assert note is not None and note.endswith(said), note
