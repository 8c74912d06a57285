"""A launch script read as bash and dash run it: each script is run by the real shell with stub `torchrun`,
`deepspeed` and `python` commands first on PATH, which record the argv they are given; llmperf's reading of the script (never run)
must give the same job as llmperf's parse of that recorded argv: sizes, training script and its arguments."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from llmperf_hook.errors import UsageError
from llmperf_hook.launch.parse import parse_launch

M = "pretrain_gpt.py --num-layers 2"
POSIX = {  # scripts dash and bash run alike
    "defaults": 'GPUS=${GPUS:-4}\nNN=${NN-2}\ntorchrun --nproc_per_node $GPUS --nnodes $NN ' + M + '\n',
    "arithmetic": 'G=4\nN=2\ntorchrun --nproc_per_node $G --nnodes $N ' + M + ' --global-batch-size $((G*N*2))\n',
    "shift": 'NP=${1:-8}\nshift\ntorchrun --nproc_per_node $NP ' + M + ' "$@"\n',
    "shift_n": 'A=$1; B=$2; shift 2\ntorchrun --nproc_per_node $A --nnodes $B ' + M + ' "$@"\n',
    "shift_past_the_end": 'shift 5\ntorchrun --nproc_per_node $1 ' + M + '\n',
    "set_dashes": 'set -- 2 4\ntorchrun --nproc_per_node $2 --nnodes $1 ' + M + '\n',
    "colon_default": ': "${NP:=4}"\n: ${NN=2}\ntorchrun --nproc_per_node $NP --nnodes $NN ' + M + '\n',
    "if_else": 'if [ -z "$NODES" ]; then NODES=2; else NODES=4; fi\ntorchrun --nnodes $NODES --nproc_per_node 8 ' + M + '\n',
    "case": 'MODE=big\ncase $MODE in\n  small) L=2;;\n  big) L=24;;\nesac\ntorchrun --nproc_per_node 8 pretrain_gpt.py '
            '--num-layers $L\n',
    "continuation": 'torchrun --nproc_per_node 8 \\\n  pretrain_gpt.py \\\n  --num-layers 2 # trailing comment\n',
    "hash_inside_a_word": 'torchrun --nproc_per_node 8 ' + M + ' --save a#b --load "c #d" # comment\n',
    "exec": 'exec torchrun --nproc_per_node 8 ' + M + '\n',
    "nohup_background": 'nohup torchrun --nproc_per_node 8 ' + M + ' > log.txt 2>&1 &\nwait\n',
    "empty_unquoted": 'EXTRA=\ntorchrun --nproc_per_node 8 pretrain_gpt.py $EXTRA --num-layers 2\n',
    "options_in_a_variable": 'OPTS="--tensor-model-parallel-size 2 --num-layers 2"\ntorchrun --nproc_per_node 8 '
                             'pretrain_gpt.py $OPTS\n',
    "deepspeed": 'NG=2\ndeepspeed --num_gpus=$NG pretrain_gpt.py --num-layers 2\n',
    "function_args": 'launch() {\n  torchrun --nproc_per_node $1 ' + M + ' "$@"\n}\nlaunch 4 --lr 1\n',
    "function_reads_at_the_call": 'NP=2\nlaunch() {\n  torchrun --nproc_per_node $NP ' + M + '\n}\nNP=4\nlaunch\n',
    "function_arg_inside_a_word": 'launch() {\n  torchrun --nproc_per_node=$1 ' + M + ' --save=/ckpt/$2\n}\nlaunch 4 run7\n',
    "function_one_line": 'launch() { torchrun --nproc_per_node $1 ' + M + '; }\nlaunch 4\n',
    "function_then_script_args": 'run() {\n  NP=$1\n}\nrun 2\ntorchrun --nproc_per_node $NP ' + M + ' "$@"\n',
    "function_given_the_script_args": 'main() {\n  NP=$1\n  shift\n  torchrun --nproc_per_node $NP ' + M + ' "$@"\n}\n'
                                      'main "$@"\n',
    "python_clustered_module": 'python -um torch.distributed.run --nproc_per_node 4 ' + M + '\n',
    "python_warning_option": 'python -W ignore -m torch.distributed.run --nproc_per_node 2 ' + M + '\n',
    "python_attached_module": 'python -mtorch.distributed.run --nproc_per_node 8 ' + M + '\n',
    "single_quoted_dollar": 'D=/data\nX=\'$D/ckpt\'\nY="\\$D"\ntorchrun --nproc_per_node 8 ' + M +
                            ' --save $X --load \'$D\' --a "\\$D" --b \\$D --c "$X" --f $Y\n',
    "eval_of_a_single_quoted_value": "NP=4\nCMD='torchrun --nproc_per_node $NP " + M + " --save $NP'\nNP=2\neval $CMD\n",
    "alternative_value": 'A=1\nE=\nOPTS="${A:+--bf16} ${E:+--fp16} ${E+--seed 7} ${U:+--x} ${U+--y}"\n'
                         'torchrun --nproc_per_node 8 ' + M + ' $OPTS\n',
    "alternative_value_words": 'A=1\nE=\ntorchrun --nproc_per_node 8 ' + M + ' ${A:+--bf16} ${E:+--fp16} ${E+--seed} '
                               '${E:-7} ${U:+--x} ${U+--y} ${U-} ${U:-} ${A-9}\n',
    "local_is_the_functions_own": 'NP=8\nNN=2\nf() {\n  local NP=2 NN\n  NN=5\n}\nf\n'
                                  'torchrun --nproc_per_node $NP --nnodes $NN ' + M + '\n',
    "local_dynamic_scope": 'NP=8\nset_np() {\n  NP=6\n}\nrun() {\n  local NP=4\n  set_np\n  torchrun --nproc_per_node $NP '
                           + M + '\n}\nrun\n',
    "local_outside_any_function": 'local NP=2\ntorchrun --nproc_per_node ${NP:-8} ' + M + '\n',  # dash stops
    "local_in_quoted_words": 'NP=8\nB=2\nrun() {\n  local NP=4 B\n  torchrun --nproc_per_node "$NP" ' + M +
                             ' --save "${B:-x}" --load "$B"y\n}\nrun\n',
    "single_run_reads_its_own_line": 'N=2\npython pretrain_gpt.py --num-layers "$N"\nN=4\n',
    "subshell_group": 'mkdir -p run\n( cd run && torchrun --nproc_per_node 4 ' + M + ' )\n',
    "subshell_group_attached": '(torchrun --nproc_per_node 4 ' + M + ') > log 2>&1\n',
    "brace_group": '{ torchrun --nproc_per_node 4 ' + M + '; } 2>&1 | tee log\n',
    "command_builtin": 'command torchrun --nproc_per_node 4 ' + M + '\n',
    "python_in_a_variable": 'PY=python\n$PY -m torch.distributed.run --nproc_per_node 2 ' + M + '\n',
    "trim_and_length": 'V=model.tar.json\nH=node1,node2\nL=abcd\ntorchrun --nproc_per_node ${#L} ' + M +
                       ' --save ${V%.*} --load ${V%%.*} --a ${V#*.} --b ${V##*.} --c ${H%%,*}\n',
}
BASH = {  # bash only
    "arrays": 'ARGS=(--nproc_per_node 4 --nnodes 2)\nM=(--split "99,1,0" --lr 1e-4)\ntorchrun "${ARGS[@]}" pretrain_gpt.py '
              '--num-layers 2 "${M[@]}"\n',
    "array_unquoted": 'M=(--data-path "a b" --lr 1e-4)\ntorchrun --nproc_per_node 2 pretrain_gpt.py --num-layers 2 ${M[@]}\n',
    "function_keyword_local": 'function main {\n  local np=4\n  torchrun --nproc_per_node $np ' + M + '\n}\nmain "$@"\n',
    "declare_in_a_function": 'NP=8\nf() {\n  declare NP=2\n  declare -g NN=2\n}\nf\ntorchrun --nproc_per_node $NP '
                             '--nnodes $NN ' + M + '\n',
    "time": 'time torchrun --nproc_per_node 8 ' + M + '\n',
    "declare_integer": 'declare -i NP=2*3\ntorchrun --nproc_per_node $NP ' + M + '\n',
    "ansi_c": "torchrun --nproc_per_node 8 " + M + " --save $'a\\tb'\n",
    "replace_case_substring": 'N=a-b-c\nL=Hello\nS=abcdef\nD=8642\ntorchrun --nproc_per_node ${D:1:1} ' + M +
                              ' --a ${N/-/_} --b ${N//-/_} --c ${L^^} --dd ${L,,} --ee ${S:2} --f ${S:1:-1}\n',
}
ARGS = {"function_then_script_args": ["--lr", "3"], "function_given_the_script_args": ["4", "--lr", "1"],
        "shift": ["6", "--lr", "2"], "shift_n": ["4", "2", "--lr", "1"], "shift_past_the_end": ["3"]}
STUB = '#!/bin/sh\nprintf "%s\\0" "$(basename "$0")" "$@" > "$ARGV_OUT"\n'


def _run(shell: str, script: Path, args: list[str], tmp_path: Path) -> list[str] | None:
    """The argv the launcher got when `shell script args` ran; None when the script stopped before it."""
    stubs = tmp_path / "bin"
    stubs.mkdir()
    for name in ("torchrun", "deepspeed", "python"):
        (stubs / name).write_text(STUB)
        (stubs / name).chmod(0o755)
    out = tmp_path / "argv"
    env = {"PATH": f"{stubs}:/usr/bin:/bin", "ARGV_OUT": str(out), "HOME": str(tmp_path)}
    subprocess.run([shell, str(script), *args], env=env, cwd=tmp_path, capture_output=True, timeout=30, check=False)
    return out.read_bytes().decode().split("\0")[:-1] if out.exists() else None


def _job(argv: list[str]) -> tuple[object, ...]:
    job = parse_launch(argv, {})
    return job.launcher, job.nnodes, job.nproc_per_node, job.world_size, job.script, job.script_args


def _compare(shell: str, name: str, text: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The shell's launch and llmperf's reading agree; where the shell stops before launching, llmperf refuses."""
    path = shutil.which(shell)
    if path is None:
        pytest.skip(f"{shell} is not installed")
    script = tmp_path / "train.sh"
    script.write_text(f"#!/bin/{shell}\n" + text)
    args = ARGS.get(name, [])
    real = _run(path, script, args, tmp_path)
    monkeypatch.chdir(tmp_path)
    if real is None:
        with pytest.raises(UsageError):
            parse_launch([shell, str(script), *args], {})
        return
    assert _job([shell, str(script), *args]) == _job(real), (name, real)


@pytest.mark.parametrize("name", POSIX)
@pytest.mark.parametrize("shell", ["bash", "dash"])
def test_posix_scripts(shell: str, name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _compare(shell, name, POSIX[name], tmp_path, monkeypatch)


@pytest.mark.parametrize("name", BASH)
def test_bash_scripts(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _compare("bash", name, BASH[name], tmp_path, monkeypatch)
