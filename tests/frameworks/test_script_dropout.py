"""The dropout a user's script runs under Megatron's shape flags is its code's (frameworks/script_dropout.py), not
Megatron's --hidden-dropout / --attention-dropout defaults of 0.1; where the code cannot tell, the defaults stay and
explain says why. Megatron's entry points and scripts importing megatron keep Megatron's defaults."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from llmperf_hook.api import predict_config, resolve_cluster, resolve_command
from llmperf_hook.frameworks import explain_json
from llmperf_hook.frameworks.script_dropout import ScriptDropout, script_dropout

ROOT = Path(__file__).resolve().parents[2]
TESTBED = str(ROOT / "examples" / "cpu-testbed" / "train_gpt.py")
SHAPE = ["--num-layers", "2", "--hidden-size", "256", "--num-attention-heads", "4", "--seq-length", "128",
         "--max-position-embeddings", "128", "--micro-batch-size", "2", "--global-batch-size", "4", "--vocab-size",
         "1024", "--no-pipeline-parallel"]
HEAD = "import torch\nimport torch.nn.functional as F\nfrom torch import nn\n"


def _script(tmp_path: Path, body: str, name: str = "train.py") -> str:
    path = tmp_path / name
    path.write_text(HEAD + body)
    return str(path)


def _read(tmp_path: Path, body: str) -> tuple[float, float] | str:
    found = script_dropout(_script(tmp_path, body))
    return (found.hidden_dropout, found.attention_dropout) if isinstance(found, ScriptDropout) else found


def _resolve(tmp_path: Path, script: str, *extra: str):
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1,
                              "zero_optimization": {"stage": 1}}))
    argv = ["deepspeed", "--num_gpus", "2", script, "--deepspeed_config", str(ds), *SHAPE, *extra]
    return resolve_command(argv, os.environ, cluster="dgx-a100")


@pytest.mark.parametrize(("body", "expected"), [
    ("a = F.scaled_dot_product_attention(q, k, v, is_causal=True)\n", (0.0, 0.0)),  # dropout_p defaults to 0.0
    ("drop = nn.Dropout(0.2)\na = F.scaled_dot_product_attention(q, k, v, dropout_p=0.1)\n", (0.2, 0.1)),
    ("class A(nn.Module):\n    def __init__(self):\n        self.attn_drop = nn.Dropout(p=0.3)\n"
     "        self.resid_drop = torch.nn.Dropout(0.05)\n    def forward(self, x):\n        return self.attn_drop(x)\n",
     (0.05, 0.3)),  # bound to an attention name; self.attn_drop(x) calls the module, no dropout of its own
    ("x = nn.Dropout()(x)\n", (0.5, 0.0)),  # torch's default p
    ("x = F.dropout(x, p=0.1, training=False)\ny = torch.nn.functional.dropout(x, 0.2, False)\n", (0.0, 0.0)),
    ("layer = nn.TransformerEncoderLayer(256, 4)\n", (0.1, 0.1)),  # dropout=0.1 on both
    ("mha = nn.MultiheadAttention(256, 4, 0.25)\nx = torch.dropout(x, 0.15, True)\n", (0.15, 0.25)),
    ("from transformers import GPT2Config\ncfg = GPT2Config(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.2)\n",
     (0.0, 0.2)),
])
def test_the_dropout_the_code_runs(tmp_path: Path, body: str, expected: tuple[float, float]) -> None:
    assert _read(tmp_path, body) == expected


@pytest.mark.parametrize(("body", "why"), [
    ("drop = nn.Dropout(args.dropout)\n", "line 4: the dropout probability is computed"),
    ("import argparse\np = argparse.ArgumentParser()\np.add_argument('--hidden-dropout', type=float)\n",
     "defines its own --hidden-dropout option"),
    ("from transformers import AutoModelForCausalLM\nm = AutoModelForCausalLM.from_pretrained('gpt2')\n",
     "imports Hugging Face transformers"),
    ("from model import GPT\n", "imports model from its own folder"),
    # a false "no dropout" prices too little: each of these runs a dropout the literal calls do not show
    ("from mypkg.layers import GPT\nm = GPT()\n", "imports mypkg.layers, whose code is not read"),
    ("import x_transformers\n", "imports x_transformers, whose code is not read"),
    ("from flash_attn import flash_attn_func\no = flash_attn_func(q, k, v, 0.1)\n", "imports flash_attn"),
    ("import sys\nsys.path.insert(0, '/src')\nfrom gpt import GPT\n", "imports gpt, whose code is not read"),
    ("import importlib\nm = importlib.import_module('gpt')\n", "imports importlib"),
    ("from deepspeed.ops.transformer import DeepSpeedTransformerLayer\n", "deepspeed.ops.transformer"),
    ("import deepspeed\nl = deepspeed.ops.transformer.DeepSpeedTransformerLayer(c)\n", "deepspeed.ops.transformer"),
    ("m = torch.hub.load('karpathy/nanogpt', 'gpt2')\n", "torch.hub.load"),
    ("from torch.nn import *\nx = Dropout(0.1)\n", "from torch.nn import *"),
    ("d = getattr(nn, 'Dropout')(0.1)\n", "line 4: getattr"),
    ("Drop = nn.Dropout\nx = Drop(0.1)\n", "line 4: torch.nn.Dropout is used other than called"),
    ("import functools\nDrop = functools.partial(nn.Dropout, 0.1)\n", "line 5: torch.nn.Dropout is used"),
    ("kw = {'p': 0.1}\nx = nn.Dropout(**kw)\n", "line 5: the dropout probability is computed"),
    ("exec(open('gpt.py').read())\n", "line 4: exec"),
    ("d = nn.Dropout(0.0)\nd.p = 0.2\n", "line 5: sets a dropout probability"),
    ("from transformers import GPT2Config, AutoModelForCausalLM\nc = GPT2Config(resid_pdrop=0.0, attn_pdrop=0.0)\n"
     "m = AutoModelForCausalLM.from_pretrained('gpt2')\n", "from_pretrained"),
])
def test_what_the_code_cannot_tell(tmp_path: Path, body: str, why: str) -> None:
    (tmp_path / "model.py").write_text("import torch\n")
    found = _read(tmp_path, body)
    assert isinstance(found, str) and why in found, found


@pytest.mark.parametrize("body", [
    "import argparse, json, math, os, sys, time\nimport numpy as np\nimport deepspeed\nfrom tqdm import tqdm\n"
    "from deepspeed.ops.adam import FusedAdam\n",  # deepspeed's optimizers build no layer
    "from torch.nn.modules.dropout import Dropout\nd = Dropout(0.0)\n",  # a module path through 'dropout'
    "for m in range(2):\n    x = F.gelu(getattr(nn, 'Linear')(4, 4)(x))\n",
])
def test_imports_and_names_that_build_no_dropout_are_read(tmp_path: Path, body: str) -> None:
    assert _read(tmp_path, body) == (0.0, 0.0)


def test_the_testbed_runs_no_dropout_and_explain_says_so(tmp_path: Path) -> None:
    cfg = _resolve(tmp_path, TESTBED)[1]
    assert (cfg.framework, cfg.hidden_dropout, cfg.attention_dropout) == ("megatron-deepspeed", 0.0, 0.0)
    shown = explain_json(cfg)
    assert (shown["hidden_dropout"], shown["attention_dropout"]) == (0.0, 0.0)
    assert "train_gpt.py: no dropout in its code" in shown["sources"]["attention_dropout"]


def test_the_testbed_drops_its_embedding_dropout_and_masks(tmp_path: Path) -> None:
    """Its attention is SDPA (priced fused) and its residual adds Megatron's fused bias-dropout-add, priced alike at
    any p; at p = 0 the embedding's nn.Dropout runs no kernel (graph/vocab_ops.py, f3ec478), so that op and its
    host overhead leave the step, and the 1-byte hidden masks Megatron's layers keep (schedule/activations.py) go."""
    from llmperf_hook.graph.build import build_graph

    cfg = _resolve(tmp_path, TESTBED)[1]
    cluster = resolve_cluster("dgx-a100", None)[0]
    megatron_cfg = replace(cfg, hidden_dropout=0.1, attention_dropout=0.1)

    def ops(config) -> set[tuple[str, str]]:
        return {(op.name, op.phase) for stage in build_graph(config, cluster).stages for chunk in stage.chunks
                for block in chunk.blocks for op in block.fwd + block.bwd}

    assert ops(megatron_cfg) - ops(cfg) == {("embedding.dropout", "fwd"), ("embedding.dropout", "bwd")}
    assert not ops(cfg) - ops(megatron_cfg)
    now, megatron = predict_config(cfg, cluster), predict_config(megatron_cfg, cluster)
    assert now.step_time_s < megatron.step_time_s
    assert now.memory.peak_bytes_per_gpu < megatron.memory.peak_bytes_per_gpu


