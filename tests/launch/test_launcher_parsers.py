"""torchrun, the legacy torch.distributed.launch and the deepspeed launcher read exactly as their own parsers read
them: each command is given to the real parser (torch.distributed.run.parse_args, torch.distributed.launch.parse_args,
deepspeed.launcher.runner.parse_args, as installed) and to llmperf; where the tool refuses the command (exit status 2),
llmperf must refuse it with exit code 2, and where it accepts it, llmperf must read the same sizes, script and script
arguments. Both tools parse with argparse at allow_abbrev's default (True): unique prefixes are options."""

from __future__ import annotations

import contextlib
import io
import os
from typing import Any, Callable

import pytest

from llmperf_hook.errors import UsageError
from llmperf_hook.launch.parse import parse_launch

GPUS = {"CUDA_VISIBLE_DEVICES": "0,1,2,3,4,5,6,7"}

TORCHRUN_CASES = [
    "--nproc_per 4 train.py", "--nproc-per 4 train.py", "--nproc 4 train.py", "--nnode 2 --nproc-per-node 4 train.py",
    "--nn=2 --nproc-per-node=4 train.py", "--nnodes 2 --nnodes 3 --nproc-per-node 4 train.py",
    "--stand --nproc-per-node 4 train.py", "--nproc-per-node 4 --rdzv train.py", "--nproc-per-node 4 --master train.py",
    "--nproc-per-node 4 --master_a x --master_p 1 train.py", "--nproc-per-node 4 --bogus train.py",
    "--nproc-per-node 4 --use_env train.py", "--nproc-per-node=4 --standalone=1 train.py",
    "--nnodes --nproc-per-node 4 train.py", "--nproc-per-node", "train.py --nproc-per-node 4 --bogus",
    "--nproc-per-node 4 -- train.py --x", "--nproc-per-node 4 -m pkg.train --lr 1", "--nproc-per-node 4 --no_py train.py",
    "--nproc_per_node 2 --nproc-per-node 4 train.py", "--nnodes=1:2 --nproc_per_node=8 train.py --num-layers 2",
    # after the script: argparse classifies every word first, so an ambiguous prefix stops torchrun there too
    "--nproc-per-node 4 train.py --nproc 2", "--nproc-per-node 4 train.py --n=2", "--nproc-per-node 4 train.py --log x",
    "--nproc-per-node 4 train.py --stand", "--nproc-per-node 4 train.py --nnodes 9", "--nproc-per-node 4 train.py --x -- --n",
    "--nproc-per-node 4 train.py --master_ 1", "--nproc-per-node 4 train.py --lr -1 --max 3",
]
LAUNCH_CASES = ["--nproc_per_node 8 train.py --nproc 2", "--nproc_per_node 8 --use_env train.py", "--nproc_per_node 8 --use train.py",
                "--nproc_per_node 8 --use-e train.py", "--nproc 8 train.py", "--nnodes 2 --nproc_per_node 8 train.py"]
DEEPSPEED_CASES = [
    "--num_gpus 4 train.py", "--num_gpu 4 train.py", "--num_g 4 train.py", "--num 4 train.py", "--num_n 1 --num_g 2 train.py",
    "--num-gpus 4 train.py", "--num_gpus=4 train.py", "--num_gpus 4 --num_gpus 2 train.py", "--incl localhost:0,1 train.py",
    "--include=localhost:1 train.py", "-i localhost:0,2 train.py", "--num_gpus 4 --bogus train.py", "--num_acc 2 train.py",
    "--num_gpus 4 --no_loc train.py", "--num_gpus 2 --force_multi=1 train.py", "--num_gpus 2 -- train.py --x 1",
    "--num_gpus 2 --launcher_args '-q high' train.py", "--num_gpus 2 --launcher_args '--qos high' train.py",
    "--num_gpus 2 --launcher_args=-q train.py", "--num_gpus 2 --launcher_arg '--qos high' train.py", "--num_gpus 2 --master_addr -x train.py", "--num_gpus train.py", "--h localhost train.py",
    "--num_gpus 2 train.py --num_gpus 8 --bogus", "-qi localhost:0,1 train.py", "-qilocalhost:1 train.py", "-qx train.py",
    "--num_gpus 2 train.py --num 4", "--num_gpus 2 train.py --num_l 4", "--num_gpus 2 train.py --master 1",
    "--num_gpus 2 train.py --deepspeed --deepspeed_config ds.json", "--num_gpus 2 train.py --m=1",
]


def _real(parse: Callable[[list[str]], Any], argv: list[str]) -> Any:
    """The tool's namespace, or the exit status its parser stopped with."""
    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            return parse(argv)
    except SystemExit as stop:
        return stop.code


def _ours(argv: list[str]) -> Any:
    try:
        return parse_launch(argv, GPUS)
    except UsageError as err:
        return err.exit_code


def _words(case: str) -> list[str]:
    import shlex

    return shlex.split(case)


@pytest.mark.parametrize("case", TORCHRUN_CASES)
def test_torchrun_reads_as_torch_distributed_run(case: str) -> None:
    run = pytest.importorskip("torch.distributed.run")
    real, ours = _real(run.parse_args, _words(case)), _ours(["torchrun", *_words(case)])
    if isinstance(real, int):
        assert ours == real == 2, f"torchrun refuses {case!r}, llmperf reads {ours}"
        return
    assert not isinstance(ours, int), f"torchrun accepts {case!r}, llmperf refused it"
    assert ours.nnodes == int(real.nnodes.split(":")[-1]) and ours.nproc_per_node == int(real.nproc_per_node)
    assert ours.script.removeprefix("-m ") == real.training_script
    assert list(ours.script_args) == real.training_script_args


