"""Every flag `tune --apply` writes exists in the parser of the fork the command runs (tune/fork_knobs.py): epfLLM's
Megatron-LLM has no --context_parallel_size, so a search widened to CP keeps CP at the command's 1 there, says so, and
every option of the applied command and of each listed row's changes is one the fork's argparse knows."""

from __future__ import annotations

import json
from pathlib import Path

from llmperf_hook.frameworks.megatron_entry_points import MEGATRON_LLM_OPTIONS
from llmperf_hook.tune.fork_knobs import KNOB_OPTIONS, fork_parser, pin_fork_knobs
from llmperf_hook.tune.search_space import load_search_space

from .helpers import gpt_config, run_cli

LLAMA_FINETUNE = ["torchrun", "--nproc_per_node", "8", "finetune.py", "--model_name", "llama2",
                  "--tensor_model_parallel_size", "2", "--pipeline_model_parallel_size", "1", "--num_layers", "32",
                  "--hidden_size", "4096", "--num_attention_heads", "32", "--ffn_hidden_size", "11008",
                  "--seq_length", "16384", "--max_position_embeddings", "16384", "--vocab_size", "32000",
                  "--use_rms_norm", "--glu_activation", "swiglu", "--no_tie_embed_logits", "--position_embedding_type",
                  "rotary", "--bf16", "--global_batch_size", "16", "--micro_batch_size", "1", "--use_flash_attn",
                  "--lr", "1e-5"]
WIDE = ("context_parallel: [1, 2, 4, 8]\nsequence_parallel: [false, true]\nrecompute: [none, selective, full, block]\n"
        "distributed_optimizer: [false, true]\nmax_virtual_pipeline: 4\nexpert_parallel: [1, 2]\n")


def _options(words: list[str]) -> set[str]:
    return {w.split("=", 1)[0][2:] for w in words if w.startswith("--")}


def _tune_fork(tmp_path: Path, capsys, monkeypatch, argv: list[str]) -> tuple[int, dict, str]:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "wide.yaml").write_text(WIDE)
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--top", "10", "--search", "wide.yaml", "--format",
                              "json", "--apply", "--dry-run", "--", *argv], capsys)
    return code, json.loads(out), err


def test_megatron_llm_never_gets_a_context_parallel_flag(tmp_path: Path, capsys, monkeypatch) -> None:
    """A 16k-sequence finetune with CP widened by --search: tune wrote --context_parallel_size (the spelling of the
    command), which Megatron-LLM's parser lacks, so the applied job stopped at argparse."""
    code, data, err = _tune_fork(tmp_path, capsys, monkeypatch, LLAMA_FINETUNE)
    assert code == 0, err
    applied = data["applied"]["argv"]
    assert not any(w.startswith(("--context_parallel_size", "--context-parallel-size")) for w in applied)
    assert all(row["cp"] == 1 for row in data["top"])
    assert data["knobs"]["kept"]["cp"] == 1 and "--context_parallel_size" in data["knobs"]["rules"]["cp"]
    # a dense model: the report lists no EP, so the fork's missing EP flag is neither a rule nor a second warning
    assert "ep" not in data["knobs"]["rules"] and "etp" not in data["knobs"]["rules"]
    assert "expert_parallel [1, 2] of the search space" not in err
    assert "context_parallel [1, 2, 4, 8]" in err and "Megatron-LLM" in err  # the widened knob is not silent
    code, out, err = run_cli(["explain", "--format", "json", "--", *applied], capsys)
    assert code == 0, err
    assert "defines no such option" not in err  # explain's warning for a flag the parser would refuse


def test_every_flag_of_every_row_is_one_the_fork_parses(tmp_path: Path, capsys, monkeypatch) -> None:
    """The audit: tp, pp, vpp, sp, recompute, distributed optimizer, micro-batch and global batch, in whatever
    combination the top rows change them, are options of Megatron-LLM's argparse (megatron/arguments.py and
    finetune.py, 806a833) in its underscore spelling; the applied command adds none it lacks."""
    argv = [*(w if w != "16384" else "4096" for w in LLAMA_FINETUNE), "--recompute_activations", "--sequence_parallel"]
    code, data, err = _tune_fork(tmp_path, capsys, monkeypatch, argv)
    assert code == 0, err
    user = _options(argv)
    assert _options(data["applied"]["argv"]) - user <= MEGATRON_LLM_OPTIONS
    changed = {c["key"][2:] for row in data["top"] for c in row["changes"] if c["key"].startswith("--")}
    assert changed and changed - user <= MEGATRON_LLM_OPTIONS, changed - user - MEGATRON_LLM_OPTIONS


