"""Shared test data: a realistic validation CSV row and a CSV writer."""

from __future__ import annotations

import csv
from pathlib import Path


DEV_CSV = Path(__file__).resolve().parents[3] / "shared" / "validation" / "dev.csv"
"""The measured runs beside the checkout (../shared, DESIGN.md); tests that need it skip without it."""

BASE_ROW = {
    "row_id": "1", "source_id": "S01", "source": "test source", "model": "GPT 22B",
    "num_layers": "48", "hidden_size": "6144", "num_attention_heads": "64", "ffn_hidden_size": "24576",
    "vocab_size": "51200", "seq_length": "2048", "micro_batch_size": "4", "global_batch_size": "64",
    "tp": "8", "pp": "1", "dp": "2", "num_gpus": "16", "recompute": "full", "precision": "fp16",
    "gpu_type": "A100-SXM4-80GB", "gpus_per_node": "8",
    "inter_node_network": "InfiniBand HDR 200Gb/s x8 per node", "framework": "Megatron-LM (2022)",
    "iteration_time_s": "2.0",
}


def write_csv(path: Path, rows: list[dict[str, str]]) -> Path:
    columns = list(rows[0])
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    return path
