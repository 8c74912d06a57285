"""--fp16 with --bf16 where a launch script gives one of them on a condition llmperf could not decide.

Megatron (megatron/training/arguments.py validate_args, `if args.fp16: assert not args.bf16`; Megatron-DeepSpeed
alike) refuses both, and megatron.megatron_precision says so (exit 2). But a script that picks its precision from
what only running it tells (`if nvidia-smi ... | grep -q A100; then ARGS+=(--bf16); else ARGS+=(--fp16); fi`) gives
one in bash, while llmperf reads both branches (ParsedJob.undecided). A user expects that job priced, so it is, in
the precision of one run bash can make, with a warning naming the lines and the other precision:
- a flag given unconditionally is kept: the branch adding the other must not run for the job to start at all;
- else the flag of the branch read first, the arm written first (`then` before `else`): bash takes it when the
  condition holds, and nothing tells which way the condition goes.
"""

from __future__ import annotations

from dataclasses import replace

from llmperf_hook.launch.parsed_job import ParsedJob

_PRECISIONS = ("--fp16", "--bf16")


def settle_undecided_precision(job: ParsedJob) -> tuple[ParsedJob, list[str]]:
    """`job` with one of --fp16 / --bf16 when both reach it and at least one only from an undecided branch, and the
    warning saying which was priced; `job` unchanged (Megatron's refusal stands) otherwise."""
    if not all(flag in job.script_args for flag in _PRECISIONS):
        return job, []
    lines = {flag: job.undecided_setting([flag]) for flag in _PRECISIONS}
    if all(lines.values()):
        kept = min(_PRECISIONS, key=lambda flag: job.undecided.index(lines[flag][0]))
        why = f"the flag of the branch read first ({lines[kept][0]})"
    elif any(lines.values()):
        kept = next(flag for flag in _PRECISIONS if not lines[flag])
        why = "the flag the script gives whatever the condition"
    else:
        return job, []
    dropped = next(flag for flag in _PRECISIONS if flag != kept)
    warning = (f"--fp16 and --bf16 both reach the launch, and Megatron accepts one (arguments.py validate_args asserts "
               f"not both); {dropped} comes from {', '.join(lines[dropped][:4])}, run on a condition llmperf could not "
               f"decide (it reads both branches, bash runs one). Priced with {kept}, {why}; if the job takes the "
               f"branch with {dropped}, give that launch line after `--` to price it.")
    return replace(job, script_args=tuple(arg for arg in job.script_args if arg != dropped)), [warning]
