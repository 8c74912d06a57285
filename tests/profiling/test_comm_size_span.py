"""`llmperf profile --comm --min-bytes A --max-bytes B` with sizes too close to give a latency and a bandwidth.

Before the check, 2 gloo ranks timed every collective at 4096 bytes only (or 4096-4100) and the fit stored a latency
of 0 us and a bandwidth of 0.011-0.012 GB/s (into the comm model and the new cluster YAML), where the same pair
measured over 4 KiB-1 MiB fitted 375 us and 1.5 GB/s, and over 4-8 KiB 320 us and 2.0 GB/s: every later
`--cluster NAME` prediction priced its gradient all-reduce ~140x too slow."""

from __future__ import annotations

import pytest

from llmperf_hook.errors import UsageError
from llmperf_hook.profile import comm_sampler
from llmperf_hook.profile.comm_sampler import CommRequest, check_message_sizes


@pytest.mark.parametrize("min_b,max_b", [(4096, 4096), (4096, 4100), (2**20, 2**21 - 1)])
def test_sizes_within_a_doubling_are_refused(min_b: int, max_b: int) -> None:
    with pytest.raises(UsageError, match="span less than a doubling.*at least 2 x --min-bytes"):
        check_message_sizes(CommRequest("c", min_bytes=min_b, max_bytes=max_b), 2, 64 << 30)


def test_two_sizes_are_accepted() -> None:
    check_message_sizes(CommRequest("c", min_bytes=4096, max_bytes=8192), 2, 64 << 30)


def test_refused_before_a_rank_waits_for_the_other(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    with pytest.raises(UsageError, match="less than a doubling"):  # not a hang in init_process_group
        comm_sampler.run_comm_profile(CommRequest("c", min_bytes=4096, max_bytes=4096))
