"""--stop-after N ends the job as a finished Python would: exit code 0, its open files flushed, its atexit run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from instrument_helpers import read_records, run_session, steps_by_rank

JOB = """
import atexit, logging, sys, torch
torch.set_num_threads(1)
log = open("train.log", "w")  # buffered: nothing reaches the file before 8 KiB or a flush
logging.basicConfig(filename="logging.log", level=logging.INFO)
model = torch.nn.Linear(8, 8)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
def at_exit():
    opt.step()  # a clean-up that steps once more: no second stop from inside the first one's atexit
    open("atexit.txt", "a").write("ran\\n")
atexit.register(at_exit)
for step in range(50):
    model(torch.randn(4, 8)).sum().backward()
    opt.step()
    opt.zero_grad()
    print("step", step, file=log)
    logging.info("step %d", step)
    print("iter", step)
"""


def test_stop_after_flushes_the_jobs_files_and_runs_its_atexit(tmp_path: Path, child_env: dict[str, str]) -> None:
    """Stopped inside its 4th optimizer step: the three steps it finished are in its log file (os._exit alone lost
    the whole buffer), its atexit callback ran, and stdout (a pipe, so block-buffered) holds its three lines."""
    script = tmp_path / "job.py"
    script.write_text(JOB)
    done = run_session(tmp_path, child_env, [sys.executable, str(script)], steps=2, stop_after=4)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n").count("iter 2") == 1 and "iter 3" not in done.stdout
    assert (tmp_path / "train.log").read_text() == "step 0\nstep 1\nstep 2\n"
    assert (tmp_path / "logging.log").read_text().count("INFO:root:step") == 3
    assert (tmp_path / "atexit.txt").read_text() == "ran\n" and "Traceback" not in done.stderr, done.stderr
    records = read_records(tmp_path / "run")
    assert steps_by_rank(records) == {0: [0, 1]}
    assert [r["num_steps"] for r in records if r["kind"] == "stop"] == [4]


def test_exit_like_a_finished_job_flushes_every_open_writer(tmp_path: Path) -> None:
    """Every open writer flushed, the atexit callbacks run; and nothing else said: looking for the open files asked a
    deprecated torch alias its class, which printed a FutureWarning into the job's stderr (seen on an H100 job)."""
    code = (f"import atexit, os, torch.distributed\nfrom llmperf_hook.instrument.job_exit import exit_like_a_finished_job\n"
            f"a = open({str(tmp_path / 'a.txt')!r}, 'w'); a.write('text')\n"
            f"b = open({str(tmp_path / 'b.bin')!r}, 'wb'); b.write(b'bytes')\n"
            f"r = open({str(tmp_path / 'a.txt')!r}); c = open({str(tmp_path / 'c.txt')!r}, 'w'); c.close()\n"
            "atexit.register(lambda: print('atexit ran'))\n"
            "atexit.register(lambda: 1 / 0)  # printed and passed over, as at a normal exit\n"
            "exit_like_a_finished_job(0)\nprint('not reached')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == "atexit ran\n", done
    assert "ZeroDivisionError" in done.stderr and "Warning" not in done.stderr, done.stderr
    assert (tmp_path / "a.txt").read_text() == "text" and (tmp_path / "b.bin").read_bytes() == b"bytes"


def test_an_atexit_callback_that_never_returns_does_not_hold_the_job(tmp_path: Path) -> None:
    """A non-daemon worker process the stopped script would have ended (megatron-core 0.16.1's persistent
    async-checkpoint caller): multiprocessing's atexit callback joins it forever. After atexit_wait_s the job still
    leaves with code 0, its file flushed, the callbacks registered after it run, one line on stderr. Before: a hang
    (the subprocess timeout)."""
    code = ("import atexit, multiprocessing as mp, os, time\n"
            "from llmperf_hook.instrument.job_exit import exit_like_a_finished_job\n"
            "def worker(parent):\n"
            "    while os.getppid() == parent: time.sleep(0.05)  # until its parent is gone (the test's clean-up)\n"
            "if __name__ == '__main__':\n"
            "    mp.get_context('fork').Process(target=worker, args=(os.getpid(),)).start()\n"
            f"    log = open({str(tmp_path / 'log.txt')!r}, 'w'); log.write('kept')\n"
            "    atexit.register(lambda: print('atexit ran'))  # LIFO: before multiprocessing's join\n"
            "    exit_like_a_finished_job(0, atexit_wait_s=2.0)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == "atexit ran\n", done
    assert done.stderr.count("llmperf hook: --stop-after: the job's atexit callbacks were still running 2 s") == 1
    assert "Traceback" not in done.stderr and (tmp_path / "log.txt").read_text() == "kept"
