"""Acceptance round 19 (H216): the ds_configs DeepSpeed's own unit tests pin, through the real `llmperf explain` CLI,
against DeepSpeed's own parser (the venv's deepspeed 0.19.8 DeepSpeedConfig) on the same dict.

Cases come from DeepSpeed's tests (edaa7221, 0.19.6, and the installed 0.19.8): tests/unit/runtime/
test_ds_config_dict.py (TestBatchConfig's triples on 2 ranks, test_only_required_fields, gradient_allreduce_op),
test_ds_config_model.py (deprecated fields, aliases, extra keys), zero/test_zero_config.py (cpu_offload /
cpu_offload_param, stage3_gather_fp16_weights_on_model_save, stage3_ aliases, offload sections, overlap_comm's
default), test_precision_config_loss_scale.py / test_precision_config_dynamic_scale.py (fp16 loss-scale keys) and
pipe/test_pipe.py (its config, typo included). The job is `deepspeed --num_gpus N train.py --deepspeed
--deepspeed_config ds.json`: DeepSpeedConfig then takes the world from the process group (no mpu), which the test fakes.
Where DeepSpeed refuses, llmperf exits 2 with a message and no traceback; where it accepts, llmperf resolves the same
batch triad, ZeRO stage, offload devices and precision (fp16 / bf16 section)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.acceptance.cli import run_cli

B = {"train_micro_batch_size_per_gpu": 2}


def _z(**zero: Any) -> dict[str, Any]:
    return {**B, "zero_optimization": zero}


def _triad(train: int, micro: int, gas: int) -> dict[str, int]:
    return {"train_batch_size": train, "train_micro_batch_size_per_gpu": micro, "gradient_accumulation_steps": gas}


def _fp16(**keys: Any) -> dict[str, Any]:
    return {**B, "fp16": {"enabled": True, **keys}}


CORPUS: list[tuple[str, dict[str, Any], int]] = [
    # test_ds_config_dict.py TestBatchConfig (world 2): all three keys, then two of them, then one
    ("triple 32/16/1", _triad(32, 16, 1), 2),
    ("triple 32/8/2", _triad(32, 8, 2), 2),
    ("triple 33/17/2", _triad(33, 17, 2), 2),
    ("triple 32/18/1", _triad(32, 18, 1), 2),
    ("train 32 micro 8", {"train_batch_size": 32, "train_micro_batch_size_per_gpu": 8}, 2),
    ("train 33 micro 17", {"train_batch_size": 33, "train_micro_batch_size_per_gpu": 17}, 2),
    ("train 32 micro 18", {"train_batch_size": 32, "train_micro_batch_size_per_gpu": 18}, 2),
    ("train 32 gas 2", {"train_batch_size": 32, "gradient_accumulation_steps": 2}, 2),
    ("train 33 gas 2", {"train_batch_size": 33, "gradient_accumulation_steps": 2}, 2),
    ("micro 8 gas 2", {"train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 2}, 2),
    ("micro 16 only", {"train_micro_batch_size_per_gpu": 16}, 2),
    ("train 32 only", {"train_batch_size": 32}, 2),
    ("gas 2 only", {"gradient_accumulation_steps": 2}, 2),
    ("train 1 on 2 ranks", {"train_batch_size": 1}, 2),
    ("train 48 micro 16", {"train_batch_size": 48, "train_micro_batch_size_per_gpu": 16}, 2),
    ("train null micro 4", {"train_batch_size": None, "train_micro_batch_size_per_gpu": 4}, 2),
    # test_ds_config_model.py test_only_required_fields
    ("train 64 only on 1 rank", {"train_batch_size": 64}, 1),
    # pipe/test_pipe.py config_dict (its 'grandient_accumulation_steps' typo) and the gradient-scaling test's
    ("test_pipe config", {"train_batch_size": 4, "grandient_accumulation_steps": 1, "zero_optimization": {"stage": 0},
                          "fp16": {"enabled": False}, "pipeline": {"seed_layers": True,
                                                                   "activation_checkpoint_interval": 1}}, 4),
    ("test_pipe gas scaling", {"train_batch_size": 2, "train_micro_batch_size_per_gpu": 1,
                               "gradient_accumulation_steps": 2, "gradient_clipping": 0.0,
                               "optimizer": {"type": "SGD", "params": {"lr": 0.1}},
                               "zero_allow_untested_optimizer": True,
                               "pipeline": {"activation_checkpoint_interval": 0}}, 1),
    # zero/test_zero_config.py: deprecated fields, aliases, offload sections, overlap_comm's default
    ("cpu_offload", _z(stage=2, cpu_offload=True), 8),
    ("cpu_offload_param", _z(stage=3, cpu_offload_param=True), 8),
    ("cpu_offload_param at stage 2", _z(stage=2, cpu_offload_param=True), 8),
    ("cpu_offload with offload_optimizer", _z(stage=2, cpu_offload=True, offload_optimizer={"device": "cpu"}), 8),
    ("cpu_offload false with offload_optimizer", _z(stage=3, cpu_offload=False,
                                                    offload_optimizer={"device": "nvme", "nvme_path": "/x"}), 8),
    ("cpu_offload_param with offload_param", _z(stage=3, cpu_offload_param=True, offload_param={"device": "cpu"}), 8),
    ("cpu_offload 'maybe'", _z(stage=2, cpu_offload="maybe"), 8),
    ("cpu_offload 2", _z(stage=2, cpu_offload=2), 8),
    ("cpu_offload 'yes'", _z(stage=2, cpu_offload="yes"), 8),
    ("cpu_offload auto", _z(stage=2, cpu_offload="auto"), 8),
    ("gather fp16 weights", _z(stage=3, stage3_gather_fp16_weights_on_model_save=True), 8),
    ("gather fp16 and 16bit weights", _z(stage=3, stage3_gather_fp16_weights_on_model_save=True,
                                         stage3_gather_16bit_weights_on_model_save=True), 8),
    ("stage3_prefetch_bucket_size", _z(stage=3, stage3_prefetch_bucket_size=12345), 8),
    ("prefetch_bucket_size", _z(stage=3, prefetch_bucket_size=12345), 8),
    ("prefetch alias and name", _z(stage=3, prefetch_bucket_size=12345, stage3_prefetch_bucket_size=1), 8),
    ("empty offload sections", _z(stage=3, offload_param={}, offload_optimizer={}), 8),
    ("null offload sections", _z(stage=3, offload_param=None, offload_optimizer=None), 8),
    ("stage 3 overlap default", _z(stage=3), 8),
    ("zero_optimization true", {**B, "zero_optimization": True}, 8),
    ("misspelt zero key", _z(stage=2, overlap_com=True), 8),
    ("stage 2.5", _z(stage=2.5), 8),
    ("compute_grad_norm false at 3", _z(stage=3, compute_grad_norm=False), 8),
    ("partial offload at 2", _z(stage=2, offload_optimizer={"device": "cpu", "ratio": 0.3}), 8),
    # test_precision_config_loss_scale.py / _dynamic_scale.py, fp16 + bf16
    ("loss_scale -1", _fp16(loss_scale=-1), 8),
    ("loss_scale -1 fp16 off", {**B, "fp16": {"enabled": False, "loss_scale": -1}}, 8),
    ("loss_scale '3'", _fp16(loss_scale="3"), 8),
    ("loss_scale true", _fp16(loss_scale=True), 8),
    ("window true fp16 off", {**B, "fp16": {"enabled": False, "loss_scale_window": True}}, 8),
    ("window 0 static", _fp16(loss_scale=128, loss_scale_window=0), 8),
    ("min_loss_scale -1 dynamic", _fp16(min_loss_scale=-1), 8),
    ("fp16 null", {**B, "fp16": None}, 8),
    ("bf16 null, bfloat16 on", {**B, "bf16": None, "bfloat16": {"enabled": True}}, 8),
    ("fp16 and bfloat16", {**B, "fp16": {"enabled": True}, "bfloat16": {"enabled": True}}, 8),
    ("torch_autocast int8", {**B, "torch_autocast": {"enabled": True, "dtype": "int8"}}, 8),
    ("torch_autocast BF16", {**B, "torch_autocast": {"enabled": True, "dtype": "BF16"}}, 8),
    # test_ds_config_dict.py gradient_allreduce_op, and the other pydantic sections DeepSpeedConfig builds
    ("allreduce SUM at 2", {**B, "gradient_allreduce_op": "SUM", "zero_optimization": {"stage": 2}}, 8),
    ("allreduce max", {**B, "gradient_allreduce_op": "max"}, 8),
    ("misspelt compile key", {**B, "compile": {"deepcompil": True}}, 8),
    ("misspelt comms_logger key", {**B, "comms_logger": {"enabld": True}}, 8),
    ("misspelt timers key", {**B, "timers": {"throughput": {"enabld": True}}}, 8),
    ("misspelt tensor_parallel key", {**B, "tensor_parallel": {"autotp_siz": 2}}, 8),
    ("tag_validation maybe", {**B, "checkpoint": {"tag_validation": "maybe"}}, 8),
    ("tag_validation fail", {**B, "checkpoint": {"tag_validation": "fail"}}, 8),
    ("keep_in_fp32_modules text", {**B, "data_types": {"keep_in_fp32_modules": "norm"}}, 8),
    # DeepSpeedConfigModel drops "auto" values before validation, unknown keys' too (config_utils.py __init__)
    ("unknown zero key auto", _z(stage=2, nosuch_key="auto"), 8),
    ("unknown offload key auto", _z(stage=3, offload_param={"device": "cpu", "nosuch_key": "auto"}), 8),
    ("unknown compile key auto", {**B, "compile": {"nosuch_key": "auto"}}, 8),
    # Model(**section) of anything but an object is a TypeError
    ("compile true", {**B, "compile": True}, 8),
    ("tensor_parallel null", {**B, "tensor_parallel": None}, 8),
    ("timers.throughput 1", {**B, "timers": {"throughput": 1}}, 8),
]
"""(name, ds_config, ranks): the configs of DeepSpeed's unit tests and their neighbours."""