def test_the_fork_table_names_what_megatron_llm_lacks() -> None:
    """The options tune writes per knob, checked against the fork's option list: only CP and expert parallelism are
    missing there, so only those are kept (and ZeRO, which tune never searches for Megatron-LM)."""
    parser = fork_parser("finetune.py", ["--model_name", "llama2"])
    assert parser is not None
    missing = {k for k, opts in KNOB_OPTIONS.items() if not all(parser.has(o) for o in opts)}
    assert missing == {"context_parallel", "expert_parallel", "expert_tensor_parallel", "zero_stage"}


def test_megatron_lm_and_other_finetune_scripts_keep_the_whole_space() -> None:
    """Megatron-LM's own entry points (and a finetune.py without --model_name) search CP as configured."""
    cfg = gpt_config(world=64, tp=8, pp=1, gbs=64)
    space = load_search_space(None, "megatron")
    for script, args in (("pretrain_gpt.py", ["--context-parallel-size", "1"]), ("finetune.py", ["--lr", "1"])):
        pins = pin_fork_knobs(space, cfg, script, args)
        assert pins.space == space and pins.rules == {} and pins.warnings == ()


BLOOM_STYLE = ["deepspeed", "--num_gpus", "8", "pretrain_gpt.py", "--num-layers", "24", "--hidden-size", "2048",
               "--num-attention-heads", "16", "--seq-length", "2048", "--max-position-embeddings", "2048",
               "--pad-vocab-size-to", "250880", "--embed-layernorm", "--position-embedding-type", "alibi",
               "--tokenizer-type", "PretrainedFromHF", "--tokenizer-name-or-path", "bigscience/tokenizer",
               "--micro-batch-size", "1", "--global-batch-size", "64", "--tensor-model-parallel-size", "2",
               "--pipeline-model-parallel-size", "2", "--checkpoint-activations", "--bf16", "--deepspeed",
               "--deepspeed_config", "ds.json", "--zero-stage", "1", "--deepspeed-activation-checkpointing"]
BLOOM_SPACE = ("micro_batch_size: [1, 2]\nsequence_parallel: [false, true]\nrecompute: [none, selective, full]\n"
               "zero_stage: [0, 1, 2, 3]\ntensor_parallel: [1, 2, 4]\n")


def test_the_bigscience_fork_gets_no_flag_its_parser_lacks(tmp_path: Path, capsys, monkeypatch) -> None:
    """BLOOM's fork (known by --pad-vocab-size-to / --embed-layernorm): its argparse has no --sequence-parallel, no
    --recompute-granularity and no --no-pipeline-parallel (it always builds GPTModelPipe, so ZeRO-2/3 are refused by
    DeepSpeed's PipelineEngine at any PP); tune searched them as for the microsoft fork and wrote them."""
    from llmperf_hook.tune.fork_knobs import BIGSCIENCE_OPTIONS

    monkeypatch.chdir(tmp_path)
    (tmp_path / "ds.json").write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "train_batch_size": 64,
                                                  "zero_optimization": {"stage": 1}, "bf16": {"enabled": True}}))
    (tmp_path / "wide.yaml").write_text(BLOOM_SPACE)
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--top", "10", "--search", "wide.yaml", "--format",
                              "json", "--apply", "--dry-run", "--", *BLOOM_STYLE], capsys)
    assert code == 0, err
    data = json.loads(out)
    assert _options(data["applied"]["argv"]) - _options(BLOOM_STYLE) <= BIGSCIENCE_OPTIONS
    assert all(row["zero_stage"] < 2 and not row["sequence_parallel"] for row in data["top"])
    assert {"sequence_parallel", "recompute", "zero_stage"} <= set(data["knobs"]["rules"])
    assert "no --no-pipeline-parallel" in err
    code, out, err = run_cli(["explain", "--format", "json", "--", *data["applied"]["argv"]], capsys)
    assert code == 0, err
