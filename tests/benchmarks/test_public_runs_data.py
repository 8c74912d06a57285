"""benchmarks/data/public_runs.csv: dev.csv's schema, reproducible from its transcription script, every row
readable by `llmperf validate`, every step time equal to its stated derivation."""

from __future__ import annotations

import csv
import re
import sys
from pathlib import Path

import pytest

from llmperf_hook.resources import configs_dir
from llmperf_hook.validate.runner import validate_runs
from llmperf_hook.validate.runs_csv import build_measured_runs, read_runs_csv
from script_module import load_script

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "benchmarks" / "data"
PUBLIC_CSV = DATA / "public_runs.csv"
DEV_CSV = ROOT.parent / "shared" / "validation" / "dev.csv"


def _compile_module():  # type: ignore[no-untyped-def]
    if str(DATA) not in sys.path:  # its sibling public_run_sources.py, on sys.path when run as a script
        sys.path.insert(0, str(DATA))
    return load_script(DATA / "compile_public_runs.py")


def _rows() -> list[dict[str, str]]:
    with PUBLIC_CSV.open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_script_reproduces_the_csv(tmp_path: Path) -> None:
    module = _compile_module()
    module.OUT_CSV = tmp_path / "public_runs.csv"
    module.main()
    assert module.OUT_CSV.read_text(encoding="utf-8") == PUBLIC_CSV.read_text(encoding="utf-8")


@pytest.mark.skipif(not DEV_CSV.exists(), reason="../shared/validation/dev.csv not beside the checkout")
def test_same_columns_as_dev_csv() -> None:
    with DEV_CSV.open(newline="", encoding="utf-8") as dev, PUBLIC_CSV.open(newline="", encoding="utf-8") as pub:
        assert next(csv.reader(pub)) == next(csv.reader(dev))


def test_every_row_is_cited_and_its_time_follows_its_method() -> None:
    rows = _rows()
    assert len(rows) >= 30 and len({r["source_id"] for r in rows}) >= 5
    for row in rows:
        for column in ("source", "source_location", "iteration_time_method", "confidence", "micro_batch_size",
                       "global_batch_size", "tp", "pp", "dp"):
            assert row[column].strip(), (row["row_id"], column)
        t = float(row["iteration_time_s"])
        method = row["iteration_time_method"]
        if method == "reported":
            assert t == pytest.approx(float(row["metric_value"]))
            continue
        gbs, seq, rate = int(row["global_batch_size"]), int(row["seq_length"]), float(row["metric_value"])
        if row["metric_unit"] == "TFLOP/s/GPU":  # Megatron-DeepSpeed's recompute FLOP formula, V = padded vocab
            l, h, v = int(row["num_layers"]), int(row["hidden_size"]), int(row["vocab_size"])
            flops = 96 * gbs * seq * l * h * h * (1 + seq / (6 * h) + v / (16 * l * h))
            assert t == pytest.approx(flops / (rate * 1e12 * int(row["num_gpus"])), rel=1e-5), row["row_id"]
            continue
        per_gpu = "per_gpu" in method
        expected = gbs * seq / (rate * (int(row["num_gpus"]) if per_gpu else 1))
        assert t == pytest.approx(expected, rel=1e-5), row["row_id"]
        assert re.search(rf"= {gbs}\*{seq}/", method), method


def test_validate_scores_every_row() -> None:
    runs = build_measured_runs(read_runs_csv(PUBLIC_CSV))
    assert {r.gpu_type.split("-")[0] for r in runs} == {"A100", "H100"}
    assert max(r.num_gpus for r in runs) >= 1024 and min(r.num_gpus for r in runs) <= 8
    report = validate_runs(runs, clusters_dir=configs_dir() / "clusters")
    assert report.num_failed == 0, [r.error for r in report.rows if r.error]
    assert all(r.predicted_s and r.predicted_s > 0 for r in report.rows)


def _flags(row: dict[str, str]) -> list[str]:
    match = re.search(r"flags:\s*([^;]*)", row["notes"])
    return match.group(1).split() if match else []


def test_nemo_2022_rows_carry_what_their_nemo_release_forced() -> None:
    """NeMo v1.11.0 (22.08, P05) and the 22.06 container's NeMo 1.10.0+aadcd1c (P08; the README's support matrix,
    not the v1.10.0 tag, which has no fusion, sequence parallelism or selective recompute) both turn
    gradient-accumulation fusion off at PP 1 only (megatron_base_model.py _validate_config), so the 175B configs'
    gradient_accumulation_fusion: True runs at PP 8. Both overlap the data-parallel gradient reduction with the last
    backward at PP 1 only (distributed_fused_adam's overlap_grad_sync / the O2 wrapper's async_grad_allreduce). The
    rows' launch flags must say so."""
    nemo = [r for r in _rows() if r["source_id"] in ("P05", "P08")]
    assert {r["source_id"] for r in nemo} == {"P05", "P08"}
    for row in nemo:
        pp1, flags = row["pp"] == "1", _flags(row)
        assert ("--no-gradient-accumulation-fusion" in flags) == pp1, row["row_id"]
        assert ("--overlap-grad-reduce" in flags) == pp1, row["row_id"]


