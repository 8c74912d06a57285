"""Launch forms of public repositories' scripts that llmperf read wrongly or refused although bash runs one training
launch from them (session H120: `llmperf explain` over the mirrors' .sh / .slurm scripts, and the leftovers R24 and
H112 noted); each test fails without its fix."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from llmperf_hook.launch.parse import parse_launch
from llmperf_hook.launch.shell_script import split_unquoted_words

BASH = shutil.which("bash")
GPT = ("--num-layers 12 --hidden-size 512 --num-attention-heads 8 --seq-length 1024 --max-position-embeddings 1024 "
       "--micro-batch-size 4 --vocab-size 1000 --mock-data")

# Megatron-DeepSpeed tests/functional_tests/test_scripts/gpt3/sbatch_gpt3_distributed_test.sh (deepspeedai and
# microsoft): srun runs a multi-line `bash -c` string that goes to the checkout and runs the test's launch script
# (pretrain_gpt3_distributed_test.sh, its torchrun line cut to the flags used here).
SBATCH_TEST = """#!/bin/bash
#SBATCH --nodes=1
DATA_PATH=/workspace/data/gpt3_data/my-gpt3_00_text_document
srun --output $BASE_DIR/results/slurm-%j.out --no-container-mount-home bash -c "
  ls
  cd {checkout}
  ./tests/pretrain_gpt3_distributed_test.sh $DATA_PATH $TP_SIZE $PP_SIZE $NUM_NODES $VP_SIZE"
"""
PRETRAIN_TEST = """#!/bin/bash
DATA_PATH=$1
TP_SIZE=$2
PP_SIZE=$3
NNODES=$4
VP_SIZE=$5
GPUS_PER_NODE=8
DISTRIBUTED_ARGS="--nproc_per_node $GPUS_PER_NODE --nnodes $NNODES"
torchrun $DISTRIBUTED_ARGS \\
       pretrain_gpt.py \\
       {gpt} \\
       --tensor-model-parallel-size $TP_SIZE \\
       --pipeline-model-parallel-size $PP_SIZE \\
       ${{VP_SIZE:+--num-layers-per-virtual-pipeline-stage "$VP_SIZE"}} \\
       --global-batch-size 32 --fp16
"""


def _checkout(tmp_path: Path) -> Path:
    checkout = tmp_path / "megatron-lm"
    (checkout / "tests").mkdir(parents=True)
    script = checkout / "tests" / "pretrain_gpt3_distributed_test.sh"
    script.write_text(PRETRAIN_TEST.format(gpt=GPT))
    script.chmod(0o755)
    (tmp_path / "job.sh").write_text(SBATCH_TEST.format(checkout=checkout))
    return checkout


@pytest.mark.parametrize("vp_size, vpp", [("3", 2), ("", 1)])
def test_srun_bash_c_lines_that_run_a_launch_script(vp_size: str, vpp: int, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The newlines of the `bash -c` string end its commands (bash manual 3.2.4): llmperf joined them into one
    command, `ls cd DIR ./tests/...sh ...`, so srun started 'ls' as the training script; and srun running a script
    file (`./x.sh`, `bash x.sh`) was taken to start that file as the training program, where the script's own torchrun
    line sizes the job. `${VP_SIZE:+--num-layers-per-virtual-pipeline-stage "$VP_SIZE"}` gives both words when
    VP_SIZE is set and none when it is empty (bash manual 3.5.3), where llmperf left it split at its blank. Before:
    exit 2 'cannot find the model shape'."""
    from llmperf_hook.frameworks.resolve import resolve_job

    _checkout(tmp_path)
    monkeypatch.chdir(tmp_path)
    job, cfg = resolve_job(["sbatch", "job.sh"], {"TP_SIZE": "2", "PP_SIZE": "2", "NUM_NODES": "1",
                                                  "VP_SIZE": vp_size})
    assert (job.launcher, job.world_size, job.script) == ("torchrun", 8, "pretrain_gpt.py")
    assert (cfg.parallel.tp, cfg.parallel.pp, cfg.parallel.vpp) == (2, 2, vpp)


