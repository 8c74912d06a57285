"""benchmarks/audit_s23.py sections 8-9: where S23's error sits by placement, and per layer and pipeline slot."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from script_module import load_script

ROOT = Path(__file__).resolve().parents[2]


def _audit():  # type: ignore[no-untyped-def]
    return load_script(ROOT / "benchmarks" / "audit_s23.py")


def _run(row: str, tp: int, pp: int, dp: int, mbs: int = 2, gbs: int = 1536, layers: int = 48,
         hidden: int = 8192, measured_s: float = 20.0) -> SimpleNamespace:
    return SimpleNamespace(row_id=row, tp=tp, pp=pp, dp=dp, micro_batch_size=mbs, global_batch_size=gbs,
                           num_layers=layers, hidden_size=hidden, seq_length=2048, gpus_per_node=8,
                           iteration_time_s=measured_s)


def test_placement_follows_megatron_rank_order() -> None:
    audit = _audit()
    tp2_pp8 = _run("633", tp=2, pp=8, dp=32)  # 39.1B on 512 GPUs: a stage is 64 GPUs = 8 nodes, 4 DP ranks each
    assert (audit.nodes_per_stage(tp2_pp8), audit.dp_ranks_per_node(tp2_pp8)) == (8, 4)
    tp8_pp2 = _run("651", tp=8, pp=2, dp=32)  # a stage is 256 GPUs = 32 nodes, one DP rank each
    assert (audit.nodes_per_stage(tp8_pp2), audit.dp_ranks_per_node(tp8_pp2)) == (32, 1)
    tp16 = _run("613", tp=16, pp=1, dp=4)  # TP spans two nodes: still one rank of a DP group per node
    assert (audit.nodes_per_stage(tp16), audit.dp_ranks_per_node(tp16)) == (8, 1)
    tp2_dp2 = _run("x", tp=2, pp=2, dp=2)  # a stage is 4 GPUs of one node: its DP group has only 2 ranks there
    assert (audit.nodes_per_stage(tp2_dp2), audit.dp_ranks_per_node(tp2_dp2)) == (1, 2)


def test_errors_are_grouped_by_ranks_per_node_and_stage_span() -> None:
    audit = _audit()
    runs = [_run("a", tp=2, pp=8, dp=32, measured_s=20.0), _run("b", tp=2, pp=8, dp=32, measured_s=10.0),
            _run("c", tp=8, pp=2, dp=32, measured_s=10.0)]
    pred = {"a": (15.0, 0.2, 9.0), "b": (11.0, 0.2, 9.0), "c": (10.0, 0.8, 9.0)}
    groups = audit.errors_by_placement(runs, pred)
    assert groups[(True, 8)] == [pytest.approx(-0.25), pytest.approx(0.1)]
    assert groups[(False, 32)] == [pytest.approx(0.0)]
    assert list(groups) == sorted(groups)


def test_section_placement_prints_each_class_once_in_order(capsys: pytest.CaptureFixture[str]) -> None:
    audit = _audit()
    runs = [_run("c", tp=8, pp=2, dp=32, measured_s=10.0), _run("a", tp=2, pp=8, dp=32, measured_s=20.0),
            _run("b", tp=2, pp=8, dp=32, measured_s=10.0)]
    audit.section_placement(runs, {"a": (15.0, 0.2, 9.0), "b": (11.0, 0.4, 9.0), "c": (10.0, 0.8, 9.0)})
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[2].split() == ["one", "32", "1", "+0.0%", "+0"]
    assert lines[3].split() == ["several", "8", "2", "-7.5%", "-25", "+10"]
    # Theil-Sen over several: a's gap +5 s at 0.2 s of all-reduce, b's -1 s at 0.4 s: b = -30, a = 5 + 30 x 0.2 = 11
    assert lines[-2].endswith("1 rows: a +0.000 s, b +0.00") and lines[-1].endswith("2 rows: a +11.000 s, b -30.00")


def test_excess_per_layer_slot_is_the_same_at_two_pipeline_depths_for_a_per_layer_cost() -> None:
    audit = _audit()
    # A cost of 40 ms in every layer's passes: PP 8 (m 24, 31 slots of 6 layers), PP 16 (m 48, 63 slots of 3 layers)
    pp8, pp16 = _run("633", tp=2, pp=8, dp=32), _run("635", tp=2, pp=16, dp=16)
    assert audit.excess_per_layer_slot(pp8, 20.0 - 0.040 * 31 * 6) == pytest.approx(0.040)
    assert audit.excess_per_layer_slot(pp16, 20.0 - 0.040 * 63 * 3) == pytest.approx(0.040)


def test_p2p_send_is_the_activation_split_over_tp() -> None:
    assert _audit().p2p_send_bytes(_run("633", tp=2, pp=8, dp=32)) == 2048 * 2 * 8192 * 2 // 2
