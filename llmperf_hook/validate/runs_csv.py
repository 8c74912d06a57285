"""Read a validation CSV (edge: the file) and build `MeasuredRun`s from its rows (the schema's rules).

The schema and what a blank cell means are documented in `measured_run.py`; a missing required column or a
row that contradicts itself (tp * pp * cp * dp != num_gpus) is a clear `UsageError`, never a traceback.
"""

from __future__ import annotations

import csv
import difflib
import io
import re
from dataclasses import replace
from pathlib import Path
from typing import Mapping, Sequence

from llmperf_hook.errors import LlmperfError, UsageError
from llmperf_hook.validate.cell_units import COLUMN_UNITS
from llmperf_hook.validate.measured_run import (
    CLUSTER_COLUMN_SETS,
    HEAD_DIM_DEFAULT,
    OPTIONAL_COLUMNS,
    POSITION_EMBEDDING_CHOICES,
    RECORD_COLUMNS,
    REQUIRED_COLUMNS,
    MeasuredRun,
    parse_extra_args,
    parse_float,
    parse_framework,
    parse_count,
    parse_int,
    parse_precision,
    parse_recompute,
    parse_choice,
    parse_switch,
    parse_zero,
)
from llmperf_hook.validate.scoring import RowResult

MEGATRON_PAPERS_VOCAB = 51200
"""GPT-2 BPE vocabulary padded as in Narayanan et al. 2021 and Korthikanti et al. 2022 (their tables use 51,200)."""


def read_runs_csv(path: str | Path) -> list[dict[str, str]]:
    """The CSV's rows as dicts, after checking the columns the schema requires."""
    text = re.sub(r"^(?:[ \t]*\r?\n)+", "", _csv_text(path))
    where = csv_name(path)
    if not text.strip():
        raise UsageError(f"validation CSV {where!r} is empty; write the header ({', '.join(REQUIRED_COLUMNS)}, "
                         "cluster, ...) and one row per measured run.")
    header = text.split("\n", 1)[0]
    # skipinitialspace: a hand-written "a, b, c" header or `1, "1,024"` row reads as "a,b,c" does
    reader = csv.DictReader(io.StringIO(text, newline=""), delimiter=_delimiter(header, where),
                            skipinitialspace=True)
    names = [(name or "").strip() for name in reader.fieldnames or []]
    _refuse_bit_rate_names(names, where)
    columns = [schema_spelling(name) for name in names]
    check_columns(columns, where)
    reader.fieldnames = columns
    return [dict(row) for row in reader]


STDIN_NAME = "-"
"""The FILE.csv that reads standard input (`export_runs | llmperf validate -`), as cat, csv tools and pandas take it."""


def csv_name(path: str | Path) -> str:
    """The CSV as messages name it: its path, or "standard input" for `-`."""
    return "standard input" if str(path) == STDIN_NAME else str(path)


def _csv_text(path: str | Path) -> str:
    """The file's text (or standard input's, for `-`), UTF-8 with or without Excel's byte-order mark (-sig)."""
    if str(path) == STDIN_NAME:
        import sys

        return sys.stdin.buffer.read().decode("utf-8-sig")
    file = Path(path)
    if file.is_dir():
        raise UsageError(f"validation CSV {str(path)!r} is a directory; pass the path of a CSV file.")
    if not file.is_file():
        raise UsageError(f"validation CSV {str(path)!r} does not exist (or is not a file); pass the path of a CSV, "
                         f"or `-` to read it from standard input.")
    return file.read_text(encoding="utf-8-sig")


_SCHEMA_COLUMNS = {c.lower(): c for c in (*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS)}


def schema_spelling(column: str) -> str:
    """A header cell as the schema spells it when it names a schema column in other letter case (`Num_Layers`,
    `TP`, `inter_node_bandwidth_gbps`: spreadsheets and SQL exports change case); other names unchanged."""
    return _SCHEMA_COLUMNS.get(column.lower(), column)


def _refuse_bit_rate_names(names: Sequence[str], where: str) -> None:
    """`inter_node_bandwidth_Gbps` says gigabits: read in any letter case as `inter_node_bandwidth_GBps` (gigabytes),
    its 200 (HDR InfiniBand's Gb/s) was 200 GB/s per GPU, 8x the bandwidth. A name that loses its case in an export
    (`..._gbps`, `..._GBPS`) still reads as the schema's column."""
    for name in names:
        column = _SCHEMA_COLUMNS.get(name.lower(), "")
        if column.endswith("_GBps") and name[-4:-2] == "Gb":
            raise UsageError(f"{where}: column `{name}` is in Gb/s (bits); the schema's `{column}` is in GB/s (bytes) "
                             f"per GPU. Divide its cells by 8 and name the column `{column}`.")


