"""TransformerConfig.__post_init__ MoE rules that earlier slipped through (Megatron-LM HEAD,
megatron/core/transformer/transformer_config.py), and argparse nargs='+' for the list-valued MoE flags."""

from __future__ import annotations

import pytest

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.flags import ONE_OR_MORE, Flag, parse_flags
from llmperf_hook.frameworks.resolve import resolve_job

BASE = ("torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 2 --hidden-size 1024 --num-attention-heads 16 "
        "--seq-length 2048 --max-position-embeddings 2048 --vocab-size 32000 --micro-batch-size 1 "
        "--global-batch-size 8 --bf16 --disable-bias-linear").split()
MOE = (*BASE, "--num-experts", "8", "--moe-router-topk", "2", "--expert-model-parallel-size", "8")


def _resolve(*words: str):
    return resolve_job(list(words), {})


@pytest.mark.parametrize("extra, quote", [
    (("--moe-expert-capacity-factor", "-1", "--moe-router-load-balancing-type", "sinkhorn"), "only works with"),
    (("--moe-expert-capacity-factor", "-1", "--moe-pad-expert-input-to-capacity"), "must be set to use"),
    (("--moe-router-load-balancing-type", "aux_loss", "seq_aux_loss"), "same length"),
    (("--moe-router-load-balancing-type", "aux_loss", "seq_aux_loss", "--moe-aux-loss-coeff", "0.01"), "same length"),
    (("--moe-router-load-balancing-type", "sinkhorn", "aux_loss", "--moe-aux-loss-coeff", "0.01", "0.001",
      "--moe-expert-capacity-factor", "1.0"), "sinkhorn"),
    (("--moe-token-dispatcher-type", "alltoall", "--moe-router-padding-for-quantization"), "fp8/fp4 must be specified"),
    (("--moe-token-dispatcher-type", "alltoall", "--moe-router-padding-for-fp8"), "fp8/fp4 must be specified"),
])
def test_megatron_refuses(extra: tuple[str, ...], quote: str) -> None:
    with pytest.raises(ConfigError, match=quote):
        _resolve(*MOE, *extra)


@pytest.mark.parametrize("extra", [
    ("--moe-router-load-balancing-type", "aux_loss", "seq_aux_loss", "--moe-aux-loss-coeff", "0.01", "0.001"),
    ("--moe-router-load-balancing-type", "aux_loss", "--moe-aux-loss-coeff", "0.01", "--moe-expert-capacity-factor", "-1"),
    ("--moe-token-dispatcher-type", "alltoall", "--moe-router-padding-for-quantization", "--fp8-format", "hybrid"),
])
def test_megatron_accepts(extra: tuple[str, ...]) -> None:
    _, cfg = _resolve(*MOE, *extra)
    assert cfg.model.moe_dispatch.capacity_factor is None  # a negative factor is dropless


def test_deepep_flag_needs_flex_even_on_a_dense_model() -> None:
    with pytest.raises(ConfigError, match="only supported with flex"):
        _resolve(*BASE, "--moe-enable-deepep")


def test_one_or_more_reads_every_value_up_to_the_next_option() -> None:
    table = {"--types": Flag("types", "str", nargs=ONE_OR_MORE), "--coeff": Flag("coeff", "float", nargs=ONE_OR_MORE),
             "--bf16": Flag("bf16", "true")}
    flags = parse_flags(["--types", "a", "b", "--coeff", "-0.5", "1e-3", "--bf16"], table)
    assert flags.get("types") == ("a", "b") and flags.get("coeff") == (-0.5, 0.001) and flags.get("bf16")
    assert parse_flags(["--types", "a"], table).get("types") == "a"  # one value: the value (validate_args unwraps)
    assert parse_flags(["--types=a"], table).get("types") == "a"
    with pytest.raises(ConfigError, match="at least one value"):
        parse_flags(["--types", "--bf16"], table)
    with pytest.raises(ConfigError, match="at least one value"):  # argparse reads '-1e-3' as an option, not a value
        parse_flags(["--coeff", "-1e-3"], table)
