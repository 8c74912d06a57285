"""Here-documents as bash gives them (bash manual 3.6.6): the ds_config a script writes with `cat > ds.json <<EOF`, and
the batch script `sbatch <<EOF` reads from its standard input. Each script is run by the real bash (with a stub
`sbatch` that keeps its standard input); llmperf, which never runs it, must read the same text."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from llmperf_hook.errors import UsageError
from llmperf_hook.launch.parse import parse_launch
from llmperf_hook.launch.standard_input import read_standard_input
from tests.launch.cli_run import llmperf

GPT = ("--num-layers 2 --hidden-size 256 --num-attention-heads 8 --seq-length 512 --max-position-embeddings 512 "
       "--tokenizer-type NullTokenizer --vocab-size 1000")
BODY = '{"train_micro_batch_size_per_gpu": $MBS, "gradient_accumulation_steps": $((GBS / MBS / 8)),\n' \
       ' "note": "\\$HOME \'$MBS\' \\\\ ${NAMES[@]} ${UNSET:-dflt}",\n "zero_optimization": {"stage": 2}}\n'
PRELUDE = "MBS=4\nGBS=64\nNAMES=(a b)\n"
WRITES = {
    "cat_into": "cat > ds.json <<EOF\n" + BODY + "EOF\n",
    "cat_then_redirect": "cat <<EOF > ds.json\n" + BODY + "EOF\n",
    "quoted_delimiter": "cat > ds.json <<'EOF'\n" + BODY + "EOF\n",
    "double_quoted_delimiter": 'cat > ds.json <<"EOF"\n' + BODY + "EOF\n",
    "backslash_delimiter": "cat > ds.json <<\\EOF\n" + BODY + "EOF\n",
    "tabs_stripped": "cat > ds.json <<-EOF\n" + "".join("\t" + line + "\n" for line in BODY.splitlines()) + "\tEOF\n",
    "spaced": "cat > ds.json << EOF\n" + BODY + "EOF\n",
    "tee": "tee ds.json > /dev/null <<EOF\n" + BODY + "EOF\n",
    "continued_line": "cat > \\\n  ds.json <<EOF\n" + BODY + "EOF\n",
    "backslash_newline": "cat > ds.json <<EOF\n{\"train_micro_batch_size_per_gpu\": \\\n$MBS}\nEOF\n",
}
LAUNCH = "deepspeed --num_gpus 8 train.py --deepspeed_config ds.json\n"


def _bash(script: Path, tmp_path: Path) -> None:
    stubs = tmp_path / "bin"
    stubs.mkdir(exist_ok=True)
    for name in ("deepspeed", "srun", "torchrun", "accelerate"):
        (stubs / name).write_text("#!/bin/sh\n")
        (stubs / name).chmod(0o755)
    (stubs / "sbatch").write_text('#!/bin/sh\ncat > "$STDIN_OUT"\n')
    (stubs / "sbatch").chmod(0o755)
    env = {"PATH": f"{stubs}:/usr/bin:/bin", "STDIN_OUT": str(tmp_path / "stdin.sh"), "HOME": "/home/u"}
    subprocess.run(["bash", str(script)], env=env, cwd=tmp_path, capture_output=True, timeout=30, check=True)


@pytest.mark.parametrize("name", WRITES)
def test_the_file_a_here_document_writes(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed")
    script = tmp_path / "train.sh"
    script.write_text(PRELUDE + WRITES[name] + LAUNCH)
    _bash(script, tmp_path)
    written = (tmp_path / "ds.json").read_text()
    (tmp_path / "ds.json").unlink()
    monkeypatch.chdir(tmp_path)
    job = parse_launch(["bash", str(script)], {"HOME": "/home/u"})
    assert job.script_files["ds.json"].text == written


def test_the_ds_config_is_read_from_the_here_document(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from llmperf_hook.frameworks.resolve import resolve_job

    script = tmp_path / "train.sh"
    model = GPT + " --fp16"
    script.write_text("MBS=2\nZ=1\ncat > ds.json <<-EOF\n\t{\"train_micro_batch_size_per_gpu\": $MBS,\n"
                      "\t \"train_batch_size\": $((MBS * 8 * 4)), \"zero_optimization\": {\"stage\": $Z}}\n\tEOF\n"
                      f"deepspeed --num_gpus 8 pretrain_gpt.py {model} --micro-batch-size $MBS --global-batch-size "
                      "$((MBS * 8 * 4)) --deepspeed --deepspeed_config ds.json\n")
    monkeypatch.chdir(tmp_path)
    _, cfg = resolve_job(["bash", str(script)], {})
    assert (cfg.batch.micro_batch_size, cfg.batch.global_batch_size, cfg.optimizer.zero_stage) == (2, 64, 1)
    assert not (tmp_path / "ds.json").exists()


SUBMIT = {
    "unquoted": "NODES=2\nsbatch <<EOF\n#!/bin/bash\n#SBATCH --nodes=$NODES\n#SBATCH --ntasks-per-node=1\n"
                "srun torchrun --nnodes \\$SLURM_NNODES --nproc_per_node 4 pretrain_gpt.py --num-layers 2 "
                "2>&1 | tee \\${SLURM_JOB_ID}.log\nEOF\n",
    "quoted": "sbatch -N 3 <<'EOF'\n#!/bin/bash\n#SBATCH --ntasks-per-node=1\nsrun torchrun --nnodes $SLURM_NNODES "
              "--nproc_per_node 2 pretrain_gpt.py --num-layers 2\nEOF\n",
    "tabs": "sbatch <<-EOF\n\t#!/bin/bash\n\t#SBATCH -N 2\n\tsrun --ntasks-per-node=4 python pretrain_gpt.py "
            "--num-layers 2\n\tEOF\n",
    "bash_c_inside": 'CMD="torchrun --nnodes 2 --nproc_per_node 8 pretrain_gpt.py --num-layers 2"\nsbatch <<EOF\n'
                     '#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\nsrun --mpi=pmix -l bash -x -c '
                     '"${CMD}" 2>&1 | tee log\nEOF\n',
}
SIZES = {"unquoted": ("torchrun", 2, 4, 8), "quoted": ("torchrun", 3, 2, 6), "tabs": ("srun", 2, 4, 8),
         "bash_c_inside": ("torchrun", 2, 8, 16)}


@pytest.mark.parametrize("name", SUBMIT)
def test_sbatch_reads_the_here_document(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed")
    script = tmp_path / "submit.sh"
    script.write_text(SUBMIT[name])
    _bash(script, tmp_path)  # the stub sbatch keeps what bash gave it
    monkeypatch.chdir(tmp_path)
    job = parse_launch(["bash", str(script)], {})
    assert (job.launcher, job.nnodes, job.nproc_per_node, job.world_size) == SIZES[name]
    options = ["-N", "3"] if name == "quoted" else []
    given = parse_launch(["sbatch", *options, str(tmp_path / "stdin.sh")], {})
    assert (given.launcher, given.nnodes, given.world_size, given.script_args) == \
        (job.launcher, job.nnodes, job.world_size, job.script_args)


def _stdin(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO(text))
    read_standard_input.cache_clear()


def test_llmperf_given_the_batch_script_on_its_standard_input(monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    _stdin(monkeypatch, "#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n#SBATCH --gpus-per-node=8\n"
                        "srun torchrun --nnodes $SLURM_NNODES --nproc_per_node $SLURM_GPUS_ON_NODE pretrain_gpt.py "
                        f"{GPT} --micro-batch-size 1 --global-batch-size 64\n")
    try:
        out = llmperf(capsys, "explain", "--format", "json", "--", "sbatch", "--nodes", "4")
    finally:
        read_standard_input.cache_clear()
    assert out.code == 0, out.err
    assert '"world_size": 32' in out.out


@pytest.mark.parametrize("text, said", [("", "its standard input is empty"), (None, "a terminal here")])
def test_no_script_on_standard_input(text: str | None, said: str, monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    stream = io.StringIO(text or "")
    if text is None:
        monkeypatch.setattr(stream, "isatty", lambda: True)
    monkeypatch.setattr(sys, "stdin", stream)
    read_standard_input.cache_clear()
    try:
        out = llmperf(capsys, "explain", "--", "sbatch")
    finally:
        read_standard_input.cache_clear()
    assert out.code == 2 and said in out.err and "Traceback" not in out.err, out.err


def test_run_hands_the_script_on_to_sbatch(tmp_path: Path) -> None:
    """`llmperf run -- sbatch <<EOF`: the prediction reads the script, and sbatch still gets all of it."""
    stubs = tmp_path / "bin"
    stubs.mkdir()
    (stubs / "sbatch").write_text('#!/bin/sh\ncat > "$STDIN_OUT"\n')
    (stubs / "sbatch").chmod(0o755)
    text = (f"#!/bin/bash\n#SBATCH -N 1\nsrun torchrun --nproc_per_node 2 pretrain_gpt.py {GPT} --micro-batch-size 1 "
            "--global-batch-size 8\n" + "#\n" * 40000)
    env = {**os.environ, "PATH": f"{stubs}{os.pathsep}{os.environ['PATH']}", "STDIN_OUT": str(tmp_path / "got")}
    done = subprocess.run([sys.executable, "-m", "llmperf_hook.cli", "run", "--", "sbatch"], input=text, text=True,
                          env=env, cwd=tmp_path, capture_output=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "got").read_text() == text


LAUNCHER_FILES = {
    "hostfile": ("H=node\ncat > hostfile <<EOF\n${H}1 slots=8\n${H}2 slots=$((2 * 4))\n${H}3 slots=4\nEOF\n",
                 "deepspeed --hostfile hostfile --exclude node3 pretrain_gpt.py --num-layers 2\n"),
    "accelerate_config": ("N=2\ncat > acc.yaml <<'EOF'\ncompute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\n"
                          "num_machines: 2\nnum_processes: 16\nmachine_rank: 0\nEOF\n",
                          "accelerate launch --config_file acc.yaml train.py\n"),
}


@pytest.mark.parametrize("name", LAUNCHER_FILES)
def test_a_launcher_file_the_script_writes(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The deepspeed hostfile or accelerate config a script writes before launching is read from its here-document,
    as the launcher, started after bash wrote it, reads the file."""
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed")
    writes, launch = LAUNCHER_FILES[name]
    script = tmp_path / "train.sh"
    script.write_text(writes + launch)
    _bash(script, tmp_path)
    monkeypatch.chdir(tmp_path)
    on_disk = parse_launch(launch.split(), {})  # the launcher reading what bash wrote
    for written in ("hostfile", "acc.yaml"):
        (tmp_path / written).unlink(missing_ok=True)
    job = parse_launch(["bash", str(script)], {})
    assert (job.launcher, job.nnodes, job.nproc_per_node, job.world_size) == \
        (on_disk.launcher, on_disk.nnodes, on_disk.nproc_per_node, on_disk.world_size)


def test_a_hostfile_a_command_writes_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "train.sh"
    script.write_text('scontrol show hostnames | sed "s/$/ slots=8/" > hostfile\n'
                      "deepspeed --hostfile hostfile pretrain_gpt.py --num-layers 2\n")
    with pytest.raises(UsageError, match=r"hostfile does not exist: the script writes it at .*train.sh line 1 with `sed"):
        parse_launch(["bash", str(script)], {})
