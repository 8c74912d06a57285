"""`llmperf predict [--cluster] [--hardware] [--format table|json] [--trace FILE] -- <command>` and
`llmperf predict --batch FILE [--format json]`.

Single command: a readable table (default) or one JSON object (schema in report/json_report.py) on stdout.
Batch: FILE holds one launch command per line (shell words; `#` comments; blank lines skipped; `-` = stdin).
A line may start with its own llmperf options ending in `--` (`--id TEXT --cluster NAME --hardware NAME --nnodes N
--nproc-per-node N --model M -- torchrun ...`) and may start with `llmperf predict`, `llmperf run` or `llmperf`. Relative paths in a line
(ds_config, hostfile) resolve against the batch file's folder (FILE's directory is the working directory while
its lines are resolved). A command continues over lines ending in a backslash. With --format json, stdout holds one
JSON object per input command, in order: {"line": N, "id": TEXT|null, ...the single-command JSON}, where N is the
command's first line in FILE and id its `--id`; a command that fails gives {"line": N, "id": ..., "error": "line N:
..."} and the rest go on (a count of failures goes to stderr; exit 0). The table format heads each result
`== line N (id TEXT)`. docs/validate.md documents the format.
"""

from __future__ import annotations

import contextlib
from dataclasses import replace
import json
import os
import re
import shlex
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import click

from llmperf_hook.commands.common import launch_argv, overrides
from llmperf_hook.errors import LlmperfError, UsageError

if TYPE_CHECKING:
    from llmperf_hook.graph.build import GraphMemo

LINE_OPTIONS = {"--cluster": "cluster", "--hardware": "hardware", "--nnodes": "nnodes",
                "--nproc-per-node": "nproc_per_node", "--model": "model", "--id": "id"}
"""llmperf options a batch line may start with; `--id TEXT` names the line in its result (`id`), to join it back."""


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--cluster", default=None, help="Cluster preset name or YAML file (default: the shipped cluster of "
              "the --hardware GPU, else dgx-h100; with a warning).")
@click.option("--hardware", default=None, help="GPU preset name or YAML file (overrides the cluster's GPU).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--batch", "batch_file", default=None, help="File of launch commands, one per line (`-` = stdin; `#` comments and blank lines skipped; a line may start with `--id TEXT --cluster NAME -- `). Each result carries its `line` number and `id`; a line that fails gives {\"line\": N, \"id\": ..., \"error\": ...} in its place, the others are still predicted, and the exit code is 0; the count of failed lines goes to stderr. Format: docs/validate.md.")
@click.option("--trace", "trace_file", default=None, help="Write a Chrome/Perfetto trace of the simulated step. An existing file is replaced only if empty or a trace llmperf wrote.")
@click.option("--nnodes", type=int, default=None, help="Override the number of nodes of the command.")
@click.option("--nproc-per-node", type=int, default=None, help="Override GPUs per node of the command.")
@click.option("--model", default=None, help="Model preset or file for scripts that do not state the model shape.")
@click.argument("launch", nargs=-1, type=click.UNPROCESSED)
def command(cluster: str | None, hardware: str | None, fmt: str, batch_file: str | None, trace_file: str | None,
            nnodes: int | None, nproc_per_node: int | None, model: str | None, launch: Sequence[str]) -> None:
    """Predict step time, throughput, MFU and memory per GPU of a launch command.

    \b
      llmperf predict --cluster dgx-a100 -- torchrun --nnodes 16 --nproc-per-node 8 pretrain_gpt.py ...
      llmperf predict --cluster dgx-h100 --batch commands.txt --format json   (one JSON object per line)
      llmperf predict --trace step.json -- deepspeed ...                      (open in ui.perfetto.dev)
    """
    if batch_file is not None:
        if launch:
            raise UsageError("--batch FILE takes the commands from the file; remove the command after `--`.")
        if trace_file:
            raise UsageError("--trace writes the trace of one command; it cannot be combined with --batch.")
        run_batch(batch_file, fmt, {"cluster": cluster, "hardware": hardware, "nnodes": nnodes,
                                    "nproc_per_node": nproc_per_node, "model": model})
        return
    from llmperf_hook import api

    argv = launch_argv(launch, "predict")
    pred = api.predict_command(argv, dict(os.environ), cluster=cluster, hardware=hardware,
                               overrides=overrides(nnodes, nproc_per_node, model), detail=trace_file is not None)
    if trace_file:
        write_trace(pred, trace_file)
    click.echo(render(pred, fmt))


