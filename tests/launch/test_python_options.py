"""`python [options] -m MODULE` / `python [options] script.py` read as CPython reads its own options (clustered letters,
attached values: `-um torch.distributed.run`, `-mtorch.distributed.run`, `-Wignore`, `-X dev`, `--`): the oracle is
the interpreter itself, running a probe module and script that print what they were started as."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from llmperf_hook.launch.parse import parse_launch

PROBE = "import json, sys\nprint(json.dumps([(__spec__.name if __spec__ else sys.argv[0]), sys.argv[1:]]))\n"
CASES = ["-m probe a b", "-mprobe a", "-um probe --x 1", "-uOm probe a", "-W ignore -m probe a", "-Wignore -m probe",
         "-X dev -m probe", "-Xdev s.py a", "-uWignore s.py --lr 1", "-bb s.py", "-E -s -m probe a", "-- s.py a",
         "-u -X faulthandler s.py --x"]


@pytest.mark.parametrize("case", CASES)
def test_python_options_as_cpython_reads_them(case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "probe.py").write_text(PROBE)
    (tmp_path / "s.py").write_text(PROBE)
    done = subprocess.run([sys.executable, *shlex.split(case)], cwd=tmp_path, capture_output=True, text=True, timeout=60,
                          check=True)
    started, args = json.loads(done.stdout.strip().splitlines()[-1])
    monkeypatch.chdir(tmp_path)
    job = parse_launch(["python", *shlex.split(case)], {})
    assert job.script == (f"-m {started}" if started == "probe" else started) and list(job.script_args) == args


@pytest.mark.parametrize("head", ["-mtorch.distributed.run", "-um torch.distributed.run", "-Wignore -m torch.distributed.run"])
def test_a_launcher_module_behind_clustered_options(head: str) -> None:
    job = parse_launch(["python", *head.split(), "--nproc_per_node", "8", "train.py"], {})
    assert (job.launcher, job.world_size, job.script) == ("torchrun", 8, "train.py")