def unknown_column_warnings(columns: Sequence[str]) -> list[str]:
    """One warning per header cell that is close to a schema column (a misspelling: its cells would be ignored and
    the blank rule applied, `micro_batch` -> micro-batch size 1), and one listing the other unknown columns."""
    known = (*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS, *RECORD_COLUMNS)
    unknown = [c for c in columns if c and c not in known]
    warnings, unrelated = [], []
    for column in unknown:
        close = difflib.get_close_matches(column.lower(), known, n=1, cutoff=0.75)
        if close and close[0] not in columns:
            fix = ("It is in another unit: convert its cells to the unit the schema's name ends in, then rename it"
                   if _other_unit(column, close[0]) else "Rename the column")
            warnings.append(f"column `{column}` is not in the schema and is ignored; did you mean `{close[0]}`? "
                            f"{fix} (see `llmperf validate --help`).")
        else:
            unrelated.append(column)
    if unrelated:
        warnings.append(f"column(s) {', '.join(f'`{c}`' for c in unrelated)} are not in the schema and are ignored "
                        "(see `llmperf validate --help` for the columns read).")
    return warnings


def _delimiter(header: str, where: str) -> str:
    """Comma, or tab for a header with tabs and no comma (a TSV export). A semicolon-separated header (the export
    of spreadsheets set to a decimal comma) is refused: its cells may hold 4,25 meaning 4.25."""
    if "," in header or not header.strip():
        return ","
    if "\t" in header:
        return "\t"
    if ";" in header:
        raise UsageError(f"{where}: the header is separated by semicolons, not commas (a spreadsheet export with a "
                         "decimal comma?). Export the file as a comma-separated CSV with decimal points.")
    return ","


def check_columns(columns: Sequence[str], where: str) -> None:
    repeated = sorted({c for c in columns if columns.count(c) > 1})
    if repeated:
        # csv.DictReader would keep only the last cell of a repeated name, silently.
        raise UsageError(f"{where}: column(s) {', '.join(map(repr, repeated))} appear more than once in the header, so "
                         "it is ambiguous which cell a row means. Rename or drop the repeated column(s).")
    missing = [c + _looks_like(c, columns) for c in REQUIRED_COLUMNS if c not in columns]
    has_cluster = any(all(c in columns for c in group) for group in CLUSTER_COLUMN_SETS)
    if not has_cluster:
        missing.append("cluster (or gpu_type + gpus_per_node)")
    if missing:
        raise UsageError(
            f"{where}: missing column(s) {', '.join(missing)}. A validation CSV needs {', '.join(REQUIRED_COLUMNS)} "
            "and a cluster (a `cluster` column naming a preset or YAML file, or `gpu_type` and `gpus_per_node`); "
            "see `llmperf validate --help` for every optional column. Add the missing column(s)."
        )


def _looks_like(column: str, header: Sequence[str]) -> str:
    """" (the header has `num_layer`: a misspelling?)" when a header cell is close to the missing `column`."""
    lowered = [c.lower() for c in header]
    close = difflib.get_close_matches(column, lowered, n=1, cutoff=0.75)
    if not close:
        return ""
    cell = header[lowered.index(close[0])]
    if _other_unit(cell, column):
        return (f" (the header has `{cell}`: the schema's column is in the unit its name ends in; convert the cells "
                f"and name the column `{column}`)")
    return f" (the header has `{cell}`: a misspelling?)"


def _other_unit(name: str, column: str) -> bool:
    """`iteration_time_ms` for `iteration_time_s`, `intra_node_bandwidth_MBps` for `..._GBps`: the schema's column
    in another unit, whose cells renamed alone would be read 1000x off."""
    return column in COLUMN_UNITS and name.lower().rsplit("_", 1)[0] == column.lower().rsplit("_", 1)[0]


