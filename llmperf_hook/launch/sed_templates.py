"""The file a chain of `sed` substitutions writes from a template, worked out without running sed.

Megatron-DeepSpeed's examples_deepspeed scripts (rebase/, MoE/, compression/, curriculum_learning/, data_efficiency/,
bert_with_pile/) write their ds_config from a template in the repository:

    sed "s/GBSIZE/${global_batch_size}/" ${template_json} \\
        | sed "s/MBSIZE/${batch_size}/" \\
        | sed "s/ZERO_STAGE/${zero_stage}/" > ${config_json}

and other scripts edit a copy in place (`cp tmpl.json ds.json; sed -i "s/MBSIZE/2/" ds.json`). Each sed there runs
`s` commands (GNU sed manual 3.3 The `s` Command), line by line: the regular expression is a POSIX basic one (`-E` /
`-r`: extended), the replacement's `&` is the match and `\\1`..`\\9` its groups, flag `g` replaces every match, a
number N the Nth, `I` ignores case. A script with any other command or flag (`y`, `d`, `p`, `w`, -n, ...), or a
regular expression Python's re would read otherwise (alternation, GNU escapes; _regex), is not worked out: the
file stays one the script writes with a command llmperf does not run (batch_script.written_text).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Sequence

_EXPRESSION_OPTIONS = ("-e", "--expression")
_ESCAPES = {"n": "\n", "t": "\t"}
"""GNU sed's `\n` / `\t` in a replacement."""
_BRE_SPECIAL = "+?|{}()"
"""Characters a POSIX basic regular expression takes literally that Python's re does not (GNU: `\\+` etc. are the
operators)."""


@dataclass(frozen=True)
class Substitution:
    """One `s/REGEX/REPLACEMENT/FLAGS` command."""

    pattern: re.Pattern[str]
    replacement: str
    """In Python's re.sub form (`\\g<0>` for `&`)."""
    occurrence: int
    """0: every match (`g`); N: the Nth match only (1 without flags)."""

    def apply(self, line: str) -> str:
        """The line (without its newline) after the substitution, as sed's pattern space."""
        matches = self.matches(line)
        chosen = matches if self.occurrence == 0 else matches[self.occurrence - 1:self.occurrence]
        out, end = [], 0
        for found in chosen:
            out += [line[end:found.start()], found.expand(self.replacement)]
            end = found.end()
        return "".join(out) + line[end:]

    def matches(self, line: str) -> list[re.Match[str]]:
        """The matches sed counts: an empty match right where the previous one ended is none (`s/a*/-/g` on `abc`
        gives `-b-c-`; Python's re.sub, since 3.7, also replaces the empty match after `a`)."""
        found: list[re.Match[str]] = []
        for match in self.pattern.finditer(line):
            if not (found and match.start() == match.end() == found[-1].end()):
                found.append(match)
        return found


def _bracket_end(text: str, i: int) -> int:
    """The index past the bracket expression opening at text[i] (`[^]a]`: a `]` first is one of its characters)."""
    j = i + 1
    j += text[j:j + 1] == "^"
    j += text[j:j + 1] == "]"
    close = text.find("]", j)
    return len(text) + 1 if close < 0 else close + 1


def _regex(text: str, extended: bool) -> str | None:
    """A sed regular expression (its delimiter escapes already removed) in Python's syntax; None for what the two
    read differently and llmperf does not translate: alternation (POSIX takes the longest match, Python the first
    alternative), a backslash in a bracket expression (literal there), and escapes other than the operators, group
    references and \\w \\W \\s \\S \\b \\B \\n \\t (GNU sed's \\d065, \\o101, \\<, \\` mean other things in Python)."""
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "[":
            end = _bracket_end(text, i)
            if end > len(text) or "\\" in text[i:end]:
                return None
            # `[`, `&`, `~`, `|` are literal in a POSIX bracket; Python's re warns of (future) set operators
            out.append("[" + re.sub(r"([\[&~|])", r"\\\1", text[i + 1:end - 1]) + "]")
            i = end
            continue
        if c == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "|" and not extended or nxt.isalnum() and nxt not in "123456789wWsSbBnt" or nxt in "`'<>":
                return None
            out.append(nxt if (nxt in _BRE_SPECIAL and not extended) else "\\" + nxt)
            i += 2
            continue
        if c == "|" and extended:
            return None
        out.append("\\" + c if (c in _BRE_SPECIAL and not extended) or _literal_anchor(text, i, extended) else c)
        i += 1
    return "".join(out)


def _literal_anchor(text: str, i: int, extended: bool) -> bool:
    """In a basic regular expression `^` anchors only at the start (or after `\\(`) and `$` only at the end (or before
    `\\)`); elsewhere each is itself (POSIX 9.3.8): `s/$GBS/64/` replaces the text `$GBS`."""
    if extended or text[i] not in "^$":
        return False
    if text[i] == "^":
        return i > 0 and not text[:i].endswith("\\(")
    return i < len(text) - 1 and not text[i + 1:].startswith("\\)")


def _replacement(text: str) -> str | None:
    """A sed replacement in re.sub's template form: `&` the match, `\\N` a group, `\\n` a newline, `\\c` c; None
    for GNU's case conversions (\\U \\L \\u \\l \\E) and character codes (\\x41 \\o101 \\d65 \\cA)."""
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt.isalpha() and nxt not in _ESCAPES:
                return None
            out.append(f"\\g<{nxt}>" if nxt.isdigit() else _ESCAPES.get(nxt, nxt.replace("\\", "\\\\")))
            i += 2
            continue
        out.append("\\g<0>" if c == "&" else "\\\\" if c == "\\" else c)
        i += 1
    return "".join(out)


