"""The public NCCL samples' `shape` is the tensor each rank passes (the authors' sampler all-gathers
`torch.rand(shape)` from every rank into a list): an all-gather's output, the bytes comm_model prices, is
group size x shape. Read so, the shipped fits carry the bus bandwidth of their links whatever the collective."""

from pathlib import Path

import numpy as np
import pytest

from llmperf_hook.predict.fitted import find_comm_model
from llmperf_hook.profile.comm_fit import read_public_comm


def test_all_gather_samples_are_read_as_group_size_times_the_per_rank_tensor(tmp_path: Path) -> None:
    for kind in ("allgather_large", "allreduce", "p2p"):
        (tmp_path / f"NVIDIAX_{kind}_fp16_1_4.csv").write_text("shape,nodes,GPUsPerNode,dur(us)\n1000,1,4,10\n")
    got = {s.collective: float(s.nbytes[0]) for s in read_public_comm(tmp_path)}
    assert got == {"allgather": 4 * 2 * 1000.0, "allreduce": 2 * 1000.0, "p2p": 2 * 1000.0}


@pytest.mark.parametrize("nodes, gpn", [(2, 1), (2, 2), (4, 1), (8, 1)])
def test_perlmutter_all_gather_and_all_reduce_fits_share_the_network_bus_bandwidth(nodes: int, gpn: int) -> None:
    """Across nodes both collectives ran on the authors' slow NCCL transport (1.2-4.4 GB/s): the same bus bandwidth
    on each layout (NCCL-tests PERFORMANCE.md: bus bandwidth reflects the links, not the collective). Reading the
    all-gather `shape` as its output gave it 1/n of it (0.5-0.6 GB/s)."""
    fits = {(f.collective, f.nodes, f.gpus_per_node): f for f in find_comm_model("perlmutter").model.layouts}
    gather, reduce = fits[("allgather", nodes, gpn)], fits[("allreduce", nodes, gpn)]
    top = np.array([min(gather.bytes_range[1], reduce.bytes_range[1])])
    n = nodes * gpn
    busbw = [(n - 1) / n * top / gather.predict_s(top, n, "allgather"),
             2 * (n - 1) / n * top / reduce.predict_s(top, n, "allreduce")]
    assert busbw[0] == pytest.approx(busbw[1], rel=0.25), busbw
