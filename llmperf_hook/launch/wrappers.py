"""Commands that only wrap the launch: `nohup`, `exec`, `time`, `nice -n 5`, `nsys profile -o out`, `stdbuf -oL`, `numactl --interleave=all`,
`taskset -c 0-7`, `uv run`, `poetry run`, `conda run -n ENV`, `apptainer exec IMAGE` / `singularity exec IMAGE`,
`ssh [options] HOST` (the command runs on that node: remote_command reads it as the remote shell does).
They start the command after their own options unchanged, so the launch is parsed from there; and the options of
an `env` prefix (`env -u NAME`, `env -i`, `env -C DIR`).
"""

from __future__ import annotations

import os
from typing import Sequence

# wrapper -> (options that take a separate value, words that follow the wrapper's name before its options)
_WRAPPERS: dict[str, tuple[frozenset[str], tuple[str, ...]]] = {
    "nohup": (frozenset(), ()),
    "command": (frozenset(), ()),  # bash builtin: `command [-p] CMD` runs CMD (not -v / -V, which only name it)
    "exec": (frozenset({"-a"}), ()),  # bash builtin: exec [-cl] [-a NAME] COMMAND replaces the shell with COMMAND
    "time": (frozenset({"-f", "--format", "-o", "--output"}), ()),
    "nice": (frozenset({"-n", "--adjustment"}), ()),
    "ionice": (frozenset({"-c", "--class", "-n", "--classdata", "-p", "--pid"}), ()),
    "stdbuf": (frozenset({"-i", "-o", "-e", "--input", "--output", "--error"}), ()),
    "numactl": (frozenset({"-N", "-m", "-C", "-i", "-p", "--cpunodebind", "--membind", "--physcpubind", "--interleave",
                           "--preferred"}), ()),
    "uv": (frozenset({"--with", "--python", "-p", "--project", "--directory", "--env-file", "--extra", "--group"}), ("run",)),
    "poetry": (frozenset(), ("run",)),
    "pipenv": (frozenset(), ("run",)),
    "conda": (frozenset({"-n", "--name", "-p", "--prefix", "--cwd"}), ("run",)),
    "mamba": (frozenset({"-n", "--name", "-p", "--prefix", "--cwd"}), ("run",)),
    "micromamba": (frozenset({"-n", "--name", "-p", "--prefix", "--cwd"}), ("run",)),
}
_CONTAINERS = frozenset({"apptainer", "singularity"})
_CONTAINER_VALUED = frozenset({"-B", "--bind", "--env", "--env-file", "-H", "--home", "--pwd", "-W", "--workdir",
                               "--overlay", "-o", "--mount", "--network", "--security"})
ENV_VALUED = frozenset({"-u", "--unset", "-C", "--chdir"})
_SSH_VALUED = frozenset({"-B", "-b", "-c", "-D", "-E", "-e", "-F", "-I", "-i", "-J", "-L", "-l", "-m", "-O", "-o", "-p",
                         "-Q", "-R", "-S", "-W", "-w"})
"""ssh(1)'s options that take a value (OpenSSH: `ssh [-46AaCfGgKkMNnqsTtVvXxYy] [-B bind_interface] ... destination
[command]`)."""


def _skip_options(words: Sequence[str], j: int, valued: frozenset[str]) -> int:
    while j < len(words) and words[j].startswith("-") and words[j] != "--":
        j += 2 if words[j] in valued else 1
    return j + (j < len(words) and words[j] == "--")


def _taskset(words: Sequence[str], i: int) -> int:
    """`taskset MASK CMD` or `taskset -c LIST CMD` (options -a, -c, -p)."""
    j = i + 1
    while j < len(words) and words[j].startswith("-"):
        j += 1
    return j + 1  # the mask or CPU list


