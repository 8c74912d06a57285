"""Hardware and cluster YAML: presets, lookup order, schema errors."""

import re
from pathlib import Path

import pytest

from llmperf_hook.errors import UsageError
from llmperf_hook.hardware.load import load_cluster, load_hardware
from llmperf_hook.resources import configs_dir

PRESETS = {"a100-sxm4-40gb": (312e12, 1555e9, 40), "a100-sxm4-80gb": (312e12, 2039e9, 80),
           "h100-sxm5-80gb": (989.4e12, 3350e9, 79.18), "gh200-96gb": (990e12, 4000e9, 95.6),
           "h200-sxm-141gb": (989.4e12, 4800e9, 139.8)}


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_hardware_presets(name: str) -> None:
    bf16, bw, gib = PRESETS[name]
    hw = load_hardware(name)
    assert hw.name == name and hw.peak_flop_per_s["bf16"] == bf16
    assert hw.memory_bandwidth_bytes_per_s == bw and hw.memory_capacity_bytes == int(gib * 2**30)
    assert 0.5 < hw.gemm_efficiency <= 1


@pytest.mark.parametrize("name,folder", [("h100-sxm5-80gb", "h100-sxm5-80gb-2026-11-26"),
                                         ("h200-sxm-141gb", "h200-sxm-141gb-2026-11-26")])
def test_capacity_is_what_torch_reported_on_our_gpu(name: str, folder: str) -> None:
    """The verdict compares the allocated peak with what torch can allocate: torch.cuda.get_device_properties'
    total_memory on the measured machine (MiB in its repr), not the marketing figure (80 GB, 141 GB)."""
    env = (Path(__file__).resolve().parents[2] / "measurements" / folder / "environment.txt").read_text()
    total_mib = int(re.search(r"total_memory=(\d+)MB", env).group(1))
    assert load_hardware(name).memory_capacity_bytes == int(round(total_mib / 1024, 2) * 2**30)


@pytest.mark.parametrize("name,gpu,per_node", [("dgx-a100", "a100-sxm4-80gb", 8), ("dgx-h100", "h100-sxm5-80gb", 8),
                                               ("dgx-h200", "h200-sxm-141gb", 8),
                                               ("perlmutter", "a100-sxm4-80gb", 4), ("vista", "gh200-96gb", 1)])
def test_cluster_presets(name: str, gpu: str, per_node: int) -> None:
    c = load_cluster(name)
    assert c.gpu.name == gpu and c.gpus_per_node == per_node
    assert c.inter_node.bandwidth_bytes_per_s < c.intra_node.bandwidth_bytes_per_s