def build_measured_run(raw: Mapping[str, str], line_no: int) -> MeasuredRun:
    """One CSV row -> MeasuredRun (line_no is the 1-based data row, used when `row_id` is absent)."""
    row_id = (raw.get("row_id") or "").strip() or str(line_no)
    where = f"row {row_id}"
    notes: list[str] = []
    shape = _model_shape(raw, where, notes)
    layout = _parallel_layout(raw, where, notes)
    zero_stage, dist_opt = parse_zero(raw.get("zero_stage_or_dist_opt") or "", where)
    precision, precision_note = parse_precision(raw.get("precision") or "")
    if precision_note:
        notes.append(precision_note)
    measured = parse_float(raw, "iteration_time_s", where)
    if measured is None or measured <= 0:
        raise UsageError(f"{where}: `iteration_time_s` = {raw.get('iteration_time_s')!r}; a measured step time > 0 is required.")
    return MeasuredRun(
        row_id=row_id,
        source_id=(raw.get("source_id") or "").strip() or "all",
        source=(raw.get("source") or "").strip(),
        model=(raw.get("model") or "").strip(),
        **shape,
        **layout,
        recompute=parse_recompute(raw.get("recompute") or "", where),
        zero_stage=zero_stage,
        distributed_optimizer=dist_opt,
        precision=precision,
        framework=parse_framework(raw.get("framework") or "", where),
        extra_args=parse_extra_args(raw),
        gpu_type=(raw.get("gpu_type") or "").strip(),
        gpus_per_node=parse_count(raw, "gpus_per_node", where) or 0,
        cluster=(raw.get("cluster") or "").strip(),
        inter_node_network=(raw.get("inter_node_network") or "").strip(),
        inter_node_bandwidth_GBps=parse_float(raw, "inter_node_bandwidth_GBps", where),
        intra_node_bandwidth_GBps=parse_float(raw, "intra_node_bandwidth_GBps", where),
        swiglu=parse_switch(raw, "swiglu", where),
        normalization=parse_choice(raw, "normalization", where, ("LayerNorm", "RMSNorm")),
        position_embedding=parse_choice(raw, "position_embedding", where, POSITION_EMBEDDING_CHOICES),
        iteration_time_s=measured,
        assumptions=tuple(notes),
        framework_text=(raw.get("framework") or "").strip(),
        source_location=(raw.get("source_location") or "").strip(),
    )


def _model_shape(raw: Mapping[str, str], where: str, notes: list[str]) -> dict[str, int]:
    hidden = parse_int(raw, "hidden_size", where)
    heads = parse_count(raw, "num_attention_heads", where) or 0
    if heads == 0:
        if hidden % HEAD_DIM_DEFAULT:
            raise UsageError(f"{where}: `num_attention_heads` is blank and hidden_size {hidden} is not a multiple "
                             f"of {HEAD_DIM_DEFAULT}, so no head count can be assumed; fill in the column.")
        heads = hidden // HEAD_DIM_DEFAULT
        notes.append(f"num_attention_heads blank: {heads} assumed (head dim {HEAD_DIM_DEFAULT})")
    vocab = parse_count(raw, "vocab_size", where) or 0
    if vocab == 0:
        vocab = MEGATRON_PAPERS_VOCAB
        notes.append(f"vocab_size blank: {vocab} assumed")
    return {
        "num_layers": parse_int(raw, "num_layers", where),
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_query_groups": parse_count(raw, "num_query_groups", where) or heads,
        "ffn_hidden_size": parse_count(raw, "ffn_hidden_size", where) or 4 * hidden,
        "vocab_size": vocab,
        "seq_length": parse_int(raw, "seq_length", where),
    }


