"""A user's own training script that takes Megatron-style shape flags with its own argparse parser
(examples/cpu-testbed/train_gpt.py) only gets knobs whose flags it defines (tune/script_options.py, tune/fork_knobs.py).

Before: llmperf read train_gpt.py as Megatron-DeepSpeed and --apply added --pipeline-model-parallel-size,
--tensor-model-parallel-size, --zero-stage and recompute flags, each of which the script's argparse refuses
('unrecognized arguments', exit 2). The applied command must run `explain` cleanly and parse with the script's own
parser: the test runs the script's parse_args function itself, compiled from its source without the torch imports.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from llmperf_hook.tune.script_options import script_options

from .helpers import run_cli

TESTBED = Path(__file__).resolve().parents[2] / "examples" / "cpu-testbed"
SHAPE = ["--num-layers", "24", "--hidden-size", "2048", "--num-attention-heads", "16", "--seq-length", "2048",
         "--max-position-embeddings", "2048", "--micro-batch-size", "2", "--global-batch-size", "64",
         "--vocab-size", "50304", "--train-iters", "20", "--bf16"]
WIDE = ("tensor_parallel: [1, 2, 4, 8]\npipeline_parallel: [1, 2, 4]\nsequence_parallel: [false, true]\n"
        "recompute: [none, selective, full]\nzero_stage: [0, 1, 2, 3]\nmicro_batch_size: [1, 2, 4, 8]\n")


def _own_parse_args():
    """train_gpt.parse_args as the script defines it, compiled alone (argparse and os only: no torch import)."""
    tree = ast.parse((TESTBED / "train_gpt.py").read_text())
    func = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "parse_args")
    module = ast.Module(body=[func], type_ignores=[])
    space = {"argparse": argparse, "os": os, "__doc__": "train_gpt"}
    exec(compile(module, "train_gpt.py", "exec"), space)  # noqa: S102 - the project's own example, parsed only
    return space["parse_args"]


def _tune(tmp_path: Path, capsys, monkeypatch, ds: str = "ds_zero1.json") -> tuple[int, dict, str]:
    for name in ("train_gpt.py", ds):
        shutil.copy(TESTBED / name, tmp_path / name)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "wide.yaml").write_text(WIDE)
    argv = ["deepspeed", "--num_gpus", "8", "train_gpt.py", "--deepspeed_config", ds, *SHAPE]
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--top", "10", "--search", "wide.yaml", "--format",
                              "json", "--apply", "--dry-run", "--", *argv], capsys)
    return code, json.loads(out), err


def test_the_static_reading_is_the_scripts_parser() -> None:
    """Every option string of train_gpt.py's parse_args, as argparse itself holds them once the function has run."""
    parser_options: set[str] = set()
    original = argparse.ArgumentParser.parse_args

    def capture(self, args=None, namespace=None):
        parser_options.update(self._option_string_actions)
        return original(self, args, namespace)

    argparse.ArgumentParser.parse_args = capture
    try:
        _own_parse_args()([])
    finally:
        argparse.ArgumentParser.parse_args = original
    read = script_options(str(TESTBED / "train_gpt.py"))
    assert read is not None and read.unread == 0
    assert read.options == parser_options - {"-h", "--help"}


def test_applied_command_parses_with_the_scripts_own_parser(tmp_path: Path, capsys, monkeypatch) -> None:
    code, data, err = _tune(tmp_path, capsys, monkeypatch)
    assert code == 0, err
    applied = data["applied"]["argv"]
    script_args = applied[applied.index("train_gpt.py") + 1:]
    parsed = _own_parse_args()(script_args)  # SystemExit (argparse's error) on any option the script lacks
    assert parsed.global_batch_size == 64
    accepted = script_options(str(tmp_path / "train_gpt.py")).options
    for row in data["top"]:  # every row's changes too, not only the applied one
        flags = {c["key"] for c in row["changes"] if c["key"].startswith("--")}
        assert flags <= accepted, (row["layout"] if "layout" in row else row, flags - accepted)
    code, _, err = run_cli(["explain", "--format", "json", "--", *applied], capsys)
    assert code == 0, err


def test_the_report_says_which_knobs_were_left_out_and_why(tmp_path: Path, capsys, monkeypatch) -> None:
    code, data, err = _tune(tmp_path, capsys, monkeypatch)
    assert code == 0, err
    rules, kept = data["knobs"]["rules"], data["knobs"]["kept"]
    for knob, flag in (("tp", "--tensor-model-parallel-size"), ("pp", "--pipeline-model-parallel-size"),
                       ("recompute", "--recompute-granularity"), ("sequence_parallel", "--sequence-parallel")):
        assert knob in kept, knob
        assert "train_gpt.py" in rules[knob] and flag in rules[knob] and "unrecognized arguments" in rules[knob]
    assert all(row["tp"] == 1 and row["pp"] == 1 for row in data["top"])


def test_zero_is_searched_through_the_ds_config_alone(tmp_path: Path, capsys, monkeypatch) -> None:
    """The script has no --zero-stage: DeepSpeed reads zero_optimization.stage, so ZeRO is still searched and a row
    that changes it says so in the ds_config copy, never with a --zero-stage flag."""
    code, data, err = _tune(tmp_path, capsys, monkeypatch)
    assert code == 0, err
    assert "zero_stage" in data["knobs"]["searched"]
    stages = {row["zero_stage"] for row in data["top"]}
    assert len(stages) > 1, stages
    keys = {c["key"] for row in data["top"] for c in row["changes"]}
    assert "--zero-stage" not in keys and "zero_optimization.stage" in keys


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "train.py"
    path.write_text(text)
    return str(path)


