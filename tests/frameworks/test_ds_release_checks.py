"""ds_config checks that came (or went) with a DeepSpeed release, applied as the job's release runs them
(frameworks/deepspeed_release.schema_release: LLMPERF_DEEPSPEED_VERSION, else the installed DeepSpeed, else today's).
Boundaries from the DeepSpeed git history: dynamic loss-scale bounds ded23491c (tag v0.19.3, not v0.19.2),
gradient_allreduce_op 1cae4920e (after v0.19.5; 0.19.6), compute_grad_norm / parameter_alignment (not in the 0.19.6
mirror, in the installed 0.19.8), removed feature sections (#8490, in 0.19.8)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks import deepspeed_release
from tests.frameworks.helpers import script

DS = ["deepspeed", "--num_gpus", "8", "train.py", "--deepspeed_config"]
FP16: dict[str, Any] = {"train_micro_batch_size_per_gpu": 2, "fp16": {"enabled": True}}


def _run(tmp_path: Path, release: str | None, **keys: Any) -> list[str]:
    """The warnings of a DeepSpeed job with FP16 + `keys` on `release` (None: LLMPERF_DEEPSPEED_VERSION unset)."""
    path = tmp_path / "ds.json"
    section = {**FP16["fp16"], **keys.pop("fp16", {})}
    path.write_text(json.dumps({**FP16, "fp16": section, **keys}))
    env = {} if release is None else {"LLMPERF_DEEPSPEED_VERSION": release}
    return list(script([*DS, str(path)], model="llama2-7b", env=env).warnings)


@pytest.mark.parametrize("field, value", [("min_loss_scale", 0), ("min_loss_scale", -1), ("loss_scale_window", -5),
                                          ("loss_scale_window", True), ("min_loss_scale", False)])
def test_dynamic_loss_scale_bounds_from_0_19_3(tmp_path: Path, field: str, value: Any) -> None:
    _run(tmp_path, "0.19.2", fp16={field: value})  # pydantic int: any integer (a bool as 0/1) runs
    with pytest.raises(ConfigError, match=rf"fp16.{field} is {value!r} .*from v0.19.3 on \(ded23491c\), and the job "
                                          r"runs DeepSpeed 0.19.3 \(LLMPERF_DEEPSPEED_VERSION\)") as err:
        _run(tmp_path, "0.19.3", fp16={field: value})
    assert err.value.exit_code == 2


def test_a_window_of_zero_stops_every_release(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"DeepSpeed 0.19.2 .* accepts it, then DynamicLossScaler.update_scale .*"
                                          "ZeroDivisionError"):
        _run(tmp_path, "0.19.2", fp16={"loss_scale_window": 0})
    with pytest.raises(ConfigError, match="must be > 0 when dynamic loss scaling is enabled"):
        _run(tmp_path, "0.19.3", fp16={"loss_scale_window": 0})
    _run(tmp_path, "0.19.3", fp16={"loss_scale": 128, "min_loss_scale": 0})  # static scaling: never checked


@pytest.mark.parametrize("op, zero", [("sum", 3), ("avg", 2), ("SUM", 3)])
def test_gradient_allreduce_op_from_0_19_6(tmp_path: Path, op: str, zero: int) -> None:
    warnings = _run(tmp_path, "0.19.5", gradient_allreduce_op=op, zero_optimization={"stage": zero})
    assert any(f"gradient_allreduce_op {op!r} ignored: DeepSpeed 0.19.5 (LLMPERF_DEEPSPEED_VERSION) does not read"
               in w for w in warnings), warnings
    with pytest.raises(ConfigError, match=r"gradient_allreduce_op .*0.19.6 and later; the job runs DeepSpeed 0.19.6"):
        _run(tmp_path, "0.19.6", gradient_allreduce_op=op, zero_optimization={"stage": zero})


def test_mean_is_silent_on_an_old_release(tmp_path: Path) -> None:
    assert not any("gradient_allreduce_op" in w for w in _run(tmp_path, "0.19.5", gradient_allreduce_op="mean"))
    assert not any("gradient_allreduce_op" in w for w in _run(tmp_path, "0.19.6", gradient_allreduce_op="sum"))


@pytest.mark.parametrize("key, value", [("compute_grad_norm", True), ("parameter_alignment", 16)])
def test_zero_keys_of_newer_releases_are_extra_keys_before(tmp_path: Path, key: str, value: Any) -> None:
    with pytest.raises(ConfigError, match=rf"zero_optimization has {key}, .*DeepSpeed 0.19.6 .*Extra inputs"):
        _run(tmp_path, "0.19.6", zero_optimization={"stage": 2, key: value})
    _run(tmp_path, "0.19.8", zero_optimization={"stage": 2, key: value})


def test_unset_release_is_the_installed_one_else_todays(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(deepspeed_release, "installed_release", lambda: (0, 19, 2))
    _run(tmp_path, None, fp16={"min_loss_scale": 0})
    monkeypatch.setattr(deepspeed_release, "installed_release", lambda: (0, 19, 8))
    with pytest.raises(ConfigError, match=r"DeepSpeed 0.19.8 \(the DeepSpeed installed beside llmperf\)"):
        _run(tmp_path, None, fp16={"min_loss_scale": 0})
    monkeypatch.setattr(deepspeed_release, "installed_release", lambda: None)
    with pytest.raises(ConfigError, match="an unknown DeepSpeed release"):
        _run(tmp_path, None, fp16={"min_loss_scale": 0})


def test_removed_sections_are_refused_only_for_a_stated_release(tmp_path: Path) -> None:
    """Years of public scripts carry them (Megatron-DeepSpeed's curriculum_learning): the installed 0.19.8 is a guess."""
    with pytest.raises(ConfigError, match=r"has sparse_gradients: the feature was removed .*DeepSpeed 0.19.9 "
                                          r"\(LLMPERF_DEEPSPEED_VERSION\)"):
        _run(tmp_path, "0.19.9", sparse_gradients=False)
    assert any("sparse_gradients accepted, not modelled" in w for w in _run(tmp_path, "0.19.7", sparse_gradients=False))
    assert any("sparse_gradients accepted, not modelled" in w for w in _run(tmp_path, None, sparse_gradients=False))