def test_h100_recipe_rows_reduce_gradients_in_bf16_as_their_recipes_did() -> None:
    """Megatron-LM keeps fp32 gradients under --bf16 unless told (4 bytes per parameter on every rank); the H100
    recipes reduce them in bf16. P01: NeMo-Framework-Launcher @24c3d6bb, every H100 FP8 example of GPT-3 and Llama
    (+training.model.optim.grad_sync_dtype=bf16) and nemotron_340b.yaml (grad_sync_dtype and dtype bf16: Adam's
    moments in bf16 too); its Nemotron-8B/22B FP8 examples keep fp32. P02: Megatron-Bridge's Llama and Qwen3
    performance configs (grad_reduce_in_fp32 = False). P03: NeMo's performance scripts and
    train_llama3_8b_h100_fp8.sh."""
    rows = [r for r in _rows() if r["source_id"] in ("P01", "P02", "P03")]
    assert len(rows) == 20
    for row in rows:
        fp32_recipe = row["model"] in ("Nemotron-8B", "Nemotron-22B")
        assert ("--grad-reduce-in-bf16" in _flags(row)) != fp32_recipe, row["row_id"]
    (nemotron_340b,) = [r for r in rows if r["model"] == "Nemotron-340B"]
    flags = _flags(nemotron_340b)
    assert flags[flags.index("--exp-avg-dtype") + 1] == flags[flags.index("--exp-avg-sq-dtype") + 1] == "bf16"


def test_megatron_bridge_rows_scale_fp8_per_tensor_from_the_current_amax() -> None:
    """Megatron-Bridge's performance configs run FP8 'cs' (scripts/performance/utils/precision.py
    get_precision_config: bf16_with_fp8_current_scaling_mixed, fp8_recipe 'tensorwise', with first_last_layers_bf16
    set False for benchmarking): Megatron's --fp8-recipe tensorwise, every layer in FP8. P01 (NeMo 24.07) and P03
    (NeMo's bf16_with_fp8_mixed) keep delayed scaling, Megatron's default."""
    for row in (r for r in _rows() if r["source_id"] in ("P01", "P02", "P03")):
        flags = _flags(row)
        assert ("--fp8-recipe" in flags) == (row["source_id"] == "P02"), row["row_id"]
        assert "--first-last-layers-bf16" not in flags
        if row["source_id"] == "P02":
            assert flags[flags.index("--fp8-recipe") + 1] == "tensorwise"


def test_llama_nemotron_and_qwen3_rows_train_without_dropout() -> None:
    """NeMo's LlamaConfig / Llama3Config and NemotronConfig set hidden_dropout = attention_dropout = 0.0 (@8e3d65dcfe),
    as Megatron-Bridge's Llama and Qwen3-MoE bridges do (@067f987df), where Megatron-LM defaults to 0.1 (and keeps a
    dropout mask per hidden state); NeMo's GPT-3 configs keep 0.1."""
    for row in _rows():
        flags, family = _flags(row), row["model"].split("-")[0]
        if family.startswith(("LLAMA", "Nemotron", "Qwen3")):
            assert flags[flags.index("--hidden-dropout") + 1] == flags[flags.index("--attention-dropout") + 1] == "0"
        elif family == "GPT3" and not (row["model"] == "GPT3-175B" and row["num_gpus"] == "512"):
            assert "--hidden-dropout" not in flags and "--attention-dropout" not in flags, row["row_id"]


def test_nemo_2407_175b_512_gpu_row_runs_the_launchers_mlperf_config() -> None:
    """The 512-GPU GPT-3 175B row (64 nodes, MBS 2, GBS 2048, FP8) is the launcher's 175b_mlperf.yaml @24c3d6bb,
    not 175b.yaml (128 nodes, MBS 1, no FP8): no dropout, LayerNorm1p."""
    (row,) = [r for r in _rows() if r["source_id"] == "P01" and r["model"] == "GPT3-175B" and r["num_gpus"] == "512"]
    flags = _flags(row)
    assert "175b_mlperf.yaml" in row["notes"] and "--apply-layernorm-1p" in flags
    assert flags[flags.index("--hidden-dropout") + 1] == flags[flags.index("--attention-dropout") + 1] == "0"


def test_bloom_row_is_split_as_its_slurm_script_split_it() -> None:
    """tr11-176B-ml.slurm: --pp-partition-method 'type:transformer|embedding' (70 layers + 2 embeddings over PP 12)."""
    (bloom,) = [r for r in _rows() if r["source_id"] == "P04"]
    flags = _flags(bloom)
    assert flags[flags.index("--pp-partition-method") + 1] == "type:transformer|embedding"


def test_bigscience_topology_rows_are_fp16_as_their_training_script() -> None:
    """chronicles-prequel's 'Best TFLOPs' rows are its bf16 section; the 02-20..02-24 topology tables ran
    tr11-200B-ml.slurm of those days (--fp16, DeepSpeed fp16 enabled, bf16 disabled)."""
    rows = [r for r in _rows() if r["source_id"] == "P06"]
    for row in rows:
        best = "Best TFLOPs / bf16" in row["notes"]
        assert row["precision"].split()[0] == ("bf16" if best else "fp16"), row["row_id"]
    assert sum(r["precision"] == "bf16" for r in rows) == 3
