"""OPT's word_embed_proj_dim (facebook/opt-350m: a 512-wide word embedding and tied LM head, project_in / project_out
linears to hidden 1024, transformers OPTDecoder): it was counted 1024 wide, 354M parameters for the model's 331M."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from llmperf_hook.frameworks.resolve import JobOverrides, resolve_job
from llmperf_hook.graph import params as pc

OPT_350M = {"model_type": "opt", "hidden_size": 1024, "ffn_dim": 4096, "num_hidden_layers": 24,
            "num_attention_heads": 16, "max_position_embeddings": 2048, "vocab_size": 50272, "word_embed_proj_dim": 512,
            "do_layer_norm_before": False}  # the Hub's facebook/opt-350m config.json (shape keys)
ARGV = ["deepspeed", "--num_gpus", "8", "main.py", "--model_name_or_path", "facebook/opt-350m", "--max_seq_len", "2048",
        "--per_device_train_batch_size", "4", "--zero_stage", "2", "--deepspeed"]


def _cfg(tmp_path: Path, config: dict):
    (tmp_path / "config.json").write_text(json.dumps(config))
    return resolve_job(ARGV, {}, JobOverrides(model=str(tmp_path / "config.json")))[1]


def test_opt_350m_embedding_is_512_wide_with_two_projections(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, OPT_350M)
    assert cfg.model.word_embed_proj_dim == 512
    projection = 512 * 1024  # project_in / project_out, nn.Linear(bias=False)
    assert pc.embedding_params(cfg) == 50272 * 512 + 2050 * 1024 + projection  # OPT's position table: 2048 + 2 rows
    assert pc.head_params(cfg) == 2 * 1024 + projection  # tied head: norm and project_out only
    layers = 24 * pc.layer_params(cfg, False)
    assert layers == 24 * (4 * (1024 * 1024 + 1024) + 2 * 1024 * 4096 + 4096 + 1024 + 2 * 2 * 1024)
    total = pc.embedding_params(cfg) + layers + pc.head_params(cfg)
    # sum(p.numel()) of OPTForCausalLM: 331,196,416; OPT-350m (post-LN) has no final norm, which llmperf counts: 2,048
    # more (the position table, max_position_embeddings + 2 rows, is OPT's exactly)
    assert total == 331_196_416 + 2 * 1024


def test_pipeline_last_stage_holds_the_narrow_head_copy(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, OPT_350M)
    piped = replace(cfg, parallel=replace(cfg.parallel, pp=2, dp=4))
    assert pc.head_params(piped) == 2 * 1024 + 50272 * 512 + 512 * 1024


def test_a_projection_as_wide_as_hidden_changes_nothing(tmp_path: Path) -> None:
    same = _cfg(tmp_path, {**OPT_350M, "word_embed_proj_dim": 1024})
    absent = _cfg(tmp_path, {k: v for k, v in OPT_350M.items() if k != "word_embed_proj_dim"})
    assert same.model.word_embed_proj_dim is None and absent.model.word_embed_proj_dim is None
    assert pc.embedding_params(same) == pc.embedding_params(absent) == 50272 * 1024 + 2050 * 1024
    assert pc.head_params(same) == 2 * 1024
