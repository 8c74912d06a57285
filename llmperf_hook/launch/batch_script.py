"""A batch script read, not run: its variables in order, the files its here-documents write, and its one launch line.

What bash would do is followed only where it has no effect outside the script: `NAME=value` / `export NAME=value`
(multi-line quoted values included) set variables (launch/shell_variables.py, which also keeps which are exported:
only those reach the command the launch line starts); `cd DIR` and `` `pwd` `` / `$(pwd)` name the folder; `cat <<EOT
> FILE` (or `tee FILE <<EOT`) writes FILE with the here-document's text as bash gives it (the ds_config of
bigscience's .slurm scripts); `clear;`, `echo`, `set -x` and other commands beside the launch are skipped, and a
launch piped into `tee` (or redirected) is the launch. A launch is also `sbatch <<EOF` (its here-document is the
batch script), and a shell that runs one: `bash -c "$LAUNCHER train.py"`, `bash <<EOF`, `bash run.sh ARGS` whose
script launches (launch/launch_line.py). Other command substitutions (`$(scontrol ...)`) leave their variable unset;
nothing is executed. `eval "$CMD"` / `eval $LAUNCHER $ARGS` (Megatron-DeepSpeed's examples: `run_cmd="deepspeed ...
2>&1 | tee log"`, `eval ${run_cmd}`) is read as bash reads it: its words expanded from the script's variables, joined
by blanks and read again as a line (launch/shell_eval.py); an eval of a command substitution or of a variable the
script does not set plainly is refused, naming the line. A `for NAME in WORDS` loop whose words llmperf knows is read
once per word (launch/shell_loops.py), up to a `break` (launch/shell_blocks.py, which also reads functions where they
are called); a launch in its body is a sweep, priced at its first pass with a warning.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass, field
from typing import Callable, Sequence

from llmperf_hook.errors import UsageError
from llmperf_hook.launch.argv_words import expand_env_refs
from llmperf_hook.launch.launch_line import (LAUNCH_HEADS, PY_SCRIPT, SHELLS, apply_prefixes, command_head, is_launch,
                                             python_code_step, script_file, shell_commands)
from llmperf_hook.launch.parsed_job import ScriptFile
from llmperf_hook.launch.script_launch import ScriptLaunch, ScriptRun
from llmperf_hook.launch.script_stops import (bare_names, exit_refusal, stop_on_nounset, stop_on_unset,
                                             stop_on_unset_element)
from llmperf_hook.launch.posix_shell import bash_only, refuse_bash_only
from llmperf_hook.launch.script_files import written_text  # noqa: F401  (frameworks/deepspeed_config_file.py's import)
from llmperf_hook.launch.script_file_writes import FileWrites
from llmperf_hook.launch.shell_arithmetic import ARITH, arithmetic as _arithmetic
from llmperf_hook.launch.shell_arithmetic_commands import (ASSIGNED, arithmetic_expressions, arithmetic_status,
                                                           forget_assigned, run_arithmetic)
from llmperf_hook.launch.shell_associative import assign_element, forget, present
from llmperf_hook.launch.shell_blocks import BlockReading
from llmperf_hook.launch.shell_functions import Definition
from llmperf_hook.launch.shell_eval import UNSET_REF, eval_refusal
from llmperf_hook.launch.shell_loops import brace_expanded, in_background, sweep_warning
from llmperf_hook.launch.shell_positional import (bind_locals, expand_positional, missing_arguments, positional_table,
                                                  run_builtin)
from llmperf_hook.launch.shell_read import (HERE_STRING_REF, ReadCommand, getopts_builtin, input_text,
                                           mapfile_builtin, printf_builtin, read_builtin, read_command)
from llmperf_hook.launch.shell_while import WhileLoop
from llmperf_hook.launch.shell_conditions import (Conditions, after_keywords, condition_expander, decide_test,
                                                  quote_arm_patterns, rematch)
from llmperf_hook.launch.shell_script import (ARRAY_ASSIGN, ScriptLine, array_and_rest, command_list, decode_ansi_c,
                                              forks, group_forks, logical_lines, plain_heredoc_operators,
                                              protect_literal_dollars, quoted_words, rejoin_substitutions,
                                              restore_dollars, shell_split, split_after_group, split_redirections,
                                              split_unquoted_words, ungroup, word_quoting, written_files)
from llmperf_hook.launch.shell_function_output import function_substitution
from llmperf_hook.launch.shell_substitution import substitute_paths
from llmperf_hook.launch.shell_variables import NAME_BEFORE_QUOTE, PRICED_NAMES, PWD, ShellVariables
from llmperf_hook.launch.subshell_state import end_subshell, forked_state
from llmperf_hook.launch.undecided_branches import (BRANCH_WORD, Branches, either_command, end_branch,
                                                    launch_words, note_array_assigned, note_branch_values,
                                                    settle_branches, start_branches)
from llmperf_hook.launch.undecided_options import argument_options, option_index, undecided_options

_VAR_WORD = re.compile(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?")
"""A word that is one unquoted variable reference, which bash splits at blanks once expanded."""
_HEREDOC_OPEN = re.compile(r"(?<!<)<<(?!<)")
"""The command holds the `<<` of the line's here-document (not a `<<<` here-string)."""
_SUBSHELL_OPEN = re.compile(r"(?<![$(<>=])\((?!\()")
"""A `(` that opens a subshell: not `$(`, `<(`, `>(`, arithmetic `((` or an array's `=(` (`A+=(x); exit 1`)."""
_COPROC = re.compile(r"(?<![\w-])coproc\s")
"""`coproc [NAME] command`: bash runs it in the background, which sets `$!` (bash manual 3.2.6 Coprocesses)."""
_WRITERS = frozenset({"cat", "tee"})
"""Commands whose here-document llmperf reads as the file they write (`cat > ds.json <<EOF`)."""
_READS_INPUT = _WRITERS | {"sbatch"} | SHELLS
"""Commands whose here-document llmperf reads: a file's text, or the script sbatch or a shell reads."""


