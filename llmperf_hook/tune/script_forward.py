"""`tune --apply` on a launch script file (`bash train.sh`, `./train.sh`, `sbatch job.sh`): the tuned flags appended to
the script's own arguments, kept only where the script passes them on to the training command.

Megatron-LM, DeepSpeed (--deepspeed_config) and the Hugging Face Trainer parse their flags with argparse, where a
flag given twice takes its last value, so `bash train.sh --micro-batch-size 4` changes the micro-batch of a launch
line that ends in "$@" without editing the file (the usual way cluster launch scripts take overrides); a tuned
ds_config is a new copy next to the script's (written by --apply as for any command) and its flag points the line
at it. Whether a script forwards its arguments, and after its own flags, is not guessed: the appended command is
parsed the way `explain` parses it (launch/batch_script.py expands $1 ... "$@") and must hand the training script
exactly its own arguments followed by the appended ones; where no new file is involved it is also resolved in full
and must be the tuned layout, world size and global batch. Appending cannot take a switch back
(--recompute-activations has no off form), so a layout that drops a flag of the script is refused, naming it.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Callable, Sequence

from llmperf_hook.errors import LlmperfError
from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.tune.apply import TunedCommand, parse_sized, script_file_kind
from llmperf_hook.tune.candidate import Candidate, candidate_of
from llmperf_hook.tune.ds_config_rewrite import find_ds_config
from llmperf_hook.tune.render import INLINE_WHERE, Change


@dataclass(frozen=True)
class ScriptApply:
    """The command --apply runs for a launch script file, or why it cannot."""

    plan: TunedCommand | None
    """The user's command with the tuned flags appended to the script's arguments; None when refused."""
    refusal: str | None = None
    """Why not (None when `plan` is set)."""


def appended_words(changes: Sequence[Change], line_plan: TunedCommand) -> tuple[list[str], list[str]]:
    """(words to append after the script's arguments, what appending cannot do: flags of the launch line the layout
    drops, config keys not carried by a new file). The keys of a tuned ds_config copy travel with its flag, which
    points the line at the copy (--deepspeed_config ds.llmperf-tuned.json, last wins like every flag); those of a
    config given in argv itself (base64 / JSON) with that flag and the rewritten word (`line_plan`'s)."""
    words: list[str] = []
    drops: list[str] = []
    ref = find_ds_config(line_plan.argv)  # a tuned copy an earlier --apply wrote (reused) travels with its flag too
    carried = {*line_plan.new_files, *([os.path.abspath(ref.path)] if ref is not None else [])}
    for c in changes:
        if c.where == INLINE_WHERE:
            continue
        if c.where != "argv":
            if c.where not in carried:
                drops.append(f"{c.where} {c.key}")
        elif c.new is None:
            drops.append(c.key)
        else:
            words += [c.key, c.new] if c.new else [c.key]
    inline = ref if any(c.where == INLINE_WHERE for c in changes) else None
    return words + ([inline.flag, inline.path] if inline else []), drops


def reaches_training_script(argv: Sequence[str], words: Sequence[str],
                            size: tuple[int | None, int | None] = (None, None)) -> bool:
    """Whether `argv` + `words` hands `words` to the training script after all its own flags (parsed as explain
    parses it: the script's $1 ... "$@" expanded), so argparse's last-wins makes them the training script's. `size`:
    llmperf's --nnodes / --nproc-per-node, for a launch line that does not say its size."""
    own, got = parse_sized(argv, size), parse_sized([*argv, *words], size)
    if own is None or got is None:
        return False
    return got.script == own.script and list(got.script_args) == [*own.script_args, *words]


def apply_to_script(argv: Sequence[str], line_plan: TunedCommand, changes: Sequence[Change], cfg: TrainingConfig,
                    tuned: Candidate, reread: Callable[[list[str]], TrainingConfig]) -> ScriptApply:
    """`argv` (`bash train.sh ARGS`) with the launch line's `changes` appended, if the script runs `tuned` that way.

    `line_plan` is the rewritten launch line (its new files are written by --apply as for any command); `reread`
    resolves a command as explain does, used where no new file is needed yet."""
    kind = script_file_kind(argv) or "sbatch script"
    words, drops = appended_words(changes, line_plan)
    if drops:
        return ScriptApply(None, (
            f"tune --apply cannot rewrite {_article(kind)} {kind} for this layout: it drops {', '.join(drops)}, which "
            "the script gives on its launch line, and flags appended to the script's arguments can change a value but "
            "not take a switch or a config key back. Make the changes listed above in the script, or run tune --apply "
            "on the launch line itself."))
    forwarded = reaches_training_script(argv, words, (cfg.nnodes, cfg.nproc_per_node))
    if not forwarded or (not line_plan.new_files and not _runs(reread, argv, words, cfg, tuned)):
        return ScriptApply(None, not_forwarded_refusal(kind) + launch_line_hint(argv, (cfg.nnodes, cfg.nproc_per_node)))
    if not words:
        return ScriptApply(TunedCommand(argv=tuple(argv)))
    note = f"the tuned flags appended to the {kind}'s arguments, which its launch line passes on (\"$@\")"
    return ScriptApply(TunedCommand(tuple([*argv, *words]), line_plan.new_files, (note,)))


def not_forwarded_refusal(kind: str) -> str:
    """Why --apply stops on `sbatch job.sh` / `bash train.sh` (kind 'sbatch script' / 'shell script') whose launch
    line does not pass the appended flags on to the training script."""
    sbatch = kind == "sbatch script"
    outer = "sbatch" if sbatch else "script"
    inside = "srun ... pretrain_gpt.py ...` inside the allocation" if sbatch else \
        "torchrun ... pretrain_gpt.py ...`, the script's launch line"
    return (f"tune --apply cannot rewrite {_article(kind)} {kind}: the training command is inside it, and flags "
            f"appended to the {outer} command reach the script as $1, $2, ..., which its launch line does not pass on "
            f"to the training script after its own flags (parsed as explain parses it; a launch line ending in \"$@\" "
            f"would). Make the changes listed above in the script, or run tune --apply on the launch line itself "
            f"(`llmperf tune --apply -- {inside}).")


_REDIRECTION = re.compile(r"\s(?:&>|\d?>>?|\||;|&&|#)")
"""Where a shell command's own words end: the first redirection, pipe, list operator or comment after the training
script."""


def launch_line_hint(argv: Sequence[str], size: tuple[int | None, int | None]) -> str:
    """' To pass them on, change FILE line N from `LINE` to `LINE with "$@"`.': the script file's launch command (the
    last uncommented one naming the training script, backslash continuations joined) with "$@" after its own words,
    before any redirection; '' where the file or the line is not found. In a double-quoted command string that an
    `eval` runs (Megatron-DeepSpeed's run_cmd="deepspeed ... &> log.txt") "$@" closes and reopens the quotes: the
    assignment joins the arguments with spaces and eval splits them again."""
    job = parse_sized(argv, size)
    name = os.path.basename(job.script) if job is not None else ""
    path = next((w for w in argv if name and os.path.isfile(w) and _mentions(w, name)), None)
    if path is None:
        return ""
    found = _launch_command(path, name)
    if found is None:
        return ""
    first, last, text = found
    cut = _REDIRECTION.search(text, text.index(name) + len(name))
    words = text[:cut.start() if cut else len(text)].rstrip()
    quoted = re.match(r'\s*\w+="', text) is not None and words.endswith('"')  # run_cmd="...": inside its quotes
    end = len(words) - quoted
    changed = f'{text[:end].rstrip()} "$@"{text[end:]}'
    lines = f"line {first}" if first == last else f"lines {first}-{last} (continuations joined)"
    return f" To pass them on, change {path} {lines} from `{text.strip()}` to `{changed.strip()}`."


def _mentions(path: str, name: str) -> bool:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return name in fh.read(1 << 20)
    except OSError:
        return False


def _launch_command(path: str, name: str) -> tuple[int, int, str] | None:
    """(first line, last line, text) of the last uncommented command of the file naming `name`, continuations joined."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            physical = fh.read().splitlines()
    except OSError:
        return None
    found, i = None, 0
    while i < len(physical):
        start, text = i, physical[i]
        while text.endswith("\\") and i + 1 < len(physical):
            i += 1
            text = text[:-1] + " " + physical[i].strip()
        if name in text and not text.lstrip().startswith("#"):
            found = (start + 1, i + 1, text)
        i += 1
    return found


def _article(kind: str) -> str:
    return "an" if kind.startswith("sbatch") else "a"


def _runs(reread: Callable[[list[str]], TrainingConfig], argv: Sequence[str], words: Sequence[str],
          cfg: TrainingConfig, tuned: Candidate) -> bool:
    """The appended command read as explain reads it is the tuned layout, world size and global batch."""
    try:
        got = reread([*argv, *words])
    except LlmperfError:
        return False
    return (candidate_of(got) == tuned and got.world_size == cfg.world_size
            and got.batch.global_batch_size == cfg.batch.global_batch_size)