def render(pred: Any, fmt: str) -> str:
    from llmperf_hook import api

    if fmt == "json":
        return json.dumps(api.prediction_json(pred), sort_keys=False)
    from llmperf_hook.report.table import render_prediction_table

    return render_prediction_table(pred)


def write_trace(pred: Any, path: str) -> None:
    """Write the trace; an existing file is replaced only when empty or a trace llmperf wrote, so a mistyped
    --trace (`--trace config.json`) never destroys the user's data."""
    from llmperf_hook.report.trace import is_llmperf_trace, render_trace

    target = Path(path)
    try:
        old = target.read_text(encoding="utf-8", errors="replace") if target.is_file() else ""
    except OSError:
        old = ""
    if old.strip() and not is_llmperf_trace(old):
        raise UsageError(f"--trace {path}: the file exists and is not a trace llmperf wrote ({len(old):,} characters); "
                         "llmperf does not overwrite it. Pass a new path, or delete the file first.")
    try:
        target.write_text(json.dumps(render_trace(pred.estimate, " ".join(pred.job.argv)[:120])))
    except OSError as err:
        raise UsageError(f"cannot write the trace to {path}: {err}. Pass a writable --trace path.") from err


def strip_shell_comment(line: str) -> str:
    """Cut the line at a `#` that starts a word outside quotes, as the shell does (`nvcr.io#nvidia/pytorch` is a word,
    not a comment: shlex's comments=True cut it)."""
    if "#" not in line:  # most lines: no character-by-character scan (a 1,000-line batch spent ~5 % of its time here)
        return line
    quote, escaped, word_start = "", False, True
    for i, ch in enumerate(line):
        if escaped:
            escaped, word_start = False, False
            continue
        if ch == "\\" and quote != "'":
            escaped = True
        elif quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and word_start:
            return line[:i]
        word_start = not quote and ch.isspace()
    return line


def split_words(line: str) -> list[str]:
    """The line's shell words: with no quote or backslash they are its whitespace-separated words, as shlex.split
    gives them (shlex scans character by character: 40 % of a 1,000-line batch's parsing)."""
    if not any(ch in line for ch in "'\"\\"):
        return [word for word in SHELL_BLANKS.split(line) if word]
    return shlex.split(line)


SHELL_BLANKS = re.compile(r"[ \t\r\n]+")
"""shlex's whitespace (str.split would also split at a no-break space, which shlex keeps inside a word)."""


def parse_batch_line(line: str, defaults: dict[str, Any]) -> tuple[list[str], dict[str, Any]] | None:
    """(launch argv, llmperf options) of one batch line, or None for a blank/comment line."""
    try:
        words = split_words(strip_shell_comment(line))
    except ValueError as err:
        raise UsageError(f"cannot split the line into shell words: {err}.") from err
    if not words:
        return None
    if words[:1] == ["llmperf"]:
        words = words[2:] if words[1:2] in (["predict"], ["run"]) else words[1:]
    options = dict(defaults)
    if words[:1] == ["--"]:  # `-- torchrun ...`: no llmperf options before the separator
        words = words[1:]
    elif words and (words[0] in LINE_OPTIONS or (words[0].startswith("--") and "--" in words)):  # llmperf options
        if "--" not in words:
            raise UsageError("a line with llmperf options must separate them from the command with `--`.")
        split = words.index("--")
        head, words = words[:split], words[split + 1:]
        if len(head) % 2:
            raise UsageError(f"llmperf options {head} must come in `--option VALUE` pairs.")
        for flag, value in zip(head[::2], head[1::2]):
            if flag not in LINE_OPTIONS:
                raise UsageError(f"unknown llmperf option {flag} in a batch line; accepted: {', '.join(LINE_OPTIONS)}.")
            if flag in ("--nnodes", "--nproc-per-node") and not value.isdigit():
                raise UsageError(f"{flag} {value!r} in a batch line must be a positive integer.")
            options[LINE_OPTIONS[flag]] = int(value) if flag in ("--nnodes", "--nproc-per-node") else value
    if not words:
        raise UsageError("the line has llmperf options but no launch command after `--`.")
    return words, options