_KEYWORDS = re.compile(r"^\s*(?:(?:then|else|do|if|elif|while|until|!|\{)\s+)+")
"""The compound-command keywords a command may begin with (bash manual 3.2.5)."""


@dataclass(kw_only=True)
class _Reading(ShellVariables, FileWrites, BlockReading):
    """The state of one pass over the script (local to read_batch_script)."""

    path: str
    """The file being read: the script, or a file it sources (`.` / `source`) while that is read."""
    script: str
    """The script's own path."""
    launches: list[ScriptRun] = field(default_factory=list)
    submissions: list[ScriptRun] = field(default_factory=list)
    """`sbatch ...` lines (record_launch)."""
    singles: list[ScriptRun] = field(default_factory=list)
    files: dict[str, ScriptFile] = field(default_factory=dict)
    unsplit: list[str] = field(default_factory=list)
    """Lines with a launch that could not be split into words: `6`, or `FILE line 6` in a sourced file."""
    unevaluated: list[str] = field(default_factory=list)
    """`eval` lines whose text only running the script would give (line number and why), for the refusal."""
    undecided: dict[str, str] = field(default_factory=dict)
    """Where a command ran that bash runs only on a condition llmperf could not decide (both branches are read), with
    the line's text."""
    missing_arguments: dict[int, tuple[str, str]] = field(default_factory=dict)
    """The script's arguments its lines read that it was not given, by number: where (`$3 at line 17`), the line."""
    unknown_at: dict[str, str] = field(default_factory=dict)
    """Where each variable llmperf cannot know was set so: `line 91` and the line's text."""
    branch_values: dict[str, Branches] = field(default_factory=dict)
    """What each branch of an undecided `if` set a variable it leaves undecided to (undecided_branches)."""
    texts: list[str] = field(default_factory=list)
    """The text of each line read before the launch, and the launch line's (for undecided_options)."""
    unreadable: list[str] = field(default_factory=list)
    """Shells that may run a launch llmperf cannot read: their command reads variables the script does not export, or
    their script file is not there (where and why), for the refusal."""
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
    sweep: tuple[str, tuple[str, ...]] | None = None
    """The `for` loop being read, pass by pass (shell_loops): its variable and words."""
    loop_calls: frozenset[str] = frozenset()
    """The functions being read where that loop started (a `break` in a function it calls ends no loop)."""
    passes: int = 0
    """The loop passes read so far, all loops together (shell_loops.MAX_TOTAL_PASSES)."""
    notes: list[str] = field(default_factory=list)
    """Warnings about what the reading passed over (a sourced file that is not here)."""
    written: set[str] = field(default_factory=set)
    """The names the script (and each file it sources) writes bare (script_stops.bare_names), which `set -u` spares."""
    unread_sources: bool = False
    """A file the script sources was not there to read: what it sets is not known (`set -u` refuses nothing then)."""
    removed_surely: set[str] = field(default_factory=set)
    """Those of `removed` whose `unset` surely ran (forget_removed): set -u refuses their `$NAME`."""
    loose_arrays: set[str] = field(default_factory=set)
    """Arrays assigned in a loop or `case` body read once, or given words only running expands (`A=($(ls))`, a glob):
    how many elements they hold only running tells, so `set -u` spares their elements (script_stops)."""
    background: bool = False
    """A command read so far runs in the background (`... &`): `$!` may be set (set -u spares it from there)."""
    listed_on: bool = False
    """The command being read is followed by `&&`, `||` or `|` on its line: its failure ends no script (set -e)."""
    errexit_ignored: bool = False
    """The function body or sourced file being read runs where set -e is ignored (`f || true`, an `if` condition):
    none of its commands ends the script when it fails (bash manual 4.3.1 `-e`)."""

    def test(self, source: str, words: list[str], tested: list[str]) -> bool | None:
        """The truth of the test `tested`, the last words of the command `words` split from `source`."""
        quoting = word_quoting(source)  # a redirection dropped or a head split: which words were quoted is unknown
        unquoted = quoting[len(quoting) - len(tested):] if len(quoting) == len(words) else [None] * len(tested)
        quoted = quoted_words(source)
        literal = quoted[len(quoted) - len(tested):] if len(quoted) == len(words) else [True] * len(tested)
        decided = decide_test(tested, condition_expander(self.undecidable, self.expand), unquoted, literal)
        if len(tested) == 5 and tested[0] == "[[" and tested[2] == "=~":  # `${BASH_REMATCH[1]}` after it
            groups = rematch(tested, condition_expander(self.undecidable, self.expand), literal)
            if groups is None:
                forget(self, "BASH_REMATCH")
            else:
                self.arrays["BASH_REMATCH"] = groups
                self.undecidable.discard("BASH_REMATCH")
        bare = tested[1:] if tested[:1] == ["!"] else tested  # `(( NP++ ))`: its status from NP's old value
        status = arithmetic_status(self, bare) if decided is None else None
        return decided if status is None else status != (bare is not tested)

    def arithmetic_test(self, words: list[str], test: Callable[[list[str]], bool | None]) -> \
            Callable[[list[str]], bool | None]:
        """The test of an `if` / `elif` / `while` / `until` command `words` where it is an arithmetic command that
        assigns (`if (( NP++ ))`): bash changes NP when it tests it. After `if`, the change is applied and the status
        (from the values before it) is what `test` answers for it; after the others, the names it assigns are made
        unknown (an `elif` bash may not test, a loop test read once for every pass)."""
        bare = words[2:] if words[1:2] == ["!"] else words[1:]
        expressions = arithmetic_expressions(bare)
        if expressions is None or not any(ASSIGNED.search(expr) for expr in expressions):
            return test
        if words[0] != "if":
            for expr in expressions:
                forget_assigned(self, expr)
            return test
        status = test(words[1:])
        run_arithmetic(self, bare, self.conditions.uncertain())
        return lambda tested: status if tested == words[1:] else test(tested)

    def loop_test(self, text: str) -> bool | None:
        """The truth of a `while` / `until` test command `text` now; None where llmperf cannot decide it."""
        text = protect_literal_dollars(text).replace("${#}", self.positional["#"]).replace("$#", self.positional["#"])
        listed = command_list(text)
        if len(listed) != 1 or len(listed[0][1]) != 1:  # a list or a pipeline: its status is not one test's
            return None
        try:
            words = shell_split(text)
        except ValueError:
            return None
        truth = self.test(text, words, words) if words else None
        bare = words[1:] if words[:1] == ["!"] else words
        if truth is not None and arithmetic_expressions(bare) is not None:  # `while (( i++ < 3 ))`: each pass's test
            run_arithmetic(self, bare, False)  # changes i (a loop not followed to its end is read again, as before)
        return truth

    def loop_input(self, loop: WhileLoop) -> tuple[ReadCommand | None, str | None]:
        """The `read` command a `while` loop tests (None for another test) and the text its `done` line redirects into
        it (None where llmperf does not have it: shell_read.input_text)."""
        try:
            words = shell_split(protect_literal_dollars(loop.test))
            done = loop.feed.text if loop.feed is not None else ""
            kept, redirections = split_redirections(shell_split(protect_literal_dollars(
                HERE_STRING_REF.sub(r'<<< "\1"', plain_heredoc_operators(done)))))
        except ValueError:
            return None, None
        command = read_command(self, words)
        if command is None or not command.follows() or "a" in command.options or kept != ["done"]:
            return None, None
        feed = loop.feed.heredoc if loop.feed is not None else None
        text = input_text(self, redirections, feed)
        return command, None if text is None else restore_dollars(text)

    def bash_source(self) -> str:
        """${BASH_SOURCE[0]}: the file being read (a sourced file's own path)."""
        return self.path

    def read(self, lines: Sequence[ScriptLine], braced: bool = False) -> None:
        """Read `lines` in order; a function definition is kept (launch/shell_functions.py) and read where called.
        `braced`: a line beginning with a `{ ... }` group that runs in the shell keeps its braces, for Conditions.step
        to run it as the list before it says (`( cd run ) || { NP=4; }`, the rest of split_after_group's line)."""
        i = 0
        while i < len(lines):
            line = lines[i]
            if self.shell[0] == "dash" and not self.launches:  # a syntax error where dash reads the line, run or not
                self.refuse_bash_only(line, line.text, False)
            after = self.block(lines, i) if not self.launches and self.conditions.running() else None
            if after is not None:
                i = after
                continue
            i += 1
            head, rest = array_and_rest(line.text)
            while rest and self.array_assignment(line, head):  # `L=(); L+=(--lr 1); ...`: one at a time
                self.texts.append(head)
                line = ScriptLine(line.number, rest, line.heredoc)
                head, rest = array_and_rest(line.text)
            if self.array_assignment(line, line.text):
                self.texts.append(line.text)
                self.note_missing_arguments(line)
                continue
            in_case = self.conditions.in_case() or "case" in line.text  # `(pattern)` opens an arm, not a subshell
            parts = None if in_case or line.heredoc else split_after_group(line.text)
            if parts:  # `( cd run ) && NP=4`: the subshell ends with the group
                self.read([ScriptLine(line.number, parts[0])])
                self.read([ScriptLine(line.number, parts[1])], braced=True)
                continue
            kept_braces = braced and line.text.lstrip().startswith("{") and not group_forks(line.text)
            text = quote_arm_patterns(line.text) if in_case else line.text if kept_braces else ungroup(line.text)
            subshell = self.subshell  # while set, loop_exit follows no break, so nothing it raises skips the reset
            self.subshell |= text is not line.text and not in_case and group_forks(line.text)
            kept = forked_state(self) if self.subshell and not (subshell or self.launches) else None
            try:
                if "$(" in text and self.conditions.running():  # `$(dirname "$(readlink -f "$0")")`: a path
                    text = substitute_paths(text, self.cwd, self.source_word, function_substitution(self))
                if text.strip() and not text.lstrip().startswith("#"):
                    self.texts += [line.text] if not self.launches else []
                    self.note_missing_arguments(line)
                    for pipeline in self.command_list(line, text):
                        self.writes_files(line, pipeline)
            finally:
                end_subshell(self, kept)
                self.subshell = subshell

    def array_assignment(self, line: ScriptLine, text: str) -> bool:
        """`NAME=( words )` (bash manual 6.7), as a line or as a command after `then` / `else` / `do` / `;` on one
        (`if [ ... ]; then ARR=(a b); fi`), where it runs before the launch; True when it assigned the array."""
        if not (ARRAY_ASSIGN.match(text) and not self.launches and self.conditions.running() and
                self.assign_array(text)):
            return False
        name = ARRAY_ASSIGN.match(text).group(1)  # type: ignore[union-attr]
        held = "".join(present(self.arrays.get(name, [])))
        if self.conditions.uncertain() or self.conditions.undecided or \
                re.search(r"[$`*?\[]", held):  # `[ -f cfg ] && A=(z)` may not run
            self.loose_arrays.add(name)
        elif not ARRAY_ASSIGN.match(text).group(2):  # type: ignore[union-attr]
            self.loose_arrays.discard(name)
        if self.conditions.in_undecided_branch():
            self.undecided.setdefault(self.where(line), line.text)
            note_array_assigned(self.conditions, text, self.arrays, self.where(line))
            assigned = ARRAY_ASSIGN.match(text)
            if assigned and assigned.group(1) in self.assoc:  # the branches of an associative array are not kept
                forget(self, assigned.group(1))
        return True

    def command_list(self, line: ScriptLine, text: str) -> list[list[str]]:
        """Read the commands of `text` in order, each test of a condition with the list operator before it (an `if
        A || B` is decided as bash runs it, shell_conditions._status); the pipelines read."""
        listed, subshell = command_list(text), self.subshell
        self.background |= in_background(text) or any(joined == "&" for joined, _ in listed) or \
            _COPROC.search(text) is not None  # `$!` is set from here
        for n, (joined, pipeline) in enumerate(listed):
            lastpipe = self.lastpipe and not self.monitor  # `shopt -s lastpipe; cat f | read TP` on one line
            for k, (command, forked) in enumerate(zip(pipeline, forks(listed, n, text, lastpipe))):
                self.subshell = subshell or forked
                self.conditions.join("|" if k else joined)
                self.listed_on = k + 1 < len(pipeline) or (n + 1 < len(listed) and listed[n + 1][0] in ("&&", "||"))
                kept = forked_state(self) if forked and not (subshell or self.launches) else None
                try:
                    self.command(line, command)
                finally:
                    end_subshell(self, kept)
        self.subshell = subshell
        if listed and not listed[-1][1]:  # `A ||` at the line's end: the list goes on at the next line
            self.conditions.join(listed[-1][0], line_end=True)
        return [pipeline for _, pipeline in listed if pipeline]

    def note_missing_arguments(self, line: ScriptLine) -> None:
        """Each `$N` of the script's own lines before its launch that it was not given, for a refusal to name."""
        if not (self.launches or self.calling or self.path != self.script):
            for number in missing_arguments(protect_literal_dollars(line.text), int(self.positional.get("#", "0"))):
                self.missing_arguments.setdefault(number, (f"${number} at {self.where(line)}", line.text))

    def command(self, line: ScriptLine, text: str) -> None:
        """Read one simple command; a variable it leaves unknown is noted with the line (unknown_value_note)."""
        end_branch(self.conditions, self, text)  # `else`: read from the values before the `if`
        unknown, said = set(self.undecidable), dict(self.unknown_at)
        before = dict(self.env) if self.conditions.in_undecided_branch() or BRANCH_WORD.match(text) else None
        removed = set(self.removed)
        try:
            self.simple_command(line, text)
        finally:
            self.forget_removed(removed, text)
            start_branches(self.conditions, self)
            for name in self.undecidable - unknown:  # unless the command said where (an `if` in a function it called)
                if self.unknown_at.get(name) == said.get(name):
                    self.unknown_at[name] = f"{self.where(line)} (`{line.text.strip()[:70]}`)"
            fresh = self.undecidable - unknown
            settled = settle_branches(self.conditions, self)
            if before is not None:
                note_branch_values(self.conditions, before, self.env, self.undecidable, fresh, self.where(line), text,
                                   settled, self.removed)

    def forget_removed(self, removed: set[str], text: str) -> None:
        """Keep in removed_surely what `unset` just removed where it surely ran (set -u refuses only those: not after
        `[ -f x ] && unset X` or in an undecided branch), and drop each removed name the command may set in a way the
        reading does not follow (`read X`)."""
        fresh = self.removed - removed
        (self.removed_surely.update if self.conditions.surely else self.removed_surely.difference_update)(fresh)
        if self.removed:
            written = bare_names(_KEYWORDS.sub("", text))  # `then unset X` writes X no more than `unset X` does
            self.removed -= written
            self.removed_surely -= written

    def simple_command(self, line: ScriptLine, text: str) -> None:
        if "$'" in text and self.shell[0] == "bash":
            text = decode_ansi_c(text)
        text = protect_literal_dollars(plain_heredoc_operators(text) if line.heredoc is not None else text)
        text = NAME_BEFORE_QUOTE.sub(r"${\1}", text)
        written = text  # before its elements and `$#` are expanded (check_nounset)
        if self.arrays or self.assoc or "[@]}" in text or "[*]}" in text or "${@:" in text or "${*:" in text:
            text = self.expand_arrays(text)
        if "$#" in text or "${#}" in text:  # shlex would read the `#` of `$#` / `${#}` as a comment
            text = text.replace("${#}", self.positional["#"]).replace("$#", self.positional["#"])
        arithmetic = ARITH.findall(text)  # `X=$(( NP++ ))`, `echo $(( NP += 2 ))`: what it assigns is not applied
        if "$((" in text:  # bash expands arithmetic when it reaches the command; `N=$(( 4 * 2 ))` is one word
            text = ARITH.sub(lambda m: _arithmetic(self.expand(self.arithmetic_elements(m.group(1))), self.env), text)
        if "<<<" in text:
            text = HERE_STRING_REF.sub(r'<<< "\1"', text)
        self.split_refs.clear()
        source = split_unquoted_words(PWD.sub(self.cwd, text), self.word_value, self.args(), self.undecidable,
                                      self.surely_unset() if self.removed else frozenset(), self.splitter())
        try:  # inside `(( ))` a `>` or `<<` is an operator (bash manual 6.5), no redirection
            words, redirections = (shell_split(source), []) if source.lstrip().startswith("((") else \
                split_redirections(*brace_expanded(*rejoin_substitutions(shell_split(source), quoted_words(source))))
        except ValueError:
            if any(head in text for head in LAUNCH_HEADS):
                self.unsplit.append(self.where(line).removeprefix("line "))
            return
        if words and _VAR_WORD.fullmatch(words[0]) and text.lstrip().startswith(words[0]):
            words = [*self.fields(self.expand(words[0])), *words[1:]]  # `$VENV_PREFIX python ...`: bash splits it
        running = self.conditions.running()
        if not self.launches:
            self.condition_source(line, words)
            if running and "getopts" in words:  # `while getopts "n:" opt; do`: opt, OPTARG are the loop's
                getopts_builtin(self, words)
        test: Callable[[list[str]], bool | None] = lambda tested: self.test(source, words, tested)
        if running and not self.launches and words[:1] in (["if"], ["elif"], ["while"], ["until"]):
            test = self.arithmetic_test(words, test)
        stepped = self.conditions.step(words, test, condition_expander(self.undecidable, self.expand))
        if not stepped and self.conditions.tests_surely():  # `if [ -n "$CKPT" ]`: bash expands the test it reaches
            self.check_nounset(line, text, written)
        if self.shell[0] == "dash" and not self.launches:
            self.refuse_bash_only(line, text, bool(stepped) or (running and self.conditions.reading()))
        if stepped and self.array_assignment(line, after_keywords(text, len(words) - len(stepped))):
            return  # `then A=(x y)`: shell_split cut the array at its blanks, as a line of its own it was read whole
        if stepped is not words:  # an `if` keyword consumed, or a branch that does not run
            words, text = stepped, shlex.join(stepped)
        if words and self.conditions.undecided and not self.launches:
            self.undecided.setdefault(self.where(line), line.text)
        if words and self.conditions.surely and not (self.launches or self.subshell):  # `: ${DATA:?set DATA}`
            stop_on_unset(words, self.env, self.positional, self.undecidable, self.stops_at(line))  # bash stops there
            self.check_nounset(line, text, written)
        if not self.launches and self.loop_exit(words, line):
            return
        if not self.launches:
            self.function_return(words)  # `return` ends the function (or sourced file) being read
        for expr in arithmetic if words and not self.launches else ():  # the command runs (a branch may not)
            forget_assigned(self, expr)
        if words and self.assignments(words, self.conditions.uncertain(), applied=not self.launches):
            return
        if len(words) == 1 and not self.launches and \
                assign_element(self, words[0], self.conditions.uncertain() or self.conditions.in_undecided_branch()):
            return  # `TP[13b]=2`
        if words and not self.launches and run_arithmetic(self, words, self.conditions.uncertain()):
            return  # `(( NP /= 2 ))`, `let NP=X/2`
        if not words or self.launches:  # what follows the launch line does not change it
            heredoc = self.standard_input(line, text, words) if command_head(words) not in _WRITERS else None
            if words and self.is_launch(line, words, text, heredoc):
                self.record_launch(line, words, heredoc)
            return
        self.readonly_failed = ""
        if self.assign(words) or self.variable_builtin(words) or run_builtin(self, line, words):  # shift, local, ...
            self.stop_on_readonly(line)
            return
        if words[0] == "exit" and not self.conditions.undecided and not (self.submissions or self.singles) and \
                not _SUBSHELL_OPEN.search(line.text.split("exit")[0]):  # `( exit 1 )` ends only the subshell
            raise exit_refusal(self.stops_at(line), words)
        if words[0] == "exit" and not (self.subshell or _SUBSHELL_OPEN.search(line.text.split("exit")[0])):
            self.conditions.note_exit()  # `else echo missing; exit 1; fi`: no value of that branch goes on
        if read_builtin(self, words, redirections, line.heredoc, self.conditions.uncertain()) or \
                mapfile_builtin(self, words, redirections, line.heredoc, self.conditions.uncertain()) or \
                printf_builtin(self, words, self.conditions.uncertain()):
            return
        if not self.subshell:  # what a subshell assigns stays there
            self.expand_for_effects(words)
        writes = written_files(redirections)
        heredoc = self.standard_input(line, text, words)
        if words[0] in self.functions:
            self.call(self.functions[words[0]], [self.expand(word) for word in words[1:]])
        elif words[0] == "eval":
            self.evaluate(line, text, words[1:])
        elif words[0] in (".", "source") and len(words) > 1:
            self.source(self.expand(words[1]), line)
        elif words[0] == "cd" and len(words) == 2:
            folder = self.expand(words[1])
            self.cwd = os.path.join(self.cwd, folder)
            self.cwd_ways = tuple(way for way in dict.fromkeys(os.path.join(way, folder) for way in self.cwd_ways)
                                  if way != self.cwd)
        else:
            self.other_command(line, text, words, writes, heredoc)

    def check_nounset(self, line: ScriptLine, text: str, written: str) -> None:
        """Under `set -u`, refuse the command `text` (`written`: as written, its array elements not yet expanded) that
        surely runs before the launch (or is it) where it expands an unset variable or array element, or `$!` before
        any command ran in the background (script_stops.stop_on_nounset, stop_on_unset_element). A file not read, or
        an eval of what only running gives (`eval "$(conda shell.bash hook)"`), may set anything: nothing is refused
        then."""
        if self.nounset and not (self.launches or self.subshell or self.unread_sources or self.unevaluated):
            gone = self.surely_unset() & self.removed_surely
            known = (self.undecidable | self.written | set(self.arrays)) - gone
            stop_on_nounset(text, self.env, self.positional, known, self.stops_at(line), gone)
            stop_on_unset_element(written, self, self.stops_at(line))

    def stop_on_readonly(self, line: ScriptLine) -> None:
        """Under `set -e`, refuse a command that surely runs and unsets a read-only name where its status counts (not in
        a test, nor before `&&` / `||`: 'cannot unset: readonly variable', builtins/set.def unset_builtin returns
        EXECUTION_FAILURE), or assigns one anywhere (an assignment error, which ends a script under set -e even
        before `||` or in an `if` test: bash 5.2.15 checked): bash ends the script there (bash manual 4.3.1 `-e`)."""
        assigned = self.readonly_failed.endswith("=")
        ignored = self.listed_on or self.errexit_ignored or self.conditions.reading()
        counts = self.errexit and (assigned or not ignored)
        name = self.readonly_failed.rstrip("=")
        if not name or not counts or not self.conditions.surely or self.launches:
            return
        raise UsageError(f"{self.stops_at(line)} before any launch line: {name} is read-only, so bash prints that it "
                         f"cannot unset or assign {name}, the command fails and, with `set -e` on, bash ends the "
                         "script there (bash manual 4.1 `unset`, 4.2 `readonly`, 4.3.1 `-e`). To predict the job, "
                         f"drop that command or the `readonly` of {name}, or give its launch line after `--`.")

    def stops_at(self, line: ScriptLine) -> str:
        """How a refusal of a line where bash ends the script begins (script_stops): the script, line and text."""
        return f"{self.kind} {self.script} stops at {self.where(line)} (`{line.text.strip()[:80]}`)"

    def standard_input(self, line: ScriptLine, text: str, words: list[str]) -> str | None:
        """The text of the here-document the command `text` reads (bash gives it the expanded body, 3.6.6), for the
        commands whose input llmperf reads: `cat` / `tee` writing a file, `sbatch`, a shell; else None."""
        if line.heredoc is None or not _HEREDOC_OPEN.search(text) or command_head(words) not in _READS_INPUT:
            return None
        return self.here_document(line.heredoc)

    def is_launch(self, line: ScriptLine, words: list[str], text: str, heredoc: str | None) -> bool:
        """launch_line.is_launch, with the commands a shell it runs reads: a script file (`bash run.sh ARGS`, a script
        that starts the job from another one, Megatron-DeepSpeed's curriculum_learning/ds_train.sh), its standard
        input, or its command string, expanded by this script where it is double-quoted, by the child shell, which has
        only the exported variables, where single-quoted (`L=...; bash -c '$L train.py'` runs no launcher unless L is
        exported)."""
        if python_code_step(words):
            return False
        at = script_file(words)
        if at is not None:
            child = self.script_text(words, at)
            if child is None and not self.launches:  # `cd /workspace/megatron-lm; ./tests/run.sh`: not here to read
                self.unreadable.append(f"{self.where(line)} runs {words[at]}, which is not in {self.cwd} to read")
            return is_launch(words, text, child)
        child = shell_commands(words, heredoc)
        if child is None or child is heredoc:
            return is_launch(words, text, child)
        outer = restore_dollars(self.expand(child, record=False))
        exported = {name: value for name, value in self.env.items() if name in self.exported}
        apply_prefixes([self.expand(word, record=False) for word in words], exported)  # `L=torchrun bash -c '$L ..'`
        if is_launch(words, text, expand_env_refs(outer, exported, {})):
            return True
        if is_launch(words, text, expand_env_refs(outer, self.env, {})):  # it would, were its variables exported
            hidden = sorted(set(UNSET_REF.findall(outer)) & (set(self.env) - self.exported))
            self.unreadable.append(f"{words[0]} -c at {self.where(line)} reads ${', $'.join(hidden)}, which the "
                                   "script sets without `export`, so that child shell does not have it (bash passes "
                                   "a child process only exported variables)")
        return False

    def script_text(self, words: list[str], at: int) -> str | None:
        """The text of the script file words[at] (from the folder the script is in at that line), its path made
        absolute in `words` for the launch that reads it later; None when there is no such file."""
        path = os.path.normpath(os.path.join(self.cwd, self.expand(words[at], record=False)))
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                text = handle.read()
        except OSError:
            return None
        words[at] = path
        return text

    def other_command(self, line: ScriptLine, text: str, words: list[str], writes: list[str],
                      heredoc: str | None) -> None:
        """A command that is no assignment or builtin: a launch, a single python run, or one that writes files (`cat >
        ds.json <<EOF` / `tee ds.json <<EOF` write the here-document's text; another command's output is unknown)."""
        if words[0] in _WRITERS and heredoc is not None and line.heredoc is not None:
            targets = writes + ([word for word in words[1:] if not word.startswith("-")] if words[0] == "tee" else [])
            origin = f"{self.path} line {line.heredoc.first_line} (the here-document of `{line.text.strip()[:60]}`)"
            for target in (os.path.normpath(self.expand(word)) for word in targets):
                if target != os.devnull:  # `tee ds.json > /dev/null <<EOF`
                    self.files[target] = ScriptFile(heredoc, origin)
        elif self.is_launch(line, words, text, heredoc):
            self.record_launch(line, words, heredoc)
        elif PY_SCRIPT.match(text.strip()):
            self.singles.append(self.run(line, words))
        elif writes:  # `sed ... > ds_config.json`: written by a command llmperf does not run
            for target in writes:
                origin = f"{self.path} line {line.number}"
                self.files.setdefault(os.path.normpath(self.expand(target)),
                                      ScriptFile("", origin, command=" ".join(words)[:80]))

    def source(self, name: str, line: ScriptLine) -> None:
        """`. FILE` / `source FILE`: the shell reads FILE's commands there, in its own environment (bash manual 4.1
        `.`), so FILE's variables and launch line are the script's; messages name FILE and its own line numbers. A
        file that is not there is passed over with a warning: most are the cluster's own setup (`source
        $six_ALL_CCFRWORK/start-prod`), there where the job runs and not where llmperf reads the script. Where it is
        missing there too, bash goes on without it, unless `set -e` is on and the failure counts (bash manual 4.3.1),
        and dash stops (POSIX 2.8.1: a special built-in's error ends a non-interactive shell)."""
        path = os.path.normpath(os.path.join(self.cwd, name))
        paths = list(dict.fromkeys([path, *(os.path.normpath(os.path.join(way, name)) for way in self.cwd_ways)]))
        if len(paths) > 1:  # a relative path from a directory undecided branches left apart: either file
            self.read_to_return(either_command(line.number, [f". {shlex.quote(path)}" for path in paths]))
            return
        if not os.path.isfile(path) and not self.launches:
            stops = "dash" if self.shell[0] == "dash" else "bash (`set -e` is on)" if self.errexit and \
                not self.listed_on and not self.conditions.reading() else ""
            self.notes.append(f"{self.where(line)} sources {path}, which is not here: the script is read without it "
                              "(its variables unset)" + (f"; where it is missing, {stops} stops the script there, "
                                                         "before the launch" if stops else ""))
        self.unread_sources |= not os.path.isfile(path)
        if path in self.sourcing or not os.path.isfile(path):
            return
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
        self.written |= bare_names(text)
        self.sourcing.add(path)
        outer, self.path = self.path, path
        try:
            self.read_to_return(logical_lines(text))
        finally:
            self.sourcing.discard(path)
            self.path = outer

    def refuse_bash_only(self, line: ScriptLine, text: str, runs: bool) -> None:
        """Under dash, a command that runs (or a test dash evaluates) holding a bash-only construct is refused."""
        found = bash_only(text, runs)
        if found is not None:
            raise refuse_bash_only(self.kind, self.path, self.shell[1], line.number, line.text, found)

    def evaluate(self, line: ScriptLine, text: str, args: list[str]) -> None:
        """`eval ARGS` (launch/shell_eval.py): the line it makes read as a command line, or the reason it cannot be."""
        expanded = restore_dollars(" ".join(self.expand(arg) for arg in args))  # eval reads a quoted `$` again
        refusal = eval_refusal(text, expanded)
        if refusal is not None:
            self.unevaluated.append(f"{self.where(line)} {refusal}")
        else:
            self.command_list(ScriptLine(line.number, expanded), expanded)

    def positioned(self, words: list[str]) -> list[str]:
        """`words` with $1 ... as they are where the line runs (inside a function: the call's words, and its locals)."""
        return [bind_locals(self, expand_positional(word, self.positional_for(word))) for word in words]

    def where(self, line: ScriptLine) -> str:
        """`line N` of the script, or `FILE line N` of a file it sources (bash reports FILE's own line numbers)."""
        return f"line {line.number}" if self.path == self.script else f"{self.path} line {line.number}"

    def run(self, line: ScriptLine, words: list[str], stdin: str | None = None) -> ScriptRun:
        words = [self.without_unset(word) for word in self.positioned(words)]
        return ScriptRun(self.where(line), words, dict(self.env), dict(self.split_refs),
                         frozenset(self.exported), stdin, self.sweep, in_background(line.text))

    def record_launch(self, line: ScriptLine, words: list[str], stdin: str | None) -> None:
        """A launch line. An `sbatch` line is the launch only of a script with no other (a batch script that submits
        its successor, `sbatch --dependency=afterany:$SLURM_JOB_ID next.sh`, launches its own srun line)."""
        if command_head(words) == "sbatch":
            self.submissions.append(self.run(line, words, stdin))
            return
        self.launches.append(self.run(line, words, stdin))

    def launch(self) -> ScriptLaunch:
        found = self.launches or self.submissions or self.singles  # a `python train.py` line runs once, on node 1
        if len(found) == 1:
            run = found[0]
            hidden = frozenset(run.env) - run.exported
            for name in hidden & set(self.used):  # read by the reading, but the prediction reads these from the
                if PRICED_NAMES.fullmatch(name):  # job's environment, which does not have them
                    del self.used[name]
            self.env.clear()
            self.env.update(run.env)
            self.used.update(run.refs)
            warnings: tuple[str, ...] = (sweep_warning(*run.sweep, run.where, run.background),) \
                if run.sweep and len(run.sweep[1]) > 1 else ()
            words, left, settled = launch_words(run.words, self.unknown_at, self.undecidable, self.branch_values)
            warnings += settled + tuple(dict.fromkeys(self.notes))
            index = option_index(self.texts)
            missing = {where: argument_options(n, text, index)
                       for n, (where, text) in sorted(self.missing_arguments.items())}
            return ScriptLaunch(words, self.files, run.stdin, hidden, warnings, tuple(self.undecided),
                                undecided_options(self.undecided, index), left, missing)
        listed = "; ".join(f"{run.where}: {' '.join(run.words)[:80]}" for run in found[:4])
        what = f"{len(found)} launch lines ({listed})" if found else "no launch line (srun, torchrun, deepspeed, " \
            "accelerate launch, mpirun or python -m torch.distributed.run)"
        unsplit = f"; line(s) {', '.join(self.unsplit)} could not be read as shell words (an unclosed quote?)" \
            if self.unsplit and not found else ""
        if self.unevaluated and not found:
            unsplit += (f"; {'; '.join(self.unevaluated)} (llmperf reads a script's variables and never runs its "
                        "commands, so it cannot know what that eval runs)")
        if self.unreadable and not found:  # shells that would launch, with what keeps llmperf from reading it
            unsplit += f"; {'; '.join(self.unreadable)}"
        raise UsageError(f"{self.kind} {self.path} has {what}{unsplit}; llmperf predicts one training launch. Give "
                         "that line after `--` (e.g. `llmperf predict --nnodes N -- srun ... python pretrain_gpt.py ...`).")


def read_batch_script(lines: Sequence[ScriptLine], env: dict[str, str], used: dict[str, str],
                      path: str, kind: str = "sbatch script", args: Sequence[str] = (),
                      shell: tuple[str, str] = ("bash", "")) -> ScriptLaunch:
    """The script's one launch line, the files it writes before it and what it hides from it, from its logical lines
    (shell_script.logical_lines); `env` gains its variables (all of them: shell_variables.child_environment then keeps
    the exported ones for the command the line starts); `args` are the script's own arguments ($1 ...); `shell` is
    posix_shell.script_shell's answer: under dash a bash-only construct before the launch is refused."""
    reading = _Reading(env=env, used=used, path=path, script=path, kind=kind, positional=positional_table(path, args),
                       shell=shell, exported=set(env), written=bare_names("\n".join(line.text for line in lines)))
    reading.read(lines)
    return reading.launch()
