"""A batch script read, not run: its variables in order, the files its here-documents write, and its one launch line.

What bash would do is followed only where it has no effect outside the script: `NAME=value` / `export NAME=value`
(multi-line quoted values included) set variables; `cd DIR` and `` `pwd` `` / `$(pwd)` name the folder; `cat <<EOT >
FILE` writes FILE with the script's variables expanded (the ds_config of bigscience's .slurm scripts); `clear;`, `echo`,
`set -x` and other commands beside the launch are skipped, and a launch piped into `tee` (or redirected) is the launch.
Other command substitutions (`$(scontrol ...)`) leave their variable unset; nothing is executed. `eval "$CMD"` /
`eval $LAUNCHER $ARGS` (Megatron-DeepSpeed's examples: `run_cmd="deepspeed ... 2>&1 | tee log"`, `eval ${run_cmd}`)
is read as bash reads it: its words expanded from the script's variables, joined by blanks and read again as a line;
an eval of a command substitution or of a variable the script does not set plainly is refused, naming the line.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from typing import Sequence

from llmperf_hook.errors import UsageError
from llmperf_hook.launch.launch_line import LAUNCH_HEADS, PY_SCRIPT, command_head, is_launch
from llmperf_hook.launch.parsed_job import ScriptFile
from llmperf_hook.launch.posix_shell import bash_only, refuse_bash_only
from llmperf_hook.launch.shell_arithmetic import ARITH, arithmetic as _arithmetic
from llmperf_hook.launch.shell_functions import Definition, definition
from llmperf_hook.launch.shell_positional import (bind_locals, expand_positional, leave_function, positional_table,
                                                  run_builtin)
from llmperf_hook.launch.shell_conditions import Conditions, condition_expander, decide_test, quote_arm_patterns
from llmperf_hook.launch.shell_script import (ARRAY_ASSIGN, ScriptLine, logical_lines, pipelines, protect_literal_dollars,
                                              quoted_words, restore_dollars, shell_split, split_unquoted_words,
                                              strip_redirections, word_quoting)
from llmperf_hook.launch.shell_variables import APPEND, ASSIGN, NAME_BEFORE_QUOTE, PWD, ShellVariables

_ANSI_C = re.compile(r"(?<![\\$])\$'((?:[^'\\]|\\.)*)'")
"""`$'...'`: bash's ANSI-C quoting (3.1.2.4), the backslash escapes decoded."""
_ANSI_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f",
                 "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"}


def _ansi_c(found: re.Match[str]) -> str:
    """A `$'...'` word part as a single-quoted shell word (its simple escapes decoded; a numeric one left as written)."""
    body = re.sub(r"\\(.)", lambda m: _ANSI_ESCAPES.get(m.group(1), m.group(0)), found.group(1))
    return shlex.quote(body)


