"""Presets for the GPUs people train on today (Blackwell, PCIe Hopper/Ampere, Ada, MI300X) and their nodes.

Every value of these presets cites a datasheet or a measured preset it was copied from (the YAML comments); these
tests hold the numbers to the datasheets' dense figures, the physical orderings between parts, and check that each
cluster predicts a real Llama-3-8B command end to end.
"""

from pathlib import Path

import pytest

from llmperf_hook.api import predict_command
from llmperf_hook.errors import ConfigError, UsageError
from llmperf_hook.hardware.load import load_cluster, load_hardware
from llmperf_hook.resources import configs_dir

NEW_HARDWARE = {
    # name: (bf16 dense TFLOP/s, fp8 dense TFLOP/s or None, HBM GB/s, usable GiB) from the cited datasheets
    "h100-pcie-80gb": (756.5, 1513, 2000, 79.1),
    "a100-pcie-80gb": (312, None, 1935, 80),
    "b200-180gb": (2250, 4500, 7700, 178.35),
    "gb200-186gb": (2500, 5000, 8000, 185.0),
    "l40s-48gb": (362.05, 733, 864, 44.5),
    "mi300x-192gb": (1307.4, 2614.9, 5300, 192.0),
}
NEW_CLUSTERS = {
    # name: (gpu, GPUs joined by the intra-node tier, GPUs per OS host, NIC GB/s per GPU)
    "dgx-b200": ("b200-180gb", 8, 8, 50),
    "gb200-nvl72": ("gb200-186gb", 72, 4, 50),
    "pcie-h100-4x400g": ("h100-pcie-80gb", 8, 8, 25),
    "pcie-l40s-2x200g": ("l40s-48gb", 8, 8, 6.25),
    "mi300x-8x400g": ("mi300x-192gb", 8, 8, 50),
}
LLAMA3_8B = ("pretrain_gpt.py --num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 "
             "--group-query-attention --num-query-groups 8 --seq-length 2048 --max-position-embeddings 8192 --swiglu "
             "--normalization RMSNorm --position-embedding-type rope --untie-embeddings-and-output-weights "
             "--disable-bias-linear --vocab-size 128256 --micro-batch-size 1 --global-batch-size 32 "
             "--tensor-model-parallel-size 2 --sequence-parallel --use-distributed-optimizer --overlap-grad-reduce "
             "--recompute-granularity selective --use-flash-attn --bf16").split()


def _torchrun(nnodes: int = 1, nproc: int = 8, extra: tuple[str, ...] = ()) -> list[str]:
    return ["torchrun", "--nnodes", str(nnodes), "--nproc-per-node", str(nproc), *LLAMA3_8B, *extra]


@pytest.mark.parametrize("name", sorted(NEW_HARDWARE))
def test_hardware_preset_holds_its_datasheet_figures(name: str) -> None:
    bf16, fp8, bandwidth_GBps, gib = NEW_HARDWARE[name]
    hw = load_hardware(name)
    assert hw.name == name
    assert hw.peak_flop_per_s["bf16"] == pytest.approx(bf16 * 1e12) == hw.peak_flop_per_s["fp16"]
    assert ("fp8" in hw.peak_flop_per_s) == (fp8 is not None)
    if fp8 is not None:  # dense FP8 is twice dense BF16 (L40S datasheet: 733 vs 362.05, its own rounding)
        assert hw.peak_flop_per_s["fp8"] == pytest.approx(fp8 * 1e12) == pytest.approx(2 * bf16 * 1e12, rel=0.015)
    assert hw.peak_flop_per_s["fp32"] < hw.peak_flop_per_s["tf32"] < hw.peak_flop_per_s["bf16"]
    assert hw.memory_bandwidth_bytes_per_s == bandwidth_GBps * 1e9
    assert hw.memory_capacity_bytes == int(gib * 2**30)
    for value in (hw.gemm_efficiency, hw.attention_efficiency, hw.memory_efficiency):
        assert 0.3 < value < 1.0
    assert 0 < hw.kernel_launch_s < 20e-6 and 0 < hw.gemm_ramp_s < 30e-6


