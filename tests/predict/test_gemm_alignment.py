"""Unaligned GEMM / bmm / attention widths: priced on Hopper from the H200 measurement, warned everywhere
(predict/gemm_alignment.py)."""

import json
import sys
from pathlib import Path

import pytest

from llmperf_hook.api import predict_config
from llmperf_hook.graph.build import build_graph
from llmperf_hook.graph.op import Op
from llmperf_hook.hardware.load import load_cluster
from llmperf_hook.predict import dispatch
from llmperf_hook.predict.dispatch import clear_prediction_cache, find_operator_profile, predict_op_times, predict_ops
from llmperf_hook.predict.gemm_alignment import (alignment_factor, element_alignment, measured_slowdown,
                                                 misalignment)
from tests.frameworks.helpers import hf_job, megatron

ROOT = Path(__file__).resolve().parents[2]
H100, H200, GH200 = load_cluster("dgx-h100"), load_cluster("dgx-h200"), load_cluster("vista")
A100 = load_cluster("dgx-a100")
GPT2 = {"model_type": "gpt2", "vocab_size": 50257, "n_positions": 1024, "n_embd": 768, "n_layer": 12, "n_head": 12}


def _gpt2(folder: Path, vocab: int):
    folder.mkdir()
    return hf_job(folder, {**GPT2, "vocab_size": vocab}, 1, 1024, "--bf16")


def _gemm(n: int, k: int = 1024, m: int = 4096, dtype: str = "bf16", phase: str = "fwd") -> Op:
    return Op("head.lm_head", "gemm", phase, {"m": m, "n": n, "k": k}, flops=2.0 * m * n * k, dtype=dtype)


def _op_times(cfg, cluster, name: str) -> dict[str, tuple[float, float]]:
    """{phase: (seconds, flops)} of the ops called `name` in the graph of `cfg` on `cluster`."""
    graph = build_graph(cfg, cluster)
    times = predict_op_times(graph, cluster, cfg.precision)
    return {op.phase: (times.seconds[op.cost_key], op.flops) for op in graph.all_ops() if op.name == name}


def _per_flop_ratio(slow: dict, fast: dict, phase: str) -> float:
    return (slow[phase][0] / slow[phase][1]) / (fast[phase][0] / fast[phase][1])


def _alignment_warnings(pred) -> list[str]:
    return [w for w in pred.warnings if "Tensor Core kernels" in w]


@pytest.mark.parametrize("width, expected", [(50257, 1), (6282, 2), (12564, 4), (25128, 8), (50304, 8), (0, 8)])
def test_alignment_is_the_largest_power_of_two_up_to_8_dividing_the_width(width: int, expected: int) -> None:
    assert element_alignment(width) == expected


def test_k_and_n_set_a_gemms_alignment_m_never_and_only_16_bit_dtypes_are_checked() -> None:
    assert misalignment(_gemm(50257)).dim == "n"
    assert misalignment(_gemm(4096, k=1802)).alignment_elements == 2
    assert misalignment(_gemm(50257, k=1802)).dim == "n"  # the worse-aligned dim sets the op's class
    assert misalignment(_gemm(4096, m=4097)) is None  # m is no operand's leading dimension
    assert misalignment(_gemm(50257, dtype="fp32")) is None and misalignment(_gemm(50257, dtype="fp8")) is None
    head = Op("attn.core", "attention", "fwd", {"b": 1, "s": 2048, "heads": 8, "kv_heads": 8, "head_dim": 150,
                                                "causal": 1}, flops=1.0, dtype="fp16")
    assert misalignment(head).alignment_elements == 2


def test_the_shipped_slowdowns_are_what_the_script_derives_from_the_committed_measurement() -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from derive_alignment_slowdown import derive

    shipped = json.loads((ROOT / "configs" / "alignment" / "hopper.json").read_text())
    folders = [ROOT / "measurements" / f"h200-sxm-141gb-2026-11-27-{run}" for run in ("c", "d")]
    assert shipped == json.loads(json.dumps(derive(folders)))
    assert measured_slowdown("gemm", "bf16", "fwd", 1)[0] > 5.0  # the odd width: ~7x (the README's table)
    assert 2.0 < measured_slowdown("gemm", "fp16", "bwd", 4)[0] < 4.0
    assert measured_slowdown("bmm", "fp16", "fwd", 1)[1] == 2  # an odd head dim: the 2-aligned lower bound
    assert 3.0 < measured_slowdown("gemm_k", "bf16", "fwd", 1)[0] < measured_slowdown("gemm", "bf16", "fwd", 1)[0]


