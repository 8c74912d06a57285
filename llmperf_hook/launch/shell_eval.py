"""`eval ARGS` in a launch script: bash expands ARGS, joins them with blanks and reads the result as a command line
(bash manual 4.1 Bourne Shell Builtins, eval), so a launch held in a variable (Megatron-DeepSpeed's examples:
`run_cmd="deepspeed ... 2>&1 | tee log"`, `eval ${run_cmd}`) is read from the variable, never run. What only running
the script gives is refused, naming the line."""

from __future__ import annotations

import re

from llmperf_hook.launch.launch_line import LAUNCH_HEADS, PY_SCRIPT

UNSET_REF = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")
"""A `$NAME` / `${NAME` left in a text once the script's variables are expanded: one it does not set plainly."""


def eval_refusal(text: str, expanded: str) -> str | None:
    """Why llmperf cannot read the command line the `eval` of `text` runs (`expanded`: its words expanded and joined),
    or None when it can: a command substitution, or variables the script does not set plainly in a text that names
    no launcher."""
    if "$(" in text or "`" in text or "$(" in expanded or "`" in expanded:
        return "evals a command substitution"
    unset = sorted(set(UNSET_REF.findall(expanded)))
    if unset and not any(head in expanded for head in LAUNCH_HEADS) and not PY_SCRIPT.search(expanded):
        return (f"evals {', '.join(f'${name}' for name in unset)}, which the script does not set with a plain "
                "NAME=value line before it")
    return None