DIFFERENT = {
    "cpu_offload_param at stage 2": "DeepSpeedZeroConfig keeps offload_param at stage 2; the engine ignores it "
                                    "below stage 3 (llmperf warns and prices none)",
}
"""Rows llmperf reads differently on purpose (only a value differs, with a warning)."""


class _World:
    """What the plain `deepspeed train.py` job's DeepSpeedConfig asks the process group (no mpu)."""

    def __init__(self, ranks: int) -> None:
        self.ranks = ranks

    def __call__(self, *args: Any, **kwargs: Any) -> int:
        return self.ranks


def _deepspeed(module: Any, config: dict[str, Any], ranks: int, monkeypatch) -> dict[str, Any] | None:
    monkeypatch.setattr(module.dist, "get_world_size", _World(ranks))
    try:
        real = module.DeepSpeedConfig(json.loads(json.dumps(config)))
    except Exception:  # noqa: BLE001 - any refusal is the oracle's answer
        return None
    zero = real.zero_config
    precision = "fp16" if real.float16_config.enabled else "bf16" if real.bfloat16_config.enabled else "fp32"
    return {"precision": precision, "global_batch_size": int(real.train_batch_size),
            "micro_batch_size": int(real.train_micro_batch_size_per_gpu),
            "num_microbatches": real.gradient_accumulation_steps, "zero_stage": int(zero.stage),
            "offload_optimizer": zero.offload_optimizer.device if zero.offload_optimizer else "none",
            "offload_param": zero.offload_param.device if zero.offload_param else "none"}


