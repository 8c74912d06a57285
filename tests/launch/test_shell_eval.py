"""Launch scripts that build the command in a string and `eval` it (Megatron-DeepSpeed's examples_deepspeed:
`run_cmd="deepspeed ${dir}/../../pretrain_gpt.py ${megatron_options} ... 2>&1 | tee ${log}"`, `eval ${run_cmd}`) are
read from the variable, never run; and `bash -x train.sh` / `bash -e` / `sh train.sh` are scripts, as bash runs
them. Before, both exited 2 (no launch line; 'llmperf does not know the launcher bash')."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmperf_hook.errors import UsageError
from llmperf_hook.frameworks.resolve import resolve_job
from llmperf_hook.launch.parse import parse_launch, shell_command_index

GPT = ("--num-layers 24 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048 "
       "--vocab-size 50257 --micro-batch-size 2 --global-batch-size 64 --bf16")
EVAL_SCRIPT = f"""#!/bin/bash
dir=`pwd`
mp_size=2
num_gpus=$(ds_ssh nvidia-smi --list-gpus | wc -l)
megatron_options=" \\
    --tensor-model-parallel-size ${{mp_size}} \\
    {GPT}"
log_path="${{dir}}/log"
run_cmd="deepspeed --num_gpus 8 ${{dir}}/pretrain_gpt.py ${{megatron_options}} 2>&1 | tee ${{log_path}}/gpt.log"
echo ${{run_cmd}}
{{EVAL}}
set +x
"""


def _script(tmp_path: Path, text: str, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "train.sh").write_text(text)
    monkeypatch.chdir(tmp_path)
    return "train.sh"


@pytest.mark.parametrize("line", ["eval ${run_cmd}", 'eval "$run_cmd"', "eval $run_cmd", 'eval "${run_cmd}"'])
def test_eval_of_a_variable_reads_the_variable(line: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _script(tmp_path, EVAL_SCRIPT.replace("{EVAL}", line), monkeypatch)
    job, cfg = resolve_job(["bash", path], {})
    assert (job.launcher, job.world_size, cfg.parallel.tp, cfg.parallel.dp) == ("deepspeed", 8, 2, 4)
    assert job.script == f"{tmp_path}/pretrain_gpt.py" and "tee" not in job.script_args


def test_eval_of_launcher_and_args_variables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = (f'LAUNCHER="torchrun --nnodes 2 --nproc-per-node 8"\nARGS="pretrain_gpt.py {GPT}"\n'
            "eval $LAUNCHER $ARGS --tensor-model-parallel-size 4\n")
    job, cfg = resolve_job(["bash", _script(tmp_path, text, monkeypatch)], {})
    assert (job.world_size, cfg.parallel.tp, cfg.parallel.dp) == (16, 4, 4)


@pytest.mark.parametrize("line, why", [
    ('eval "$(python make_cmd.py)"', "line 4 evals a command substitution"),
    ("eval `cat cmd.txt`", "line 4 evals a command substitution"),
    ("eval $LAUNCH_CMD", "line 4 evals $LAUNCH_CMD, which the script does not set"),
])
def test_eval_llmperf_cannot_read_is_refused_naming_the_line(line: str, why: str, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    path = _script(tmp_path, f"#!/bin/bash\nset -e\nLAUNCH_CMD=$(cat cmd.txt)\n{line}\n", monkeypatch)
    with pytest.raises(UsageError) as err:
        parse_launch(["bash", path], {})
    assert err.value.args[0].startswith("shell script train.sh has no launch line") and why in err.value.args[0]
    assert "never runs its commands" in err.value.args[0]


@pytest.mark.parametrize("shell", [["bash", "-x"], ["bash", "-e"], ["bash", "-xe"], ["bash", "-x", "-e"], ["sh"],
                                   ["bash", "-o", "pipefail"], ["bash", "--norc", "-eo", "pipefail"], ["bash", "--"],
                                   ["/bin/bash", "+x"], ["zsh", "-l"], ["dash", "-eu"]])
def test_shell_options_before_the_script(shell: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _script(tmp_path, f"#!/bin/bash\ntorchrun --nproc-per-node 8 pretrain_gpt.py {GPT}\n", monkeypatch)
    job = parse_launch([*shell, path, "ckpt"], {})
    assert (job.launcher, job.world_size, job.script) == ("torchrun", 8, "pretrain_gpt.py")


@pytest.mark.parametrize("words, expected", [
    (["bash", "-c", "torchrun x.py"], True), (["bash", "-lc", "torchrun x.py"], True),
    (["sh", "-ec", "torchrun x.py"], True), (["bash", "-ce", "torchrun x.py"], True),
    (["bash", "train.sh"], False), (["bash", "-x", "train.sh"], False), (["bash", "-c"], False),
    (["python", "-c", "x"], False),
])
def test_shell_c_forms(words: list[str], expected: bool) -> None:
    assert (shell_command_index(words, 0) == 2) is expected


def test_bash_s_reads_standard_input(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`bash -s ARGS` reads its script from standard input (bash manual 6.1): llmperf's own, refused when that holds
    none (a terminal here, or nothing to read); given one, its launch line with ARGS as $1 ..."""
    import io
    import sys

    from llmperf_hook.launch.standard_input import read_standard_input

    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match="bash is given no script file, so it reads the script from its standard input"):
        parse_launch(["bash", "-s"], {})
    monkeypatch.setattr(sys, "stdin", io.StringIO("torchrun --nproc_per_node $1 pretrain_gpt.py --num-layers 2\n"))
    read_standard_input.cache_clear()
    try:
        job = parse_launch(["bash", "-s", "4"], {})
    finally:
        read_standard_input.cache_clear()
    assert (job.launcher, job.world_size, job.script) == ("torchrun", 4, "pretrain_gpt.py")
