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