def _part(script: str, i: int, delimiter: str) -> tuple[str, int] | None:
    """The text up to the next unescaped `delimiter` from i (a `\\delimiter` is the delimiter itself), and the index
    past it; None when it is not closed."""
    out = []
    while i < len(script):
        c = script[i]
        if c == "\\" and i + 1 < len(script):
            out.append(delimiter if script[i + 1] == delimiter else script[i:i + 2])
            i += 2
            continue
        if c == delimiter:
            return "".join(out), i + 1
        out.append(c)
        i += 1
    return None


def parse_substitutions(script: str, extended: bool = False) -> list[Substitution] | None:
    """The `s` commands of a sed script (separated by `;` or newlines), or None when it holds anything else or sed
    would stop on it (`s/A/1/2/`: "unknown option to `s'")."""
    out: list[Substitution] = []
    i = 0
    while i < len(script):
        if script[i] in " \t\n;":
            i += 1
            continue
        if script[i] != "s" or i + 1 >= len(script) or script[i + 1] in "\\\n" or script[i + 1].isalnum():
            return None
        delimiter = script[i + 1]
        pattern = _part(script, i + 2, delimiter)
        replacement = _part(script, pattern[1], delimiter) if pattern else None
        if pattern is None or replacement is None:
            return None
        flags = re.match(r"[gIi0-9]*", script[replacement[1]:]).group(0)  # type: ignore[union-attr]
        i = replacement[1] + len(flags)
        if i < len(script) and script[i] not in " \t\n;" or flags.count("g") > 1 or re.search(r"\d\D+\d", flags):
            return None
        number = int("".join(c for c in flags if c.isdigit()) or "1")
        if "g" in flags and number > 1 or not pattern[0] or re.search(r"\[[:=.]", pattern[0]):
            return None  # `2g` (the 2nd match on), `s//x/` (the last regex), POSIX classes: not worked out
        regex = _regex(pattern[0], extended)
        try:
            compiled = re.compile(regex or "", re.IGNORECASE if set("Ii") & set(flags) else 0)
        except re.error:
            return None
        template = _replacement(replacement[0])
        if regex is None or template is None or number < 1:
            return None
        out.append(Substitution(compiled, template, 0 if "g" in flags and number == 1 else number))
    return out


@dataclass(frozen=True)
class SedCommand:
    """One `sed [-i] [-E] [-e SCRIPT]... [SCRIPT] [FILE]...`."""

    substitutions: list[Substitution]
    files: list[str]
    in_place: bool
    """-i / --in-place[=SUFFIX]: each FILE is rewritten, nothing goes to the output."""


def _scan(words: Sequence[str]) -> tuple[list[str], list[str], bool, bool, bool]:
    """(scripts, files, in place, extended, only options llmperf follows) of `sed [OPTION]... [SCRIPT] [FILE]...`."""
    scripts: list[str] = []
    operands: list[str] = []
    in_place = extended = False
    known = True
    i = 1
    while i < len(words):
        word = words[i]
        if word in _EXPRESSION_OPTIONS and i + 1 < len(words):
            scripts.append(words[i + 1])
            i += 1
        elif word.startswith("--expression="):
            scripts.append(word.partition("=")[2])
        elif word in ("-E", "-r", "--regexp-extended"):
            extended = True
        elif word == "--in-place" or word.startswith("--in-place=") or re.fullmatch(r"-i\S*", word):
            in_place = True  # GNU sed: -i[SUFFIX] keeps a backup; the file itself is rewritten either way
        elif word.startswith("-") and word != "-":
            known = False  # -n prints nothing, -s / -z change what a line is, -f reads a script file
        else:
            operands.append(word)
        i += 1
    if not scripts and operands:
        scripts.append(operands.pop(0))
    return scripts, operands, in_place, extended, known


def in_place_files(words: Sequence[str]) -> list[str]:
    """The files `sed -i ...` rewrites (whatever its script), [] for a sed that edits none."""
    _, files, in_place, _, _ = _scan(words)
    return files if in_place else []


def parse_sed(words: Sequence[str]) -> SedCommand | None:
    """The sed command `words` runs, or None when it does more than substitutions (-n, -s, -z, other commands)."""
    scripts, files, in_place, extended, known = _scan(words)
    found = [parse_substitutions(script, extended) for script in scripts]
    if not known or not scripts or any(one is None for one in found):
        return None
    return SedCommand([sub for one in found for sub in one or []], files, in_place)


def substitute(substitutions: Sequence[Substitution], text: str) -> str:
    """`text` after the substitutions, applied to each line in order as sed runs its script on the pattern space."""
    lines = []
    for line in text.splitlines(True):
        body, newline = (line[:-1], "\n") if line.endswith("\n") else (line, "")
        for sub in substitutions:
            body = sub.apply(body)
        lines.append(body + newline)
    return "".join(lines)


def sed_output(commands: Sequence[Sequence[str]], read: Callable[[str], str | None]) -> str | None:
    """The text the pipeline `commands` (each the words of a sed command, expanded) writes: the first reads one
    template file (`read` gives its text, None when it cannot be known), each applies its substitutions line by line;
    None when the pipeline is anything else."""
    text: str | None = None
    for k, words in enumerate(commands):
        parsed = parse_sed(words) if words and words[0] == "sed" else None
        if parsed is None or parsed.in_place or len(parsed.files) != (1 if k == 0 else 0):
            return None
        text = read(parsed.files[0]) if k == 0 else text
        if text is None:
            return None
        text = substitute(parsed.substitutions, text)
    return text