@pytest.mark.parametrize("name", sorted(NEW_HARDWARE) + sorted(NEW_CLUSTERS))
def test_every_new_preset_names_its_source(name: str) -> None:
    kind = "hardware" if name in NEW_HARDWARE else "clusters"
    text = (configs_dir() / kind / f"{name}.yaml").read_text()
    assert "datasheet" in text.lower() or "data sheet" in text.lower()
    assert any(f"({year}" in text or f"{year})" in text for year in range(2020, 2027))
    # Every efficiency or latency value line is preceded by a comment saying where it came from.
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.split(":")[0] in ("gemm_efficiency", "intra_node_bus_efficiency", "host_overhead_per_op_us"):
            assert lines[i - 1].startswith("#"), f"{name}: {line} has no source comment"


@pytest.mark.parametrize("name,fields,source", [
    ("h100-pcie-80gb", ("gemm_efficiency", "gemm_ramp_s", "attention_efficiency", "memory_efficiency"), "h100-sxm5-80gb"),
    ("mi300x-192gb", ("gemm_efficiency", "gemm_ramp_s", "attention_efficiency", "memory_efficiency"), "h100-sxm5-80gb"),
    ("b200-180gb", ("gemm_ramp_s", "attention_efficiency"), "h100-sxm5-80gb"),
    ("gb200-186gb", ("gemm_efficiency", "gemm_ramp_s", "attention_efficiency", "memory_efficiency"), "b200-180gb"),
    ("l40s-48gb", ("gemm_efficiency",), "a100-pcie-80gb"),
    ("l40s-48gb", ("gemm_ramp_s", "attention_efficiency"), "a100-sxm4-80gb"),
    ("a100-pcie-80gb", ("gemm_ramp_s", "attention_efficiency", "memory_efficiency"), "a100-sxm4-80gb"),
])
def test_copied_efficiencies_follow_their_source(name: str, fields: tuple[str, ...], source: str) -> None:
    new, src = load_hardware(name), load_hardware(source)
    assert [getattr(new, f) for f in fields] == [getattr(src, f) for f in fields]


def test_measured_gemm_efficiencies_are_the_calibration_tables() -> None:
    """stas00's mamf-finder figures (../shared/validation/calibration/gemm_mamf_bf16_fp8_stas00.csv)."""
    assert load_hardware("a100-pcie-80gb").gemm_efficiency == round(252.9 / 312, 2)
    assert load_hardware("b200-180gb").gemm_efficiency == round(1745.0 / 2250, 2)


def test_physical_orderings_between_generations() -> None:
    bf16 = {n: load_hardware(n).peak_flop_per_s["bf16"] for n in
            ("a100-sxm4-80gb", "a100-pcie-80gb", "h100-pcie-80gb", "h100-sxm5-80gb", "b200-180gb", "gb200-186gb",
             "l40s-48gb", "mi300x-192gb")}
    assert bf16["a100-pcie-80gb"] == bf16["a100-sxm4-80gb"] < bf16["l40s-48gb"] < bf16["h100-pcie-80gb"]
    assert bf16["h100-pcie-80gb"] < bf16["h100-sxm5-80gb"] < bf16["mi300x-192gb"] < bf16["b200-180gb"]
    assert bf16["b200-180gb"] < bf16["gb200-186gb"]  # same die, 1,200 W instead of 1,000 W
    hbm = {n: load_hardware(n).memory_bandwidth_bytes_per_s for n in
           ("l40s-48gb", "a100-pcie-80gb", "h100-pcie-80gb", "h100-sxm5-80gb", "mi300x-192gb", "b200-180gb")}
    assert list(hbm) == sorted(hbm, key=hbm.__getitem__)


@pytest.mark.parametrize("name", sorted(NEW_CLUSTERS))
def test_cluster_preset_loads_with_its_gpu_and_network(name: str) -> None:
    gpu, domain, host, nic_GBps = NEW_CLUSTERS[name]
    c = load_cluster(name)
    assert c.name == name and c.gpu.name == gpu
    assert c.gpus_per_node == domain and c.host_gpus == host
    assert c.inter_node.bandwidth_bytes_per_s == nic_GBps * 1e9
    assert c.inter_node.bandwidth_bytes_per_s < c.intra_node.bandwidth_bytes_per_s
    assert 0 < c.intra_node.bus_efficiency <= 1 and 0 < c.inter_node.bus_efficiency <= 1
    assert 0 < c.intra_node.latency_s < 1e-3 and 0 < c.host_overhead_per_op_s < 1e-3