_VAR_WORD = re.compile(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?")
"""A word that is one unquoted variable reference, which bash splits at blanks once expanded."""
_UNSET_REF = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")


@dataclass(frozen=True)
class _Run:
    """A launch line, `sbatch` submission or single `python` run the script reaches."""

    number: int
    words: list[str]
    env: dict[str, str]
    """The variables where it runs, for normalise_argv: reading goes on past a submission or single run, and a later
    `N=4` (`N=2; sbatch -N "$N" job.sh; N=4`) does not reach it."""
    refs: dict[str, str]
    """The variables its unquoted words were split from (counted as used when it is the launch)."""


@dataclass(kw_only=True)
class _Reading(ShellVariables):
    """The state of one pass over the script (local to read_batch_script)."""

    path: str
    launches: list[_Run] = field(default_factory=list)
    submissions: list[_Run] = field(default_factory=list)
    """`sbatch ...` lines (record_launch)."""
    singles: list[_Run] = field(default_factory=list)
    files: dict[str, ScriptFile] = field(default_factory=dict)
    unsplit: list[int] = field(default_factory=list)
    unevaluated: list[str] = field(default_factory=list)
    """`eval` lines whose text only running the script would give (line number and why), for the refusal."""
    kind: str = "sbatch script"
    """What the script is, for messages: "sbatch script", or "shell script" for `bash train.sh`."""
    conditions: Conditions = field(default_factory=Conditions)
    """The open `if` blocks (launch/shell_conditions.py)."""
    shell: tuple[str, str] = ("bash", "")
    """The shell that runs the script and what said so (posix_shell.script_shell): dash refuses bash-only commands."""
    functions: dict[str, Definition] = field(default_factory=dict)
    """The functions the script has defined so far, by name."""
    calling: set[str] = field(default_factory=set)
    """The functions being read at a call (a call of one of them from its own body is not followed)."""
    sourcing: set[str] = field(default_factory=set)
    """Files being read by `.` / `source` (one that sources itself is not followed again)."""

    def test(self, source: str, words: list[str], tested: list[str]) -> bool | None:
        """The truth of the test `tested`, the last words of the command `words` split from `source`."""
        quoting = word_quoting(source)  # a redirection dropped or a head split: which words were quoted is unknown
        unquoted = quoting[len(quoting) - len(tested):] if len(quoting) == len(words) else [None] * len(tested)
        return decide_test(tested, condition_expander(self.undecidable, self.expand), unquoted)

    def read(self, lines: Sequence[ScriptLine]) -> None:
        """Read `lines` in order; a function definition is kept (launch/shell_functions.py) and read where called."""
        i = 0
        while i < len(lines):
            line = lines[i]
            if self.shell[0] == "dash" and not self.launches:  # a syntax error where dash reads the line, run or not
                self.refuse_bash_only(line, line.text, False)
            defined = definition(lines, i) if not self.launches and self.conditions.running() else None
            if defined is not None:
                self.functions[defined.name] = defined
                i = defined.end
                continue
            i += 1
            if ARRAY_ASSIGN.match(line.text) and not self.launches and self.conditions.running() and \
                    self.assign_array(line.text):
                continue
            text = quote_arm_patterns(line.text) if self.conditions.in_case() or "case" in line.text else line.text
            if text.strip() and not text.lstrip().startswith("#"):
                for pipeline in pipelines(text):
                    for command in pipeline:
                        self.command(line, command)

    def call(self, defined: Definition, args: list[str]) -> None:
        """A call of a function the script defined: its body read with the call's words as $1 ... "$@"."""
        if defined.name in self.calling:  # recursion: llmperf reads, it cannot tell where it ends
            return
        saved, self.positional = self.positional, positional_table(self.positional["0"], args)
        self.calling.add(defined.name)
        self.frames.append({})
        try:
            self.read(defined.body)
        finally:
            leave_function(self)
            self.positional = saved
            self.calling.discard(defined.name)

    def command(self, line: ScriptLine, text: str) -> None:
        if "$'" in text and self.shell[0] == "bash":
            text = _ANSI_C.sub(_ansi_c, text)
        text = protect_literal_dollars(text)
        text = NAME_BEFORE_QUOTE.sub(r"${\1}", text)
        if self.arrays:
            text = self.expand_arrays(text)
        if "$#" in text or "${#}" in text:  # shlex would read the `#` of `$#` / `${#}` as a comment
            text = text.replace("${#}", self.positional["#"]).replace("$#", self.positional["#"])
        if "$((" in text:  # bash expands arithmetic when it reaches the command; `N=$(( 4 * 2 ))` is one word
            text = ARITH.sub(lambda m: _arithmetic(self.expand(m.group(1)), self.env), text)
        self.split_refs.clear()
        source = split_unquoted_words(PWD.sub(self.cwd, text), self.word_value, self.args())
        try:
            words, writes = strip_redirections(shell_split(source), quoted_words(source))
        except ValueError:
            if any(head in text for head in LAUNCH_HEADS):
                self.unsplit.append(line.number)
            return
        if words and _VAR_WORD.fullmatch(words[0]) and text.lstrip().startswith(words[0]):
            words = [*self.expand(words[0]).split(), *words[1:]]  # `$VENV_PREFIX python ...`: bash splits it
        running = self.conditions.running()
        stepped = self.conditions.step(words, lambda tested: self.test(source, words, tested),
                                       condition_expander(self.undecidable, self.expand))
        if self.shell[0] == "dash" and not self.launches:
            self.refuse_bash_only(line, text, bool(stepped) or (running and self.conditions.reading()))
        if stepped is not words:  # an `if` keyword consumed, or a branch that does not run
            words, text = stepped, shlex.join(stepped)
        assigned = (ASSIGN.match(words[-1]) or APPEND.match(words[-1])) if words else None
        if words and self.conditions.uncertain() and len(words) <= 2 and assigned:
            name = assigned.group(1)
            self.env.pop(name, None)  # a loop or case body: its value is not known without running it
            self.undecidable.add(name)
            return
        if not words or self.launches:  # what follows the launch line does not change it
            if words and is_launch(words, text):
                self.record_launch(line, words)
            return
        if self.assign(words) or run_builtin(self, line, words):  # shift, set --, local, `: ${X:=v}`
            return
        if words[0] in self.functions:
            self.call(self.functions[words[0]], [self.expand(word) for word in words[1:]])
            return
        if words[0] == "eval":
            self.evaluate(line, text, words[1:])
            return
        if words[0] in (".", "source") and len(words) > 1:
            self.source(self.expand(words[1]))
            return
        if words[0] == "cd" and len(words) == 2:
            self.cwd = os.path.join(self.cwd, self.expand(words[1]))
        elif words[0] == "cat" and line.heredoc is not None and writes:
            body = self.expand(line.heredoc.body) if line.heredoc.expand else line.heredoc.body
            origin = f"{self.path} line {line.heredoc.first_line} (the here-document of `{line.text.strip()[:60]}`)"
            self.files[os.path.normpath(self.expand(writes[-1]))] = ScriptFile(body, origin)
        elif is_launch(words, text):
            self.record_launch(line, words)
        elif PY_SCRIPT.match(text.strip()):
            self.singles.append(self.run(line, words))
        elif writes:  # `sed ... > ds_config.json`: written by a command llmperf does not run
            for target in writes:
                origin = f"{self.path} line {line.number}"
                self.files.setdefault(os.path.normpath(self.expand(target)),
                                      ScriptFile("", origin, command=" ".join(words)[:80]))

    def source(self, name: str) -> None:
        """`. FILE` / `source FILE`: the shell reads FILE's commands there, in its own environment (bash manual 4.1
        `.`), so FILE's variables and launch line are the script's. A file that is not there is passed over (bash
        reports it and goes on; POSIX sh stops, which leaves no launch either)."""
        path = os.path.normpath(os.path.join(self.cwd, name))
        if path in self.sourcing or not os.path.isfile(path):
            return
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
        self.sourcing.add(path)
        try:
            self.read(logical_lines(text))
        finally:
            self.sourcing.discard(path)

    def refuse_bash_only(self, line: ScriptLine, text: str, runs: bool) -> None:
        """Under dash, a command that runs (or a test dash evaluates) holding a bash-only construct is refused."""
        found = bash_only(text, runs)
        if found is not None:
            raise refuse_bash_only(self.kind, self.path, self.shell[1], line.number, line.text, found)

    def evaluate(self, line: ScriptLine, text: str, args: list[str]) -> None:
        """`eval ARGS`: bash expands ARGS, joins them with blanks and reads the result as a command line (bash manual
        4.1 Bourne Shell Builtins, eval), so a launch held in a variable is read from the variable, never run."""
        expanded = restore_dollars(" ".join(self.expand(arg) for arg in args))  # eval reads a quoted `$` again
        unset = sorted(set(_UNSET_REF.findall(expanded)))
        if "$(" in text or "`" in text or "$(" in expanded or "`" in expanded:
            self.unevaluated.append(f"line {line.number} evals a command substitution")
            return
        if unset and not any(head in expanded for head in LAUNCH_HEADS) and not PY_SCRIPT.search(expanded):
            names = ", ".join(f"${name}" for name in unset)
            self.unevaluated.append(f"line {line.number} evals {names}, which the script does not set with a plain "
                                    "NAME=value line before it")
            return
        evaluated = ScriptLine(line.number, expanded)
        for pipeline in pipelines(expanded):
            for command in pipeline:
                self.command(evaluated, command)

    def positioned(self, words: list[str]) -> list[str]:
        """`words` with $1 ... as they are where the line runs (inside a function: the call's words, and its locals)."""
        return [bind_locals(self, expand_positional(word, self.positional)) for word in words]

    def run(self, line: ScriptLine, words: list[str]) -> _Run:
        return _Run(line.number, self.positioned(words), dict(self.env), dict(self.split_refs))

    def record_launch(self, line: ScriptLine, words: list[str]) -> None:
        """A launch line. An `sbatch` line is the launch only of a script with no other (a batch script that submits
        its successor, `sbatch --dependency=afterany:$SLURM_JOB_ID next.sh`, launches its own srun line)."""
        if command_head(words) == "sbatch":
            self.submissions.append(self.run(line, words))
            return
        self.launches.append(self.run(line, words))

    def launch(self) -> list[str]:
        found = self.launches or self.submissions or self.singles  # a `python train.py` line runs once, on node 1
        if len(found) == 1:
            self.env.clear()
            self.env.update(found[0].env)
            self.used.update(found[0].refs)
            return found[0].words
        listed = "; ".join(f"line {run.number}: {' '.join(run.words)[:80]}" for run in found[:4])
        what = f"{len(found)} launch lines ({listed})" if found else "no launch line (srun, torchrun, deepspeed, " \
            "accelerate launch, mpirun or python -m torch.distributed.run)"
        unsplit = f"; line(s) {', '.join(map(str, self.unsplit))} could not be read as shell words (an unclosed quote?)" \
            if self.unsplit and not found else ""
        if self.unevaluated and not found:
            unsplit += (f"; {'; '.join(self.unevaluated)} (llmperf reads a script's variables and never runs its "
                        "commands, so it cannot know what that eval runs)")
        raise UsageError(f"{self.kind} {self.path} has {what}{unsplit}; llmperf predicts one training launch. Give "
                         "that line after `--` (e.g. `llmperf predict --nnodes N -- srun ... python pretrain_gpt.py ...`).")


def read_batch_script(lines: Sequence[ScriptLine], env: dict[str, str], used: dict[str, str],
                      path: str, kind: str = "sbatch script", args: Sequence[str] = (),
                      shell: tuple[str, str] = ("bash", "")) -> tuple[list[str], dict[str, ScriptFile]]:
    """The words of the script's one launch line and the files it writes before it, from its logical lines
    (shell_script.logical_lines); `env` gains its variables; `args` are the script's own arguments ($1 ...);
    `shell` is posix_shell.script_shell's answer: under dash a bash-only construct before the launch is refused."""
    reading = _Reading(env=env, used=used, path=path, kind=kind, positional=positional_table(path, args), shell=shell)
    reading.read(lines)
    return reading.launch(), reading.files


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
