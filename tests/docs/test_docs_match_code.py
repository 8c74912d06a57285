"""What the README and docs/ tell a user is what the code does (H147: after many sessions of changes, the README
named sample counts, figures and JSON keys the code no longer had). Checked here: every repository path they name
exists; the README keeps exactly two set-up commands, its test command is the one `.ci/run` runs, and its usage
lines run as written and exit as it says; every option an `llmperf <command>` line in them passes is an option of
that command; the exit codes they state are `llmperf_hook/errors.py`'s; and every key `predict`, `run --dry-run`
and `tune` print with `--format json` is named in docs/output.md (validate's: tests/validate/test_schema_doc.py)."""

from __future__ import annotations

import json
import os
import re
import shlex
import sys
from pathlib import Path

import click
import pytest

from llmperf_hook import errors
from llmperf_hook.cli import cli, main
from llmperf_hook.report.table import BREAKDOWN_LABELS
from json_keys import json_keys

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
OUTPUT_MD = ROOT / "docs" / "output.md"
# Repository folders a doc can name a path in; upstream paths (megatron/..., src/graph/tuning.cc) are not ours.
OUR_ROOTS = ("llmperf_hook/", "benchmarks/", "configs/", "measurements/", "tests/", "examples/", "launchers/",
             "docs/", ".ci/")
# A small Megatron job whose shape comes from a preset: fast to predict and to tune.
JOB = ["torchrun", "--nproc-per-node", "8", "pretrain_gpt.py", "--tensor-model-parallel-size", "2",
       "--micro-batch-size", "1", "--global-batch-size", "16", "--bf16"]


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _named_paths(text: str) -> set[str]:
    """Repository paths in backticks or after `python ` in the text, placeholders (<name>, [FOLDER]) left out."""
    words = re.findall(r"`([^`\s]+)`", text) + re.findall(r"python3? (\S+\.py)", text)
    return {w.rstrip(".,;:)") for w in words
            if w.startswith(OUR_ROOTS) and not re.search(r"[<>\[\]{}]", w)}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_named_path_exists(doc: Path) -> None:
    missing = [p for p in sorted(_named_paths(_text(doc))) if not list(ROOT.glob(p.rstrip("/")))]
    assert not missing, f"{doc.name} names paths that do not exist: {missing}"


def _setup_commands() -> list[str]:
    section = _text(ROOT / "README.md").split("## Set up", 1)[1].split("\n## ", 1)[0]
    return [line.strip() for line in section.splitlines() if line.startswith("    ")]


def test_readme_has_two_setup_commands() -> None:
    first, second = _setup_commands()  # exactly two
    assert "pip install ." in first and "llmperf predict" in first and "pytest" in second
    batch = re.search(r"--batch (\S+)", first)
    assert batch and (ROOT / batch.group(1)).is_file()


def _ci_steps() -> list[str]:
    """.ci/run's commands, with pip's --quiet dropped and `python -m pip` read as `pip`."""
    lines = [ln.strip() for ln in _text(ROOT / ".ci" / "run").splitlines()]
    steps = [ln for ln in lines if ln and not ln.startswith(("#", "set ", "cd "))]
    return [re.sub(r"\s+", " ", s.replace("python -m pip", "pip").replace(" --quiet", "")) for s in steps]


def test_readme_test_command_is_what_ci_runs() -> None:
    parts = [p.strip() for p in _setup_commands()[1].split("&&")]
    ci = _ci_steps()
    installs = [p for p in parts if p.startswith("pip install")]
    assert installs == [s for s in ci if s.startswith("pip install") and "--upgrade pip" not in s]
    env, _, pytest_cmd = parts[-1].partition(" python -m pytest")
    assert f"export {env}" in ci and f"python -m pytest{pytest_cmd}" in ci


def _llmperf_invocations(text: str) -> list[tuple[str, str]]:
    """(subcommand, its llmperf options) of every `llmperf <sub> ...` in backticks or on an indented line."""
    spans = re.findall(r"`(llmperf [^`]+)`", text)
    spans += [ln.strip() for ln in text.splitlines() if ln.startswith("    ") and ln.strip().startswith("llmperf ")]
    subcommands = set(cli.list_commands(click.Context(cli)))  # a lazy group: its `commands` is empty
    out = []
    for span in spans:
        words = span.split()
        if len(words) > 1 and words[1] in subcommands:
            own = span.split(" -- ", 1)[0].split("#", 1)[0]  # options after `--` belong to the launch command
            out.append((words[1], own))
    return out


def _option_names(command: click.Command) -> set[str]:
    return {name for p in command.params for name in (*p.opts, *p.secondary_opts)}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_option_shown_exists(doc: Path) -> None:
    ctx = click.Context(cli)
    wrong = []
    invocations = _llmperf_invocations(_text(doc))
    assert invocations, f"{doc.name}: no llmperf command line found"  # the parser reads them
    for sub, own in invocations:
        names = _option_names(cli.get_command(ctx, sub)) | {"--help"}
        wrong += [f"llmperf {sub} {opt}" for opt in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", own)
                  if opt not in names]
    assert not wrong, f"{doc.name} shows options the command does not have: {sorted(set(wrong))}"


