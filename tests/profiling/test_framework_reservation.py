"""The framework cost's share of `llmperf profile --device cpu --budget`: the dtypes measured keep to its deadline
together, a dtype that ran over its share taking it from the next one's, never adding to the run."""

import pytest

from llmperf_hook.profile import cpu_framework as cf
from llmperf_hook.profile import cpu_framework_readings as cfr

pytest.importorskip("torch")  # write_framework_overhead sets torch's threads


@pytest.mark.parametrize(("first_took_s", "second_box_s"), [
    (85.0, cf.RESERVED_S - 85.0),  # bf16 over its half: fp32 gets what is left (it had its whole half)
    (50.0, cf.RESERVED_S / 2),  # within its half: fp32 still gets its own half, not more
    (200.0, None),  # the whole reservation spent: fp32 is not measured (said: time_box_notes); it took its 3
    # minimum readings whatever they cost, and a 3-minute profile ran 4:02 at load 10
])
def test_a_dtype_over_its_share_shortens_the_next(tmp_path, monkeypatch: pytest.MonkeyPatch, first_took_s: float,
                                                  second_box_s: float | None) -> None:
    from llmperf_hook.instrument import reference_speed

    clock, boxes = [1000.0], []

    def measure(hardware: str, dtype: str, threads: int, box_s: float) -> dict:
        boxes.append(box_s)
        clock[0] += first_took_s if dtype == "bf16" else box_s
        return {}

    class Reading:
        def to_json(self) -> dict:
            return {"cpu_s": 0.006}

    monkeypatch.setattr(cfr.time, "perf_counter", lambda: clock[0])
    monkeypatch.setattr(cfr, "measure_framework_overhead", measure)
    monkeypatch.setattr(reference_speed, "measure_reference", lambda where: Reading())
    cfr.write_framework_overhead(tmp_path, "cpu-x", ["bf16", "fp32"], 1)
    assert boxes == [pytest.approx(cf.RESERVED_S / 2)] + ([] if second_box_s is None else [pytest.approx(second_box_s)])