@pytest.mark.parametrize("name,source", [("dgx-b200", "dgx-h100"), ("gb200-nvl72", "dgx-h100"),
                                         ("pcie-h100-4x400g", "dgx-h100"), ("pcie-l40s-2x200g", "dgx-h100"),
                                         ("mi300x-8x400g", "dgx-h100")])
def test_copied_values_follow_their_measured_source(name: str, source: str) -> None:
    """Values the YAML says are copied ("as dgx-h100", "as perlmutter") must not drift from a refitted source."""
    new, src = load_cluster(name), load_cluster(source)
    assert new.host_overhead_per_op_s == src.host_overhead_per_op_s
    assert (new.inter_node.bus_efficiency, new.inter_node.latency_s) == (src.inter_node.bus_efficiency,
                                                                         src.inter_node.latency_s)
    if name in ("dgx-b200", "gb200-nvl72"):  # NVSwitch with NVLink SHARP, as on DGX H100
        assert (new.intra_node.bus_efficiency, new.intra_node.latency_s) == (src.intra_node.bus_efficiency,
                                                                             src.intra_node.latency_s)
    mesh, perlmutter = load_cluster("mi300x-8x400g"), load_cluster("perlmutter")
    assert (mesh.intra_node.bus_efficiency, mesh.intra_node.latency_s) == (perlmutter.intra_node.bus_efficiency,
                                                                           perlmutter.intra_node.latency_s)


def test_nvlink_domain_of_several_hosts() -> None:
    """GB200 NVL72: 18 hosts of 4 GPUs fill one 72-GPU NVLink domain; DGX nodes are their own domain."""
    nvl72, dgx = load_cluster("gb200-nvl72"), load_cluster("dgx-b200")
    assert nvl72.ranks_per_fabric(4) == 72 and nvl72.ranks_per_fabric(2) == 36 and nvl72.ranks_per_fabric(0) == 72
    assert dgx.gpus_per_host == 0 and dgx.host_gpus == 8
    assert [dgx.ranks_per_fabric(n) for n in (0, 1, 4, 8, 16)] == [8, 1, 4, 8, 8]  # = min(gpus_per_node, nproc)


@pytest.mark.parametrize("value,ok", [(4, 4), (72, 0), (8, 8), (5, None), (0, None), (True, None), ("4", None)])
def test_gpus_per_host_must_divide_the_domain(tmp_path: Path, value: object, ok: int | None) -> None:
    path = tmp_path / "domain.yaml"
    path.write_text(f"name: domain\ngpu: gb200-186gb\ngpus_per_node: 72\nintra_node_bandwidth_GBps: 900\n"
                    f"inter_node_bandwidth_GBps: 50\ngpus_per_host: {value!r}\n".replace("'", '"'))
    if ok is None:
        with pytest.raises(UsageError, match="gpus_per_host must be a positive integer dividing gpus_per_node 72"):
            load_cluster(str(path))
    else:
        assert load_cluster(str(path)).gpus_per_host == ok


def test_collectives_inside_the_nvl72_domain_run_at_nvlink_speed() -> None:
    """A TP-8 group over two 4-GPU trays is priced on NVLink when placed on the domain, as alpha_beta does for a node."""
    from llmperf_hook.frameworks.training_config import ParallelLayout
    from llmperf_hook.graph.op import Op
    from llmperf_hook.graph.placement import place_group
    from llmperf_hook.predict.alpha_beta import collective_time_s

    nvl72, pcie = load_cluster("gb200-nvl72"), load_cluster("pcie-h100-4x400g")
    layout = ParallelLayout(tp=8, pp=1, dp=9)
    in_domain = place_group("tp", 8, layout, nvl72.ranks_per_fabric(4))
    per_tray = place_group("tp", 8, layout, nvl72.host_gpus)
    assert in_domain.intra_node and not per_tray.intra_node
    op = Op("tp.allreduce", "allreduce", "fwd", {"bytes": 256 * 2**20}, flops=0, bytes_moved=256 * 2**20,
            dtype="bf16", collective=in_domain)
    nvlink_s = collective_time_s(op, nvl72)
    assert nvlink_s == pytest.approx(54e-6 + 2 * 7 / 8 * 256 * 2**20 / (900e9 * 0.99))
    assert collective_time_s(op, pcie) > 10 * nvlink_s  # 64 GB/s PCIe Gen5 against 900 GB/s NVLink 5


