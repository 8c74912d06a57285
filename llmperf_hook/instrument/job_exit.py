"""`--stop-after N`: end the job after its N-th optimizer step as an interpreter that finished would, with code 0.

The hook stops the job from inside the step (DeepSpeed's engine.step, a torch optimizer's step, Megatron's
train_step), so the rest of the script never runs. It leaves with os._exit rather than SystemExit: SystemExit
would unwind through the framework's and the user's code (a bare `except:` or a retry loop catches it; a
`finally:` could start more work), and the interpreter's own shutdown then joins every non-daemon thread
(a prefetcher can hold it forever) and destroys the process group and DDP's reducer in whatever order the
garbage collector picks (with gloo, torch 2.13 aborted about one exit in three when the group went first:
tests/instrument/test_torchrun_job.py). But os._exit alone skips what a finished
Python still does on its way out (Python docs, sys.exit / atexit / io): the atexit callbacks (logging.shutdown
flushes the job's log handlers; multiprocessing ends its daemon workers; the user's own) and the flush of every
buffered file object still open (a `log = open(...)` written with print(file=log) kept up to 8 KiB in memory,
lost). Both are done here, then os._exit: the job's files are complete, and its exit code is 0.

The callbacks get ATEXIT_WAIT_S, not forever: some wait on work that the rest of the script would have ended.
multiprocessing's own callback joins every non-daemon child process (multiprocessing/util.py, _exit_function),
and megatron-core 0.16.1's persistent async-checkpoint worker is one, ended only by the finalize call at the end
of train() (megatron/core/dist_checkpointing/strategies/async_utils.py, PersistentAsyncCaller: a non-daemon
'spawn' Process looping on its queue; later Megatron-LM marks it daemon): stopped inside train_step, a job with
such a worker waited at exit forever (a torch job with one: tests/instrument/test_stop_after_exit.py).
"""

from __future__ import annotations

import _io
import atexit
import gc
import os
import sys
import threading

ATEXIT_WAIT_S = 30.0
"""How long the job's atexit callbacks may run after the stop. What they normally do takes milliseconds
(logging.shutdown flushes its handlers, multiprocessing terminates its daemon workers); one still running after
this waits on something the stopped script would have ended, and would hold every rank of the job forever."""


def exit_like_a_finished_job(code: int = 0, atexit_wait_s: float = ATEXIT_WAIT_S) -> None:
    """Run the atexit callbacks (for atexit_wait_s at most), flush every open writable file object, then
    os._exit(code); never returns."""
    watchdog = threading.Timer(atexit_wait_s, _leave_without_the_callbacks, (code, atexit_wait_s))
    watchdog.daemon = True  # a thread: a callback blocked in a join or a lock wait releases the GIL to it
    watchdog.start()
    try:
        atexit._run_exitfuncs()  # each callback's exception is printed and passed over, as at a normal exit
    except BaseException:  # noqa: BLE001 - a KeyboardInterrupt while they ran: still flush and leave
        pass
    flush_open_files()
    os._exit(code)


def _leave_without_the_callbacks(code: int, atexit_wait_s: float) -> None:
    try:  # os.write, not sys.stderr: the blocked main thread may hold the stream's lock
        os.write(2, f"llmperf hook: --stop-after: the job's atexit callbacks were still running {atexit_wait_s:g} s "
                    f"after the stop (waiting for a non-daemon worker process or thread that the rest of the script "
                    f"would have ended); the job leaves without them, exit code {code}.\n".encode())
    except OSError:  # stderr closed: leave all the same
        pass
    flush_open_files()
    os._exit(code)


def flush_open_files() -> int:
    """Flush every open, writable io object of this process (what the interpreter's teardown does when it
    finalizes them); the number flushed. A stream that cannot flush (a closed pipe, a full disk) is passed over."""
    flushed = 0
    # by the object's type: isinstance() also asks the object its __class__, and a deprecated alias's (torch's
    # distributed.reduce_op) answers with a FutureWarning on the job's stderr. Every io object, the C ones and
    # io.IOBase's Python subclasses (gzip.GzipFile...), derives from _io._IOBase.
    found = (o for o in gc.get_objects() if issubclass(type(o), _io._IOBase))
    for stream in [sys.stdout, sys.stderr, *found]:
        try:
            if stream is not None and not stream.closed and stream.writable():
                stream.flush()
                flushed += 1
        except Exception:  # noqa: BLE001 - ValueError (detached), OSError (EPIPE, ENOSPC): nothing more to do
            pass
    return flushed
