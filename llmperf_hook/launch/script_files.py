"""The files a launch script writes before its launch line, as the job reads them (ParsedJob.script_files).

A here-document's text is known without running anything (`cat > ds.json <<EOF`); a file a command writes (`sed ...
> ds.json` that launch/sed_templates.py cannot work out, `scontrol ... > hostfile`) is read from disk when an
earlier run left it there, and refused naming that command otherwise.
"""

from __future__ import annotations

import os
import re
from typing import Mapping

from llmperf_hook.errors import UsageError
from llmperf_hook.launch.parsed_job import ScriptFile
from llmperf_hook.launch.shell_script import restore_dollars


def written_text(path: str, written: ScriptFile) -> str:
    """The text of a file the script writes (a here-document), read from `path` by the job; refused while it still
    holds what only running the script would give. A file a command writes (`sed ... > FILE`) is read from disk
    when it is there (an earlier run wrote it), else refused naming that command."""
    if written.command:
        try:
            with open(path, encoding="utf-8") as handle:
                return handle.read()
        except OSError:
            raise UsageError(f"{path} does not exist: the script writes it at {written.origin} with `{written.command}`, "
                             "a command llmperf does not run (it reads scripts, never executes them). Run the script "
                             "once so the file exists (or write it yourself), then predict again from that folder.") \
                from None
    unresolved = sorted(set(re.findall(r"\$\{?([A-Za-z_]\w*)", written.text)))
    if unresolved or "$(" in written.text or "`" in written.text:
        what = ", ".join(f"${name}" for name in unresolved) or "a command substitution"
        raise UsageError(f"{path} is written by {written.origin} with {what}, which llmperf cannot evaluate without "
                         "running the script (a variable the script does not set, or a command). Set the variable in "
                         "llmperf's environment, or write the file yourself and give its path.")
    return written.text


def script_file_text(path: str, files: Mapping[str, ScriptFile]) -> str | None:
    """The text the job reads at `path` when the launch script writes that file before its launch line (`cat >
    hostfile <<EOF`, an accelerate config file; written_text), None when it does not: the file on disk is read."""
    written = files.get(os.path.normpath(path))
    return None if written is None else restore_dollars(written_text(path, written))