@pytest.mark.parametrize("head", [["srun", "-N", "1"], []])
@pytest.mark.parametrize("string", [
    "cd /w # go to the checkout\ntorchrun --nproc-per-node 8 pretrain_gpt.py {gpt} --tensor-model-parallel-size 2",
    "cd /w\ntorchrun --nproc-per-node 8 pretrain_gpt.py {gpt} --tensor-model-parallel-size 2\n",
    "echo start # it's here\n\ntorchrun --nproc-per-node 8 pretrain_gpt.py {gpt} --tensor-model-parallel-size 2"])
def test_bash_c_string_of_several_lines(head: list[str], string: str) -> None:
    """`bash -c "cd /w # a comment<newline>torchrun ..."` (H112): the comment ran to the string's end once its
    newlines were blanks, so no flags were read ('cannot find the model shape'); without srun, `cd` was 'a launcher
    llmperf does not know'."""
    job = parse_launch([*head, "bash", "-c", string.format(gpt=GPT)], {})
    assert (job.launcher, job.world_size) == ("torchrun", 8)
    assert job.script_args[-2:] == ("--tensor-model-parallel-size", "2")


def test_srun_bash_script_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`srun -N 2 bash run.sh` whose run.sh starts torchrun: each task runs the script, so its torchrun sizes the job
    (as `srun bash -c 'torchrun ...'` does); llmperf read 'bash' as the training program."""
    (tmp_path / "run.sh").write_text(f"#!/bin/bash\nTP=2\ntorchrun --nnodes 2 --nproc-per-node 4 pretrain_gpt.py "
                                     f"{GPT} --tensor-model-parallel-size $TP\n")
    monkeypatch.chdir(tmp_path)
    for head in (["bash", "run.sh"], ["./run.sh"]):
        job = parse_launch(["srun", "-N", "2", "--ntasks-per-node", "1", *head], {})
        assert (job.launcher, job.nnodes, job.world_size, job.script) == ("torchrun", 2, 8, "pretrain_gpt.py")


ALTERNATE = {"set": {"VP": "3", "A": "4"}, "empty": {"VP": "", "A": ""}, "unset": {}}


@pytest.mark.parametrize("values", ALTERNATE.values(), ids=ALTERNATE.keys())
def test_alternate_value_words_as_bash_splits_them(values: dict[str, str]) -> None:
    """`${VP:+--flag "$VP"}`, `${VP:+--flag ${VP}}`, `${A:-8 9}` as unquoted words, checked against bash."""
    if BASH is None:
        pytest.skip("needs bash")
    line = 'x ${VP:+--vp "$VP"} ${VP:+--vp2 ${VP}} ${A:-8 9} ${A+--a "$A"} end'
    ours = split_unquoted_words(line, values.get, [])
    script = "".join(f"{name}={value!r}\n" for name, value in values.items()) + f'printf "[%s]" {line}'
    theirs = subprocess.run([BASH, "-c", script], capture_output=True, text=True, check=True,
                            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")}).stdout
    assert "".join(f"[{word}]" for word in shlex.split(ours)) == theirs


@pytest.mark.parametrize("line", [
    "mp_size=2 num_gpus_pernode=$(nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)",
    "num_gpus_pernode=`nvidia-smi -L | wc -l` mp_size=2",
    "mp_size=2 num_gpus=$(($(ds_ssh nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)-2))",
])
def test_one_line_assignments_with_a_command_substitution(line: str, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """`A=1 B=$(cmd | cmd)` on one line (R24; the substitutions are Megatron-DeepSpeed examples_deepspeed/rebase/
    ds_pretrain_gpt_1.3B.sh lines 146-147): bash assigns both, left to right (bash manual 3.7.1). The substitution's
    `|` cut the line into two commands and its blanks into words, so neither variable was set: '--tensor-model-
    parallel-size expects an integer, got $mp_size' (exit 2)."""
    (tmp_path / "train.sh").write_text(f"#!/bin/bash\n{line}\ntorchrun --nproc-per-node 8 pretrain_gpt.py {GPT} "
                                       "--tensor-model-parallel-size $mp_size\n")
    monkeypatch.chdir(tmp_path)
    assert parse_launch(["bash", "train.sh"], {}).script_args[-2:] == ("--tensor-model-parallel-size", "2")


