"""sbatch and srun options read as Slurm reads them: glibc's getopt_long with the option string "+..." over
slurm_opt.c's option table (launch/slurm_option_names.py). The oracle is getopt_long itself, called through ctypes with
the same table: which options it finds, with which values, and where it stops (the script); llmperf must find the same,
and refuse (exit 2) where getopt_long refuses an ambiguous prefix. Then sbatch's own rules (src/sbatch/opt.c):
#SBATCH only in the first column, a non-option in a directive, --wrap with script arguments."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import shlex
import tempfile
from pathlib import Path

import pytest

from llmperf_hook.errors import UsageError
from llmperf_hook.launch.options import scan_options
from llmperf_hook.launch.parse import parse_launch
from llmperf_hook.launch.sbatch import SBATCH_GRAMMAR, SBATCH_OPTIONS
from llmperf_hook.launch.slurm import SRUN_GRAMMAR, SRUN_OPTIONS
from llmperf_hook.launch.slurm_option_names import SBATCH_ARITY, SRUN_ARITY


class _LongOption(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("has_arg", ctypes.c_int), ("flag", ctypes.c_void_p), ("val", ctypes.c_int)]


def _glibc() -> ctypes.CDLL:
    name = ctypes.util.find_library("c")
    if name is None:
        pytest.skip("no C library to call getopt_long in")
    libc = ctypes.CDLL(name)
    if not hasattr(libc, "getopt_long"):
        pytest.skip("this C library has no getopt_long")
    return libc


def getopt_long(arity: dict[str, str], words: list[str]) -> tuple[list[tuple[str, str | None]], int] | str:
    """(options found as (spelling, value), index of the first non-option word) as glibc's getopt_long reads `words`
    with Slurm's table, or, where it returns '?', the message it prints ("... is ambiguous ...", "unrecognized ...")."""
    with tempfile.TemporaryFile() as err:
        saved = os.dup(2)
        os.dup2(err.fileno(), 2)
        try:
            found = _getopt_long(arity, words)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        err.seek(0)
        return found if found is not None else err.read().decode(errors="replace")


def _getopt_long(arity: dict[str, str], words: list[str]) -> tuple[list[tuple[str, str | None]], int] | None:
    libc = _glibc()
    longs = sorted(n for n in arity if n.startswith("--"))
    table = (_LongOption * (len(longs) + 1))(
        *[_LongOption(n[2:].encode(), {"0": 0, "1": 1, "?": 2}[arity[n]], None, 1000 + k) for k, n in enumerate(longs)],
        _LongOption(None, 0, None, 0))
    shorts = "+" + "".join(n[1] + {"0": "", "1": ":", "?": "::"}[arity[n]] for n in arity if len(n) == 2)
    argv = (ctypes.c_char_p * (len(words) + 2))(b"sbatch", *[w.encode() for w in words], None)
    optind, optarg = ctypes.c_int.in_dll(libc, "optind"), ctypes.c_char_p.in_dll(libc, "optarg")
    opterr = ctypes.c_int.in_dll(libc, "opterr")
    optind.value, opterr.value = 0, 1  # optind 0: glibc starts a fresh scan; opterr 1: it says why it refuses
    found: list[tuple[str, str | None]] = []
    while True:
        code = libc.getopt_long(len(words) + 1, argv, shorts.encode(), table, None)
        if code == -1:
            return found, optind.value - 1
        if code == ord("?"):
            return None
        name = longs[code - 1000] if code >= 1000 else "-" + chr(code)
        found.append((name, optarg.value.decode() if optarg.value is not None else None))


CASES = [
    "--nodes=2 job.sh", "--nod=2 job.sh", "--node 2 job.sh", "--ntasks-per-n=8 job.sh", "--ntasks-per 8 job.sh",
    "-N2 --gpus-per-n=8 job.sh", "-W job.sh", "--wait job.sh", "--exclusive job.sh", "--exclusive=user -N 2 job.sh",
    "--wrap=a --wrap=b", "--wra 'srun x'", "-N 2 -n 16 job.sh -N 4", "--nodes 2 -- job.sh", "--time 10 --ti=5 job.sh",
    "--gpus 8 --gp=8 job.sh", "--array=0-3 --ar 0-1 job.sh", "-QN2 --gpus-per-node=8 job.sh", "-vQN 2 job.sh",
]


def _ours(grammar, table, arity, words):  # type: ignore[no-untyped-def]
    try:
        scanned = scan_options(words, 0, table, "sbatch", grammar)
    except UsageError as err:
        assert err.exit_code == 2 and "ambiguous" in str(err)
        return None
    return scanned


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("client", ["sbatch", "srun"])
def test_options_read_as_getopt_long_reads_them(case: str, client: str) -> None:
    arity, grammar, table = (SBATCH_ARITY, SBATCH_GRAMMAR, SBATCH_OPTIONS) if client == "sbatch" else \
        (SRUN_ARITY, SRUN_GRAMMAR, SRUN_OPTIONS)
    words = shlex.split(case)
    if client == "srun" and "--wra" in case:
        return  # --wrap is sbatch's alone
    real, ours = getopt_long(arity, words), _ours(grammar, table, arity, words)
    if isinstance(real, str):  # ambiguous: refused alike; unknown to Slurm: a SPANK plugin may define it, so warned
        assert (ours is None) if "ambiguous" in real else bool(ours and ours.unknown), (case, client, real, ours)
        return
    assert ours is not None, f"getopt_long accepts {case!r} for {client}, llmperf refused it"
    found, rest = real
    assert ours.rest == rest, case
    for dest, name in (("nodes", "--nodes"), ("ntasks_per_node", "--ntasks-per-node"), ("wrap", "--wrap"),
                       ("gpus_per_node", "--gpus-per-node"), ("time", "--time"), ("gpus", "--gpus")):
        given = [v for n, v in found if n in (name, {"nodes": "-N", "gpus": "-G", "time": "-t"}.get(dest))]
        assert ours.values.get(dest) == (given[-1] if given else None), (case, dest)


