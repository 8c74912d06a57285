"""The files a launch script writes before its launch line, worked out without running it: `sed TEMPLATE | sed ...
> ds.json` (launch/sed_templates.py), `sed -i` on a file, `cp TEMPLATE ds.json`, and `cat <<EOF | tee ds.json`. The
text is what the script wrote to the file before, else the disk's; one only running the command gives is recorded as
written by that command (ScriptFile.command), so the launch names it instead of reading a stale file.
Here-documents written by `cat > FILE <<EOF` / `tee FILE <<EOF` are read with the command (batch_script.py)."""

from __future__ import annotations

import os

from llmperf_hook.launch.parsed_job import ScriptFile
from llmperf_hook.launch.sed_templates import in_place_files, parse_sed, sed_output, substitute
from llmperf_hook.launch.shell_conditions import Conditions
from llmperf_hook.launch.shell_script import (Heredoc, ScriptLine, protect_literal_dollars, restore_dollars,
                                              shell_split, split_redirections, strip_redirections)


_PLAIN_CP_OPTIONS = frozenset(("-f", "--force", "-p", "--preserve", "-v", "--verbose", "--"))
"""cp options that leave the copy's text the source's; with any other (`-t DIR`, `-u`, `-n`, `-s`) the copy is
recorded as written by the command, so the launch does not read a stale file of that name."""


class FileWrites:
    """The file-writing commands of batch_script._Reading (a mixin after ShellVariables, whose expand and
    here_document these stubs stand for)."""

    files: dict[str, ScriptFile]
    conditions: Conditions
    launches: list
    path: str
    cwd: str

    def expand(self, text: str, record: bool = True) -> str: ...

    def here_document(self, heredoc: Heredoc) -> str: ...

    def writes_files(self, line: ScriptLine, pipeline: list[str]) -> None:
        """The files the pipeline writes, where bash surely runs it before the launch."""
        if self.launches or self.conditions.uncertain() or not self.conditions.running():
            return
        self.sed_template(line, pipeline)
        self.piped_heredoc(line, pipeline)
        self.copied_file(line, pipeline)

    def sed_template(self, line: ScriptLine, pipeline: list[str]) -> None:
        """`sed "s/GBSIZE/$GBS/" TEMPLATE | sed ... > ds_config.json` (launch/sed_templates.py): the file it writes,
        from the template the script wrote or the one on disk, in place of a file only running the command gives."""
        if ">>" in pipeline[-1] or any(command.split()[:1] != ["sed"] for command in pipeline):
            return
        try:
            split = [strip_redirections(shell_split(protect_literal_dollars(command))) for command in pipeline]
        except ValueError:
            return
        words = [[restore_dollars(self.expand(word, record=False)) for word in command] for command, _ in split]
        edited = in_place_files(words[0]) if len(words) == 1 else []
        if edited:  # `sed -i "s/MBSIZE/2/" ds.json`: each file rewritten where it is
            edit, origin = parse_sed(words[0]), f"{self.path} line {line.number}"
            for name in edited:
                old = self.template_text(name) if edit is not None else None
                self.files[os.path.normpath(name)] = \
                    ScriptFile("", origin, command=" ".join(words[0])[:80]) if edit is None or old is None else \
                    ScriptFile(substitute(edit.substitutions, old), f"{origin} (sed -i)")
            return
        text = sed_output(words, self.template_text)
        if text is not None and split[-1][1]:
            target = os.path.normpath(self.expand(split[-1][1][-1], record=False))
            self.files[target] = ScriptFile(text, f"{self.path} line {line.number} (sed on {words[0][-1]})")

    def copied_file(self, line: ScriptLine, pipeline: list[str]) -> None:
        """`cp TEMPLATE ds.json` (into a folder: its own name there): the copy has the text the script wrote to
        TEMPLATE, else the disk's, so a later `sed -i` on it, or the launch, reads that."""
        if len(pipeline) != 1 or not pipeline[0].lstrip().startswith("cp "):
            return
        try:
            words = [restore_dollars(self.expand(word, record=False))
                     for word in shell_split(protect_literal_dollars(pipeline[0]))]
        except ValueError:
            return
        operands = [word for word in words[1:] if not word.startswith("-")]
        if len(operands) != 2:
            return
        source, target = operands
        if os.path.isdir(os.path.join(self.cwd, target)) or target.endswith("/"):
            target = os.path.join(target, os.path.basename(source))
        plain = all(word in _PLAIN_CP_OPTIONS for word in words[1:] if word.startswith("-"))
        text, origin = self.template_text(source) if plain else None, f"{self.path} line {line.number}"
        self.files[os.path.normpath(target)] = ScriptFile(text, f"{origin} (cp {source})") if text is not None else \
            ScriptFile("", origin, command=" ".join(words)[:80])

    def piped_heredoc(self, line: ScriptLine, pipeline: list[str]) -> None:
        """`cat <<EOF | tee ds.json`: cat gives the here-document's text to the pipe, and each `tee FILE` after it
        writes what it reads and passes it on (tee -a appends to a file llmperf does not have: left unknown)."""
        if len(pipeline) < 2 or line.heredoc is None:
            return
        try:
            commands = [split_redirections(shell_split(protect_literal_dollars(command))) for command in pipeline]
        except ValueError:
            return
        (first, redirections), origin = commands[0], f"{self.path} line {line.heredoc.first_line}"
        if first != ["cat"] or [r.operator for r in redirections] not in (["<<"], ["<<-"]):
            return
        text = self.here_document(line.heredoc)
        for words, _ in commands[1:]:
            if not words or words[0] != "tee" or any(word.startswith("-") for word in words[1:]):
                return
            for target in words[1:]:
                self.files[os.path.normpath(self.expand(target, record=False))] = ScriptFile(
                    text, f"{origin} (the here-document of `{line.text.strip()[:60]}`)")

    def template_text(self, name: str) -> str | None:
        """The text of a file the script reads (`name` from where it is): what it wrote there, else the disk's."""
        written = self.files.get(os.path.normpath(name))
        if written is not None:
            return None if written.command else written.text
        try:
            with open(os.path.join(self.cwd, name), encoding="utf-8") as handle:
                return handle.read()
        except OSError:
            return None
