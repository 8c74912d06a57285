"""benchmarks/measure_sdpa_layout.py: the two layouts it compares are the sampler's and the testbed job's."""

from __future__ import annotations

from pathlib import Path

import pytest

from script_module import load_script

ROOT = Path(__file__).resolve().parents[2]


def test_job_layout_is_the_packed_projection_and_the_sampler_layout_is_contiguous() -> None:
    torch = pytest.importorskip("torch")
    tool = load_script(ROOT / "benchmarks" / "measure_sdpa_layout.py")
    kw = {"device": "cpu", "dtype": torch.float32}
    q, k, v = tool.job_inputs(torch, 2, 3, 16, 8, kw)
    assert q.shape == (2, 3, 16, 8) and not q.is_contiguous()
    assert q.stride() == (16 * 3 * 3 * 8, 8, 3 * 3 * 8, 1)  # [b, s, 3, h, d] memory, as train_gpt.py's view/permute
    assert k.data_ptr() - q.data_ptr() == 3 * 8 * q.element_size()
    assert all(t.is_contiguous() for t in tool.sampler_inputs(torch, 2, 3, 16, 8, kw))
    for layout in ("sampler", "job"):  # both run forward and backward; off CUDA no time is taken
        assert tool.measure(torch, layout, (1, 2, 32, 8), kw, 1)["backend"] != "?"


def test_cuda_asked_without_a_gpu_is_refused_with_exit_2(monkeypatch, capsys) -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    tool = load_script(ROOT / "benchmarks" / "measure_sdpa_layout.py")
    monkeypatch.setattr("sys.argv", ["measure_sdpa_layout.py"])
    with pytest.raises(SystemExit) as stop:
        tool.main()
    assert stop.value.code == 2
    assert "--device cpu --tiny" in capsys.readouterr().err