def _nsys(words: Sequence[str], i: int) -> int | None:
    """`nsys profile|launch [opts] CMD`: Nsight Systems options take a value (`-o out`, `--trace=cuda,nvtx`)."""
    if i + 1 >= len(words) or words[i + 1] not in ("profile", "launch"):
        return None
    j = i + 2
    while j < len(words) and words[j].startswith("-"):
        j += 1 if "=" in words[j] else 2
    return j


def wrapped_program(words: Sequence[str], i: int) -> int | None:
    """Index of the command a wrapper at words[i] runs, or None when words[i] is not a known wrapper."""
    head = os.path.basename(words[i])
    if head == "nsys":
        return _nsys(words, i)
    if head == "taskset":
        return _taskset(words, i)
    if head == "ssh":  # `ssh -q $node python -m torch.distributed.launch ...`: the command runs on that node
        j = _skip_options(words, i + 1, _SSH_VALUED)
        terminated = j < len(words) and words[j - 1] == "--"
        # ssh.c main parses options after the destination too (`goto again`: `ssh node -p 22 CMD`), up to a `--`
        j = j + 1 if terminated else _skip_options(words, j + 1, _SSH_VALUED)
        return j if j < len(words) else None  # no command: an interactive login
    if head in _CONTAINERS and i + 1 < len(words) and words[i + 1] in ("exec", "run"):
        return _skip_options(words, i + 2, _CONTAINER_VALUED) + 1  # + the image
    if head not in _WRAPPERS or (head == "command" and i + 1 < len(words) and words[i + 1] in ("-v", "-V")):
        return None
    valued, subcommand = _WRAPPERS[head]
    j = i + 1
    if subcommand:
        j = _skip_options(words, j, valued)  # `uv --project X run`
        if j >= len(words) or words[j] not in subcommand:
            return None
        j += 1
    return _skip_options(words, j, valued)


def remote_command(words: Sequence[str], i: int) -> str | None:
    """For `ssh [options] DESTINATION COMMAND...` at words[i]: the command string the remote host runs, else None.
    ssh joins its command words with single blanks into one string (OpenSSH ssh.c main: `sshbuf_putf(command,
    "%s%s", i ? " " : "", av[i])`) and sshd runs it as `$SHELL -c STRING` with the user's login shell (session.c
    do_child: argv = shell, "-c", command). So `ssh n1 "cd /w && torchrun ..."` runs two commands there, and a quoted
    word with blanks locally is split again by the remote shell."""
    if os.path.basename(words[i]) != "ssh":
        return None
    j = wrapped_program(words, i)
    return " ".join(words[j:]) if j is not None and j < len(words) else None


def unwrap(words: Sequence[str], i: int, through_ssh: bool = True) -> int:
    """Skip any chain of wrappers at words[i] (`nohup numactl -N 0 torchrun ...`): the index of the real program;
    `through_ssh` False stops at an `ssh` (whose command the caller reads as the remote shell does)."""
    while i < len(words):
        if not through_ssh and os.path.basename(words[i]) == "ssh":
            return i
        j = wrapped_program(words, i)
        if j is None or j >= len(words):
            return i
        i = j
    return i


def env_options(words: Sequence[str], i: int, env: dict[str, str]) -> int:
    """Past `env` at words[i] and its options, applied to `env` as coreutils env(1) applies them before it runs the
    command: `-i` / `--ignore-environment` / `-` start from an empty environment, `-u NAME` / `--unset=NAME` remove
    NAME (`env -u CUDA_DEVICE_MAX_CONNECTIONS torchrun ...`), `-C DIR` takes a value; the index of the next word."""
    j = i + 1
    while j < len(words) and words[j].startswith("-") and words[j] != "--":
        word = words[j]
        if word in ("-i", "--ignore-environment", "-"):
            env.clear()
        elif word in ("-u", "--unset") and j + 1 < len(words):
            env.pop(words[j + 1], None)
        elif word.startswith(("--unset=", "-u")):
            env.pop(word.removeprefix("--unset=") if word.startswith("--") else word[2:], None)
        j += 2 if word in ENV_VALUED else 1
    return j + (j < len(words) and words[j] == "--")