def test_reading_rules(tmp_path: Path) -> None:
    """Megatron's parser (an import of megatron) and HfArgumentParser are not read; BooleanOptionalAction's --no-
    form, DeepSpeed's add_config_arguments and argument groups are; a computed name is counted as unread."""
    assert script_options(_write(tmp_path, "from megatron.training import pretrain\nimport argparse\n"
                                           "p = argparse.ArgumentParser()\np.add_argument('--x')\n")) is None
    assert script_options(_write(tmp_path, "from transformers import HfArgumentParser\n"
                                           "p = HfArgumentParser((A,))\np.add_argument('--x')\n")) is None
    assert script_options(str(tmp_path / "missing.py")) is None
    read = script_options(_write(tmp_path, (
        "import argparse, deepspeed\np = argparse.ArgumentParser()\ng = p.add_argument_group('model')\n"
        "g.add_argument('--micro-batch-size', type=int)\n"
        "p.add_argument('--fused', action=argparse.BooleanOptionalAction)\n"
        "p.add_argument('input')\nfor n in ('--a', '--b'):\n    p.add_argument(n)\n"
        "p = deepspeed.add_config_arguments(p)\n")))
    assert read is not None
    assert read.options == {"--micro-batch-size", "--fused", "--no-fused", "--deepspeed", "--deepspeed_config",
                            "--deepscale", "--deepscale_config"}
    assert read.unread == 1


@pytest.mark.parametrize("script", ["pretrain_gpt.py", "train.py"])
def test_megatron_scripts_keep_their_knobs(tmp_path: Path, script: str) -> None:
    """A script that imports megatron runs Megatron's parser: nothing is pinned on its account."""
    from llmperf_hook.tune.fork_knobs import fork_parser

    path = tmp_path / script
    path.write_text("import argparse\nfrom megatron.training import pretrain\n"
                    "def extra(parser):\n    parser.add_argument('--my-flag')\n    return parser\n")
    assert fork_parser(str(path), []) is None


@pytest.mark.parametrize("text, reason", [
    ("import argparse\np = argparse.ArgumentParser(\n", "SyntaxError (line "),
    ("import argparse\nx = a" + ".b" * 50000 + "\n", "RecursionError"),  # deeper than the parser's stack
    ("import argparse\np = argparse.ArgumentParser()\x00\n", "null bytes"),
])
def test_an_unreadable_script_falls_back_and_says_why(tmp_path: Path, text: str, reason: str) -> None:
    """Never a traceback: a script ast cannot parse has no options read (None, the Megatron behaviour) and the reason
    is what pin_fork_knobs warns with."""
    from llmperf_hook.tune.script_options import unreadable_reason

    path = tmp_path / "train.py"
    path.write_bytes(text.encode())
    assert script_options(str(path)) is None
    assert reason in (unreadable_reason(str(path)) or "")


def test_an_attribute_chain_past_the_recursion_limit_is_read(tmp_path: Path) -> None:
    """_dotted walks an action's attribute chain in a loop: a chain the parser accepts never raises RecursionError."""
    path = _write(tmp_path, "import argparse\np = argparse.ArgumentParser()\n"
                            "p.add_argument('--x', action=a" + ".b" * (sys.getrecursionlimit() + 50) + ")\n")
    assert script_options(path).options == {"--x"}


def test_a_coding_line_is_honoured(tmp_path: Path) -> None:
    """PEP 263: a latin-1 script (its coding line) is read, not taken for unreadable UTF-8."""
    path = tmp_path / "train.py"
    path.write_bytes("# -*- coding: latin-1 -*-\n# caf\u00e9\nimport argparse\np = argparse.ArgumentParser()\n"
                     "p.add_argument('--micro-batch-size')\n".encode("latin-1"))
    assert script_options(str(path)).options == {"--micro-batch-size"}


def test_tune_on_an_unreadable_script_warns_and_runs(tmp_path: Path, capsys, monkeypatch) -> None:
    """train_gpt.py with a syntax error: tune searches as before (exit 0, no traceback) and says it could not read
    the script's parser."""
    shutil.copy(TESTBED / "ds_zero1.json", tmp_path / "ds_zero1.json")
    (tmp_path / "train_gpt.py").write_text((TESTBED / "train_gpt.py").read_text() + "\ndef broken(:\n")
    monkeypatch.chdir(tmp_path)
    argv = ["deepspeed", "--num_gpus", "8", "train_gpt.py", "--deepspeed_config", "ds_zero1.json", *SHAPE]
    code, out, err = run_cli(["tune", "--cluster", "dgx-h100", "--top", "3", "--format", "json", "--", *argv], capsys)
    assert code == 0, err
    assert "train_gpt.py could not be read (SyntaxError (line " in err and "Traceback" not in err
    assert "tp" not in json.loads(out)["knobs"]["rules"]


@pytest.mark.parametrize("call, refusal", [("parse_args()", "unrecognized arguments"),
                                           ("parse_known_args()[0]", "parse_known_args would pass it over")])
def test_the_rule_says_what_the_scripts_parser_does_with_a_flag_it_lacks(tmp_path: Path, call: str,
                                                                         refusal: str) -> None:
    """parse_args stops the job on an unknown option; parse_known_args returns it among the extras, so the job runs
    its own value: either way the knob is kept, and the rule names the right reason."""
    from llmperf_hook.tune.fork_knobs import fork_parser

    parser = fork_parser(_write(tmp_path, "import argparse\np = argparse.ArgumentParser()\n"
                                          f"p.add_argument('--micro-batch-size')\nargs = p.{call}\n"), [])
    assert parser is not None and not parser.has("tensor-model-parallel-size")
    assert refusal in parser.refusal
