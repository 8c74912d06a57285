"""Regression (issue h17 campaign): `tune --apply` on `srun ... sh -c "python pretrain_gpt.py ..."` rewrites the
flags inside the shell command; they used to be appended after it, where sh takes them as $0, $1, ..."""

from __future__ import annotations

import shlex
from dataclasses import replace

from llmperf_hook.frameworks.resolve import resolve_job
from llmperf_hook.tune.apply import plan_tuned_command
from llmperf_hook.tune.candidate import apply_candidate, candidate_of

INNER = ("python -u pretrain_gpt.py --num-layers 24 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 "
         "--max-position-embeddings 2048 --vocab-size 50257 --micro-batch-size 2 --global-batch-size 64 --bf16 "
         "--tensor-model-parallel-size 2")
ENV = {"SLURM_NNODES": "2", "SLURM_NTASKS_PER_NODE": "8"}


def test_flags_rewritten_inside_sh_c() -> None:
    argv = ["srun", "-l", "sh", "-c", INNER]
    _, cfg = resolve_job(argv, ENV)
    new = replace(candidate_of(cfg), tp=4, micro_batch_size=4)
    plan = plan_tuned_command(argv, cfg, new, apply_candidate(cfg, new))
    assert list(plan.argv[:4]) == ["srun", "-l", "sh", "-c"] and len(plan.argv) == 5
    inner = shlex.split(plan.argv[4])
    assert inner[inner.index("--tensor-model-parallel-size") + 1] == "4"
    assert inner[inner.index("--micro-batch-size") + 1] == "4"
    _, again = resolve_job(list(plan.argv), ENV)  # what explain runs on the applied command
    assert (again.parallel.tp, again.batch.micro_batch_size, again.world_size) == (4, 4, 16)


def test_unexpanded_variables_stay_expandable() -> None:
    from llmperf_hook.tune.apply import _shell_join

    assert _shell_join(["python", "${DIR}/pretrain_gpt.py", "--split", "99,1,0", "a b"]) == "python ${DIR}/pretrain_gpt.py --split 99,1,0 'a b'"


def _applied(argv: list[str]) -> tuple[str, object]:
    """CMD of the applied command for TP 4, micro-batch 4, and the configuration explain resolves from it."""
    _, cfg = resolve_job(argv, ENV)
    new = replace(candidate_of(cfg), tp=4, micro_batch_size=4)
    plan = plan_tuned_command(argv, cfg, new, apply_candidate(cfg, new))
    assert list(plan.argv[:-1]) == argv[:-1]
    return plan.argv[-1], resolve_job(list(plan.argv), ENV)[1]


def test_a_pipe_and_redirections_in_the_shell_command_stay_as_written() -> None:
    """`sh -c "python ... 2>&1 | tee log.txt"`: CMD was rewritten as one list of words, which quoted `2>&1` and `|`
    into Megatron arguments and appended the tuned flags after `tee log.txt`; explain refused it ('unrecognized
    arguments') and bash would have run a pipeline-less command with stray words."""
    cmd, cfg = _applied(["srun", "-l", "sh", "-c", f"{INNER} 2>&1 | tee log.txt"])
    assert cmd.endswith(" 2>&1 | tee log.txt") and "'|'" not in cmd
    head = shlex.split(cmd.removesuffix(" 2>&1 | tee log.txt"))
    assert head[head.index("--tensor-model-parallel-size") + 1] == head[head.index("--micro-batch-size") + 1] == "4"
    assert (cfg.parallel.tp, cfg.batch.micro_batch_size, cfg.world_size) == (4, 4, 16)


def test_commands_before_the_launch_in_the_shell_command_are_kept() -> None:
    cmd, cfg = _applied(["srun", "bash", "-c", f"cd /work && export X=1; {INNER} > train.log"])
    assert cmd.startswith("cd /work && export X=1; python -u pretrain_gpt.py ") and cmd.endswith(" > train.log")
    assert (cfg.parallel.tp, cfg.batch.micro_batch_size) == (4, 4)


def test_the_change_list_reads_the_flags_inside_the_shell_command(capsys) -> None:
    """The table's changes of a `sh -c CMD` command came from the outer words, where CMD is one word: every row said
    '(differs from yours, but no flag ... sets it: change it by hand)' although --apply rewrote the flags."""
    import json

    from .helpers import run_cli

    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--format", "json", "--", "srun", "-N", "2",
                              "--ntasks-per-node", "8", "sh", "-c", f"{INNER} 2>&1 | tee log.txt"], capsys)
    assert code == 0, err
    top = json.loads(out)["top"]
    changed = [row for row in top if row["micro_batch_size"] != 2]
    assert changed and all(any(c["key"] == "--micro-batch-size" and c["new"] == str(row["micro_batch_size"])
                               for c in row["changes"]) for row in changed)


def test_a_multi_line_shell_command_keeps_its_lines() -> None:
    """A newline ends a command in `sh -c CMD` as `;` does: CMD 'cd /work<newline>python ... > train.log' was read as
    one command, so --apply joined it into 'cd /work python ...' with '>' quoted as an argument."""
    cmd, cfg = _applied(["srun", "bash", "-c", f"cd /work\n{INNER} > train.log\necho done"])
    assert cmd.startswith("cd /work\npython -u pretrain_gpt.py ") and cmd.endswith(" > train.log\necho done")
    assert (cfg.parallel.tp, cfg.batch.micro_batch_size) == (4, 4)


def test_a_continued_line_is_one_training_command() -> None:
    """A backslash-newline joins lines: the flags after it belong to the training command and are rewritten with it
    (left behind, the old --micro-batch-size after the tuned one would win: argparse keeps the last)."""
    head, tail = INNER.split(" --micro-batch-size")
    cmd, cfg = _applied(["srun", "bash", "-c", f"{head} \\\n  --micro-batch-size{tail} 2>&1 | tee log.txt"])
    assert cmd.endswith(" 2>&1 | tee log.txt") and shlex.split(cmd).count("--micro-batch-size") == 1
    assert (cfg.parallel.tp, cfg.batch.micro_batch_size) == (4, 4)
