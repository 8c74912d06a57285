"""cpu_engine_cost.Reader: a measuring child's answers are read without ever blocking past the deadline."""

from __future__ import annotations

import time

import pytest

from llmperf_hook.profile.cpu_engine_cost import MARK, ChildFailed, Reader


def _reader(body: str) -> Reader:
    return Reader(f"import sys, time\n{body}", threads=1)


def test_partial_line_then_a_stall_times_out_and_kills_the_child() -> None:
    """select() says readable for the half line; a readline() waited for its newline forever."""
    reader = _reader("sys.stdout.write('half a line'); sys.stdout.flush(); time.sleep(120)")
    t0 = time.monotonic()
    with pytest.raises(ChildFailed, match="no answer within 1 s"):
        reader.receive(timeout_s=1.0)
    assert time.monotonic() - t0 < 10
    assert reader.proc.poll() is not None  # killed, not left stuck
    reader.close()


def test_log_line_and_answer_in_one_write_are_both_read_at_once() -> None:
    """Both lines arrive in one read: the answer must come from our buffer, not wait for more data on the pipe."""
    reader = _reader(f"sys.stdout.write('[INFO] engine built\\n{MARK}[1, 2]\\n'); sys.stdout.flush(); "
                     "time.sleep(120)")
    t0 = time.monotonic()
    assert reader.receive(timeout_s=30.0) == [1, 2]
    assert time.monotonic() - t0 < 10
    reader.proc.kill()
    reader.close()


def test_a_chatty_child_without_an_answer_still_meets_one_deadline() -> None:
    """The timeout is for the answer, not per line: a child logging every 0.2 s never resets it."""
    reader = _reader("while True:\n    print('still working', flush=True); time.sleep(0.2)")
    t0 = time.monotonic()
    with pytest.raises(ChildFailed, match="no answer"):
        reader.receive(timeout_s=1.5)
    assert time.monotonic() - t0 < 10
    reader.close()


def test_answers_split_across_writes_and_an_exit_without_one() -> None:
    reader = _reader(f"for part in ('{MARK}{{\"a\"', ': 1}}\\n{MARK}2\\n'):\n"
                     "    sys.stdout.write(part); sys.stdout.flush(); time.sleep(0.3)\n"
                     "sys.stdout.write('no newline at the end'); sys.exit(3)")
    assert reader.receive(timeout_s=30.0) == {"a": 1}
    assert reader.receive(timeout_s=30.0) == 2
    with pytest.raises(ChildFailed, match="closed its output"):
        reader.receive(timeout_s=30.0)
    reader.close()
    assert reader.proc.returncode == 3


def test_go_and_answer_round_trips() -> None:
    reader = _reader(f"print('{MARK}\"ready\"', flush=True)\n"
                     f"for n, _ in enumerate(sys.stdin):\n    print('{MARK}' + str(n), flush=True)")
    reader.started()
    for expected in range(3):
        reader.send()
        assert reader.receive(timeout_s=30.0) == expected
    reader.close()
    assert reader.proc.returncode == 0