@pytest.mark.parametrize("phase", ["fwd", "bwd", "recompute"])
def test_the_price_multiplies_what_the_predictor_answers_for_the_op(phase: str, monkeypatch) -> None:
    op = _gemm(50257, phase=phase)
    profile = find_operator_profile(H100, "bf16")
    clear_prediction_cache()
    priced = predict_ops([op], H100, profile, None, sustained_floor=True)[0][op.cost_key]
    monkeypatch.setattr(dispatch, "alignment_factor", lambda op, gpu: 1.0)
    clear_prediction_cache()
    aligned = predict_ops([op], H100, profile, None, sustained_floor=True)[0][op.cost_key]
    clear_prediction_cache()
    expected = measured_slowdown("gemm", "bf16", "bwd" if phase == "bwd" else "fwd", 1)[0]
    assert priced == pytest.approx(aligned * expected, rel=1e-12)


@pytest.mark.parametrize("cluster", [H100, H200, GH200], ids=["h100", "h200", "gh200"])
def test_hopper_prices_an_unaligned_gemm_and_other_gpus_do_not(cluster) -> None:
    assert alignment_factor(_gemm(50257), cluster.gpu) == measured_slowdown("gemm", "bf16", "fwd", 1)[0]
    assert alignment_factor(_gemm(50304), cluster.gpu) == 1.0
    assert alignment_factor(_gemm(4096, k=4095), cluster.gpu) == measured_slowdown("gemm_k", "bf16", "fwd", 1)[0]
    assert alignment_factor(_gemm(4096, m=4095), cluster.gpu) == 1.0
    assert alignment_factor(_gemm(50257), A100.gpu) == 1.0
    assert alignment_factor(_gemm(50257), load_cluster("dgx-b200").gpu) == 1.0


def test_a_gpt2_hf_job_with_vocab_50257_on_h100_predicts_a_slower_head_than_50304_and_warns(tmp_path) -> None:
    odd, padded = _gpt2(tmp_path / "odd", 50257), _gpt2(tmp_path / "pad", 50304)
    assert odd.model.padded_vocab_size == 50257  # transformers does not pad the embedding
    slow, fast = _op_times(odd, H100, "head.lm_head"), _op_times(padded, H100, "head.lm_head")
    for phase in ("fwd", "bwd"):  # the profile's own answers for the two widths differ a little per FLOP
        assert _per_flop_ratio(slow, fast, phase) == pytest.approx(measured_slowdown("gemm", "bf16", phase, 1)[0],
                                                                   rel=0.1)
    pred_odd, pred_pad = predict_config(odd, H100), predict_config(padded, H100)
    assert pred_odd.step_time_s > pred_pad.step_time_s
    warnings = _alignment_warnings(pred_odd)
    assert len(warnings) == 1 and "head.lm_head" in warnings[0] and "n = 50257" in warnings[0]
    assert "priced on h100-sxm5-80gb" in warnings[0] and "pad_to_multiple_of=64" in warnings[0]
    assert not _alignment_warnings(pred_pad)


def test_the_same_job_on_a100_warns_but_is_not_priced(tmp_path) -> None:
    odd, padded = _gpt2(tmp_path / "odd", 50257), _gpt2(tmp_path / "pad", 50304)
    slow, fast = _op_times(odd, A100, "head.lm_head"), _op_times(padded, A100, "head.lm_head")
    assert _per_flop_ratio(slow, fast, "fwd") == pytest.approx(1.0, abs=0.1)
    warnings = _alignment_warnings(predict_config(odd, A100))
    assert len(warnings) == 1 and "not priced on a100-sxm4-80gb" in warnings[0]


def test_megatrons_default_vocab_padding_gives_no_warning_and_a_small_divisor_does() -> None:
    padded = megatron("--tensor-model-parallel-size", "2", "--bf16")
    assert padded.model.padded_vocab_size == 50432  # ceil(50257 / 256) * 256
    assert not _alignment_warnings(predict_config(padded, H100))
    small = megatron("--tensor-model-parallel-size", "2", "--bf16", "--make-vocab-size-divisible-by", "1")
    warnings = _alignment_warnings(predict_config(small, H100))
    assert len(warnings) == 1 and "n = 25129" in warnings[0] and "--make-vocab-size-divisible-by x TP" in warnings[0]


