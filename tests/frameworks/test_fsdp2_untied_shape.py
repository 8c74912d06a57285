"""--use-torch-fsdp2's untied-embeddings assert (Megatron arguments.py validate_args: `assert
args.untie_embeddings_and_output_weights`) reads the resolved model shape, so a --model preset that unties them
(llama3-8b) passes as the flag would, and a tied shape is still refused."""

from __future__ import annotations

import pytest

from llmperf_hook.errors import ConfigError
from tests.frameworks.helpers import script

_FSDP2 = ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--micro-batch-size", "1", "--global-batch-size", "8",
          "--bf16", "--use-torch-fsdp2", "--no-gradient-accumulation-fusion"]


def test_a_preset_with_untied_embeddings_passes_fsdp2() -> None:
    cfg = script(_FSDP2, model="llama3-8b")
    assert cfg.model.untie_embeddings and cfg.optimizer.fsdp == "torch_fsdp2"


def test_tied_embeddings_are_still_refused_under_fsdp2() -> None:
    with pytest.raises(ConfigError, match="tied embeddings"):
        script([*_FSDP2, "--num-layers", "2", "--hidden-size", "256", "--num-attention-heads", "4", "--seq-length", "128",
                "--max-position-embeddings", "128", "--tokenizer-type", "GPT2BPETokenizer"])