def _llmperf(folder: Path, config: dict[str, Any], ranks: int, capsys, monkeypatch) -> tuple[int, dict | None, str]:
    monkeypatch.chdir(folder)
    (folder / "ds.json").write_text(json.dumps(config))
    code, out, err = run_cli(["explain", "--format", "json", "--model", "llama2-7b", "--", "deepspeed", "--num_gpus",
                              str(ranks), "train.py", "--deepspeed", "--deepspeed_config", "ds.json"], capsys)
    return code, (json.loads(out) if code == 0 else None), err


@pytest.mark.parametrize(("name", "config", "ranks"), CORPUS, ids=[name for name, _, _ in CORPUS])
def test_llmperf_accepts_and_refuses_what_deepspeed_does(name: str, config: dict[str, Any], ranks: int, tmp_path: Path,
                                                          capsys, monkeypatch, deepspeed_config) -> None:
    real = _deepspeed(deepspeed_config, config, ranks, monkeypatch)
    code, ours, err = _llmperf(tmp_path, config, ranks, capsys, monkeypatch)
    assert "Traceback" not in err
    if real is None:
        assert code == 2 and "error" in err, f"DeepSpeedConfig refuses {name}; llmperf exit {code}"
        return
    assert code == 0, f"DeepSpeedConfig accepts {name}; llmperf: {err}"
    resolved = {key: ours[key] for key in ("global_batch_size", "micro_batch_size", "num_microbatches", "zero_stage",
                                           "offload_optimizer", "offload_param", "precision")}
    if name in DIFFERENT:
        assert resolved != real
        return
    assert resolved == real


def test_the_corpus_covers_both_answers(deepspeed_config, monkeypatch) -> None:
    answers = [_deepspeed(deepspeed_config, config, ranks, monkeypatch) is None for _, config, ranks in CORPUS]
    assert len(CORPUS) >= 40 and 15 <= sum(answers) <= len(CORPUS) - 15
    assert len({name for name, _, _ in CORPUS}) == len(CORPUS)


