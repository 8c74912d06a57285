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
