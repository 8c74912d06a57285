"""The predict path stays light: no torch, deepspeed, lightgbm or sklearn on import or --help."""

import subprocess
import sys

import pytest

HEAVY = ("torch", "deepspeed", "lightgbm", "sklearn")


def _loaded_after(code: str) -> list[str]:
    probe = f"import sys\n{code}\nprint('HEAVY:' + ' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("HEAVY:")][-1]
    return line[len("HEAVY:"):].split()


def test_import_package_is_light() -> None:
    assert _loaded_after("import llmperf_hook, llmperf_hook.cli") == []


def test_help_is_light() -> None:
    code = "from llmperf_hook.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass"
    assert _loaded_after(code) == []


SHELL_READER = ("llmperf_hook.launch.batch_script", "llmperf_hook.launch.sbatch", "llmperf_hook.launch.shell_blocks",
                "llmperf_hook.launch.shell_loops", "llmperf_hook.launch.shell_functions",
                "llmperf_hook.launch.posix_shell", "llmperf_hook.launch.undecided_options",
                "llmperf_hook.launch.shell_variables", "llmperf_hook.launch.shell_conditions",
                "llmperf_hook.launch.undecided_branches")
"""The shell-script reader: launch/parse.py loads it only for a command that runs a script (H143: ~30 ms of a
plain torchrun predict's ~300 ms process went to importing it)."""
TORCHRUN = ("torchrun --nnodes 2 --nproc-per-node 8 pretrain_gpt.py --num-layers 24 --hidden-size 2048 "
            "--num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048 --micro-batch-size 1 "
            "--global-batch-size 64 --tensor-model-parallel-size 2 --bf16 --vocab-size 51200")


def _shell_modules_after(code: str) -> tuple[list[str], str]:
    probe = f"import sys\n{code}\nprint('SHELL:' + ' '.join(m for m in {SHELL_READER!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("SHELL:")][-1]
    return line[len("SHELL:"):].split(), out.stdout


def test_plain_torchrun_predict_skips_the_shell_reader() -> None:
    code = (f"from llmperf_hook.cli import main\ntry:\n    main(['predict', '--cluster', 'dgx-a100', '--format', "
            f"'json', '--', *{TORCHRUN!r}.split()])\nexcept SystemExit as e:\n    assert not e.code, e.code")
    loaded, stdout = _shell_modules_after(code)
    assert loaded == []
    assert '"step_time_s": ' in stdout  # the prediction itself was made


@pytest.mark.parametrize("form", ["file", "command string"])
def test_script_command_loads_the_shell_reader(tmp_path, form: str) -> None:
    """`bash run.sh` and `bash -c "NODES=2; torchrun ..."` are scripts: the reader loads and reads them."""
    script = f"NODES=2\nfor x in a b; do echo $x; done\n{TORCHRUN.replace('--nnodes 2', '--nnodes $NODES')}\n"
    (tmp_path / "run.sh").write_text("#!/bin/bash\n" + script)
    argv = ["bash", str(tmp_path / "run.sh")] if form == "file" else ["bash", "-c", script]
    code = (f"from llmperf_hook.launch.parse import parse_launch\n"
            f"job = parse_launch({argv!r}, {{}})\nprint('WORLD', job.nnodes, job.world_size)")
    loaded, stdout = _shell_modules_after(code)
    assert "llmperf_hook.launch.batch_script" in loaded and "llmperf_hook.launch.shell_variables" in loaded
    assert "WORLD 2 16" in stdout