@pytest.mark.parametrize("case", LAUNCH_CASES)
def test_legacy_launch_reads_as_torch_distributed_launch(case: str) -> None:
    launch = pytest.importorskip("torch.distributed.launch")
    real = _real(launch.parse_args, _words(case))
    ours = _ours(["python", "-m", "torch.distributed.launch", *_words(case)])
    if isinstance(real, int):
        assert ours == real == 2
        return
    assert not isinstance(ours, int) and ours.world_size == int(real.nnodes.split(":")[-1]) * int(real.nproc_per_node)


def _deepspeed_parse() -> Callable[[list[str]], Any]:
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    return pytest.importorskip("deepspeed.launcher.runner").parse_args  # type: ignore[no-any-return]


@pytest.mark.parametrize("case", DEEPSPEED_CASES)
def test_deepspeed_reads_as_deepspeed_runner(case: str) -> None:
    real, ours = _real(_deepspeed_parse(), _words(case)), _ours(["deepspeed", *_words(case)])
    if isinstance(real, int):
        assert ours == real == 2, f"deepspeed refuses {case!r}, llmperf reads {ours}"
        return
    assert not isinstance(ours, int), f"deepspeed accepts {case!r}, llmperf refused it"
    assert ours.script == real.user_script and list(ours.script_args) == real.user_args
    if real.num_gpus > 0:
        assert ours.nproc_per_node == real.num_gpus
    elif real.include:
        assert ours.world_size == len(real.include.split(":")[1].split(","))


def test_refusals_name_the_rule_and_the_fix() -> None:
    with pytest.raises(UsageError, match=r"--nproc is ambiguous, it could be --nproc-per-node, --nproc_per_node.*in full"):
        parse_launch(["torchrun", "--nproc", "4", "train.py"], {})
    with pytest.raises(UsageError, match=r"no option --num-gpus .*Write --num_gpus instead"):
        parse_launch(["deepspeed", "--num-gpus", "4", "train.py"], {})
    with pytest.raises(UsageError, match=r"'--nproc', an argument of train.py, is ambiguous .*--nproc-per-node, "
                       r"--nproc_per_node.*'ambiguous option'.*in full"):
        parse_launch(["torchrun", "--nproc-per-node", "4", "train.py", "--nproc", "4"], {})
    with pytest.raises(UsageError, match=r"--force_multi is a switch"):
        parse_launch(["deepspeed", "--force_multi=1", "--num_gpus", "2", "train.py"], {})


def test_a_short_option_with_its_value_attached(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """argparse reads `-Hhostfile` as -H hostfile: the next word is not its value."""
    hostfile = tmp_path / "hosts"
    hostfile.write_text("a slots=8\nb slots=8\n")
    job = parse_launch(["deepspeed", f"-H{hostfile}", "--num_gpus", "2", "train.py"], {})
    assert (job.nnodes, job.world_size) == (2, 4)


def test_the_table_is_the_installed_torchs_parser() -> None:
    """run_py_options reads the installed torch/distributed/run.py (text, not imported): the table holds every option
    of it with its arity, and only --rdzv-timeout (an older release's) and argparse's -h/--help beside."""
    from llmperf_hook.launch.torchrun import TORCHRUN_OPTIONS, _argparse_spellings, installed_run_options

    installed = installed_run_options()
    if not installed:
        pytest.skip("torch is not installed")
    extra = {k: v for k, v in _argparse_spellings(TORCHRUN_OPTIONS).items() if k not in installed}
    assert set(extra) == {"-h", "--help", "--rdzv-timeout", "--rdzv_timeout"}
    assert all(_argparse_spellings(TORCHRUN_OPTIONS)[k] == v for k, v in installed.items())


def test_a_newer_torchs_own_option_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    """A torch newer than the table (2.13) defines options the table lacks: read from its run.py, they are accepted;
    an option neither defines is still refused."""
    from llmperf_hook.launch import torchrun

    newer = ('def get_args_parser():\n    parser = ArgumentParser()\n    parser.add_argument(\n        "--nnodes", action=env,'
             ' type=str, default="1:1", help="Number of nodes (--nproc-per-node)")\n    parser.add_argument("--new-option",'
             ' "--new_option", action=env, type=str)\n    parser.add_argument("--new-switch", action=check_env)\n'
             '    return parser\n')
    assert torchrun.run_py_options(newer) == {"--nnodes": "1", "--new-option": "1", "--new_option": "1", "--new-switch": "0"}
    monkeypatch.setattr(torchrun, "installed_run_options", lambda: torchrun.run_py_options(newer))
    job = parse_launch(["torchrun", "--new-option", "x", "--new-switch", "--nproc-per-node", "4", "train.py"], {})
    assert (job.nproc_per_node, job.script) == (4, "train.py")
    with pytest.raises(UsageError, match="--bogus"):
        parse_launch(["torchrun", "--bogus", "--nproc-per-node", "4", "train.py"], {})
