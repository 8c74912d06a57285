"""The `llmperf` command line: a click group whose subcommands are imported only when invoked.

Each subcommand lives in `llmperf_hook/commands/<name>.py` as a click command named `command`.
`llmperf torchrun ...` / `llmperf deepspeed ...` / `llmperf python -m torch.distributed.run ...` are the
prefix forms of `llmperf run -- ...`.
"""

from __future__ import annotations

import importlib
import re
import sys
from typing import Sequence

import click

from llmperf_hook.errors import EXIT_INTERNAL, LlmperfError
from llmperf_hook.resources import pin_llmperf_home

SUBCOMMANDS: dict[str, str] = {
    "explain": "Print the resolved job and training configuration, with where each value came from.",
    "predict": "Predict step time, throughput, MFU and memory per GPU of a launch command.",
    "run": "Predict, then launch the command (exec); gates for dry-run, step-time budget and fit.",
    "tune": "Search micro-batch size, pipeline degree and more; optionally launch the best.",
    "profile": "Sample operators (or collectives) on this machine and fit a hardware profile.",
    "validate": "Compare predictions with measured runs from a CSV and print the errors.",
    "refine": "Ingest an instrumented run's actuals, refit models and calibrate the cluster.",
}

# Words that make `llmperf WORD ...` mean `llmperf run -- WORD ...`.
LAUNCHER_PREFIXES = frozenset({"torchrun", "ft_launcher", "deepspeed", "accelerate", "accelerate-launch", "python", "python3", "srun", "sbatch",
                               "mpirun", "mpiexec", "orterun", "prterun", "mpiexec.hydra"})


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in SUBCOMMANDS:
            return None
        module = importlib.import_module(f"llmperf_hook.commands.{name}")
        return module.command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # Help must not import the subcommand modules (they may pull heavier dependencies).
        with formatter.section("Commands"):
            formatter.write_dl([(n, SUBCOMMANDS[n]) for n in sorted(SUBCOMMANDS)])
        with formatter.section("Launcher prefix"):
            formatter.write_text("llmperf torchrun|deepspeed|python -m torch.distributed.run ... = llmperf run -- ...")


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="llmperf_hook")
def cli() -> None:
    """Predict how fast (and whether) a Megatron-LM or DeepSpeed training job will run, then launch it."""


def _is_launcher_word(word: str) -> bool:
    """`torchrun`, `/opt/conda/bin/deepspeed`, `python3.11`, `env` (an `env VAR=1 torchrun ...` prefix)."""
    name = word.rsplit("/", 1)[-1]
    return name in LAUNCHER_PREFIXES or name == "env" or re.fullmatch(r"python[0-9.]*", name) is not None


def _rewrite_prefix(args: list[str]) -> list[str]:
    if args and _is_launcher_word(args[0]) and args[0] not in SUBCOMMANDS:
        return ["run", "--", *args]
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = _rewrite_prefix(list(sys.argv[1:] if argv is None else argv))
    try:
        pin_llmperf_home()  # before any command changes folder or starts a child
        # standalone_mode=False: click returns (not raises) the code of a click.exceptions.Exit raised in a command.
        code = cli.main(args=args, prog_name="llmperf", standalone_mode=False)
    except LlmperfError as err:
        click.echo(f"llmperf: error: {err}", err=True)
        sys.exit(err.exit_code)
    except click.exceptions.Abort:
        sys.exit(130)
    except click.ClickException as err:
        err.show()
        sys.exit(2)
    except click.exceptions.Exit as err:
        sys.exit(err.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as err:  # noqa: BLE001 - last resort: one line, exit 1, trace only on request
        if "LLMPERF_DEBUG" in __import__("os").environ:
            raise
        click.echo(f"llmperf: internal error: {type(err).__name__}: {err} (set LLMPERF_DEBUG=1 for a traceback)", err=True)
        sys.exit(EXIT_INTERNAL)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
