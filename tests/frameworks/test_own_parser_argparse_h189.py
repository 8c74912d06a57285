"""H189: the default a script's own argparse parser gives an attribute, read from its source as argparse itself gives
it (Lib/argparse.py): a negative default, `dest=` (two option strings of one dest, an option whose dest is not its
name), and `parser.set_defaults(...)` before and after `add_argument`. Each script is also run by Python, whose
argparse prints the value the reading must find."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from llmperf_hook.frameworks.script_defaults import own_parser_default
from tests.frameworks.test_own_parser_defaults_h177 import PARSER, _cfg

M = "max_position_embeddings"
SCRIPTS = {  # the parser lines after PARSER's; argparse gives args.max_position_embeddings
    "negative": "p.add_argument('--max-position-embeddings', type=int, default=-1)",
    "negative_string_through_its_type": "p.add_argument('--max-position-embeddings', type=int, default='-1')",
    "two_option_strings_one_dest": "p.add_argument('--max-pos', '--max-position-embeddings', type=int, default=512)",
    "dest_named_apart_from_the_option": "p.add_argument('--max-pos', dest='max_position_embeddings', type=int, "
                                        "default=640)",
    "option_whose_dest_is_another": "p.add_argument('--max-position-embeddings', dest='mpe', type=int, default=640)",
    "short_option_first": "p.add_argument('-m', '--max-position-embeddings', type=int, default=77)",
    "set_defaults_after": "p.add_argument('--max-position-embeddings', type=int, default=512)\n"
                          "p.set_defaults(max_position_embeddings=2048)",
    "set_defaults_before_an_option_without_default": "p.set_defaults(max_position_embeddings=2048)\n"
                                                     "p.add_argument('--max-position-embeddings', type=int)",
    "set_defaults_before_an_option_with_default": "p.set_defaults(max_position_embeddings=2048)\n"
                                                  "p.add_argument('--max-position-embeddings', type=int, default=256)",
    "set_defaults_of_a_dest_no_option_stores": "p.set_defaults(max_position_embeddings=4096)",
    "set_defaults_string_through_its_type": "p.add_argument('--max-position-embeddings', type=int, default=512)\n"
                                            "p.set_defaults(max_position_embeddings='1024')",
    "first_of_two_options_of_one_dest": "p.add_argument('--max-pos', dest='max_position_embeddings', type=int, "
                                        "default=100)\n"
                                        "p.add_argument('--max-position-embeddings', type=int, default=200)",
}
_PRINT = f"\nif __name__ == '__main__':\n    print(repr(getattr(p.parse_args([]), {M!r}, None)))\n"


def _argparse_gives(script: Path) -> object:
    """What Python's own argparse leaves in args.max_position_embeddings (deepspeed stubbed: PARSER imports it)."""
    stub = script.parent / "deepspeed.py"
    stub.write_text("")
    ran = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=True, cwd=script.parent)
    return ast.literal_eval(ran.stdout.strip())  # the repr of an int or None the script printed


@pytest.mark.parametrize("name", SCRIPTS)
def test_the_default_argparse_gives(name: str, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(PARSER + SCRIPTS[name] + "\n" + _PRINT)
    own = own_parser_default(str(script), "--max-position-embeddings")
    assert own is not None and own.literal and own.value == _argparse_gives(script), name


def test_set_defaults_of_every_dest_is_not_guessed(tmp_path: Path) -> None:
    """`p.set_defaults(**cfg)` may set any dest to what only running gives: the literal before it is not priced."""
    script = tmp_path / "train.py"
    script.write_text(PARSER + "cfg = dict(max_position_embeddings=8)\n"
                               "p.add_argument('--max-position-embeddings', type=int, default=512)\n"
                               "p.set_defaults(**cfg)\n")
    own = own_parser_default(str(script), "--max-position-embeddings")
    assert own is not None and own.defined and not own.literal and own.value is None


def test_a_set_defaults_value_is_priced(tmp_path: Path) -> None:
    """The job is priced with the table set_defaults gives (2048 rows), not add_argument's 512."""
    script = tmp_path / "train.py"
    script.write_text(PARSER + SCRIPTS["set_defaults_after"] + "\np.add_argument('--vocab-size', dest='vocab_size', "
                      "type=int, default=-1)\np.set_defaults(vocab_size=50304)\n")
    cfg = _cfg(tmp_path, script)
    assert cfg.model.max_position_embeddings == 2048 and cfg.model.vocab_size == 50304


TWO_ENTRY_POINTS = ("def train_args():\n    parser = argparse.ArgumentParser()\n"
                    "    parser.add_argument('--max-position-embeddings', type=int, default={train})\n"
                    "    return parser\n\n\ndef eval_args():\n    parser = argparse.ArgumentParser()\n"
                    "    parser.add_argument('--max-position-embeddings', type=int, default={eval})\n"
                    "    return parser\n")


@pytest.mark.parametrize(("train", "evaluate", "value"), [(512, 128, None), (512, 512, 512)])
def test_parsers_of_two_functions_are_two_parsers(train: int, evaluate: int, value: int | None,
                                                  tmp_path: Path) -> None:
    """R68: two functions that each build a `parser` (one script, two entry points) are two parsers, even under one
    variable name: where they state the default apart, which parses the job only running tells (not the first
    in the file); where they agree, that value."""
    script = tmp_path / "train.py"
    script.write_text(PARSER + TWO_ENTRY_POINTS.format(train=train, eval=evaluate))
    own = own_parser_default(str(script), "--max-position-embeddings")
    assert own is not None and own.defined and own.value == value and own.literal == (value is not None)


MAIN = "def main():\n    p = build()\n    p.set_defaults(max_position_embeddings=2048)\n    return p\n\n\n"
BUILD = ("def build():\n    p = argparse.ArgumentParser()\n    p.add_argument('--num-layers', type=int, default=2)\n"
         "    p.add_argument('--max-position-embeddings', type=int, default=512)\n    return p\n\n\n")


@pytest.mark.parametrize("functions", [MAIN + BUILD, BUILD + MAIN], ids=["main_first", "builder_first"])
def test_calls_in_functions_run_where_the_function_is_called(functions: str, tmp_path: Path) -> None:
    """R68: `main()` calls `build()`, whose add_argument(default=512) runs before main's set_defaults(2048), wherever
    each function stands in the file: argparse gives 2048 both ways (read in source order, main first gave 512)."""
    script = tmp_path / "train.py"
    script.write_text("import argparse\n\n\n" + functions + "if __name__ == '__main__':\n"
                      f"    print(repr(main().parse_args([]).{M}))\n")
    own = own_parser_default(str(script), "--max-position-embeddings")
    assert own is not None and own.literal and own.value == _argparse_gives(script) == 2048
