"""Review R64 of H177's frameworks/script_defaults: what argparse itself makes of the default a script's own parser
states (Lib/argparse.py parse_known_args: a string default is converted through the option's `type`, as if given
on the command line), and a flag two parsers of the script define with different defaults."""

from __future__ import annotations

from pathlib import Path

from tests.frameworks.test_own_parser_defaults_h177 import PARSER, _cfg


def test_a_string_default_is_converted_by_its_type(tmp_path: Path) -> None:
    """`type=int, default='2048'`: argparse gives the script 2048 (its parse_known_args runs `_get_value(action,
    action.default)` on a string default), not the text."""
    script = tmp_path / "train.py"
    script.write_text(PARSER + "p.add_argument('--max-position-embeddings', type=int, default='2048')\n"
                               "p.add_argument('--vocab-size', type=int, default='50304')\n")
    cfg = _cfg(tmp_path, script)
    assert cfg.model.max_position_embeddings == 2048 and cfg.model.vocab_size == 50304


def test_a_flag_two_parsers_define_apart_is_not_guessed(tmp_path: Path) -> None:
    """Two parsers (one per entry point) give --max-position-embeddings 1024 and 4096: which one parses the job's
    command only running tells, so neither is priced as if sure; the warning says so."""
    script = tmp_path / "train.py"
    script.write_text(PARSER + "p.add_argument('--max-position-embeddings', type=int, default=1024)\n"
                               "def other():\n    q = argparse.ArgumentParser()\n"
                               "    q.add_argument('--max-position-embeddings', type=int, default=4096)\n")
    cfg = _cfg(tmp_path, script, "--vocab-size", "1024")
    assert cfg.model.max_position_embeddings is None
    assert any("or two parsers state it apart" in w for w in cfg.warnings)
    script.write_text(script.read_text().replace("4096", "1024"))  # defaults that agree stand
    assert _cfg(tmp_path, script, "--vocab-size", "1024").model.max_position_embeddings == 1024
