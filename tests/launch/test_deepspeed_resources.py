"""The deepspeed launcher's world as runner.py computes it: the hostfile read by its own fetch_hostfile (comments,
blank lines, `slots=`, duplicate and bad entries), --include/--exclude by parse_inclusion_exclusion, then
apply_num_nodes_and_gpus (deepspeed 0.19.8 as installed); llmperf must find the same nodes and ranks, and refuse
(exit 2) what runner.py refuses."""

from __future__ import annotations

import contextlib
import io
import os
import shlex
from pathlib import Path

import pytest

from llmperf_hook.errors import UsageError
from llmperf_hook.launch.parse import parse_launch

HOSTFILES = {
    "plain": "worker-0 slots=8\nworker-1 slots=8\n",
    "comments": "# cluster\n\nworker-0 slots=8  # first\n   \nworker-1 slots=4\n#worker-2 slots=8\n",
    "uneven": "a slots=4\nb slots=8\nc slots=2\n",
    "tabs": "a\tslots=8\nb\t slots=8 max_slots=16\n",
    "duplicate": "a slots=4\na slots=8\n",
    "no_slots": "a 8\n",
    "empty": "# nothing\n\n",
}
FILTERS = ["", "--num_gpus 2", "--num_nodes 1", "--num_nodes 1 --num_gpus 4", "--include a", "--include a:0,1@b:2",
           "--exclude a", "--exclude a:0", "--include worker-1", "--exclude worker-0:0,1,2", "--include worker-0:0,0,1",
           "--num_gpus 2 --include a", "--include x", "--include a:9", "--num_nodes 5", "--num_gpus 16"]


def _runner():  # type: ignore[no-untyped-def]
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    return pytest.importorskip("deepspeed.launcher.runner")


def _real(hostfile: Path, options: str) -> tuple[int, int] | None:
    """(nodes, ranks) as runner.main resolves them before launching, or None where it raises."""
    runner = _runner()
    args = runner.parse_args([*shlex.split(options), "-H", str(hostfile), "train.py"])
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            pool = runner.fetch_hostfile(args.hostfile)
            if (args.num_nodes >= 0 or args.num_gpus >= 0) and (args.include or args.exclude):
                raise ValueError("Cannot specify num_nodes/gpus with include/exclude")  # runner.main's own check
            active = runner.parse_inclusion_exclusion(pool, args.include, args.exclude)
            active = runner.apply_num_nodes_and_gpus(active, args.num_nodes, args.num_gpus)
    except ValueError:
        return None
    return (len(active), sum(len(slots) for slots in active.values())) if active else None


@pytest.mark.parametrize("options", FILTERS)
@pytest.mark.parametrize("name", HOSTFILES)
def test_resources_as_runner_resolves_them(name: str, options: str, tmp_path: Path) -> None:
    hostfile = tmp_path / "hostfile"
    hostfile.write_text(HOSTFILES[name])
    real = _real(hostfile, options)
    try:
        job = parse_launch(["deepspeed", *shlex.split(options), "-H", str(hostfile), "train.py"], {})
        ours: tuple[int, int] | None = (job.nnodes, job.world_size)
    except UsageError as err:
        assert err.exit_code == 2
        ours = None
    assert ours == real, (name, options)
