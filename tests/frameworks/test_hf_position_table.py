"""A Hugging Face model's learned position table has the config's rows, whatever sequence length the job trains at:
GPT-2's wpe is n_positions x hidden (modeling_gpt2.py), OPT's OPTLearnedPositionalEmbedding keeps
max_position_embeddings + 2 rows (its offset of 2, modeling_opt.py). Rotary models have no table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf_hook.frameworks.resolve import resolve_job

GPT2 = {"model_type": "gpt2", "n_layer": 4, "n_embd": 1024, "n_head": 16, "n_positions": 1024, "vocab_size": 50257}
OPT = {"model_type": "opt", "num_hidden_layers": 4, "hidden_size": 1024, "num_attention_heads": 16,
       "ffn_dim": 4096, "max_position_embeddings": 2048, "vocab_size": 50272, "word_embed_proj_dim": 1024}
LLAMA = {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 1024, "num_attention_heads": 16,
         "intermediate_size": 2816, "max_position_embeddings": 4096, "vocab_size": 32000, "rms_norm_eps": 1e-5}


@pytest.mark.parametrize("raw, rows", [(GPT2, 1024), (OPT, 2050), (LLAMA, None)])
def test_position_table_rows_follow_the_config(tmp_path: Path, raw: dict, rows: int | None) -> None:
    (tmp_path / "config.json").write_text(json.dumps(raw))
    argv = ["torchrun", "--nproc-per-node", "8", "run_clm.py", "--model_name_or_path", str(tmp_path),
            "--block_size", "512"]
    model = resolve_job(argv, {})[1].model
    assert model.max_position_embeddings == rows
    if rows is not None:
        assert model.position_embedding == "learned_absolute"