def test_torchrun_on_gb200_trays_places_tp8_inside_the_nvlink_domain() -> None:
    from llmperf_hook.graph.build import build_graph

    pred = predict_command(_torchrun(2, 4, ("--tensor-model-parallel-size", "8")), {}, cluster="gb200-nvl72")
    graph = build_graph(pred.config, pred.cluster)
    groups = {op.collective.group: op.collective for op in graph.all_ops() if op.collective is not None}
    assert groups["tp"].ranks_per_node == 8 and groups["tp"].intra_node


def test_nproc_per_node_gpu_on_gb200_counts_the_trays_gpus() -> None:
    argv = ["torchrun", "--nnodes", "2", "--nproc-per-node", "gpu", *LLAMA3_8B, "--global-batch-size", "144"]
    assert predict_command(argv, {}, cluster="gb200-nvl72").config.world_size == 8


@pytest.mark.parametrize("cluster", sorted(NEW_CLUSTERS))
def test_llama3_8b_predicts_end_to_end_on_every_new_cluster(cluster: str) -> None:
    nproc = load_cluster(cluster).host_gpus
    pred = predict_command(_torchrun(16 // nproc, nproc), {}, cluster=cluster)
    est = pred.estimate
    assert 0.05 < est.step_time_s < 60 and 0.05 < est.mfu < 0.8
    assert est.memory.fits
    assert pred.cluster.name == cluster and pred.config.world_size == 16


def test_step_time_orders_generations_on_the_same_job() -> None:
    step = {c: predict_command(_torchrun(2, 8), {}, cluster=c).estimate.step_time_s
            for c in ("dgx-a100", "dgx-h100", "dgx-b200", "pcie-h100-4x400g")}
    assert step["dgx-b200"] < step["dgx-h100"] < step["dgx-a100"]
    assert step["dgx-h100"] < step["pcie-h100-4x400g"]  # fewer SMs and clocks, PCIe for TP, a quarter of the NICs


def test_fp8_runs_where_the_gpu_has_fp8_and_is_refused_where_it_has_none() -> None:
    fp8 = ("--fp8-format", "hybrid")
    for cluster in ("dgx-b200", "pcie-l40s-2x200g", "mi300x-8x400g"):
        bf16_s = predict_command(_torchrun(2, 8), {}, cluster=cluster).estimate.step_time_s
        fp8_s = predict_command(_torchrun(2, 8, fp8), {}, cluster=cluster).estimate.step_time_s
        assert fp8_s < bf16_s, cluster
    with pytest.raises(ConfigError, match="a100-pcie-80gb.*compute capability 8.9 or higher"):
        predict_command(_torchrun(2, 8, fp8), {}, cluster="pcie-h100-4x400g", hardware="a100-pcie-80gb")


def test_unknown_cluster_lists_the_new_presets(capsys: pytest.CaptureFixture[str]) -> None:
    from llmperf_hook.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["predict", "--cluster", "dgx-b300", "--", *_torchrun()])
    assert exit_info.value.code == 2
    text = " ".join(capsys.readouterr().err.split())
    assert "cluster 'dgx-b300' not found" in text
    for name in NEW_CLUSTERS:
        assert name in text


def test_pcie_parts_do_not_inherit_nvswitch_defaults(tmp_path: Path) -> None:
    """A cluster YAML with only the standard keys gets a generation's NVSwitch / NVLink fit only for SXM parts."""
    for gpu, sxm in (("h100-pcie-80gb", "h100-sxm5-80gb"), ("a100-pcie-80gb", "a100-sxm4-80gb")):
        for name in (gpu, sxm):
            (tmp_path / f"{name}.yaml").write_text(f"name: {name}\ngpu: {name}\ngpus_per_node: 8\n"
                                                   "intra_node_bandwidth_GBps: 64\ninter_node_bandwidth_GBps: 25\n")
        pcie, nvswitch = load_cluster(str(tmp_path / f"{gpu}.yaml")), load_cluster(str(tmp_path / f"{sxm}.yaml"))
        assert (pcie.intra_node.latency_s, pcie.intra_node.bus_efficiency) == pytest.approx((20e-6, 0.8))
        assert nvswitch.intra_node.bus_efficiency in (0.72, 0.99)
