"""H197: `set_defaults` reaches only the options of its own parser (Lib/argparse.py: a parser's set_defaults changes its
own actions and _defaults; an argument group's actions are its parser's), where R68's reading applied it file-wide.
Each script is also run by Python, whose argparse prints the value the reading must find."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmperf_hook.frameworks.script_defaults import own_parser_default
from tests.frameworks.test_own_parser_argparse_h189 import _PRINT, _argparse_gives
from tests.frameworks.test_own_parser_defaults_h177 import PARSER

OPTION = "'--max-position-embeddings', type=int"
SCRIPTS = {  # the lines after PARSER's (which builds `p`); argparse gives p's args.max_position_embeddings
    "another_parsers_set_defaults_after": f"p.add_argument({OPTION}, default=512)\ne = argparse.ArgumentParser()\n"
                                          "e.set_defaults(max_position_embeddings=128)",
    "another_parsers_set_defaults_before": "e = argparse.ArgumentParser()\n"
                                           "e.set_defaults(max_position_embeddings=128)\n"
                                           f"p.add_argument({OPTION})",
    "another_parser_in_a_function": f"p.add_argument({OPTION}, default=512)\n\n\ndef evaluation():\n"
                                    "    p = argparse.ArgumentParser()\n"
                                    "    p.set_defaults(max_position_embeddings=128)\n    return p",
    "group_of_the_parser": f"g = p.add_argument_group('model')\ng.add_argument({OPTION}, default=512)\n"
                           "p.set_defaults(max_position_embeddings=2048)",
    "chained_group": f"p.add_mutually_exclusive_group().add_argument({OPTION}, default=512)\n"
                     "p.set_defaults(max_position_embeddings=2048)",
    "helper_given_the_parser": f"def add_args(parser):\n    parser.add_argument({OPTION}, default=512)\n\n\n"
                               "add_args(p)\np.set_defaults(max_position_embeddings=2048)",
    # R80: `parents=[q]` copies q's actions (the same objects) and q's _defaults into the new parser
    # (ArgumentParser.__init__: _add_container_actions(parent), self._defaults.update(parent._defaults)), so each
    # one's set_defaults reaches the options of both
    "set_defaults_of_a_child_parser": f"q = argparse.ArgumentParser(add_help=False)\nq.add_argument({OPTION}, "
                                      "default=512)\np = argparse.ArgumentParser(parents=[q])\n"
                                      "p.set_defaults(max_position_embeddings=64)",
    "set_defaults_of_the_parent_after": f"q = argparse.ArgumentParser(add_help=False)\nq.add_argument({OPTION}, "
                                        "default=512)\np = argparse.ArgumentParser(parents=[q])\n"
                                        "q.set_defaults(max_position_embeddings=64)",
    "defaults_the_parent_gives": "q = argparse.ArgumentParser(add_help=False)\n"
                                 "q.set_defaults(max_position_embeddings=64)\np = argparse.ArgumentParser(parents=[q])\n"
                                 f"p.add_argument({OPTION})",
    # R80: a function's `global p` assigns the module's p (Python reference 7.12)
    "parser_built_in_a_function_as_global": f"def build():\n    global p\n    p = argparse.ArgumentParser()\n"
                                            f"    p.add_argument({OPTION}, default=512)\n\n\nbuild()\n"
                                            "p.set_defaults(max_position_embeddings=64)",
}


@pytest.mark.parametrize("name", SCRIPTS)
def test_set_defaults_of_its_own_parser(name: str, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(PARSER + SCRIPTS[name] + "\n" + _PRINT)
    own = own_parser_default(str(script), "--max-position-embeddings")
    assert own is not None and own.literal and own.value == _argparse_gives(script), name


def test_two_parsers_that_state_it_apart_stay_unknown(tmp_path: Path) -> None:
    """`e` and `p` each add the option and their defaults differ after their own set_defaults: which one parses the
    job only running tells (as R68's two entry points)."""
    script = tmp_path / "train.py"
    script.write_text(PARSER + f"e = argparse.ArgumentParser()\ne.add_argument({OPTION}, default=512)\n"
                      f"p.add_argument({OPTION}, default=512)\ne.set_defaults(max_position_embeddings=64)\n")
    own = own_parser_default(str(script), "--max-position-embeddings")
    assert own is not None and own.defined and not own.literal


SUBCOMMAND = "sub = p.add_subparsers(dest='cmd')\nt = sub.add_parser('train')\n"
SUBCOMMANDS = {  # R80: a subcommand's parser fills the namespace only when the command chooses it, and then over the
    # main parser's values (Lib/argparse.py _SubParsersAction.__call__: parse_known_args(arg_strings, None), then
    # setattr of each of its attributes), so the default depends on the subcommand the job gives
    "subcommands_set_defaults": f"p.add_argument({OPTION}, default=512)\n{SUBCOMMAND}"
                                "t.set_defaults(max_position_embeddings=64)",
    "main_set_defaults_and_a_subcommands_option": f"{SUBCOMMAND}t.add_argument({OPTION}, default=512)\n"
                                                  "p.set_defaults(max_position_embeddings=64)",
}


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_a_subcommands_defaults_are_not_guessed(name: str, tmp_path: Path) -> None:
    """Without the subcommand argparse gives one value, with `train` another: only the job's command tells (R68's
    file-wide reading and H197's both gave 64 as the script's default)."""
    script = tmp_path / "train.py"
    script.write_text(PARSER + SUBCOMMANDS[name] + "\n" + _PRINT)
    chosen = tmp_path / "chosen.py"
    chosen.write_text(PARSER + SUBCOMMANDS[name] + "\n" + _PRINT.replace("parse_args([])", "parse_args(['train'])"))
    assert _argparse_gives(script) != _argparse_gives(chosen)
    own = own_parser_default(str(script), "--max-position-embeddings")
    assert own is not None and own.defined and not own.literal


def test_an_option_only_a_subcommand_states(tmp_path: Path) -> None:
    """Everything about the dest on the one subcommand parser: its own default, as argparse gives it there."""
    script = tmp_path / "train.py"
    script.write_text(PARSER + SUBCOMMAND + f"t.add_argument({OPTION}, default=512)\n"
                      "t.set_defaults(max_position_embeddings=256)\n")
    own = own_parser_default(str(script), "--max-position-embeddings")
    assert own is not None and own.literal and own.value == 256