@contextlib.contextmanager
def working_directory(folder: Path) -> Iterator[None]:
    previous = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(previous)


def _read_batch(path: str) -> tuple[list[tuple[int, str]], Path]:
    """(first line number, command) per logical line, and the folder relative paths resolve against."""
    if path == "-":
        return join_continued_lines(sys.stdin.read().splitlines()), Path.cwd()
    file = Path(path)
    try:
        return join_continued_lines(file.read_text(encoding="utf-8").splitlines()), file.resolve().parent
    except UnicodeDecodeError as err:
        raise UsageError(f"the batch file {path} is not UTF-8 text (byte {err.start}: {err.reason}); write one launch "
                         "command per line as plain text.") from None
    except OSError as err:
        raise UsageError(f"cannot read the batch file {path}: {err}. Pass an existing file.") from err


def join_continued_lines(lines: list[str]) -> list[tuple[int, str]]:
    """A line ending in a backslash continues on the next one, as in the shell script it was copied from."""
    out: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for number, line in enumerate(lines, start=1):
        start, text = pending if pending else (number, "")
        text += line
        if line.endswith("\\") and not line.endswith("\\\\") and not text.lstrip().startswith("#"):
            pending = (start, text[:-1] + " ")
            continue
        pending = None
        out.append((start, text))
    if pending:
        out.append(pending)
    return out


def predict_batch_line(line: str, defaults: dict[str, Any], clusters: dict[tuple, Any],
                       graphs: GraphMemo | None = None) -> tuple[Any, str | None] | None:
    """One batch line -> (prediction, the line's --id or None); None for a blank or comment line. `clusters`
    memoises (cluster, hardware) -> (spec, warnings, measured: api.assumed_cluster), `graphs` the batch's graphs
    (graph/build.GraphMemo)."""
    from llmperf_hook import api

    parsed = parse_batch_line(line, defaults)
    if parsed is None:
        return None
    argv, opts = parsed
    key = (opts["cluster"], opts["hardware"])
    if key not in clusters:
        clusters[key] = api.assumed_cluster(opts["cluster"], opts["hardware"])
    spec, notes, measured = clusters[key]
    job_overrides = overrides(opts["nnodes"], opts["nproc_per_node"], opts["model"])
    if opts["cluster"]:  # a named cluster sizes 'every GPU of the node'; the assumed default does not
        job_overrides = replace(job_overrides, cluster_gpus_per_node=spec.gpus_per_node)
    pred = api.predict_command(argv, dict(os.environ), cluster=spec, hardware=None, overrides=job_overrides,
                               measured=measured, graphs=graphs)  # its ranks per node kept on one node, as predict does
    if notes:
        pred = replace(pred, warnings=pred.warnings + notes)
    return pred, opts.get("id")


