"""A Megatron entry script's arguments refused exactly where Megatron's argparse refuses them.

megatron/training/arguments.py parse_args: `argparse.ArgumentParser(allow_abbrev=False)` and, for pretrain_gpt.py
and the other entry points (ignore_unknown_args=False), `parser.parse_args()`. The oracle below is argparse itself
given the options as arguments.py (Megatron-LM d98e8a6) and Megatron-DeepSpeed's megatron/arguments.py define them;
each command goes to it and to llmperf, and llmperf must refuse (ConfigError, exit 2) exactly the commands argparse
refuses.
"""

from __future__ import annotations

import argparse
import contextlib
import io

import pytest

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.megatron_unknown_args import check_megatron_options
from tests.launch.cli_run import llmperf


def _megatron_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Megatron-LM Arguments", allow_abbrev=False)
    for name in ("--num-layers", "--hidden-size", "--micro-batch-size", "--tensor-model-parallel-size"):
        parser.add_argument(name, type=int, default=None)
    parser.add_argument("--split", type=str, default=None)
    parser.add_argument("--data-path", nargs="*", default=None)
    parser.add_argument("--cp-comm-type", nargs="+", type=str, default=["p2p"])
    parser.add_argument("--rampup-batch-size", nargs="*", default=None)
    parser.add_argument("--recompute-modules", nargs="*", type=str, default=None)
    parser.add_argument("--lr", type=float, default=None)
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--use-distributed-optimizer", action="store_true")
    parser.add_argument("--no-masked-softmax-fusion", action="store_false", dest="masked_softmax_fusion")
    parser.add_argument("--deepspeed", default=False, action="store_true")  # deepspeed.add_config_arguments
    parser.add_argument("--deepspeed_config", default=None, type=str)
    return parser


CASES = [
    "--num-layers 2 foo", "foo --num-layers 2", "--num-layers 2 --bf16 foo", "--bf16 foo --num-layers 2",
    "--num-layers=2 foo", "--num-layers 2 3", "--data-path 1.0 a 0.5 b --num-layers 2",
    "--cp-comm-type p2p a2a --num-layers 2", "--rampup-batch-size 16 16 1000 --bf16", "--recompute-modules core_attn mlp",
    "--split 99,1,0 --num-layers 2", "--num-layers 2 --num-layers 4", "--no-masked-softmax-fusion x",
    "--deepspeed ds.json", "--deepspeed --deepspeed_config ds.json", "--lr -1 --bf16", "--use-distributed-optimizer --bf16",
    "--micro-batch-size 1 -- extra", "--hidden-size 64 --tensor-model-parallel-size 2 0",
    # an explicit `=value` is the option's one value whatever its nargs: the next word is positional
    "--cp-comm-type=p2p a2a", "--cp-comm-type=p2p --num-layers 2", "--data-path=a b", "--recompute-modules=mlp moe",
    "--rampup-batch-size=16 16 1000", "--cp-comm-type p2p a2a=x",
]


def _argparse_refuses(words: list[str]) -> bool:
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            _megatron_parser().parse_args(words)
    except SystemExit as stop:
        assert stop.code == 2
        return True
    return False


@pytest.mark.parametrize("case", CASES)
def test_positional_words_refused_as_megatron_refuses_them(case: str) -> None:
    words = case.split()
    try:
        check_megatron_options("pretrain_gpt.py", words)
        refused = False
    except ConfigError as err:
        refused = True
        assert "unrecognized arguments" in str(err) and err.exit_code == 2
    assert refused == _argparse_refuses(words), case


def test_a_custom_script_may_take_positionals() -> None:
    """Only Megatron's own entry points parse with Megatron's parser; a script of the user's may define positionals."""
    assert check_megatron_options("my_train.py", ["--num-layers", "2", "data.bin"]) == []


def test_explain_exits_2_without_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    done = llmperf(capsys, "explain", "--", "torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "2",
                   "--hidden-size", "256", "--num-attention-heads", "8", "--seq-length", "128",
                   "--max-position-embeddings", "128", "--micro-batch-size", "1", "--vocab-size", "1000", "foo")
    assert done.code == 2 and "'foo'" in done.err and "Traceback" not in done.err


def test_a_yaml_configuration_replaces_the_flags() -> None:
    """megatron/training/arguments.py parse_args: with --yaml-cfg, load_yaml returns the YAML's arguments and the
    command line's are ignored; llmperf cannot price flags the job does not use."""
    with pytest.raises(ConfigError, match="argparse arguments will be ignored"):
        check_megatron_options("pretrain_gpt.py", ["--yaml-cfg", "gpt.yaml", "--num-layers", "2"])
