"""The file a chain of `sed` substitutions writes from a template, worked out without running sed.

Megatron-DeepSpeed's examples_deepspeed scripts (rebase/, MoE/, compression/, curriculum_learning/, data_efficiency/,
bert_with_pile/) write their ds_config from a template in the repository:

    sed "s/GBSIZE/${global_batch_size}/" ${template_json} \\
        | sed "s/MBSIZE/${batch_size}/" \\
        | sed "s/ZERO_STAGE/${zero_stage}/" > ${config_json}

Each sed there substitutes a literal word of the template (GNU sed manual 3.3 The `s` Command: without `g` the first
match on each line, with `g` every match); a word of letters, digits and `_` matches itself as a basic regular
expression, and a replacement without `&` or `\\` is inserted as written. A chain that does anything else (another
sed command, an option such as -i, -n or -E, a regular expression) is not worked out: the file stays one the script
writes with a command llmperf does not run (batch_script.written_text).
"""

from __future__ import annotations

import re
from typing import Callable, Sequence

_SUBSTITUTION = re.compile(r"s([^\w\s\\])(\w+)\1([^&\\]*?)\1(g?)")
"""`s/WORD/TEXT/` or `s/WORD/TEXT/g` (any delimiter that is not a letter, digit, blank or backslash)."""
_EXPRESSION_OPTIONS = ("-e", "--expression")


def _substitutions(script: str) -> list[tuple[str, str, bool]] | None:
    """(word, replacement, every match) of each `;`-separated command of a sed script, or None when one is not a
    literal substitution."""
    out = []
    for part in (piece.strip() for piece in script.split(";")):
        found = _SUBSTITUTION.fullmatch(part)
        if found is None or found.group(1) in found.group(3):  # `s/A/1/2/`: sed stops, "unknown option to `s'"
            return None
        out.append((found.group(2), found.group(3), found.group(4) == "g"))
    return out


def _sed_command(words: Sequence[str]) -> tuple[list[tuple[str, str, bool]], list[str]] | None:
    """(substitutions, input files) of one `sed [-e SCRIPT]... [SCRIPT] [FILE]...`, or None when it does more."""
    scripts: list[str] = []
    operands: list[str] = []
    i = 1
    while i < len(words):
        word = words[i]
        if word in _EXPRESSION_OPTIONS and i + 1 < len(words):
            scripts.append(words[i + 1])
            i += 2
            continue
        if word.startswith("--expression="):
            scripts.append(word.partition("=")[2])
        elif word.startswith("-"):
            return None  # -i edits in place, -n prints nothing, -E / -r change the regular expressions
        else:
            operands.append(word)
        i += 1
    if not scripts and operands:
        scripts.append(operands.pop(0))
    found = [_substitutions(script) for script in scripts]
    if not scripts or any(one is None for one in found):
        return None
    return [sub for one in found for sub in one or []], operands


def sed_output(commands: Sequence[Sequence[str]], read: Callable[[str], str | None]) -> str | None:
    """The text the pipeline `commands` (each the words of a sed command, expanded) writes: the first reads one
    template file (`read` gives its text, None when it cannot be known), each applies its substitutions line by line;
    None when the pipeline is anything else."""
    text: str | None = None
    for k, words in enumerate(commands):
        parsed = _sed_command(words) if words and words[0] == "sed" else None
        if parsed is None or len(parsed[1]) != (1 if k == 0 else 0):
            return None
        substitutions, files = parsed
        text = read(files[0]) if k == 0 else text
        if text is None:
            return None
        for word, replacement, every in substitutions:
            text = "".join(line.replace(word, replacement, -1 if every else 1) for line in text.splitlines(True))
    return text
