"""How many nodes and processes per node a measured run is launched as: exactly its GPU count (12 GPUs on 8-GPU
nodes were launched as 2 x 8 = 16 ranks, another data-parallel size), and a row that names its cluster without a
`gpus_per_node` cell uses that cluster's hosts (16 GPUs on dgx-h100 were one node of 16). Found by the issue-5
acceptance audit."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, strategies as st

from llmperf_hook.resources import configs_dir
from llmperf_hook.validate.cluster_choice import read_cluster_presets
from llmperf_hook.validate.launch_command import build_launch_plan, launch_size
from llmperf_hook.validate.runner import plan_run
from llmperf_hook.validate.runs_csv import build_measured_run

from .validate_helpers import BASE_ROW


@given(st.integers(1, 5000), st.integers(1, 72))
def test_launch_size_starts_exactly_the_gpus_and_fits_a_node(num_gpus: int, per_node: int) -> None:
    nnodes, nproc = launch_size(num_gpus, per_node)
    assert nnodes * nproc == num_gpus and 1 <= nproc <= per_node
    if num_gpus % per_node == 0:
        assert nproc == per_node  # whole nodes, as the runs were launched
    if num_gpus <= per_node:
        assert (nnodes, nproc) == (1, num_gpus)


def test_twelve_gpus_on_eight_gpu_nodes_are_twelve_ranks(tmp_path: Path) -> None:
    row = {**BASE_ROW, "tp": "2", "dp": "6", "num_gpus": "12", "global_batch_size": "48"}
    plan = build_launch_plan(build_measured_run(row, 1), tmp_path)
    assert plan.argv[:5] == ("torchrun", "--nnodes", "2", "--nproc-per-node", "6")
    assert any("2 nodes of 6" in note for note in plan.notes)


@pytest.mark.parametrize(("cluster", "num_gpus", "size"), [
    ("dgx-h100", "16", ("2", "8")), ("dgx-a100", "4096", ("512", "8")), ("perlmutter", "16", ("4", "4")),
    ("dgx-h100", "2", ("1", "2")),
])
def test_a_named_cluster_gives_the_node_size(cluster: str, num_gpus: str, size: tuple[str, str],
                                             tmp_path: Path) -> None:
    row = {k: v for k, v in BASE_ROW.items() if k not in ("gpu_type", "gpus_per_node", "inter_node_network", "dp")}
    row.update(cluster=cluster, tp="1", num_gpus=num_gpus, global_batch_size=str(4 * int(num_gpus)))
    plan, choice = plan_run(build_measured_run(row, 1), read_cluster_presets(configs_dir() / "clusters"), tmp_path)
    assert choice.cluster == cluster
    assert (plan.argv[2], plan.argv[4]) == size


def test_a_blank_cluster_cell_without_gpu_columns_says_so(tmp_path: Path) -> None:
    from llmperf_hook.errors import UsageError

    row = {k: v for k, v in BASE_ROW.items() if k not in ("gpu_type", "gpus_per_node", "inter_node_network")}
    row["cluster"] = ""
    with pytest.raises(UsageError, match="`cluster` cell is blank and it gives no `gpu_type`"):
        plan_run(build_measured_run(row, 1), read_cluster_presets(configs_dir() / "clusters"), tmp_path)