def test_minimal_cluster_file_and_hardware_override(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text("name: mine\ngpu: h100-sxm5-80gb\ngpus_per_node: 4\nintra_node_bandwidth_GBps: 300\n"
                    "inter_node_bandwidth_GBps: 25\n")
    c = load_cluster(str(path))
    assert c.name == "mine" and c.gpus_per_node == 4
    assert c.intra_node.bandwidth_bytes_per_s == 300e9 and c.inter_node.bandwidth_bytes_per_s == 25e9
    assert load_cluster(str(path), "a100-sxm4-40gb").gpu.name == "a100-sxm4-40gb"


def test_unknown_and_missing_keys_are_clear_errors(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("name: bad\ngpu: h100-sxm5-80gb\ngpus_per_node: 8\nintra_node_bandwith_GBps: 300\n")
    with pytest.raises(UsageError, match="unknown keys \\['intra_node_bandwith_GBps'\\].*missing keys"):
        load_cluster(str(path))
    with pytest.raises(UsageError, match="not found.*Shipped: dgx-a100"):
        load_cluster("no-such-cluster")


def test_extra_keys_are_the_users_but_a_misspelt_optional_key_is_an_error(tmp_path: Path) -> None:
    base = "name: mine\ngpu: h100-sxm5-80gb\ngpus_per_node: 8\nintra_node_bandwidth_GBps: 300\ninter_node_bandwidth_GBps: 50\n"
    extra = tmp_path / "extra.yaml"
    extra.write_text(base + "description: our SLURM partition\nsite_contact: ops@example.org\n")
    assert load_cluster(str(extra)).name == "mine"
    typo = tmp_path / "typo.yaml"
    typo.write_text(base + "inter_node_latency_uss: 5\n")
    with pytest.raises(UsageError, match="unknown keys \\['inter_node_latency_uss'\\]"):
        load_cluster(str(typo))


def test_llmperf_home_hardware_wins_over_shipped(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "hardware").mkdir()
    (tmp_path / "hardware" / "cpu-box.yaml").write_text(
        "name: cpu-box\npeak_TFLOPs: {fp32: 1.5, bf16: 0.5}\nmemory_bandwidth_GBps: 50\nmemory_capacity_GB: 24\n")
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    hw = load_hardware("cpu-box")
    assert hw.peak_flop_per_s["fp32"] == 1.5e12 and hw.memory_capacity_bytes == 24e9
    assert hw.peak_for("fp8") == 0.5e12


@pytest.mark.parametrize("gpu,per_node,latency_s,step_s,efficiency", [
    ("a100-sxm4-80gb", 8, 44e-6, 2.03e-6, 0.72), ("a100-sxm4-40gb", 4, 20e-6, 0.0, 0.5),
    ("h100-sxm5-80gb", 8, 54e-6, 0.0, 0.99), ("gh200-96gb", 1, 20e-6, 0.0, 0.8)])
def test_standard_keys_only_get_the_gpu_generations_intra_node_defaults(tmp_path: Path, gpu: str, per_node: int,
                                                                       latency_s: float, step_s: float,
                                                                       efficiency: float) -> None:
    """A held-out cluster YAML with the five standard keys gets the fitted NVLink numbers of its GPU generation."""
    path = tmp_path / "held-out.yaml"
    path.write_text(f"name: held-out\ngpu: {gpu}\ngpus_per_node: {per_node}\nintra_node_bandwidth_GBps: 300\n"
                    "inter_node_bandwidth_GBps: 25\n")
    c = load_cluster(str(path))
    assert c.intra_node.latency_s == pytest.approx(latency_s) and c.intra_node.bus_efficiency == efficiency
    assert c.intra_node.latency_per_step_s == pytest.approx(step_s)
    assert c.inter_node.bus_efficiency == 0.95
    shipped = load_cluster("dgx-a100" if gpu.startswith("a100") and per_node == 8 else "dgx-h100")
    if (gpu, per_node) in (("a100-sxm4-80gb", 8), ("h100-sxm5-80gb", 8)):
        assert (c.intra_node.latency_s, c.intra_node.latency_per_step_s, c.intra_node.bus_efficiency) == (
            shipped.intra_node.latency_s, shipped.intra_node.latency_per_step_s, shipped.intra_node.bus_efficiency)


def test_a_stated_latency_without_a_per_step_part_stays_flat(tmp_path: Path) -> None:
    path = tmp_path / "own.yaml"
    base = ("name: own\ngpu: a100-sxm4-80gb\ngpus_per_node: 8\nintra_node_bandwidth_GBps: 300\n"
            "inter_node_bandwidth_GBps: 25\nintra_node_latency_us: 57\n")
    path.write_text(base)
    assert load_cluster(str(path)).intra_node.latency_per_step_s == 0.0
    path.write_text(base + "intra_node_latency_per_step_us: 3.4\n")
    assert load_cluster(str(path)).intra_node.latency_per_step_s == pytest.approx(3.4e-6)
    path.write_text(base + "intra_node_latency_per_step_us: -1\n")
    with pytest.raises(UsageError, match="intra_node_latency_per_step_us"):
        load_cluster(str(path))


def test_a_missing_path_is_named_as_given(tmp_path) -> None:
    """A path (absolute, relative with a folder, or *.yaml) that does not exist is reported as that path, not
    glued onto $LLMPERF_HOME (the message read '.../clusters//nonexistent/x.yaml.yaml')."""
    import pytest

    from llmperf_hook.errors import UsageError
    from llmperf_hook.hardware.load import find_config_file

    for given in (str(tmp_path / "x.yaml"), "sub/x.yaml", "x.yml"):
        with pytest.raises(UsageError) as err:
            find_config_file("clusters", given)
        assert f"cluster file {given} not found" in str(err.value) and ".yaml.yaml" not in str(err.value)
    with pytest.raises(UsageError, match="it is a folder"):
        find_config_file("hardware", str(tmp_path))


def test_a_profile_folder_is_answered_with_its_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`llmperf profile` prints the profile folder first; given to --hardware it was answered with the shipped
    presets' names only."""
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path))
    folder = tmp_path / "profiles" / "my-cpu"
    folder.mkdir(parents=True)
    (folder / "profile.json").write_text("{}")
    with pytest.raises(UsageError, match=r"fitted operator profile, not a hardware file\. Pass its name, --hardware "
                                         r"my-cpu .*hardware/my-cpu\.yaml"):
        load_hardware(str(folder))
    shipped = configs_dir() / "profiles" / "h100-sxm5-80gb"  # its YAML is configs/hardware/, not $LLMPERF_HOME's
    with pytest.raises(UsageError, match=re.escape(str(configs_dir() / "hardware" / "h100-sxm5-80gb.yaml"))):
        load_hardware(str(shipped))
