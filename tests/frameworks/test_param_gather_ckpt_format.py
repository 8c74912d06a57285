"""--overlap-param-gather-with-optimizer-step and distributed checkpointing: Megatron-LM's validate_args asserts
`not args.use_dist_ckpt` for it (core_r0.9.0, where the flag came, to HEAD d98e8a6), use_dist_ckpt being
ckpt_format != "torch" with --ckpt-format defaulting to torch_dist: only --ckpt-format torch passes. Through the CLI."""

from __future__ import annotations

import pytest

from tests.launch.cli_run import llmperf

GPT = ["torchrun", "--nproc_per_node", "8", "pretrain_gpt.py", "--num-layers", "8", "--hidden-size", "1024",
       "--num-attention-heads", "16", "--seq-length", "2048", "--max-position-embeddings", "2048",
       "--micro-batch-size", "1", "--global-batch-size", "64", "--bf16", "--vocab-size", "50257",
       "--tokenizer-type", "NullTokenizer", "--use-distributed-optimizer", "--overlap-grad-reduce",
       "--overlap-param-gather", "--pipeline-model-parallel-size", "2", "--num-layers-per-virtual-pipeline-stage", "2",
       "--overlap-param-gather-with-optimizer-step"]


@pytest.mark.parametrize("fmt, shown", [([], "the default --ckpt-format torch_dist"),
                                        (["--ckpt-format", "torch_dist"], "--ckpt-format torch_dist"),
                                        (["--ckpt-format", "zarr"], "--ckpt-format zarr")])
def test_a_distributed_checkpoint_format_is_refused(fmt: list[str], shown: str,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    out = llmperf(capsys, "explain", "--", *GPT, *fmt)
    assert out.code == 2 and f"--overlap-param-gather-with-optimizer-step with {shown}" in out.err, out.err
    assert "not supported with distributed checkpointing yet" in out.err and "--ckpt-format torch" in out.err


def test_legacy_torch_checkpoints_are_accepted(capsys: pytest.CaptureFixture[str]) -> None:
    out = llmperf(capsys, "explain", "--format", "json", "--", *GPT, "--ckpt-format", "torch")
    assert out.code == 0, out.err
    assert '"vpp": 2' in out.out


def test_without_the_flag_the_default_format_is_fine(capsys: pytest.CaptureFixture[str]) -> None:
    out = llmperf(capsys, "explain", "--format", "json", "--", *GPT[:-1])
    assert out.code == 0, out.err