def _sbatch(tmp_path: Path, script: str, *options: str) -> object:
    (tmp_path / "job.sh").write_text(script)
    return parse_launch(["sbatch", *options, str(tmp_path / "job.sh")], {})


LAUNCH = "srun python pretrain_gpt.py --num-layers 2\n"


def test_directives_count_only_in_the_first_column(tmp_path: Path) -> None:
    job = _sbatch(tmp_path, "#!/bin/bash\n#SBATCH --nodes=2 --ntasks-per-node=4\n  #SBATCH --nodes=8\n" + LAUNCH)
    assert (job.nnodes, job.world_size) == (2, 8)  # type: ignore[attr-defined]


def test_an_abbreviated_directive_is_its_option(tmp_path: Path) -> None:
    job = _sbatch(tmp_path, "#!/bin/bash\n#SBATCH --nodes=2 --ntasks-per-n=4\n" + LAUNCH)
    assert job.world_size == 8  # type: ignore[attr-defined]
    with pytest.raises(UsageError, match="--nod is ambiguous"):
        _sbatch(tmp_path, "#!/bin/bash\n#SBATCH --nod=2\n" + LAUNCH)


def test_a_directive_that_is_no_option_stops_sbatch(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="Invalid directive"):
        _sbatch(tmp_path, "#!/bin/bash\n#SBATCH -N 2 four\n" + LAUNCH)
    with pytest.raises(UsageError, match="Unmatched quote"):
        _sbatch(tmp_path, "#!/bin/bash\n#SBATCH -J 'name\n" + LAUNCH)


def test_wrap_takes_no_script_arguments_and_the_last_wins(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="Script arguments not permitted with --wrap"):
        parse_launch(["sbatch", "-N", "2", "--wrap", "srun python t.py", "extra"], {})
    job = parse_launch(["sbatch", "-N", "2", "--ntasks-per-node", "4", "--wrap", "srun python a.py",
                        "--wra=srun python b.py"], {})
    assert job.script == "b.py" and job.world_size == 8


def test_sbatch_wait_is_a_switch(tmp_path: Path) -> None:
    """sbatch -W waits for the job (no value); srun -W N is seconds: the script after sbatch -W is the script."""
    job = _sbatch(tmp_path, "#!/bin/bash\n#SBATCH -N 2 --ntasks-per-node=4\n" + LAUNCH, "-W")
    assert job.world_size == 8  # type: ignore[attr-defined]


def test_sbatch_input_variables_sit_between_directives_and_options(tmp_path: Path) -> None:
    """sbatch.html INPUT ENVIRONMENT VARIABLES: SBATCH_GPUS_PER_NODE is --gpus-per-node; the command line overrides
    it, and it overrides #SBATCH lines. A bare python line then runs one process per GPU of the node."""
    (tmp_path / "job.sh").write_text("#!/bin/bash\n#SBATCH -N 2 --gpus-per-node=4\nsrun python pretrain_gpt.py\n")
    job = str(tmp_path / "job.sh")
    assert parse_launch(["sbatch", job], {}).world_size == 8
    assert parse_launch(["sbatch", job], {"SBATCH_GPUS_PER_NODE": "8"}).world_size == 16
    assert parse_launch(["sbatch", "--gpus-per-node=2", job], {"SBATCH_GPUS_PER_NODE": "8"}).world_size == 4


def test_a_heterogeneous_jobs_first_component_sizes_it(tmp_path: Path) -> None:
    """`#SBATCH hetjob` separates components (src/sbatch/opt.c _opt_batch_script); it is no invalid directive."""
    job = _sbatch(tmp_path, "#!/bin/bash\n#SBATCH -N 2 --ntasks-per-node=4\n#SBATCH hetjob\n#SBATCH -N 1\n" + LAUNCH)
    assert job.world_size == 8  # type: ignore[attr-defined]


@pytest.mark.parametrize(("export", "caller", "tasks"), [
    ("ALL,CUDA_DEVICE_MAX_CONNECTIONS=1", None, "1"), ("NONE", "1", None), ("NIL", "1", None),
    ("NONE,CUDA_DEVICE_MAX_CONNECTIONS=8", None, None),  # items after NONE are not read
    ("ALL,CUDA_DEVICE_MAX_CONNECTIONS=1", "8", "8"),  # with ALL the caller's value wins over the explicit one
    ("CUDA_DEVICE_MAX_CONNECTIONS=1", "8", "1"), ("PATH", "1", None),  # without ALL only the listed ones pass
    ("CUDA_DEVICE_MAX_CONNECTIONS", "4", "4"), ("ALL", "4", "4"),
])
def test_srun_export_builds_the_tasks_environment(export: str, caller: str | None, tasks: str | None) -> None:
    """src/srun/launch.c _build_user_env: tokens up to NONE; NAME=value or the caller's NAME; the caller's other
    variables only with ALL, which then also win over explicit values (env_array_merge overwrites)."""
    env = {} if caller is None else {"CUDA_DEVICE_MAX_CONNECTIONS": caller}
    job = parse_launch(["srun", "-N", "2", "--ntasks-per-node", "8", f"--exp={export}", "python", "pretrain_gpt.py"], env)
    assert job.env.get("CUDA_DEVICE_MAX_CONNECTIONS") == tasks
