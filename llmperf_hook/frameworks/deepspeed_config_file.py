"""Reading a ds_config as the job's reader reads it: DeepSpeed's hjson (comments, trailing commas, unquoted keys,
duplicate keys refused), the Hugging Face Trainer's plain json.load, a config given inline (base64 or a JSON string),
and a file the batch script writes before launching. Parsing is deepspeed_config.parse_ds_config's.
"""

from __future__ import annotations

import base64
import json
import os
import re
from typing import Any, Mapping

from llmperf_hook.errors import ConfigError, UsageError
from llmperf_hook.launch.script_files import written_text
from llmperf_hook.launch.parsed_job import ScriptFile


def read_ds_config(path: str, hf_trainer: bool = False, written: ScriptFile | None = None,
                   megatron_deepspeed: bool = False) -> dict[str, Any]:
    """Read a ds_config file (relative paths against the current directory) as the job will: DeepSpeed reads it with
    hjson (deepspeed/runtime/config.py: `//`, `#` and `/* */` comments, trailing commas, a UTF-8 byte-order mark and
    hjson's unquoted keys are accepted; a key given twice is an error). The Hugging Face Trainer (`hf_trainer`) reads
    `--deepspeed FILE` first with json.load (accelerate's HfDeepSpeedConfig), which accepts plain JSON only.
    `written`: the batch script writes the file before launching (a here-document), so its text is read instead.
    Only DeepSpeed's own file reader refuses a key given twice (hjson.load with dict_raise_error_on_duplicate_keys);
    its base64 reader (hjson.loads) and accelerate's json.load / json.loads keep the last value, as llmperf does there.
    `megatron_deepspeed`: an entry point of Megatron-DeepSpeed, whose pretrain() opens --deepspeed_config itself and
    json.load-s it before handing DeepSpeed the dict (megatron/training.py: _create_ds_config_dict since 54e6c2c8,
    2023-10; before it `args.deepspeed_configuration = json.load(open(args.deepspeed_config))` since the curriculum
    learning commits, microsoft db97cd2a 2021-10-27, bigscience-workshop 0035f06a 2021-10-09): plain JSON, a repeated
    key keeps its last value, and a base64 word is no file. DeepSpeed's own launcher never reads the file: what reads
    it first is the training script."""
    if written is not None:
        text, inline = written_text(path, written), None
    else:
        inline = _inline_config(path, hf_trainer)
        if inline is not None and megatron_deepspeed:
            raise ConfigError(f"Megatron-DeepSpeed cannot read --deepspeed_config {path[:40]}...: it is {inline[0]} "
                              "JSON, which DeepSpeed itself decodes, but Megatron-DeepSpeed's pretrain() opens the word "
                              f"as a file first ({_MDS_READER[1]}), and the job stops with FileNotFoundError. Write the "
                              "config to a file and pass its path.")
        text = inline[1] if inline else _file_text(path)
    unique = not (hf_trainer or megatron_deepspeed) and inline is None
    if hf_trainer or megatron_deepspeed:
        raw = _load_strict_json(text, path, unique, _MDS_READER if megatron_deepspeed else _HF_READER)
    else:
        raw = _load_hjson_subset(text.removeprefix("\ufeff"), path, unique)
    if not isinstance(raw, dict):
        raise UsageError(f"DeepSpeed config {path} is not a JSON object.")
    return raw


def inline_ds_config_form(word: str, hf_trainer: bool = False) -> str | None:
    """"base64" or "json" when `word`, given where a ds_config path goes, is the config itself (as read_ds_config
    reads it: not an existing path, and decoding to a JSON object); None for a path. tune --apply writes a tuned
    config back in the same form."""
    inline = _inline_config(word, hf_trainer)
    return inline[0] if inline else None


def encode_inline_ds_config(raw: Mapping[str, Any], form: str) -> str:
    """A config dict as one argv word of `form` ("base64": urlsafe, what DeepSpeedConfig decodes; "json": compact)."""
    text = json.dumps(raw, separators=(",", ":"))
    return base64.urlsafe_b64encode(text.encode("utf-8")).decode("ascii") if form == "base64" else text


def _inline_config(word: str, hf_trainer: bool) -> tuple[str, str] | None:
    """(form, config text) of a word that is not an existing file: DeepSpeedConfig decodes it as base64 (urlsafe)
    JSON (deepspeed/runtime/config.py); accelerate's HfDeepSpeedConfig, which the Trainer uses, first tries it as a
    JSON string. None for an existing file, or when neither reading gives a JSON object (then it is a missing file)."""
    if os.path.exists(word):
        return None
    if hf_trainer and word.lstrip().startswith("{"):
        return "json", word
    try:
        text = base64.urlsafe_b64decode(word).decode("utf-8")
    except (ValueError, UnicodeDecodeError):  # binascii.Error is a ValueError
        return None
    # hjson.loads also takes an object without its braces ("train_batch_size: 8"); accelerate's json.loads does not
    if text.lstrip().startswith("{") or (not hf_trainer and _load_hjson(text, word, unique=False) is not None):
        return "base64", text
    return None