def test_deprecated_key_with_its_replacement_is_deepspeeds_assert(tmp_path: Path, capsys, monkeypatch) -> None:
    code, _, err = _llmperf(tmp_path, _z(stage=2, cpu_offload=True, offload_optimizer={"device": "cpu"}), 8, capsys,
                            monkeypatch)
    assert code == 2 and "Cannot provide deprecated parameter 'cpu_offload' and replacing parameter " \
                         "'offload_optimizer' together" in err


def test_a_misspelt_batch_key_is_named(tmp_path: Path, capsys, monkeypatch) -> None:
    # DeepSpeed ignores unknown top-level keys; DeepSpeed's own test_pipe.py config has one
    code, ours, _ = _llmperf(tmp_path, {"train_batch_size": 4, "grandient_accumulation_steps": 2}, 4, capsys,
                             monkeypatch)
    assert code == 0 and ours["num_microbatches"] == 1
    assert any("'grandient_accumulation_steps' is not a DeepSpeed key (did you mean gradient_accumulation_steps?)" in w
               for w in ours["warnings"])


@pytest.mark.parametrize(("section", "words"), [({"tensor_parallel": {"autotp_size": 2}}, "AutoTP"),
                                                ({"expert_parallel": {"enabled": True, "autoep_size": 4}}, "AutoEP")])
def test_autotp_and_autoep_are_warned(section: dict, words: str, tmp_path: Path, capsys, monkeypatch) -> None:
    code, ours, _ = _llmperf(tmp_path, {**B, **section}, 8, capsys, monkeypatch)
    assert code == 0 and sum(words in w and "not modelled" in w for w in ours["warnings"]) == 1


FP16_OFF_BOOL_WINDOW = {**B, "fp16": {"enabled": False, "loss_scale_window": True}}


@pytest.mark.parametrize(("config", "before"), [(_fp16(loss_scale=-1), "0.18.7"), (FP16_OFF_BOOL_WINDOW, "0.19.2")])
def test_fp16_validators_follow_the_release(config: dict, before: str, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("LLMPERF_DEEPSPEED_VERSION", before)  # an older DeepSpeed's pydantic model takes these
    assert _llmperf(tmp_path, config, 8, capsys, monkeypatch)[0] == 0
    monkeypatch.setenv("LLMPERF_DEEPSPEED_VERSION", "0.19.3")
    code, _, err = _llmperf(tmp_path, config, 8, capsys, monkeypatch)
    assert code == 2 and "DeepSpeedFP16Config raises" in err


@pytest.mark.parametrize(("section", "before", "since"), [
    # DeepSpeed 0.13.2-0.14.3's compile model was {enabled, backend, kwargs} (runtime/compiler.py); 0.14.4-0.16.5
    # ignore the section; 0.16.6 (#7154) brought deepcompile's CompileConfig
    ({"compile": {"enabled": True, "backend": "inductor"}}, "0.14.0", "0.16.6"),
    # TPTrainingConfig came with AutoTP training (#7004, v0.16.4); older releases ignore the section
    ({"tensor_parallel": {"autotp_sise": 2}}, "0.16.3", "0.16.4"),
    # DeepSpeedThroughputTimerConfig came with #5363 (v0.14.3)
    ({"timers": {"throughput": {"enabld": True}}}, "0.14.2", "0.14.3")])
def test_section_keys_are_refused_only_by_the_releases_whose_model_forbids_them(
        section: dict, before: str, since: str, tmp_path: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("LLMPERF_DEEPSPEED_VERSION", before)
    assert _llmperf(tmp_path, {**B, **section}, 8, capsys, monkeypatch)[0] == 0
    monkeypatch.setenv("LLMPERF_DEEPSPEED_VERSION", since)
    code, _, err = _llmperf(tmp_path, {**B, **section}, 8, capsys, monkeypatch)
    assert code == 2 and "DeepSpeed " + since in err and "Traceback" not in err


@pytest.mark.parametrize("section", [{"compile": {"deepcompile": True, "a_key_of_a_later_release": True}},
                                     {"zero_optimization": {"stage": 2, "a_key_of_a_later_release": True}}])
def test_a_release_newer_than_the_known_models_is_not_refused_a_key_it_may_know(section: dict, tmp_path: Path, capsys,
                                                                                 monkeypatch) -> None:
    config = {**B, **section}
    monkeypatch.setenv("LLMPERF_DEEPSPEED_VERSION", "0.20.0")
    code, ours, _ = _llmperf(tmp_path, config, 8, capsys, monkeypatch)
    assert code == 0 and any("a_key_of_a_later_release" in w and "0.19.8" in w for w in ours["warnings"])
    monkeypatch.setenv("LLMPERF_DEEPSPEED_VERSION", "0.19.8")
    assert _llmperf(tmp_path, config, 8, capsys, monkeypatch)[0] == 2
