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


ACCELERATE_READER = ("llmperf_hook.launch.accelerate",)
"""`accelerate launch`'s reader (its options, config file and yaml): loaded for accelerate's commands only."""


def _modules_after(code: str, modules: tuple[str, ...]) -> tuple[list[str], str]:
    """Which of `modules` a fresh interpreter has loaded after running `code`, and its stdout."""
    probe = f"import sys\n{code}\nprint('LOADED:' + ' '.join(m for m in {modules!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("LOADED:")][-1]
    return line[len("LOADED:"):].split(), out.stdout


def _cli(args: list[str]) -> str:
    """Probe code running `llmperf ARGS -- TORCHRUN` in the probe's process, asserting exit 0."""
    return (f"from llmperf_hook.cli import main\ntry:\n    main([*{args!r}, '--', *{TORCHRUN!r}.split()])\n"
            f"except SystemExit as e:\n    assert not e.code, e.code")


def test_plain_torchrun_predict_skips_the_shell_and_accelerate_readers() -> None:
    loaded, stdout = _modules_after(_cli(["predict", "--cluster", "dgx-a100", "--format", "json"]),
                                    SHELL_READER + ACCELERATE_READER)
    assert loaded == []
    assert '"step_time_s": ' in stdout  # the prediction itself was made


OFF_PREDICT_PATH = ("llmperf_hook.profile.local_hardware", "llmperf_hook.profile.op_sampler", "llmperf_hook.tune",
                    *(f"llmperf_hook.commands.{name}" for name in ("explain", "run", "tune", "profile", "validate",
                                                                    "refine")))
"""What `llmperf predict` of a plain command never needs (H193): the sampler's local_hardware (its
shipped_hardware_names was imported to check a profile's name: fitted.py now looks for configs/hardware/NAME.yaml)
with op_sampler, tune's search, and the other subcommands (cli.LazyGroup imports only the one invoked)."""


def test_plain_torchrun_predict_skips_the_sampler_tune_and_other_subcommands() -> None:
    loaded, stdout = _modules_after(_cli(["predict", "--cluster", "dgx-a100", "--format", "json"]), OFF_PREDICT_PATH)
    assert loaded == []
    assert '"gemm": "lightgbm:a100-sxm4-80gb"' in stdout  # priced by the shipped profile, whose name is checked


def test_predict_help_skips_the_frameworks() -> None:
    """`llmperf predict --help` (and a usage error) loads no frameworks/: commands/common.py imports JobOverrides
    where it builds one."""
    code = "from llmperf_hook.cli import main\ntry:\n    main(['predict', '--help'])\nexcept SystemExit:\n    pass"
    loaded, stdout = _modules_after(code, ("llmperf_hook.frameworks.resolve", "llmperf_hook.api", "numpy"))
    assert loaded == [] and "--cluster" in stdout


def test_plain_torchrun_tune_skips_the_shell_and_accelerate_readers() -> None:
    """tune/apply.py (its change lists) loads sbatch's reader only for an sbatch command and accelerate's only for
    accelerate's jobs."""
    args = ["tune", "--cluster", "dgx-a100", "--format", "json", "--top", "1"]
    loaded, stdout = _modules_after(_cli(args), SHELL_READER + ACCELERATE_READER)
    assert loaded == []
    assert '"changes": [' in stdout  # the search ran and its best row's change list was made


def test_an_accelerate_command_loads_its_reader() -> None:
    argv = ["accelerate", "launch", "--num_processes", "8", "train.py"]
    code = (f"from llmperf_hook.launch.parse import parse_launch\n"
            f"job = parse_launch({argv!r}, {{'HF_HOME': '/nonexistent'}})\nprint('WORLD', job.world_size)")
    loaded, stdout = _modules_after(code, ACCELERATE_READER)
    assert loaded == ["llmperf_hook.launch.accelerate"] and "WORLD 8" in stdout


@pytest.mark.parametrize("form", ["file", "command string"])
def test_script_command_loads_the_shell_reader(tmp_path, form: str) -> None:
    """`bash run.sh` and `bash -c "NODES=2; torchrun ..."` are scripts: the reader loads and reads them."""
    script = f"NODES=2\nfor x in a b; do echo $x; done\n{TORCHRUN.replace('--nnodes 2', '--nnodes $NODES')}\n"
    (tmp_path / "run.sh").write_text("#!/bin/bash\n" + script)
    argv = ["bash", str(tmp_path / "run.sh")] if form == "file" else ["bash", "-c", script]
    code = (f"from llmperf_hook.launch.parse import parse_launch\n"
            f"job = parse_launch({argv!r}, {{}})\nprint('WORLD', job.nnodes, job.world_size)")
    loaded, stdout = _modules_after(code, SHELL_READER)
    assert "llmperf_hook.launch.batch_script" in loaded and "llmperf_hook.launch.shell_variables" in loaded
    assert "WORLD 2 16" in stdout