def test_head_dim_150_in_megatrons_unfused_attention_on_h100_is_priced() -> None:
    base = ["--num-layers", "4", "--num-attention-heads", "12", "--seq-length", "2048", "--max-position-embeddings",
            "2048", "--tokenizer-type", "GPT2BPETokenizer", "--micro-batch-size", "1", "--bf16",
            "--attention-backend", "unfused"]
    odd = megatron("--hidden-size", "1800", base=base, gpus=1)   # head dim 150
    even = megatron("--hidden-size", "1824", base=base, gpus=1)  # head dim 152
    assert odd.attention_backend == "unfused"
    for name in ("attn.qk", "attn.av"):
        slow, fast = _op_times(odd, H100, name), _op_times(even, H100, name)
        assert _per_flop_ratio(slow, fast, "fwd") > 2.0
    warnings = _alignment_warnings(predict_config(odd, H100))
    assert {w.split(" ")[0] for w in warnings} == {"attn.qk", "attn.av"}
    assert all("head dim a multiple of 8" in w for w in warnings)


def test_explain_warns_of_the_unpadded_hf_vocabulary_and_not_of_megatrons_padded_one(tmp_path) -> None:
    from click.testing import CliRunner

    from llmperf_hook.commands.explain import command

    (tmp_path / "config.json").write_text(json.dumps(GPT2))
    hf = ["torchrun", "--nproc-per-node", "1", "run_clm.py", "--model_name_or_path", str(tmp_path), "--bf16"]
    out = CliRunner().invoke(command, ["--format", "json", "--", *hf])
    assert out.exit_code == 0, out.output
    warnings = [w for w in json.loads(out.output)["warnings"] if "Tensor Core kernels" in w]
    assert len(warnings) == 1 and "n = 50257" in warnings[0] and "prices it on Hopper" in warnings[0]
    mega = ["torchrun", "--nproc-per-node", "2", "pretrain_gpt.py", "--num-layers", "2", "--hidden-size", "1024",
            "--num-attention-heads", "16", "--seq-length", "1024", "--max-position-embeddings", "1024",
            "--tokenizer-type", "GPT2BPETokenizer", "--micro-batch-size", "1", "--tensor-model-parallel-size", "2"]
    table = CliRunner().invoke(command, ["--", *mega])
    assert table.exit_code == 0 and "Tensor Core kernels" not in table.output


def test_a_multi_token_prediction_head_gets_the_vocabulary_fix_as_the_models_head_does() -> None:
    cfg = megatron("--tensor-model-parallel-size", "2", "--bf16", "--make-vocab-size-divisible-by", "1",
                   "--mtp-num-layers", "1", "--position-embedding-type", "rope")
    warnings = {w.split(" ")[0]: w for w in _alignment_warnings(predict_config(cfg, H100))}
    assert set(warnings) == {"head.lm_head", "mtp.lm_head"}
    assert all("n = 25129" in w and "--make-vocab-size-divisible-by x TP" in w for w in warnings.values())


def test_explain_checks_the_head_dim_the_fused_kernel_computes_at(tmp_path) -> None:
    """Head dim 150: flash-attention v2 reads it as is (a warning); Megatron-DeepSpeed's Triton kernel pads it to
    256 (graph/attention_core_ops.flash_head_dim), aligned."""
    from llmperf_hook.predict.gemm_alignment import config_alignment_warnings

    ds_config = tmp_path / "ds_config.json"
    ds_config.write_text(json.dumps({"train_batch_size": 1, "train_micro_batch_size_per_gpu": 1,
                                     "bf16": {"enabled": True}, "zero_optimization": {"stage": 0}}))
    base = ["--num-layers", "2", "--hidden-size", "1200", "--num-attention-heads", "8", "--seq-length", "2048",
            "--max-position-embeddings", "2048", "--vocab-size", "53248", "--micro-batch-size", "1",
            "--global-batch-size", "1", "--bf16", "--deepspeed", "--zero-stage", "0", "--no-pipeline-parallel",
            "--deepspeed_config", str(ds_config)]
    by_flag = {flag: [w for w in config_alignment_warnings(megatron(flag, base=base, gpus=1)) if "head_dim" in w]
               for flag in ("--use-flash-attn-v2", "--use-flash-attn-triton")}
    assert len(by_flag["--use-flash-attn-v2"]) == 1 and "head_dim = 150" in by_flag["--use-flash-attn-v2"][0]
    assert by_flag["--use-flash-attn-triton"] == []


def test_the_derivation_refuses_a_folder_that_holds_no_alignment_measurement(tmp_path, capsys) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from derive_alignment_slowdown import main

    out = tmp_path / "hopper.json"
    with pytest.raises(SystemExit) as exit_info:
        main([str(tmp_path), "--out", str(out)])
    assert exit_info.value.code == 2 and "no alignment_meta.json in" in capsys.readouterr().err
    assert not out.exists()