def _parallel_layout(raw: Mapping[str, str], where: str, notes: list[str]) -> dict[str, object]:
    tp, pp = parse_int(raw, "tp", where), parse_int(raw, "pp", where)
    cp, num_gpus = parse_int(raw, "cp", where, default=1), parse_int(raw, "num_gpus", where)
    zero = [f"{name} = 0" for name, value in (("tp", tp), ("pp", pp), ("cp", cp), ("num_gpus", num_gpus)) if value < 1]
    if zero:
        raise UsageError(f"{where}: {', '.join(zero)}; parallel degrees and the GPU count are at least 1 (blank cp = 1). "
                         "Fix the cell(s).")
    if num_gpus % (tp * pp * cp):
        raise UsageError(f"{where}: num_gpus {num_gpus} is not a multiple of tp*pp*cp = {tp}*{pp}*{cp}; "
                         "fix the parallel degrees or the GPU count.")
    dp = parse_int(raw, "dp", where, default=num_gpus // (tp * pp * cp))
    if tp * pp * cp * dp != num_gpus:
        raise UsageError(f"{where}: tp*pp*cp*dp = {tp}*{pp}*{cp}*{dp} = {tp * pp * cp * dp} but num_gpus is "
                         f"{num_gpus}; the degrees must multiply to the GPU count.")
    mbs = parse_count(raw, "micro_batch_size", where) or 0
    if mbs == 0:
        mbs = 1
        notes.append("micro_batch_size blank: 1 assumed")
    return {
        "micro_batch_size": mbs,
        "global_batch_size": parse_int(raw, "global_batch_size", where),
        "tp": tp, "pp": pp, "cp": cp, "dp": dp, "num_gpus": num_gpus,
        "vpp": parse_count(raw, "vpp", where) or 1,
        "ep": parse_count(raw, "ep", where) or 1,
        "sequence_parallel": parse_switch(raw, "sequence_parallel", where),
    }


def build_measured_runs(rows: Sequence[Mapping[str, str]], base_dir: Path | None = None) -> list[MeasuredRun]:
    """All rows; a `cluster` cell naming a YAML file beside the CSV (`base_dir`) is resolved against it."""
    runs = [build_measured_run(raw, i + 1) for i, raw in enumerate(rows)]
    if base_dir is None:
        return runs
    return [_resolve_cluster_path(run, base_dir) for run in runs]


def build_runs_or_failures(rows: Sequence[Mapping[str, str]], base_dir: Path | None = None) -> list[MeasuredRun | RowResult]:
    """Like `build_measured_runs`, but a row that breaks the schema's or the framework's rules (tp*pp*cp not
    dividing num_gpus, no measured time, ...) becomes a failed RowResult in its place: it is reported on its
    row and the other rows are still predicted (one bad row used to abort the whole validation)."""
    out: list[MeasuredRun | RowResult] = []
    first_line: dict[str, int] = {}
    for i, raw in enumerate(rows):
        if all(not (v or "").strip() for k, v in raw.items() if k is not None) and None not in raw:
            continue  # a line of blanks or commas only: no run
        ragged = _ragged(raw, i + 1)
        if ragged:
            out.append(failed_row(raw, i + 1, ragged))
            continue
        row_id = (raw.get("row_id") or "").strip() or str(i + 1)
        if row_id in first_line:  # the report, --source and --write-batch name rows by row_id
            out.append(failed_row(raw, i + 1, f"row_id {row_id!r} (data row {i + 1}) repeats the row_id of data row "
                                              f"{first_line[row_id]}, so the report could not tell them apart; only "
                                              f"the first is scored. Give each row its own row_id."))
            continue
        first_line[row_id] = i + 1
        try:
            run = build_measured_run(raw, i + 1)
        except LlmperfError as err:
            out.append(failed_row(raw, i + 1, str(err)))
            continue
        out.append(run if base_dir is None else _resolve_cluster_path(run, base_dir))
    return out


def _ragged(raw: Mapping[str | None, object], line_no: int) -> str:
    """csv.DictReader puts a row's extra cells under None and fills missing ones with None: either way its cells
    no longer line up with the header (an unquoted comma inside a cell, or a cut line)."""
    extra = raw.get(None)
    missing = [k for k, v in raw.items() if k is not None and v is None]
    if not extra and not missing:
        return ""
    what = (f"{len(extra)} cell(s) more than the header" if extra else  # type: ignore[arg-type]
            f"{len(missing)} cell(s) fewer than the header (from `{missing[0]}` on)")
    return (f"data row {line_no} has {what}, so its cells do not line up with the columns (a cell holding a comma "
            f"must be quoted, \"like, this\"). Fix the row.")


def failed_row(raw: Mapping[str, str], line_no: int, error: str) -> RowResult:
    """A row that could not be read as a run, with what its cells say (for the table)."""
    def cell(name: str) -> str:
        return (raw.get(name) or "").strip()

    try:
        measured: float | None = float(cell("iteration_time_s"))
    except ValueError:
        measured = None
    if measured is not None and not 0 < measured < float("inf"):  # nan / inf / <= 0: not a measurement
        measured = None
    layout = f"tp{cell('tp') or '?'} pp{cell('pp') or '?'} ({cell('num_gpus') or '?'} GPUs)"
    return RowResult(row_id=cell("row_id") or str(line_no), source_id=cell("source_id") or "all",
                     source=cell("source"), model=cell("model"), layout=layout, measured_s=measured,
                     predicted_s=None, cluster="", argv=(), error=error)


def _resolve_cluster_path(run: MeasuredRun, base_dir: Path) -> MeasuredRun:
    """A relative cluster YAML path is read beside the CSV first, as --help and docs/validate.md say (and as
    `predict --batch` reads its file's paths); else from the working directory (a file of the same name there won
    over the one beside the CSV)."""
    if not run.cluster.endswith((".yaml", ".yml")) or Path(run.cluster).is_absolute():
        return run
    beside = base_dir / run.cluster
    return replace(run, cluster=str(beside)) if beside.is_file() else run
