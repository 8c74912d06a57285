"""A variable a script sets without `export` is not in the environment of the commands it starts (bash manual 3.7.4
Environment): each script is run by the real bash with stub `torchrun` and `python` commands first on PATH, which
record the argv and the environment they are given; llmperf's reading of the script (never run) must give the job
llmperf parses from that argv and environment, CUDA_DEVICE_MAX_CONNECTIONS (which Megatron reads) and WORLD_SIZE
(which sizes a plain python run) included."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from llmperf_hook.errors import UsageError
from llmperf_hook.launch.parse import parse_launch

M = "pretrain_gpt.py --num-layers 2"
T = "torchrun --nproc_per_node 8 " + M
SCRIPTS = {
    "plain_assignment": "CUDA_DEVICE_MAX_CONNECTIONS=1\n" + T + "\n",
    "plain_assignment_tested": 'CUDA_DEVICE_MAX_CONNECTIONS=1\nif [ "$CUDA_DEVICE_MAX_CONNECTIONS" = 1 ]; then NP=4; '
                               'else NP=2; fi\ntorchrun --nproc_per_node $NP ' + M + '\n',
    "export_assignment": "export CUDA_DEVICE_MAX_CONNECTIONS=1\n" + T + "\n",
    "export_after": "CUDA_DEVICE_MAX_CONNECTIONS=1\nexport CUDA_DEVICE_MAX_CONNECTIONS\n" + T + "\n",
    "export_before": "export CUDA_DEVICE_MAX_CONNECTIONS\nCUDA_DEVICE_MAX_CONNECTIONS=1\n" + T + "\n",
    "export_two": "export NCCL_DEBUG=INFO CUDA_DEVICE_MAX_CONNECTIONS=1\n" + T + "\n",
    "export_n": "export CUDA_DEVICE_MAX_CONNECTIONS=1\nexport -n CUDA_DEVICE_MAX_CONNECTIONS\n" + T + "\n",
    "unset": "export CUDA_DEVICE_MAX_CONNECTIONS=1\nunset CUDA_DEVICE_MAX_CONNECTIONS\n" + T + "\n",
    "unset_v_then_plain": "export CUDA_DEVICE_MAX_CONNECTIONS=1\nunset -v CUDA_DEVICE_MAX_CONNECTIONS\n"
                          "CUDA_DEVICE_MAX_CONNECTIONS=1\n" + T + "\n",
    "prefix_assignment": "CUDA_DEVICE_MAX_CONNECTIONS=1 " + T + "\n",
    "prefix_expands_first": "NP=8\nNP=2 torchrun --nproc_per_node $NP " + M + "\n",
    "set_a": "set -a\nCUDA_DEVICE_MAX_CONNECTIONS=1\nset +a\n" + T + "\n",
    "set_a_off_first": "set -a\nset +a\nCUDA_DEVICE_MAX_CONNECTIONS=1\n" + T + "\n",
    "set_o_allexport": "set -o allexport\nCUDA_DEVICE_MAX_CONNECTIONS=1\nset +o allexport\n" + T + "\n",
    "set_cluster": "set -ae\nCUDA_DEVICE_MAX_CONNECTIONS=1\n" + T + "\n",
    "declare_x": "declare -x CUDA_DEVICE_MAX_CONNECTIONS=1\n" + T + "\n",
    "inherited_and_reassigned": "CUDA_DEVICE_MAX_CONNECTIONS=2\n" + T + "\n",
    "world_size_plain": "WORLD_SIZE=8\npython " + M + "\n",
    "world_size_exported": "export WORLD_SIZE=8\npython " + M + "\n",
    "expanded_by_the_script": "NP=4\nMASTER_ADDR=localhost\ntorchrun --nproc_per_node $NP --master_addr $MASTER_ADDR "
                              + M + "\n",
    "bash_c_double_quoted": 'L="torchrun --nproc_per_node 4"\nbash -c "$L ' + M + '"\n',
    "bash_c_single_quoted_exported": 'export L="torchrun --nproc_per_node 4"\nbash -c \'$L ' + M + "'\n",
    "bash_c_single_quoted_not_exported": 'L="torchrun --nproc_per_node 4"\nbash -c \'$L ' + M + "'\n",
    "sh_c_sees_exports_only": "export CUDA_DEVICE_MAX_CONNECTIONS=1\nNP=2\nsh -c 'torchrun --nproc_per_node ${NP:-4} "
                              + M + "'\n",
    "bash_c_script": "bash -c 'NP=2; export CUDA_DEVICE_MAX_CONNECTIONS=1; torchrun --nproc_per_node $NP " + M + "'\n",
    "prefix_for_a_child_shell": "L='torchrun --nproc_per_node 2' bash -c '$L " + M + "'\n",
    "env_u": "export CUDA_DEVICE_MAX_CONNECTIONS=1\nenv -u CUDA_DEVICE_MAX_CONNECTIONS " + T + "\n",
    "env_unset_long": "export CUDA_DEVICE_MAX_CONNECTIONS=1\nenv --unset=CUDA_DEVICE_MAX_CONNECTIONS " + T + "\n",
    "env_i": 'export CUDA_DEVICE_MAX_CONNECTIONS=1\nenv -i PATH="$PATH" ARGV_OUT="$ARGV_OUT" ENV_OUT="$ENV_OUT" '
             'WORLD_SIZE=2 ' + T + "\n",
    "script_runs_a_script": "export NP=4\nNN=2\nCUDA_DEVICE_MAX_CONNECTIONS=1\nbash inner.sh --lr 1\n",
    "script_runs_a_script_in_a_folder": "mkdir -p sub\ncp inner.sh sub/\ncd sub\nNP=2 bash ./inner.sh --lr 2\n",
}
FILES = {"inner.sh": 'torchrun --nproc_per_node ${NP:-8} --nnodes ${NN:-1} pretrain_gpt.py "$@"\n'}
"""Files beside the script (a script that starts the job with another script, as Megatron-DeepSpeed's
curriculum_learning/ds_train.sh runs `bash ds_pretrain_gpt2.sh ARGS`)."""
LAUNCHING_ENV = {"inherited_and_reassigned": {"CUDA_DEVICE_MAX_CONNECTIONS": "8"}}
WATCHED = ("CUDA_DEVICE_MAX_CONNECTIONS", "WORLD_SIZE")
STUB = '#!/bin/sh\nprintf "%s\\0" "$(basename "$0")" "$@" > "$ARGV_OUT"\nenv -0 > "$ENV_OUT"\n'


def _run(script: Path, env: dict[str, str], tmp_path: Path) -> tuple[list[str], dict[str, str]] | None:
    """(argv, watched environment) the launcher got when bash ran the script; None when it launched nothing."""
    stubs = tmp_path / "bin"
    stubs.mkdir()
    for name in ("torchrun", "python"):
        (stubs / name).write_text(STUB)
        (stubs / name).chmod(0o755)
    argv_out, env_out = tmp_path / "argv", tmp_path / "env"
    run_env = {"PATH": f"{stubs}:/usr/bin:/bin", "ARGV_OUT": str(argv_out), "ENV_OUT": str(env_out), **env}
    subprocess.run(["bash", str(script)], env=run_env, cwd=tmp_path, capture_output=True, timeout=30, check=False)
    if not argv_out.exists():
        return None
    seen = dict(item.split("=", 1) for item in env_out.read_bytes().decode().split("\0") if "=" in item)
    return argv_out.read_bytes().decode().split("\0")[:-1], {k: v for k, v in seen.items() if k in WATCHED}


def _job(argv: list[str], env: dict[str, str]) -> tuple[object, ...]:
    job = parse_launch(argv, env)
    return (job.launcher, job.nnodes, job.nproc_per_node, job.world_size, job.script, job.script_args,
            job.env.get("CUDA_DEVICE_MAX_CONNECTIONS"))


@pytest.mark.parametrize("name", SCRIPTS)
def test_the_launch_sees_what_bash_exports(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed")
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/bash\n" + SCRIPTS[name])
    for file, text in FILES.items():
        (tmp_path / file).write_text(text)
    env = LAUNCHING_ENV.get(name, {})
    real = _run(script, env, tmp_path)
    monkeypatch.chdir(tmp_path)
    if real is None:
        with pytest.raises(UsageError):
            parse_launch(["bash", str(script)], dict(env))
        return
    assert _job(["bash", str(script)], dict(env)) == _job(*real), (name, real)


def test_a_priced_variable_not_exported_is_a_warning(tmp_path: Path) -> None:
    script = tmp_path / "train.sh"
    script.write_text(SCRIPTS["plain_assignment"])
    job = parse_launch(["bash", str(script)], {})
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in job.env
    assert any("CUDA_DEVICE_MAX_CONNECTIONS=1 is set by the script without `export`" in w for w in job.warnings)
    script.write_text(SCRIPTS["export_assignment"])
    assert not any("without `export`" in w for w in parse_launch(["bash", str(script)], {}).warnings)


def test_a_variables_expanded_in_the_launch_line_warn_nothing(tmp_path: Path) -> None:
    script = tmp_path / "train.sh"
    script.write_text(SCRIPTS["expanded_by_the_script"])
    job = parse_launch(["bash", str(script)], {})
    assert job.nproc_per_node == 4 and not job.warnings
    assert job.env.get("NP") == "4"  # the launch line's words came from it (llmperf explain lists it)


def test_a_child_shell_that_misses_an_unexported_launcher(tmp_path: Path) -> None:
    script = tmp_path / "train.sh"
    script.write_text(SCRIPTS["bash_c_single_quoted_not_exported"])
    with pytest.raises(UsageError, match=r"bash -c at line 2 reads \$L, which the script sets without `export`"):
        parse_launch(["bash", str(script)], {})


def test_srun_bash_c_of_an_unexported_variable_names_it(tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\n#SBATCH -N 2\nL='torchrun --nnodes 2 --nproc_per_node 8'\n"
                      "srun bash -c '$L " + M + "'\n")
    with pytest.raises(UsageError, match=r"\$L.*L is set by the script without `export`"):
        parse_launch(["sbatch", str(script)], {})
    script.write_text(script.read_text().replace("L='", "export L='"))
    job = parse_launch(["sbatch", str(script)], {})
    assert (job.launcher, job.nnodes, job.world_size) == ("torchrun", 2, 16)