def test_a_launch_word_from_a_command_output_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`torchrun --nproc-per-node $(nvidia-smi -L | wc -l) ...`: the substitution is one word; llmperf cut the line at
    its `|` and refused '-L' as an unknown torchrun option."""
    from llmperf_hook.errors import UsageError

    (tmp_path / "train.sh").write_text(f"#!/bin/bash\ntorchrun --nproc-per-node $(nvidia-smi -L | wc -l) "
                                       f"pretrain_gpt.py {GPT}\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match=r"--nproc-per-node \$\(nvidia-smi -L \| wc -l\) is the output of a command.*"
                                         r"--nproc-per-node N"):
        parse_launch(["bash", "train.sh"], {})
    assert parse_launch(["bash", "train.sh"], {}, nproc_per_node=4).world_size == 4


# bigscience-workshop/bigscience train/tr7-alibi/tr7b-extrapolation-law.slurm, cut to what sizes the job: an
# evaluation per sequence length, `for increment in {100..2000..100}` around the ds_config, LAUNCHER, CMD and srun.
SWEEP = """#!/bin/bash
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=1
#SBATCH --gres=gpu:4
GPUS_PER_NODE=4
NNODES=4
SEQ_LEN=2048
for increment in {100..2000..100}; do
    SEQ_LEN_2=$(($increment + $SEQ_LEN))
    echo "***** Extrapolation for a seq length of $SEQ_LEN_2 *****"
    GPT_ARGS=" \\
    --num-layers 24 --hidden-size 1024 --num-attention-heads 16 \\
    --seq-length $SEQ_LEN_2 \\
    --max-position-embeddings $SEQ_LEN_2 \\
    --micro-batch-size 8 --global-batch-size 512 --vocab-size 50257 --fp16 \\
    "
    export LAUNCHER="python -u -m torch.distributed.launch \\
    --nproc_per_node $GPUS_PER_NODE \\
    --nnodes $NNODES \\
    "
    export CMD=" \\
    pretrain_gpt.py \\
    --tensor-model-parallel-size 4 \\
    --pipeline-model-parallel-size 2 \\
    $GPT_ARGS \\
    "
    srun --jobid $SLURM_JOBID bash -c '$LAUNCHER --node_rank $SLURM_PROCID $CMD' 2>&1 | tee -a log.txt
done
"""


def test_a_sweep_prices_its_first_pass_and_names_the_others(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A launch in a `for` loop runs once per value, one job after another. llmperf refused it ('bash -c runs
    $LAUNCHER as its command, a variable that shell does not have': the loop body's variables were unknown); now the
    body is read per value (bash manual 3.2.5.1, brace expansion 3.5.1) and the first job, the one bash starts first,
    is priced, with a warning naming the loop's values."""
    (tmp_path / "tr7b.slurm").write_text(SWEEP)
    monkeypatch.chdir(tmp_path)
    job = parse_launch(["sbatch", "tr7b.slurm"], {})
    assert (job.nnodes, job.world_size) == (4, 16)
    assert job.script_args[job.script_args.index("--seq-length") + 1] == "2148"
    warning = next(w for w in job.warnings if "loop" in w)
    assert "`for increment in ...`" in warning and "increment = 100, 200, 300" in warning and "(20 values)" in warning
    assert "increment=100" in warning


