"""`llmperf run` refuses a command whose training script (or `-m` module) python cannot open, and a --run-dir no
folder can be made in, before it predicts (commands/run_entry.py; H184's notes: `llmperf run -- python nosuch.py
--num-layers ...` was priced as a Megatron job, then python failed)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from llmperf_hook.commands.run_entry import entry_problem

PY = sys.executable
ENV = {**os.environ, "PATH": f"{Path(PY).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
"""This interpreter's torchrun and deepspeed first on PATH, as in an activated environment."""
MEGATRON = ["--num-layers", "2", "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "64",
            "--max-position-embeddings", "64", "--micro-batch-size", "1", "--global-batch-size", "2", "--vocab-size", "128"]


@pytest.fixture()
def work(tmp_path: Path) -> Path:
    (tmp_path / "train.py").write_text("")
    (tmp_path / "no_main").mkdir()
    (tmp_path / "app").mkdir()
    (tmp_path / "app" / "__main__.py").write_text("")
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "sub" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "sub" / "__main__.py").write_text("")
    (tmp_path / "pkg" / "mod.py").write_text("")
    (tmp_path / "plug").mkdir()  # its __init__ extends its own __path__: what it holds is known only by importing it
    (tmp_path / "plug" / "__init__.py").write_text("__path__ = __import__('pkgutil').extend_path(__path__, __name__)\n")
    (tmp_path / "lib" / "elsewhere").mkdir(parents=True)
    (tmp_path / "lib" / "elsewhere" / "__main__.py").write_text("")
    return tmp_path


