"""`llmperf profile --comm --min-bytes B --max-bytes B`: one message size cannot give a latency and a bandwidth.

Before the check, 2 gloo ranks timed every collective at 4096 bytes only and the fit stored a latency of 0 us and a
bandwidth of 0.011 GB/s (into the comm model and the new cluster YAML), where the same pair measured over 4 KiB-1 MiB
fitted 375 us and 1.5 GB/s: every later `--cluster NAME` prediction priced its gradient all-reduce ~140x too slow."""

from __future__ import annotations

import pytest

from llmperf_hook.errors import UsageError
from llmperf_hook.profile import comm_sampler
from llmperf_hook.profile.comm_sampler import CommRequest, check_message_sizes


@pytest.mark.parametrize("size", [4096, 2**20])
def test_one_message_size_is_refused(size: int) -> None:
    with pytest.raises(UsageError, match="cannot separate latency from bandwidth at one size"):
        check_message_sizes(CommRequest("c", min_bytes=size, max_bytes=size), 2, 64 << 30)


def test_two_sizes_are_accepted() -> None:
    check_message_sizes(CommRequest("c", min_bytes=4096, max_bytes=8192), 2, 64 << 30)


def test_refused_before_a_rank_waits_for_the_other(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    with pytest.raises(UsageError, match="one message size"):  # not a hang in init_process_group
        comm_sampler.run_comm_profile(CommRequest("c", min_bytes=4096, max_bytes=4096))