def test_a_loop_starting_each_node_in_the_background_is_no_sweep(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """`for node in n1 n2; do ssh $node torchrun --nnodes 2 --node_rank $R ... & done`: bash starts the passes at once,
    the nodes of one job, so no warning says it starts 2 jobs one after another; it says they start at once."""
    (tmp_path / "train.sh").write_text(f"#!/bin/bash\nR=0\nfor node in n1 n2; do\n  ssh $node torchrun --nnodes 2 "
                                       f"--node_rank $R --nproc-per-node 8 pretrain_gpt.py {GPT} &\n  R=$((R+1))\n"
                                       "done\nwait\n")
    monkeypatch.chdir(tmp_path)
    job = parse_launch(["bash", "train.sh"], {})
    assert job.world_size == 16 and not any("one after another" in w for w in job.warnings), job.warnings
    assert any("starts all 2 at once" in w and "node=n1" in w for w in job.warnings), job.warnings


LOOPS = {
    "brace sequence": 'for s in {1..3}; do\n  A="$A --stage$s"\ndone',
    "step and reversed": 'for s in {10..2..4}; do\n  A="$A $s"\ndone\nfor s in {3..1}; do\n  B="$B $s"\ndone',
    "brace list with text": 'for m in pre{a,b}post; do\n  A="$A $m"\ndone',
    "words and a variable": 'L="4 8"\nfor n in 1 $L "x y"\ndo\n  A="$A [$n]"\ndone\nB=$n',
    "array": 'SIZES=(1 "2 3")\nfor n in "${SIZES[@]}"; do\n  A="$A <$n>"\ndone',
    "arguments": 'set -- --tp 2\nfor a in "$@"; do\n  A="$A $a"\ndone',
    "nested, with an if": 'for i in 1 2; do\n  for j in a b; do\n    if [ $j = b ]; then\n      A="$A $i$j"\n    fi\n'
                          '  done\ndone',
    "no words": 'for n in $UNSET_ONE; do\n  A=ran\ndone',
    "on one line": 'for n in 1 2; do A="$A $n"; B=$n; done',
    "arguments with blanks": 'set -- "a b" c\nfor a in "$@"; do\n  A="$A <$a>"\ndone\nfor a in "$*" $@; do\n'
                             '  B="$B <$a>"\ndone',
    "a function's arguments": 'f() {\n  for a in "$@"; do\n    A="$A <$a>"\n  done\n}\nf "x y" z',
    "`;` and `do` on the next line": 'for n in 1 2;\ndo\n  A="$A <$n>"\ndone',
    "a brace list with an empty item": 'for n in {a,} x{a,} ""; do\n  A="$A <$n>"\ndone',
    "single-quoted dollar": "V=x\nfor n in 'a b' '$V' \\$V; do\n  A=\"$A <$n>\"\ndone",
    "done with a redirection": 'for i in 1 2; do\n  A="$A $i"\ndone > /dev/null',
    "a while loop in a pipe inside": 'for i in 1 2; do\n  echo x | while read l; do\n    :\n  done\n  A="$A $i"\ndone',
    "break": 'for i in 1 2 3; do\n  if [ $i = 2 ]; then break; fi\n  A="$A $i"\ndone\nB=$i',
    "continue on one line": 'for i in 1 2 3; do [ $i = 2 ] && continue; A="$A $i"; done',
    "break 2": 'for i in 1 2; do\n  for j in a b; do\n    A="$A $i$j"\n    break 2\n  done\ndone',
    "continue 2": 'for i in 1 2; do\n  for j in a b; do\n    [ $j = b ] && continue 2\n    A="$A $i$j"\n  done\n'
                  '  A="$A never"\ndone',
    "break in the inner loop only": 'for i in 1 2; do\n  for j in a b c; do\n    [ $j = b ] && break\n'
                                    '    A="$A $i$j"\n  done\n  B="$B $i"\ndone',
    "break past every loop": 'for i in 1 2; do\n  A="$A $i"\n  break 5\ndone',
    "break 0 and continue 0": 'for i in 1 2; do\n  A="$A $i"\n  continue 0\n  A="$A x"\ndone\n'
                              'for i in 1 2; do\n  B="$B $i"\n  break 0\ndone',
    "negative and zero-padded counts": 'for i in 1 2; do\n  A="$A $i"\n  continue -1\ndone\nfor i in 1 2; do\n'
                                       '  for j in a b; do\n    B="$B $i$j"\n    break 02\n  done\ndone',
    "a smallest count that fits": 'NEED=3\nfor n in 1 2 4 8; do\n  if [ $n -ge $NEED ]; then\n    A=$n\n    break\n'
                                  '  fi\ndone',
    "break in a called function ends no loop": 'stop() { break; }\nfor i in 1 2 3; do\n  [ $i = 3 ] && stop\n  A="$A $i"\ndone',
    "break in a subshell ends no loop": 'for i in 1 2 3; do\n  ( [ $i = 2 ] && break )\n  A="$A $i"\ndone',
    "break in a while inside": 'for i in 1 2; do\n  while true; do\n    break\n  done\n  A="$A $i"\ndone',
    "a loop in a function": 'f() {\n  for i in 1 2 3; do\n    [ $i = $1 ] && break\n    A="$A $i"\n  done\n}\nf 3',
}


@pytest.mark.parametrize("body", LOOPS.values(), ids=LOOPS.keys())
def test_loops_as_bash_runs_them(body: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A `for` loop whose words llmperf knows is read once per word, so what the body builds is what bash builds (it
    left the body's variables unknown after any loop)."""
    if BASH is None:
        pytest.skip("needs bash")
    script = tmp_path / "train.sh"
    script.write_text(f"#!/bin/bash\nA=-; B=-\n{body}\n" + 'torchrun --nproc_per_node 8 pretrain_gpt.py "[$A]" "[$B]"\n')
    monkeypatch.chdir(tmp_path)
    runner = 'torchrun() { printf "%s\\n" "${@:4}"; }; export -f torchrun; bash "$0"'
    theirs = subprocess.run([BASH, "-c", runner, str(script)], capture_output=True, text=True, check=True,
                            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, cwd=tmp_path).stdout.split("\n")[:2]
    assert list(parse_launch(["bash", script.name], {}).script_args) == theirs, theirs


def test_nested_loops_are_read_pass_by_pass_up_to_a_bound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Three nested loops of 100 words are a million passes, which took minutes to read: past MAX_TOTAL_PASSES the
    inner loops are read once as bodies that may run, so what they set is unknown, never a wrong value."""
    (tmp_path / "train.sh").write_text("#!/bin/bash\nfor i in {1..100}; do\n  for j in {1..100}; do\n"
                                       "    for k in {1..100}; do\n      X=$i.$j.$k\n    done\n  done\ndone\n"
                                       'torchrun --nproc_per_node 8 pretrain_gpt.py "[$X]"\n')
    monkeypatch.chdir(tmp_path)
    assert parse_launch(["bash", "train.sh"], {}).script_args == ("[$X]",)


UNFOLLOWED_LOOPS = {
    "break on a command's status": 'for i in 1 2 3; do\n  if ping -c1 node$i; then break; fi\n  A="$A $i"\ndone',
    "continue on a command's output": 'for i in 1 2 3; do\n  [ "$(hostname)" = n$i ] && continue\n  A="$A $i"\ndone',
    "return": 'f() {\n  for i in 1 2 3; do\n    A="$A $i"\n    return\n  done\n}\nf',
    "done in a pipe": 'for i in 1 2; do\n  A="$A $i"\ndone | cat',
    "quoted braces": 'for i in "{1..3}"; do\n  A="$A $i"\ndone',
    "an array's first item": 'L=(p q)\nfor i in ${L}; do\n  A="$A $i"\ndone',
    "a tilde": 'for i in ~/x; do\n  A="$A $i"\ndone',
    "break 2 from a while read once": 'for i in 1 2; do\n  while true; do\n    break 2\n  done\n  A="$A $i"\ndone',
}  # zero-padded and letter sequences and two brace expressions in a word are expanded as bash does since H189
# (launch/brace_expansion.py): their loops are read pass by pass, compared with bash in test_launch_front_end_h189;
# so is a loop split at the script's IFS since H205 (test_front_end_h205 IFS "for_loop_words")


@pytest.mark.parametrize("body", UNFOLLOWED_LOOPS.values(), ids=UNFOLLOWED_LOOPS.keys())
def test_loops_llmperf_cannot_follow_are_read_once(body: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A loop whose passes bash ends early where llmperf cannot tell (a break or continue on a command's status,
    return), runs in a subshell (`done | cat`) or splits
    otherwise (brace forms llmperf does not expand) is read once as a body that may run: what it
    builds stays unknown, where reading every pass gave a value bash does not (`[- 1 2 3]` for bash's `[- 1]`)."""
    launch = 'torchrun --nproc_per_node 8 pretrain_gpt.py "[$A]"\n'
    (tmp_path / "train.sh").write_text(f"#!/bin/bash\nA=-\n{body}\n{launch}")
    monkeypatch.chdir(tmp_path)
    assert parse_launch(["bash", "train.sh"], {}).script_args == ("[$A]",)


PRECISION_BRANCHES = """#!/bin/bash
TRAINING_ARGS=(--micro-batch-size 1 --global-batch-size 8)
{before}
if [ "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" = "NVIDIA A100-SXM4-80GB" ]; then
    TRAINING_ARGS+=({first})
else
    TRAINING_ARGS+=({second})
fi
torchrun --nproc-per-node 8 pretrain_gpt.py {gpt} "${{TRAINING_ARGS[@]}}" {after}
"""


@pytest.mark.parametrize("first, second, after, priced, dropped_at", [
    ("--bf16", "--fp16", "", "bf16", "line 7"),
    ("--fp16", "--bf16", "", "fp16", "line 7"),
    ("--seed 3", "--bf16", "--fp16", "fp16", "line 7"),
    ("--bf16", "--seed 3", "--fp16", "fp16", "line 5"),
])
def test_precision_from_an_undecided_branch_is_priced(first: str, second: str, after: str, priced: str,
                                                      dropped_at: str, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A script that picks --bf16 or --fp16 from a command's output (the array form of Megatron-LM's examples;
    Megatron-DeepSpeed tests/functional_tests pretrain_gpt3_distributed_test.sh picks TRAINING_DTYPE in an `if`):
    bash passes one, llmperf read both branches and Megatron's 'assert not args.bf16' made it exit 2. Priced now with
    the unconditional flag, else the first branch's, and a warning names the other and its line."""
    from llmperf_hook.frameworks.resolve import resolve_job

    (tmp_path / "train.sh").write_text(PRECISION_BRANCHES.format(before="", first=first, second=second, after=after,
                                                                 gpt=GPT))
    monkeypatch.chdir(tmp_path)
    _, cfg = resolve_job(["bash", "train.sh"], {})
    assert cfg.precision == priced
    warning = next(w for w in cfg.warnings if "--fp16 and --bf16" in w)
    assert f"from {dropped_at}, run on a condition llmperf could not decide" in warning
    assert f"Priced with --{priced}" in warning


def test_precision_given_twice_unconditionally_is_still_refused(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from llmperf_hook.errors import ConfigError
    from llmperf_hook.frameworks.resolve import resolve_job

    (tmp_path / "train.sh").write_text(PRECISION_BRANCHES.format(before="", first="--seed 1", second="--seed 2",
                                                                 after="--fp16 --bf16", gpt=GPT))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="are both set; Megatron accepts one"):
        resolve_job(["bash", "train.sh"], {})


DATA_BRANCH = {
    "a line setting no data flag refuses": ("export NCCL_DEBUG=INFO", "--data-path /d/text_document", None),
    "a data flag in the branch warns": ("ARGS+=(--data-path /d/text_document)", "", "line 4"),
    "a variable a data flag reads warns": ("DATA_PATH=/d/text_document", "--data-path $DATA_PATH", "line 4"),
}


@pytest.mark.parametrize("branch, after, warned", DATA_BRANCH.values(), ids=DATA_BRANCH.keys())
def test_only_undecided_lines_that_may_set_a_data_flag_soften(branch: str, after: str, warned: str | None,
                                                              tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Megatron-LM's single-data-source assert (R24): any undecided line anywhere in the script made a refusal a
    warning, also `export NCCL_DEBUG=INFO` run on a condition; now only a line that may give a data source (it names
    one, or sets a variable a data flag expands: launch/undecided_options.py) does."""
    from llmperf_hook.errors import ConfigError
    from llmperf_hook.frameworks.resolve import resolve_job

    (tmp_path / "train.sh").write_text(f"#!/bin/bash\nARGS=(--seed 1)\nif [ \"$(hostname)\" = login ]; then\n"
                                       f"    {branch}\nfi\ntorchrun --nproc-per-node 8 pretrain_gpt.py {GPT} "
                                       f"--global-batch-size 32 \"${{ARGS[@]}}\" {after}\n")
    monkeypatch.chdir(tmp_path)
    if warned is None:
        with pytest.raises(ConfigError, match="single data source"):
            resolve_job(["bash", "train.sh"], {})
        return
    _, cfg = resolve_job(["bash", "train.sh"], {})
    assert any("single data source" in w and warned in w for w in cfg.warnings)


def test_an_undecided_line_assigning_a_variable_that_holds_a_data_flag_softens(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """`ARGS="$DATA"` on an undecided condition, DATA set to `--data-path ...` before: the data-source rule is a
    warning (it was before a166bd5, which refused it). Both branches assign it (H177: where one alone did, ARGS is
    --data-path or unset after `fi`, which the launch names instead)."""
    from llmperf_hook.frameworks.resolve import resolve_job

    (tmp_path / "train.sh").write_text(f"#!/bin/bash\nDATA=\"--data-path /d/text_document\"\n"
                                       "if [ \"$(hostname)\" = login ]; then ARGS=\"$DATA\"; else ARGS=\"$DATA\"; "
                                       "fi\n"
                                       f"torchrun --nproc-per-node 8 pretrain_gpt.py {GPT} --global-batch-size 32 "
                                       "$ARGS\n")
    monkeypatch.chdir(tmp_path)
    _, cfg = resolve_job(["bash", "train.sh"], {})
    assert any("single data source" in w and "line 3" in w for w in cfg.warnings)


NOT_TRAINING = {
    # bigscience-workshop/Megatron-DeepSpeed examples/run_evalharness.sh: was 'the --num-layers -1 must be at least 1'
    "eval harness": ("./tasks/eval_harness/evaluate.py", "--num-layers -1 --hidden-size -1 --num-attention-heads -1 "
                     "--seq-length -1 --max-position-embeddings -1 --micro-batch-size 1", "lm-evaluation-harness"),
    # Megatron-DeepSpeed examples/run_text_generation_server_345M.sh: was priced as a training step (exit 0)
    "text generation server": ("tools/run_text_generation_server.py", GPT, "text-generation tool"),
    # Megatron-DeepSpeed examples_deepspeed/data_efficiency/gpt/ds_analyze_gpt_data_map.sh: was priced (exit 0)
    "data analysis": ("../analyze_data.py", GPT, "data or checkpoint tool"),
}


@pytest.mark.parametrize("script, args, what", NOT_TRAINING.values(), ids=NOT_TRAINING.keys())
def test_megatron_tools_that_do_not_train_are_named(script: str, args: str, what: str, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from llmperf_hook.errors import ConfigError
    from llmperf_hook.frameworks.resolve import resolve_job

    (tmp_path / "run.sh").write_text(f"#!/bin/bash\ntorchrun --nproc-per-node 1 {script} {args}\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=f"is Megatron's {what}.*llmperf does not price: it predicts training steps"):
        resolve_job(["bash", "run.sh"], {})


def test_a_value_only_running_the_script_gives_is_traced_to_its_line(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Megatron-DeepSpeed examples_deepspeed/bert_with_pile/ds_pretrain_bert.sh: `num_gpus=$(($(ds_ssh nvidia-smi
    ... | wc -l)-2))`, then `batch_size=$(( ${global_batch_size} / ${dp_size} ))`: the refusal of `--micro-batch-size
    ${batch_size}` advised 'set it in the environment', which the script's own assignment overrides; it now names the
    line that sets it."""
    from llmperf_hook.errors import ConfigError
    from llmperf_hook.frameworks.resolve import resolve_job

    (tmp_path / "train.sh").write_text(
        "#!/bin/bash\nglobal_batch_size=1024\n"
        "num_gpus=$(($(ds_ssh nvidia-smi --query-gpu=name --format=csv,noheader | wc -l)-2))\n"
        "dp_size=$(( ${num_gpus} / 2 ))\nbatch_size=$(( ${global_batch_size} / ${dp_size} ))\n"
        f"torchrun --nproc-per-node 8 pretrain_gpt.py {GPT.replace('--micro-batch-size 4', '')} "
        "--micro-batch-size ${batch_size}\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match=r"sets \$batch_size at line 5 \(`batch_size=\$\(\( \$\{global_batch_size\} "
                                          r"/ \$\{dp_size\} \)\)`\) from what only running it tells"):
        resolve_job(["bash", "train.sh"], {})


def test_a_loop_of_several_runs_is_refused_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """NVIDIA/apex apex/contrib/sparsity/permutation_tests/ablation_studies.sh: `for seed in {0..24}` around two
    python runs. Read pass by pass, the refusal listed 50 launch lines; it names the loop body's two, from the first
    pass, as bash's first pass runs them."""
    from llmperf_hook.errors import UsageError

    (tmp_path / "ablation.sh").write_text(
        "#!/bin/bash\nfor seed in {0..24}; do\n    echo $seed\n"
        "    python3 permutation_test.py --channels 16 --filters 32 --seed $seed | tee a_$seed.log\n"
        "    python3 permutation_test.py --channels 128 --filters 64 --seed $seed | tee b_$seed.log\ndone\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match=r"has 2 launch lines \(line 4: .*--seed 0; line 5: .*--seed 0\)"):
        parse_launch(["bash", "ablation.sh"], {})


# bigscience-workshop/bigscience jz/slurm/multi-node-launcher3.slurm, cut to what sizes the job: one
# torch.distributed.launch per node, started over ssh in a loop over the allocation's hosts.
SSH_LOOP = """#!/bin/bash
#SBATCH --nodes=2
GPUS_PER_NODE=4
NNODES=2
MASTER_ADDR=`/bin/hostname -s`
SLAVES=`scontrol show hostnames $SLURM_JOB_NODELIST | grep -v $MASTER_ADDR`
HOSTLIST="$MASTER_ADDR $SLAVES"
NODE_RANK=0
for node in $HOSTLIST; do
    ssh -q $node \\
        python -m torch.distributed.launch \\
            --nproc_per_node $GPUS_PER_NODE \\
            --nnodes $NNODES \\
            --node_rank $NODE_RANK \\
            pretrain_gpt.py {gpt} &
    NODE_RANK=$((NODE_RANK+1))
done
wait
"""


def test_ssh_per_host_in_a_loop_over_unknown_hosts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The loop's words hold `$MASTER_ADDR $SLAVES`, which only running hostname / scontrol gives: llmperf read them
    as empty (the test of a variable holding an unknown one was decided), so the loop ran no pass and the script had
    'no launch line'; and `ssh -q HOST CMD` was 'a launcher llmperf does not know'. ssh now wraps the command it runs
    on that host (OpenSSH ssh(1): destination, then command), and the loop is read once as a body that may run."""
    (tmp_path / "job.slurm").write_text(SSH_LOOP.format(gpt=GPT))
    monkeypatch.chdir(tmp_path)
    job = parse_launch(["sbatch", "job.slurm"], {})
    assert (job.launcher, job.nnodes, job.world_size) == ("torch.distributed.launch", 2, 8)


def test_a_test_on_a_variable_holding_an_unknown_one_is_undecided(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "train.sh").write_text(
        "#!/bin/bash\nTP=1\nHOST=`hostname -s`\nH=\"$HOST\"\nif [ -z \"$H\" ]; then TP=2; fi\n"
        f"torchrun --nproc-per-node 8 pretrain_gpt.py {GPT} --tensor-model-parallel-size $TP\n")
    monkeypatch.chdir(tmp_path)
    assert parse_launch(["bash", "train.sh"], {}).undecided == ("line 5",)


def test_a_script_file_that_is_not_there_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """sbatch_gpt3_distributed_test.sh as committed (`cd /workspace/megatron-lm` inside the container): the test's
    launch script is not on this machine, so there is no launch to read; the refusal said only 'no launch line' (and
    before the newline fix, 'cannot find the model shape'). It names the script file and the folder looked in."""
    from llmperf_hook.errors import UsageError

    (tmp_path / "job.sh").write_text(SBATCH_TEST.format(checkout="/nonexistent/megatron-lm"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match=r"line 4 runs \./tests/pretrain_gpt3_distributed_test\.sh, which is not in "
                                         r"/nonexistent/megatron-lm to read"):
        parse_launch(["sbatch", "job.sh"], {})


def test_a_script_run_without_its_arguments_is_told_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Megatron-LM examples/gpt3/train_gpt3_175b_distributed.sh reads CHECKPOINT_PATH=$1 ... DATA_PATH=$5; run
    without them, bash passes `--vocab-file` with no value and llmperf said only '--vocab-file needs 1 value(s) ...
    but none follow it'. The refusal now names the argument that option's value comes from; a refusal about another
    matter says nothing of the arguments."""
    from llmperf_hook.errors import LlmperfError
    from llmperf_hook.frameworks.resolve import resolve_job

    body = ("#!/bin/bash\nCHECKPOINT_PATH=$1 #<Specify path>\nVOCAB_FILE=${{3}} #<Specify path to file>/gpt2-vocab.json\n"
            "LABEL=${{9:-none}}\nARGS=(\n  --vocab-file $VOCAB_FILE\n)\n"
            "torchrun --nproc-per-node 8 {script} {gpt} --save $CHECKPOINT_PATH \"${{ARGS[@]}}\"\n")
    (tmp_path / "train.sh").write_text(body.format(script="pretrain_gpt.py", gpt=GPT))
    (tmp_path / "t5.sh").write_text(body.format(script="pretrain_t5.py", gpt=GPT))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(LlmperfError, match=r"reads arguments it was not given: \$3 at line 3;"):
        resolve_job(["bash", "train.sh"], {})
    with pytest.raises(LlmperfError) as other:
        resolve_job(["bash", "t5.sh"], {})
    assert "T5" in str(other.value) and "not given" not in str(other.value)