def paths_from_cwd(defaults: dict[str, Any]) -> dict[str, Any]:
    """The command line's own --cluster / --hardware / --model files, made absolute before the batch file's folder
    becomes the working directory: `llmperf predict --cluster mine.yaml --batch runs/cmds.txt` reads ./mine.yaml
    (it was looked up as runs/mine.yaml and every line failed). A model preset name keeps its precedence over a
    file of that name, as `load_model_preset` gives it, and a cluster or GPU preset over a folder of that name, as
    `find_config_file` does (only a file wins there); paths written inside the file resolve against its folder."""
    from llmperf_hook.frameworks.presets import list_model_presets

    out = dict(defaults)
    for key in ("cluster", "hardware", "model"):
        value = out.get(key)
        found = os.path.exists if key == "model" else os.path.isfile  # a model may be a Hugging Face folder
        if not value or os.path.isabs(value) or not found(value):
            continue
        if key == "model" and value in list_model_presets():
            continue
        out[key] = os.path.abspath(value)
    return out


def _require_commands(path: str, lines: list[tuple[int, str]]) -> None:
    """A batch with no launch command is refused (exit 2): an empty file, or stdin from a pipeline that matched
    nothing, is almost always the wrong input, and exiting 0 with no output looked like success."""
    if any(line.strip() and not line.lstrip().startswith("#") for _, line in lines):
        return
    name = "standard input" if path == "-" else f"the batch file {path}"
    held = f"{len(lines)} line(s), all blank or comments" if lines else "nothing"
    raise UsageError(f"{name} holds no launch command ({held}); llmperf predict --batch predicts one command per line. "
                     "Write one launch command per line (torchrun ..., deepspeed ..., sbatch job.sh) or pass the "
                     "file that holds them.")


def run_batch(path: str, fmt: str, defaults: dict[str, Any]) -> None:
    lines, folder = _read_batch(path)
    _require_commands(path, lines)
    defaults = {**paths_from_cwd(defaults), "id": None}
    failures = total = 0
    out = sys.stdout
    clusters: dict[tuple, Any] = {}
    from llmperf_hook.graph.build import GraphMemo
    from llmperf_hook.predict.fitted import batch_lookups

    graphs = GraphMemo()  # a repeated configuration's graph is built once; profiles are found once (while unchanged)
    with working_directory(folder), batch_lookups():
        for number, line in lines:
            text, failed = batch_result(number, line, defaults, fmt, clusters, graphs)
            if text is None:
                continue
            total += 1
            failures += failed
            out.write(text + ("\n" if fmt == "json" else "\n\n"))
    out.flush()
    if failures:
        what = "error objects" if fmt == "json" else "'line N: error:' entries"
        click.echo(f"llmperf predict: {failures} of {total} commands failed (see their {what}).", err=True)


def batch_result(number: int, line: str, defaults: dict[str, Any], fmt: str,
                 clusters: dict[tuple, Any], graphs: GraphMemo | None = None) -> tuple[str | None, bool]:
    """(rendered result, failed) of the command starting on line `number`: JSON {"line", "id", ...prediction} or
    {"line", "id", "error"}; a table headed `== line N (id X)`. None for a blank or comment line."""
    try:
        predicted = predict_batch_line(line, defaults, clusters, graphs)
        if predicted is None:
            return None, False
        pred, line_id = predicted
        if fmt == "json":
            from llmperf_hook import api

            return json.dumps({"line": number, "id": line_id, **api.prediction_json(pred)}), False
        return f"{_batch_heading(number, line_id)}\n{render(pred, fmt)}", False
    except LlmperfError as err:
        message = f"line {number}: {err}"
    except Exception as err:  # noqa: BLE001 - one bad line must not stop the batch
        message = f"line {number}: internal error: {type(err).__name__}: {err}"
    line_id = _line_id(line)
    if fmt == "json":
        return json.dumps({"line": number, "id": line_id, "error": message}), True
    return f"{_batch_heading(number, line_id)}\n{message.replace(':', ': error:', 1)}", True


def _batch_heading(number: int, line_id: str | None) -> str:
    return f"== line {number}" + (f" (id {line_id})" if line_id is not None else "")


def _line_id(line: str) -> str | None:
    """The --id of a line that failed, when its options can still be read."""
    try:
        parsed = parse_batch_line(line, {"id": None})
    except LlmperfError:
        return None
    return parsed[1].get("id") if parsed else None