def test_stated_exit_codes_are_the_codes() -> None:
    assert (errors.EXIT_OK, errors.EXIT_INTERNAL, errors.EXIT_BAD_INPUT, errors.EXIT_INFEASIBLE) == (0, 1, 2, 3)
    assert errors.UsageError.exit_code == errors.ConfigError.exit_code == errors.EXIT_BAD_INPUT
    assert errors.InfeasibleError.exit_code == errors.EXIT_INFEASIBLE
    for doc in (ROOT / "README.md", ROOT / "docs" / "commands.md"):
        text = " ".join(_text(doc).split())
        assert ("0 ok; 2 bad input or a configuration the framework itself would reject; 3 valid but infeasible"
                in text and "1 internal error" in text), doc.name


def _undocumented(keys: set[str]) -> list[str]:
    """Keys docs/output.md does not name, as `key` or inside a JSON example as "key"."""
    text = _text(OUTPUT_MD)
    return sorted(k for k in keys if f"`{k}`" not in text and f'"{k}"' not in text)


def _run_json(capsys: pytest.CaptureFixture[str], args: list[str], exit_code: int = 0) -> list[dict]:
    """The JSON lines `llmperf ARGS` prints, run as the console script runs it (errors become exit codes)."""
    with pytest.raises(SystemExit) as done:
        main(args)
    out = capsys.readouterr()
    assert done.value.code == exit_code, out.err
    try:
        return [json.loads(out.out)]  # one object (tune prints it indented)
    except json.JSONDecodeError:
        return [json.loads(line) for line in out.out.splitlines() if line.startswith("{")]  # run --dry-run: two


def test_predict_json_keys_are_documented(capsys: pytest.CaptureFixture[str]) -> None:
    (data,) = _run_json(capsys, ["predict", "--format", "json", "--model", "llama3-8b", "--", *JOB])
    keys = (set(data) | set(data["memory"]) | set(data["memory"]["host"]) | set(data["cluster"])
            | json_keys(data["stages"]))
    assert not _undocumented(keys | set(BREAKDOWN_LABELS))  # every breakdown key the table can print, too


def test_dry_run_json_keys_are_documented(capsys: pytest.CaptureFixture[str]) -> None:
    job = [sys.executable, "pretrain_gpt.py", "--micro-batch-size", "1", "--global-batch-size", "16", "--bf16"]
    plan = _run_json(capsys, ["run", "--dry-run", "--format", "json", "--model", "llama3-8b", "--", *job])[-1]
    assert plan["dry_run"] is True and not _undocumented(set(plan))


def test_tune_json_keys_are_documented(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    space = tmp_path / "space.yaml"
    space.write_text("micro_batch_size: [1, 2]\ntensor_parallel: [1, 2]\npipeline_parallel: [1]\n"
                     "virtual_pipeline: [1]\ncontext_parallel: [1]\n", encoding="utf-8")
    (data,) = _run_json(capsys, ["tune", "--format", "json", "--search", str(space), "--model", "llama3-8b", "--",
                                 *JOB])
    changed = [row for row in data["top"] if row["changes"]]
    assert changed, data["top"]  # a row with changes, so their keys are checked too
    keys = set(data) | set(data["knobs"]) | set(data["search"]) | set(data["baseline"]) | json_keys(changed[0])
    assert not _undocumented(keys)


def test_tune_nothing_fits_json_keys_are_documented(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    space = tmp_path / "space.yaml"
    space.write_text("micro_batch_size: [1]\ntensor_parallel: [2]\npipeline_parallel: [1]\nvirtual_pipeline: [1]\n"
                     "context_parallel: [1]\n", encoding="utf-8")
    (data,) = _run_json(capsys, ["tune", "--format", "json", "--search", str(space), "--model", "llama3-405b", "--",
                                 *JOB], exit_code=3)
    assert data["exit_code"] == 3 and data["fits"] is False
    assert not _undocumented(set(data) | set(data["nearest"]))


def _use_lines() -> tuple[list[str], list[str]]:
    """(the README's CMD words, its `llmperf ...` usage lines without their comments)."""
    section = _text(ROOT / "README.md").split("## Use", 1)[1].split("\n## ", 1)[0]
    lines = [ln.strip() for ln in section.splitlines() if ln.startswith("    ")]
    (cmd,) = [shlex.split(ln.partition("=")[2])[0] for ln in lines if ln.startswith("CMD=")]
    return shlex.split(cmd), [ln.split("#", 1)[0].strip() for ln in lines if ln.startswith("llmperf ")]


# What each usage line must exit with here: refine has no instrumented run in an empty $LLMPERF_HOME. profile
# (minutes of sampling), validate (80 predictions) and run --instrument (`...`) are run by tests/profiling,
# tests/validate and tests/instrument.
USE_EXIT = {"explain": 0, "predict": 0, "run": 0, "tune": 0, "refine": 2}


def test_readme_usage_lines_run_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    cmd, lines = _use_lines()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LLMPERF_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")  # torchrun
    ran = []
    for line in lines:
        words = [w for word in shlex.split(line) for w in (cmd if word == "$CMD" else [word])]
        if words[1] not in USE_EXIT or "..." in words:
            continue
        with pytest.raises(SystemExit) as done:
            main(words[1:])
        assert done.value.code == USE_EXIT[words[1]], (line, capsys.readouterr().err[-2000:])
        ran.append(words[1])
    assert sorted(ran) == sorted(USE_EXIT)
