"""`tune --apply` inside a command string: `srun bash -c "CMD"`, `sh -c "CMD"`, `sbatch --wrap "CMD"`.

CMD is shell text, not words: `python pretrain_gpt.py ... 2>&1 | tee log.txt` or `cd /w && torchrun ...` holds
operators and redirections that the shell reads. The training command is the one simple command of CMD that the
launch parser reads as a launch (launch/parse.py: a CMD of several commands is read as a batch script, its launch
line taken; a newline ends a command, a backslash-newline joins lines); only that command's span of the text is
rewritten, its redirections kept as written, and the rest of CMD stays byte-identical. Rewriting CMD as one list of words quoted `|`, `&&` and `2>&1` into arguments and appended
the tuned flags after `tee log.txt`: explain refused the result, and bash would have run something else.
"""

from __future__ import annotations

import os
import shlex
from typing import Sequence

from llmperf_hook.errors import LlmperfError
from llmperf_hook.launch.shell_script import pipelines, quoted_words, shell_split
from llmperf_hook.launch.shell_script import split_redirections as shell_redirections


def shell_join(words: Sequence[str]) -> str:
    """Join words for `sh -c`, leaving `$VAR` references unquoted so the shell still expands them."""
    return " ".join(w if "$" in w and not any(c.isspace() or c in "'\"" for c in w) else shlex.quote(w) for w in words)


def split_redirections(text: str) -> tuple[list[str], list[str]]:
    """(the words of a simple command without its redirections, the redirections as shell text): `python t.py --a 1
    2>&1 > log` -> (['python', 't.py', '--a', '1'], ['2>&1', '> log']). A quoted word is never a redirection."""
    text = text.replace("\\\n", "")  # a backslash-newline is a line continuation, removed (bash manual 3.1.2.1)
    kept, redirections = shell_redirections(shell_split(text), quoted_words(text))
    return kept, [f"{r.operator} {shlex.quote(r.target)}" if r.target_is_next_word
                  else r.operator + (shlex.quote(r.target) if r.target else "") for r in redirections]


def _is_launch(words: list[str]) -> bool:
    from llmperf_hook.launch.parse import parse_launch

    try:
        parse_launch(list(words), dict(os.environ))
    except LlmperfError:
        return False
    return True


def _lines(cmd: str) -> list[tuple[int, str]]:
    """CMD's lines as bash reads them, each with its offset in CMD: a newline outside quotes ends a command as `;`
    does (bash 3.2.4 Lists); a backslash-newline or a newline in quotes does not; a comment runs to the newline."""
    out: list[tuple[int, str]] = []
    start, quote, i = 0, "", 0
    while i < len(cmd):
        c = cmd[i]
        if quote == "'":
            quote = "" if c == "'" else quote
        elif c == "\\":
            i += 1  # the escaped character, a newline included, is literal
        elif quote == '"':
            quote = "" if c == '"' else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == start or cmd[i - 1] in " \t;&|()"):
            i = cmd.find("\n", i) - 1 if "\n" in cmd[i:] else len(cmd)  # a quote in a comment opens nothing
        elif c == "\n":
            out.append((start, cmd[start:i]))
            start = i + 1
        i += 1
    return [*out, (start, cmd[start:])]


def training_command_span(cmd: str) -> tuple[int, int] | None:
    """(start, end) in `cmd` of its first simple command the launch parser reads as a launch, or None."""
    for offset, line in _lines(cmd):
        pos = 0
        for pipeline in pipelines(line):
            for simple in pipeline:
                start = line.find(simple, pos)
                pos = start + len(simple)
                try:
                    words = split_redirections(simple)[0]
                except ValueError:  # an unclosed quote: not a command the parser reads either
                    continue
                if words and _is_launch(words):
                    return offset + start, offset + pos
    return None


def training_words(cmd: str) -> list[str] | None:
    """The words of CMD's training command without redirections (None when CMD holds no launch the parser reads)."""
    span = training_command_span(cmd)
    return None if span is None else split_redirections(cmd[span[0]:span[1]])[0]


def rewrite_command_string(cmd: str, words: Sequence[str]) -> str:
    """CMD with its training command (training_words) replaced by `words`: blanks around it and its redirections
    kept, the rest of CMD as written."""
    span = training_command_span(cmd)
    assert span is not None, "rewrite_command_string on a CMD without a training command (see training_words)"
    start, end = span
    segment = cmd[start:end]
    redirects = split_redirections(segment)[1]
    lead, trail = segment[:len(segment) - len(segment.lstrip())], segment[len(segment.rstrip()):]
    return cmd[:start] + lead + " ".join([shell_join(words), *redirects]) + trail + cmd[end:]
