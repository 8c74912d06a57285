"""One parse of the user's script (frameworks/script_tree.py), read as Python reads it, shared by every reader:
a latin-1 (PEP 263 coding line) or BOM script is read, not taken for unreadable UTF-8; a nesting deeper than the
parser's stack (RecursionError) is unreadable, never a traceback."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from llmperf_hook.cli import main
from llmperf_hook.frameworks.assemble import _builds_pipeline_module
from llmperf_hook.frameworks.deepspeed_optimizer import script_client_optimizer
from llmperf_hook.frameworks.script_shape import script_training
from llmperf_hook.frameworks.script_tree import script_parse_error, script_tree

LATIN1 = "# -*- coding: latin-1 -*-\nTITLE = 'caf\u00e9 cr\u00e8me'\n"
DEEP = "x = a" + ".b" * 50000 + "\n"  # deeper than the parser's stack: RecursionError during ast construction
SHAPE = ["--num-layers", "2", "--hidden-size", "256", "--num-attention-heads", "4", "--seq-length", "128",
         "--max-position-embeddings", "128", "--micro-batch-size", "1", "--global-batch-size", "1", "--vocab-size",
         "1024"]


def _latin1(tmp_path: Path, body: str, name: str = "train.py") -> str:
    path = tmp_path / name
    path.write_bytes((LATIN1 + body).encode("latin-1"))
    return str(path)


def _write(tmp_path: Path, text: str, name: str = "train.py") -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_the_tree_is_read_as_python_reads_it(tmp_path: Path) -> None:
    assert script_tree(_latin1(tmp_path, "import torch\n", "latin.py")) is not None
    bom = tmp_path / "bom.py"
    bom.write_bytes(b"\xef\xbb\xbfimport torch\n")
    assert script_tree(str(bom)) is not None
    wrong = tmp_path / "undeclared.py"
    wrong.write_bytes("TITLE = 'caf\u00e9'\n".encode("latin-1"))  # latin-1 bytes, no coding line: not UTF-8
    assert script_tree(str(wrong)) is None and script_parse_error(str(wrong)).startswith("SyntaxError")


def test_unreadable_files_give_none_and_say_why(tmp_path: Path) -> None:
    assert script_tree(str(tmp_path / "missing.py")) is None and script_parse_error(str(tmp_path / "missing.py")) is None
    assert script_tree(str(tmp_path)) is None and "IsADirectoryError" in script_parse_error(str(tmp_path))
    bad = _write(tmp_path, "import torch\ndef f(:\n", "bad.py")
    assert script_tree(bad) is None and script_parse_error(bad).startswith("SyntaxError (line 2)")
    deep = _write(tmp_path, DEEP, "deep.py")
    assert script_tree(deep) is None and script_parse_error(deep).startswith("RecursionError")
    assert script_tree("a\0b.py") is None and script_parse_error("a\0b.py") is None


def test_the_tree_is_parsed_once_per_file_version(tmp_path: Path) -> None:
    path = _write(tmp_path, "import torch\n")
    first = script_tree(path)
    assert script_tree(path) is first
    Path(path).write_text("import torch\nimport deepspeed\n")  # another size (and mtime): parsed again
    assert script_tree(path) is not first and len(script_tree(path).body) == 2


def test_a_same_size_rewrite_within_the_clock_tick_is_parsed_again(tmp_path: Path) -> None:
    """A file system with coarse timestamps (1 s on NFS, HFS+, ext3; 2 s on FAT) keeps the mtime of a rewrite within
    that second: `sed -i s/0.1/0.2/` keeps the size too. The tree must be the new text's, not the cached one's."""
    path = _write(tmp_path, "p = 0.1\n")
    stat = Path(path).stat()
    assert script_tree(path).body[0].value.value == 0.1
    Path(path).write_text("p = 0.2\n")
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # the clock tick the rewrite fell in
    assert script_tree(path).body[0].value.value == 0.2


def test_each_reader_reads_a_latin1_script(tmp_path: Path) -> None:
    """Before the shared parse each of these opened the file as UTF-8 and took a latin-1 script for unreadable."""
    pipe = _latin1(tmp_path, "from deepspeed.pipe import PipelineModule\nmodel = PipelineModule(layers=[])\n", "p.py")
    plain = _latin1(tmp_path, "import torch\nmodel = torch.nn.Linear(4, 4)\n", "plain.py")
    assert _builds_pipeline_module(pipe, 1) and not _builds_pipeline_module(plain, 1)  # unreadable: True (default)
    cast = _latin1(tmp_path, "import torch\nm = torch.nn.Linear(4, 4).bfloat16()\n"
                             "opt = torch.optim.AdamW(m.parameters())\n", "cast.py")
    assert (script_training(cast).optimizer, script_training(cast).impl) == ("adam", "foreach")
    client = _latin1(tmp_path, "import torch, deepspeed\nm = torch.nn.Linear(4, 4)\n"
                               "engine, *_ = deepspeed.initialize(model=m, optimizer=torch.optim.SGD(m.parameters()))\n")
    assert script_client_optimizer(client) == ("SGD", f"{client} line 5", "none", "sgd")  # SGD's decay default: 0


@pytest.mark.parametrize("text", [DEEP, "import torch\ndef f(:\n", None])
def test_each_reader_takes_an_unreadable_script_as_before(tmp_path: Path, text: str | None) -> None:
    """Too deep to parse, a syntax error, or no file: each reader's unreadable default, no exception."""
    path = _write(tmp_path, text) if text is not None else str(tmp_path / "train.py")
    assert _builds_pipeline_module(path, 1) is True
    assert script_training(path) is None and script_client_optimizer(path) is None


def _explain(tmp_path: Path, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    with pytest.raises(SystemExit) as info:
        main(["explain", "--format", "json", *argv])
    out = capsys.readouterr().out
    return info.value.code, json.loads(out) if out.strip() else {}


@pytest.mark.parametrize("launch", ["deepspeed-plain", "megatron-deepspeed", "torchrun-megatron"])
def test_a_too_deep_script_explains_with_each_readers_default(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                              launch: str) -> None:
    """The three launches that reach the three readers (client optimizer, pipeline module, plain-torch training):
    exit 0 and the unreadable script's defaults, where RecursionError once escaped as a traceback (exit 1)."""
    script = _write(tmp_path, DEEP)
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1,
                              "zero_optimization": {"stage": 0}}))
    argv = {"deepspeed-plain": ["--model", "llama2-7b", "--", "deepspeed", "--num_gpus", "1", script,
                                "--deepspeed_config", str(ds)],
            "megatron-deepspeed": ["--", "deepspeed", "--num_gpus", "1", script, "--deepspeed_config", str(ds), *SHAPE],
            "torchrun-megatron": ["--", "torchrun", "--nproc-per-node", "1", script, *SHAPE, "--bf16"]}[launch]
    code, shown = _explain(tmp_path, capsys, *argv)
    assert code in (0, None), code
    assert shown["world_size"] == 1
    if launch == "megatron-deepspeed":
        assert "RecursionError" in shown["sources"]["hidden_dropout"]  # script_dropout says why it kept 0.1