@pytest.fixture()
def no_dns(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hostfiles' `worker-*` names are unknown without asking a resolver (no network; a silent one would cost
    local_host.RESOLVE_LIMIT_S a test)."""
    real = socket.getaddrinfo

    def getaddrinfo(host: object, *args: object, **kwargs: object) -> list:
        if isinstance(host, str) and host.startswith("worker-"):
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


@pytest.mark.parametrize("argv, says", [
    ([PY, "nosuch.py", "--x"], "can't open file '{cwd}/nosuch.py': [Errno 2] No such file or directory"),
    ([PY, "-u", "no_main"], "can't find '__main__' module in '{cwd}/no_main'"),
    ([PY, "-m", "nosuch"], "No module named nosuch"),
    ([PY, "-m", "nosuch.x"], "No module named 'nosuch'"),
    ([PY, "-m", "pkg"], "No module named pkg.__main__; 'pkg' is a package and cannot be directly executed"),
    ([PY, "-m", "pkg.nosuch"], "No module named pkg.nosuch"),
    ([PY, "-m", "pkg.mod.x"], "No module named pkg.mod.x; 'pkg.mod' is not a package"),
    (["torchrun", "--nproc-per-node", "2", "nosuch.py", "--lr", "1"], "can't open file '{cwd}/nosuch.py'"),
    (["OMP_NUM_THREADS=1", "deepspeed", "--num_gpus", "1", "sub/nosuch.py"], "can't open file '{cwd}/sub/nosuch.py'"),
    ([PY, "-m", "torch.distributed.run", "--nproc-per-node", "2", "nosuch.py"], "can't open file '{cwd}/nosuch.py'"),
    (["torchrun", "--no-python", "no-such-program-xyz"], "no such program 'no-such-program-xyz' on PATH"),
    (["deepspeed", "--num_gpus", "1", "--module", "nosuch"], "No module named nosuch"),  # its #! python is this one
    (["deepspeed", "--num_gpus", "1", "--no_python", "./train.py"], "'{cwd}/train.py' is not executable"),
    ([PY, "a" * 300 + ".py"], "can't open file '{cwd}/" + "a" * 300 + ".py': [Errno"),  # ENAMETOOLONG: was an
    (["torchrun", "--no-python", "./" + "a" * 300], "File name too long"),                 # internal error
])
def test_what_python_cannot_open_is_said_in_its_words(work: Path, argv: list[str], says: str) -> None:
    problem = entry_problem(argv, ENV, work)
    assert says.format(cwd=work) in problem and "Nothing was predicted or started" in problem, problem


@pytest.mark.parametrize("argv", [
    [PY, "train.py", "--x"], [PY, "app"], [PY, "-m", "pkg.sub"], [PY, "-m", "pkg.mod"], [PY, "-m", "json.tool"],
    [PY, "-m", "plug.anything"], [PY, "-c", "print(1)"], [PY, "-Ic", "pass"], [PY, "-"],
    ["PYTHONPATH=lib", PY, "-m", "elsewhere"],  # the job's PYTHONPATH, relative to its directory as python takes it
    ["torchrun", "--no-python", "ls"], ["PET_MODULE=1", "torchrun", "nosuch"],
    ["torchrun", "--nproc-per-node", "2", "-m", "pkg.sub"],
    ["bash", "-c", f"{PY} nosuch.py"],  # a shell's command: not read here
    ["/nonexistent/python3", "-m", "nosuch"],  # another interpreter: its modules are unknown here
])
def test_what_python_can_open_or_llmperf_cannot_know_is_not_refused(work: Path, argv: list[str]) -> None:
    assert entry_problem(argv, ENV, work) == ""


def llmperf(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "LLMPERF_HOME": str(cwd / "home")}
    return subprocess.run([PY, "-m", "llmperf_hook", *args], capture_output=True, text=True, cwd=cwd, env=env,
                          timeout=300)


def test_a_missing_script_is_refused_before_the_prediction_and_warned_in_a_dry_run(tmp_path: Path) -> None:
    out = llmperf("run", "--instrument", "2", "--", PY, "nosuch.py", *MEGATRON, cwd=tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert f"can't open file '{tmp_path}/nosuch.py': [Errno 2] No such file or directory" in out.stderr
    assert "step time" not in out.stderr.lower() and not (tmp_path / "llmperf-runs").exists()
    dry = llmperf("run", "--dry-run", "--", PY, "nosuch.py", *MEGATRON, cwd=tmp_path)
    assert dry.returncode == 0 and "warning" in dry.stderr and "can't open file" in dry.stderr, dry.stderr


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc")
def test_a_run_dir_where_no_folder_can_be_made_is_refused_before_the_prediction(tmp_path: Path) -> None:
    """/proc passes os.access for root, and mkdir there fails (ENOENT): it failed after the prediction."""
    (tmp_path / "train.py").write_text("")
    out = llmperf("run", "--instrument", "1", "--run-dir", "/proc/x", "--", PY, "train.py", *MEGATRON, cwd=tmp_path)
    assert out.returncode == 2 and "--run-dir '/proc/x'" in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert "step time" not in out.stderr.lower() and not list(Path("/proc").glob(".llmperf-probe-*"))


@pytest.mark.parametrize("folder, module", [("json", "json.tool"), ("pytest", "pytest")])
def test_a_plain_folder_named_like_an_installed_package_does_not_hide_it(work: Path, folder: str, module: str) -> None:
    """A folder without __init__.py in the job's directory (data, logs, a checkout) is only a namespace portion:
    python's path finder takes the regular package later on sys.path (importlib _bootstrap_external
    PathFinder._get_spec), and so must the check (it searched the job's directory alone first: a false refusal)."""
    (work / folder).mkdir()
    ran = subprocess.run([PY, "-m", module, "--help"], cwd=work, env=ENV, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr  # python itself runs it from there
    assert entry_problem([PY, "-m", module, "--help"], ENV, work) == ""


@pytest.mark.parametrize("launch, refused", [
    (["--hostfile", "hosts"], False),  # two hosts: pdsh starts it there (`cd <cwd>`), not here
    (["--hostfile", "hosts", "--module"], False),
    (["--hostfile", "hosts", "--no_ssh", "--node_rank", "0"], True),  # each host starts its own part: here too
    (["--hostfile", "hosts", "--num_nodes", "1"], True),  # one host: deepspeed.launcher.launch runs it here
    (["--hostfile", "one_host", "--force_multi"], False),
    (["--hostfile", "one_host"], True),
    (["--force_multi", "--num_gpus", "1"], True),  # no hostfile: pdsh starts it on localhost, this host
    (["--hostfile", "with_localhost"], True),  # its localhost ranks open it here and fail
    (["--hostfile", "with_this_host"], True),
    (["--hostfile", "with_localhost", "--exclude", "localhost"], False),
    (["--hostfile", "with_loopback"], True),  # runner.py names no host local: pdsh's ssh reaches this one (H213)
    (["--hostfile", "with_this_address"], True),
])
def test_a_multi_node_deepspeed_launch_only_warns_of_an_entry_this_host_cannot_see(work: Path, launch: list[str],
                                                                                  refused: bool, no_dns: None,
                                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(work)  # the launch reads its hostfile from the working directory, as deepspeed does
    (work / "hosts").write_text("worker-1 slots=1\nworker-2 slots=1\n")
    (work / "one_host").write_text("worker-1 slots=1\n")
    (work / "with_localhost").write_text("localhost slots=1\nworker-1 slots=1\nworker-2 slots=1\n")
    (work / "with_this_host").write_text(f"worker-1 slots=1\n{socket.gethostname()} slots=1\n")
    (work / "with_loopback").write_text("worker-1 slots=1\n0:0:0:0:0:0:0:1 slots=1\n")  # ::1 spelled out
    from llmperf_hook.commands.local_host import local_addresses

    mine = sorted(str(a) for a in local_addresses() if not a.is_loopback) or ["::1"]  # no /proc/net: loopback only
    (work / "with_this_address").write_text(f"worker-1 slots=1\n{mine[0]} slots=1\n")
    from llmperf_hook.commands.run_entry import entry_verdict

    problem, refuse = entry_verdict(["deepspeed", *launch, "only_on_workers.py", "--lr", "1"], ENV, work)
    assert refuse is refused and "only_on_workers" in problem, problem
    assert refused or "launched anyway" in problem and "hostfile's hosts" in problem


def test_run_launches_a_multi_node_deepspeed_job_whose_script_only_the_workers_have(
        work: Path, no_dns: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """run's gate warns and goes on (a launch), where a one-host job is refused (exit 2)."""
    from llmperf_hook.commands.run import _check_entry
    from llmperf_hook.errors import UsageError

    monkeypatch.chdir(work)
    (work / "hosts").write_text("worker-1 slots=1\nworker-2 slots=1\n")
    _check_entry(["deepspeed", "--hostfile", "hosts", "only_on_workers.py"], ENV, dry_run=False)
    assert "launched anyway" in capsys.readouterr().err
    with pytest.raises(UsageError, match="can't open file"):
        _check_entry(["deepspeed", "--hostfile", "hosts", "--num_nodes", "1", "only_on_workers.py"], ENV, dry_run=False)


def test_a_refused_multi_node_launch_names_the_host_that_is_this_machine(work: Path, no_dns: None,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The refusal of a hostfile launch says why this host's missing script matters: one of the hostfile's hosts is
    this machine (here by a loopback address), so pdsh starts ranks here (R94: it read like a one-host refusal)."""
    monkeypatch.chdir(work)
    (work / "hosts").write_text("worker-1 slots=1\n127.0.0.2 slots=1\n")
    from llmperf_hook.commands.run_entry import entry_verdict

    problem, refuse = entry_verdict(["deepspeed", "--hostfile", "hosts", "only_on_workers.py"], ENV, work)
    assert refuse and "can't open file" in problem and "127.0.0.2" in problem and "this machine" in problem, problem
    problem, refuse = entry_verdict(["deepspeed", "--num_gpus", "1", "only_on_workers.py"], ENV, work)
    assert refuse and "this machine" not in problem  # one host: plain python's refusal
