"""Find a Python pickle in a folder of fitted models (op profiles: profile_io.py; comm models: comm_model.py).

Fitted models are data (DESIGN.md: JSON and LightGBM text, never pickles), because they are shared between
users and clusters: a pickle runs arbitrary code when loaded, so one found beside a fitted model means the
folder was not written by llmperf, or was tampered with, and the folder is refused as a whole. llmperf itself
never loads a pickle; the check keeps a planted one from looking like part of a trusted profile.

Recognised by name (pickle, joblib, dill and torch.save suffixes) or by content: pickle protocols 2-5 start
with the PROTO opcode 0x80 and the protocol number (Python's pickletools, `proto`); torch.save writes a zip
archive holding `data.pkl`.
"""

from __future__ import annotations

from pathlib import Path

PICKLE_SUFFIXES = (".pkl", ".pickle", ".joblib", ".dill", ".pt", ".pth", ".ckpt", ".sav")
"""File names of Python pickles (joblib, dill and torch.save write pickles too)."""
MAX_FILES_CHECKED = 1000
"""Files of a folder looked at (a fitted model folder holds 1 to ~25; a far larger one is checked in part)."""


def pickle_kind(path: Path) -> str | None:
    """Why the file `path` is a pickle (its name, or its first bytes), or None."""
    if path.name.lower().endswith(PICKLE_SUFFIXES):
        return f"named {path.suffix}"
    try:
        with open(path, "rb") as handle:
            head = handle.read(4)
        if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
            return f"pickle protocol {head[1]} data"
        if head == b"PK\x03\x04":
            import zipfile

            with zipfile.ZipFile(path) as archive:
                if any(n.lower().endswith(PICKLE_SUFFIXES) for n in archive.namelist()):
                    return "a zip archive holding a pickle (torch.save)"
    except Exception:  # noqa: BLE001 - unreadable, or a damaged zip (BadZipFile): no pickle anyone could load
        return None
    return None


def find_pickle(directory: Path) -> tuple[Path, str] | None:
    """(the first pickle under `directory`, why it is one), or None; files in sorted order, subfolders included."""
    for num, path in enumerate(sorted(directory.rglob("*"))):
        if num >= MAX_FILES_CHECKED:
            return None
        kind = path.is_file() and pickle_kind(path)
        if kind:
            return path, kind
    return None


def planted_pickle_reason(directory: Path, contents: str) -> str | None:
    """Why the fitted-model folder `directory` is refused (the reason both readers print), or None when it holds no
    pickle. `contents` names what the folder may hold ("profile.json and LightGBM text dumps")."""
    planted = find_pickle(directory)
    if planted is None:
        return None
    path, kind = planted
    return (f"its folder holds {path.relative_to(directory)}, a Python pickle ({kind}). Fitted models are data only "
            f"({contents}) and llmperf never loads a pickle, which can run any code when loaded; one beside them "
            f"means the folder was not written by llmperf or was tampered with. Remove {path.name} if you trust the "
            f"rest of the folder")
