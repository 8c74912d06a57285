"""`tune --apply` on a launch script file (`bash train.sh`, `./train.sh`, `sbatch job.sh`): the tuned flags appended to
the script's own arguments, kept only where the script passes them on to the training command.

Megatron-LM parses its flags with argparse, where a flag given twice takes its last value, so `bash train.sh
--micro-batch-size 4` changes the micro-batch of a launch line that ends in "$@" without editing the file (the usual
way cluster launch scripts take overrides). Whether a script forwards its arguments, and after its own flags, is
not guessed: the appended command is read again the way `explain` reads it (launch/batch_script.py expands $1 ...
"$@" and validates the layout) and applied only when that reading is exactly the tuned layout, same world size and
global batch. Appending cannot take a switch back (--recompute-activations has no off form), so a layout that
drops a flag of the script is refused, naming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from llmperf_hook.errors import LlmperfError
from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.tune.apply import TunedCommand
from llmperf_hook.tune.candidate import Candidate, candidate_of
from llmperf_hook.tune.render import Change


@dataclass(frozen=True)
class ScriptApply:
    """The command --apply runs for a launch script file, or why it cannot."""

    plan: TunedCommand | None
    """The user's command with the tuned flags appended to the script's arguments; None when refused."""
    refusal: str | None = None
    """Why not (None when `plan` is set)."""


def appended_words(changes: Sequence[Change]) -> tuple[list[str], list[str]]:
    """(words to append after the script's arguments, flags of the launch line the layout drops). A config-file
    change is a drop too: the script names its own ds_config, which appended flags do not rewrite."""
    words: list[str] = []
    drops: list[str] = []
    for c in changes:
        if c.where != "argv" or c.new is None:
            drops.append(c.key if c.where == "argv" else f"{c.where} {c.key}")
        else:
            words += [c.key, c.new] if c.new else [c.key]
    return words, drops


def apply_to_script(argv: Sequence[str], changes: Sequence[Change], cfg: TrainingConfig, tuned: Candidate,
                    reread: Callable[[list[str]], TrainingConfig], kind: str, not_forwarded: str) -> ScriptApply:
    """`argv` (`bash train.sh ARGS`) with the launch line's `changes` appended, if the script runs `tuned` that way.

    `reread` resolves a command as explain does; `not_forwarded` is the refusal for a script whose launch line does
    not pass the appended flags on (or passes them before its own, which then win)."""
    words, drops = appended_words(changes)
    if drops:
        article = "an" if kind.startswith("sbatch") else "a"
        return ScriptApply(None, (
            f"tune --apply cannot rewrite {article} {kind} for this layout: it drops {', '.join(drops)}, which the "
            "script gives on its launch line, and flags appended to the script's arguments can change a value but not "
            "take a switch or a config key back. Make the changes listed above in the script, or run tune --apply on "
            "the launch line itself."))
    candidate = [*argv, *words]
    try:
        got = reread(candidate)
    except LlmperfError:
        return ScriptApply(None, not_forwarded)
    same = (candidate_of(got) == tuned and got.world_size == cfg.world_size
            and got.batch.global_batch_size == cfg.batch.global_batch_size)
    if not same:
        return ScriptApply(None, not_forwarded)
    note = f"the tuned flags appended to the {kind}'s arguments, which its launch line passes on (\"$@\")"
    return ScriptApply(TunedCommand(argv=tuple(candidate), notes=(note,)) if words else
                       TunedCommand(argv=tuple(argv)))
