"""llmperf's own standard input, when the command it is given reads its script from there.

`llmperf predict -- sbatch <<EOF` ... `EOF` (or `sbatch < job.sh`, `cat train.sh | llmperf predict -- bash -s`): the
shell gives the here-document to llmperf's standard input, where sbatch (slurm.schedmd.com/sbatch.html: "If no file
name is specified, sbatch will read in a script from standard input") or `bash -s` would read it. It is read once,
and put back where the command `llmperf run` then starts will read it.
"""

from __future__ import annotations

import functools
import os
import sys
import tempfile


@functools.lru_cache(maxsize=1)
def read_standard_input() -> str | None:
    """The whole of llmperf's standard input, read once; None when it is a terminal (a person, not a script, would
    have to type the script) or cannot be read."""
    try:
        if sys.stdin is None or sys.stdin.isatty():
            return None
        text = sys.stdin.read()
    except (OSError, ValueError):
        return None
    _put_back(text)
    return text


def _put_back(text: str) -> None:
    """File descriptor 0 replaced by a file holding `text` from its start: the command `llmperf run` execs (or starts
    under the hook) inherits it and reads the same script, which it would otherwise find already read. A pipe could
    not hold more than its buffer before its reader starts; a temporary file holds any size. Nothing when standard
    input is not file descriptor 0 (a test's stand-in) or holds nothing."""
    try:
        if not text or sys.stdin is None or sys.stdin.fileno() != 0:
            return
    except (OSError, ValueError):
        return
    with tempfile.TemporaryFile() as held:
        held.write(text.encode())
        held.seek(0)
        os.dup2(held.fileno(), 0)