def test_unknown_dropout_keeps_the_flags_and_says_why(tmp_path: Path) -> None:
    script = _script(tmp_path, "drop = nn.Dropout(args.dropout)\n")
    cfg = _resolve(tmp_path, script)[1]
    assert (cfg.hidden_dropout, cfg.attention_dropout) == (0.1, 0.1)
    assert "framework default Megatron: 0.1" in str(cfg.sources["hidden_dropout"])
    assert "computed, not a literal" in str(cfg.sources["hidden_dropout"])
    given = _resolve(tmp_path, script, "--hidden-dropout", "0.2")[1]
    assert given.hidden_dropout == 0.2 and str(given.sources["hidden_dropout"]) == "argv --hidden-dropout"


def test_megatron_scripts_keep_megatrons_defaults(tmp_path: Path) -> None:
    """An entry point (pretrain_gpt.py) or a script importing megatron: Megatron's layers, 0.1 each, no explain row."""
    importer = _script(tmp_path, "from megatron.training import pretrain\n", "my_pretrain.py")
    for script in (importer, "pretrain_gpt.py"):
        cfg = _resolve(tmp_path, script)[1]
        assert (cfg.hidden_dropout, cfg.attention_dropout) == (0.1, 0.1), script
        assert "hidden_dropout" not in explain_json(cfg), script