def _file_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        hint = "; it holds an unexpanded shell variable: set it in the environment or write the path" if "$" in path else \
            ("; DeepSpeed takes a file, a Python dict or base64-encoded JSON, not a JSON string (DeepSpeedConfig "
             "base64-decodes it and fails): write it to a file or base64-encode it" if path.lstrip().startswith("{") else "")
        raise UsageError(f"DeepSpeed config {path} does not exist (relative paths are read from {os.getcwd()}{hint}). "
                         "Run llmperf from the directory you launch from, or give an absolute path.") from None
    except IsADirectoryError:
        raise UsageError(f"DeepSpeed config {path} is a directory, not a JSON file; name the config file itself.") from None
    except (OSError, ValueError) as err:
        raise UsageError(f"cannot read DeepSpeed config {path}: {getattr(err, 'strerror', None) or err}.") from None


_HF_READER = ("the Hugging Face Trainer", "--deepspeed FILE with json.load (accelerate HfDeepSpeedConfig)")
_MDS_READER = ("Megatron-DeepSpeed", "--deepspeed_config FILE with json.load in pretrain() (megatron/training.py "
               "_create_ds_config_dict; every release since 2021-10) before DeepSpeed sees it")


_BARE_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _load_strict_json(text: str, path: str, unique: bool, reader: tuple[str, str]) -> Any:
    try:
        return _loads(text, path, unique)
    except json.JSONDecodeError as err:
        bare = _BARE_WORD.match(text, err.pos)
        what = f"the bare word {bare.group(0)} where a value goes (a template placeholder the script's sed left?); " \
            "replace it with its value" if bare and bare.group(0) not in ("true", "false", "null") else \
            "the comments, trailing commas and byte-order mark that DeepSpeed's own hjson reader accepts; save the " \
            "file as plain JSON"
        raise ConfigError(f"{reader[0]} cannot read DeepSpeed config {path}: {err}. It loads {reader[1]}, which "
                          f"refuses {what}.") from None


class _DuplicateKeys(ValueError):
    pass


def _duplicate_keys_error(path: str, err: _DuplicateKeys) -> ConfigError:
    return ConfigError(f"DeepSpeed config {path} gives the key(s) {err} twice in one object; DeepSpeed refuses it "
                       "('Duplicate keys in DeepSpeed config'). Keep one of each.")


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    twice = sorted({key for key in keys if keys.count(key) > 1})
    if twice:
        raise _DuplicateKeys(", ".join(twice))
    return dict(pairs)


def _load_hjson_subset(text: str, path: str, unique: bool = True) -> Any:
    """JSON, else JSON with the comments and trailing commas hjson (DeepSpeed's reader) accepts, else hjson itself
    where it is installed (it comes with DeepSpeed): unquoted keys and strings, braces omitted at the top. `unique`:
    a key given twice is an error (else the last value is kept)."""
    try:
        return _loads(text, path, unique)
    except json.JSONDecodeError as first:
        try:
            return _loads(strip_json_comments(text), path, unique)
        except json.JSONDecodeError:
            raw = _load_hjson(text, path, unique)
            if raw is None:
                raise UsageError(f"cannot read DeepSpeed config {path}: {first}.") from None
            return raw


def _load_hjson(text: str, path: str, unique: bool = True) -> Any:
    """hjson.loads as DeepSpeed calls it, or None when hjson is missing or refuses the text."""
    try:
        import hjson  # type: ignore[import-untyped]
    except ImportError:
        return None
    try:
        raw = hjson.loads(text, object_pairs_hook=_no_duplicate_keys if unique else None)
    except _DuplicateKeys as err:
        raise _duplicate_keys_error(path, err) from None
    except Exception:  # noqa: BLE001 - hjson raises its own HjsonDecodeError and ValueErrors
        return None
    return json.loads(json.dumps(raw)) if isinstance(raw, dict) else None


def _loads(text: str, path: str, unique: bool = True) -> Any:
    try:
        return json.loads(text, object_pairs_hook=_no_duplicate_keys if unique else None)
    except _DuplicateKeys as err:
        raise _duplicate_keys_error(path, err) from None


_TRAILING_COMMA = re.compile(r",(\s*[}\]])")


def strip_json_comments(text: str) -> str:
    """Drop `//`, `#` and `/* */` comments outside strings, then commas before `}` or `]`."""
    out: list[str] = []
    i, in_string = 0, False
    while i < len(text):
        ch = text[i]
        if in_string:
            out.append(ch)
            if ch == "\\":
                out.append(text[i + 1:i + 2])
                i += 1
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
            out.append(ch)
        elif ch == "#" or text.startswith("//", i):
            i = text.find("\n", i)
            i = len(text) if i < 0 else i
            continue
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = len(text) if end < 0 else end + 2
            continue
        else:
            out.append(ch)
        i += 1
    return _TRAILING_COMMA.sub(r"\1", "".join(out))
