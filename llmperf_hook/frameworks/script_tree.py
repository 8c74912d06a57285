"""The syntax tree of a user's training script, parsed once per file version and shared by every reader.

Several readers look at the same script's code (never importing or running it): whether it builds a PipelineModule
(assemble), the optimizer it casts and steps (script_shape), the optimizer it hands deepspeed.initialize
(deepspeed_optimizer), the dropout it runs (script_dropout) and the options of its own argparse parser
(tune/script_options). They all read `script_tree(path)`.

The file is read as bytes, as Python reads it: `ast.parse` then honours a UTF-8 BOM and a PEP 263 coding line
(a latin-1 script parses as it runs). A file that cannot be read or parsed (missing, a directory, SyntaxError, a
null byte, a nesting deeper than the parser's stack: RecursionError or MemoryError) gives None, and
`script_parse_error` says why; no reader sees an exception. The tree is cached per file content and shared:
readers only walk it.
"""

from __future__ import annotations

import ast
import functools
import os


def script_tree(script: str) -> ast.Module | None:
    """The parsed module of `script`, or None when the file cannot be read or parsed (script_parse_error says why)."""
    tree = _tree(script)
    return tree if isinstance(tree, ast.Module) else None


def script_parse_error(script: str) -> str | None:
    """Why a file that exists could not be read or parsed ('SyntaxError (line 3): invalid syntax'), else None (also
    None when there is no such file)."""
    tree = _tree(script)
    return tree if isinstance(tree, str) else None


def _tree(script: str) -> ast.Module | str | None:
    try:
        os.stat(script)
    except (OSError, ValueError):  # ValueError: a path with a null byte
        return None
    try:
        with open(script, "rb") as handle:
            source = handle.read()
    except OSError as err:
        return f"{type(err).__name__}: {err}"
    return _parse(os.path.abspath(script), source)


@functools.lru_cache(maxsize=32)
def _parse(path: str, source: bytes) -> ast.Module | str:
    """Cached per file content: a predict reads the script from several readers, tune once per candidate command it
    plans. The bytes are the key, not the mtime: a same-size rewrite within a coarse clock tick (1 s on NFS or HFS+)
    keeps both mtime and size. Reading a script again costs microseconds; parsing it, milliseconds. At most 32 trees
    (and their sources) are kept, however long a tune or a batch of predictions runs."""
    try:
        return ast.parse(source, filename=path)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as err:
        where = f" (line {err.lineno})" if isinstance(err, SyntaxError) and err.lineno else ""
        return f"{type(err).__name__}{where}: {err.msg if isinstance(err, SyntaxError) else err}"
