"""Megatron-DeepSpeed FPDT (--ds-sequence-parallel-fpdt): the chunking its first step refuses exits 2, and the one
warning says what is not priced (frameworks/fpdt.py; deepspeed/sequence/fpdt_layer.py 0.19.8)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.flags import parse_flags
from llmperf_hook.frameworks.fpdt import fpdt_chunks, fpdt_warnings
from llmperf_hook.frameworks.script_flags import SCRIPT_FLAGS
from tests.frameworks.real_scripts.replay import load_cases, replay


def _warnings(*words: str) -> list[str]:
    return fpdt_warnings(parse_flags(["--seq-length", "262144", "--ds-sequence-parallel-size", "4", *words], SCRIPT_FLAGS))


def test_chunks_as_fpdt_runs_them() -> None:
    # 262144 tokens over SP 4 (65536 per rank), C = 65536: 4 attention chunks, MLP chunks of 65536 // 4 // 2 = 8192
    # tokens (8 of them), loss chunks: 65536 // (65536 // 4 // 32) = 128
    assert fpdt_chunks(262144, 4, 65536) == (4, 8, 128)
    assert fpdt_chunks(65536, 1, 65536) == (1, 2, 32)  # loss chunks of 65536 // 32 = 2048 tokens


@pytest.mark.parametrize(("seq", "sp", "chunk", "match"), [
    (32768, 4, 65536, "32768 % 65536 = 32768; FPDT_InputConstruct"),
    (20000, 1, 3000, "20000 % 3000 = 2000; FPDT_InputConstruct"),
    (98304, 4, 65536, "98304 % 65536 = 32768; FPDT_InputConstruct"),  # the review's case: passed before
    (8190, 4, 2730, r"8190 % 4 = 2, 8190 % 2730 = 0"),
    (300, 3, 100, "attention runs 300 // 100 = 3 chunks, which must divide the 100 tokens per rank"),
    (6000, 1, 3000, r"the loss runs 6000 // \(3000 // 1 // 32\) = 64 chunks"),
    (4096, 4, 64, r"the loss runs 1024 // \(64 // 4 // 32\) = 0 chunks"),
])
def test_chunkings_fpdt_refuses_exit_2(seq: int, sp: int, chunk: int, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        fpdt_chunks(seq, sp, chunk)


def test_one_warning_names_what_is_not_priced() -> None:
    [warning] = _warnings("--ds-sequence-parallel-fpdt", "--ds-sequence-parallel-fpdt-offloading")
    assert warning.startswith("--ds-sequence-parallel-fpdt: FPDT's chunked Ulysses (4 attention chunks, 8 MLP and 128 "
                              "loss chunks per layer and micro-batch) priced as one Ulysses pass")
    assert "--ds-sequence-parallel-fpdt-offloading" in warning and "peak memory is overestimated" in warning
    # one attention chunk: FPDT_Attention takes the path without offloading
    [single] = _warnings("--ds-sequence-parallel-fpdt", "--ds-sequence-parallel-fpdt-chunk-size", "262144",
                         "--ds-sequence-parallel-fpdt-offloading")
    assert "(1 attention chunks" in single and "host memory" not in single


def test_chunk_flags_without_fpdt_have_no_effect() -> None:
    assert _warnings("--ds-sequence-parallel-fpdt-chunk-size", "8192") == [
        "--ds-sequence-parallel-fpdt-chunk-size: no effect without --ds-sequence-parallel-fpdt"]
    assert _warnings() == []


def test_the_public_fpdt_script_warns(tmp_path: Path) -> None:
    case = next(c for c in load_cases() if c["name"] == "mds_gpt_6.7b_fpdt_32k")
    result = replay(case, "explain", tmp_path)
    assert result.exit_code == 0 and result.data is not None
    assert sum("--ds-sequence-parallel-fpdt:" in w for w in result.data["warnings"]) == 1
