"""bash's associative arrays and array elements by key or computed index, as a launch script's lookup tables use them:
`declare -A TP=([7b]=1 [70b]=8)`, `TP[13b]=2`, then `--tensor-model-parallel-size ${TP[$MODEL]}` (bash manual 6.7
Arrays: "Associative arrays are created using declare -A name"; `name[subscript]=value` assigns one element, and
`${name[subscript]}` expands it, the subscript of an indexed array being arithmetic).

bash keeps an associative array's keys in its own hash order (bash 5.2: `declare -A M=([small]=2 [big]=4 [a]=1)`
lists `small a big`), so `${M[@]}` and `${!M[@]}` of more than one element are left as written: a launch line using
them names them. A key or index only running the script gives leaves the element as written too.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from llmperf_hook.launch.shell_arithmetic import arithmetic

ASSOCIATIVE_DECLARE = re.compile(r"^\s*(?:declare|local|typeset)\s+(?:-\w+\s+)*?-\w*A")
"""`declare -A NAME`, `local -A`, `typeset -gA`: the names it declares are associative arrays."""
_ITEM = re.compile(r"\$\{(#?)([A-Za-z_][A-Za-z0-9_]*)\[((?:[^\]\\@*]|\\.)(?:[^\]\\]|\\.)*)\]\}")
"""`${NAME[KEY]}` / `${#NAME[KEY]}` with a subscript other than `@` / `*`."""
_ELEMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\[((?:[^\]\\]|\\.)+)\]=(.*)$", re.DOTALL)
"""`NAME[SUBSCRIPT]=value`: one element assigned."""
_PAIR = re.compile(r"^\[((?:[^\]\\]|\\.)+)\]=(.*)$", re.DOTALL)
"""`[KEY]=value`: a word of `declare -A M=( ... )`."""
_SAFE = re.compile(r"[\w.,:/@%+=-]*")
"""A value that needs no quoting where it is put back into the command's text."""


def declare_associative(reading: Any, words: list[str]) -> None:
    """`declare -A NAME ...`: each NAME an associative array (empty where it was none)."""
    for word in words[1:]:
        name = word.split("=", 1)[0]
        if not word.startswith(("-", "+")) and re.fullmatch(r"[A-Za-z_]\w*", name):
            reading.assoc.setdefault(name, {})
            reading.arrays.pop(name, None)
            reading.undecidable.discard(name)


def assign_pairs(reading: Any, name: str, words: list[str], append: bool) -> bool:
    """`NAME=([k]=v ...)` (`+=`: added to it) for an associative NAME; an element llmperf cannot expand, or the
    `( k v k v )` form, leaves NAME unknown. True (the assignment is read)."""
    table = dict(reading.assoc.get(name, {})) if append else {}
    for word in words:
        pair = _PAIR.match(word)
        key = _key(reading, pair.group(1)) if pair else None
        value = reading.expand(pair.group(2)) if pair else "$"
        if key is None or "$" in value:
            forget(reading, name)
            return True
        table[key] = value
    reading.assoc[name] = table
    reading.undecidable.discard(name)
    return True


def assign_element(reading: Any, word: str, uncertain: bool) -> bool:
    """`NAME[SUBSCRIPT]=value`: one element set (bash manual 6.7); an index past the end of an indexed array, a key
    llmperf cannot expand, or a command that may not run (`uncertain`) leaves NAME unknown. True when `word` is one."""
    found = _ELEMENT.match(word)
    if found is None:
        return False
    name, subscript, value = found.group(1), found.group(2), reading.expand(found.group(3))
    if uncertain or "$(" in found.group(3) or "`" in found.group(3) or "$" in value:
        forget(reading, name)
    elif name in reading.assoc:
        key = _key(reading, subscript)
        if key is None:
            forget(reading, name)
        else:
            reading.assoc[name][key] = value
    else:
        _set_index(reading, name, _index(reading, subscript), value)
    return True


def _set_index(reading: Any, name: str, index: int | None, value: str) -> None:
    """Element `index` of the indexed array NAME set (a plain variable's value is its element 0)."""
    elements = reading.arrays.get(name, [reading.env[name]] if name in reading.env else [])
    if name in reading.undecidable or index is None or not 0 <= index <= len(elements):
        forget(reading, name)  # a sparse array, or one whose elements only running the script tells
        return
    elements = elements[:index] + [value] + elements[index + 1:]
    reading.arrays[name] = elements
    reading.env.pop(name, None)


def forget(reading: Any, name: str) -> None:
    """NAME made unknown: a launch line using it names it."""
    reading.assoc.pop(name, None)
    reading.arrays.pop(name, None)
    reading.env.pop(name, None)
    reading.undecidable.add(name)


def _key(reading: Any, subscript: str) -> str | None:
    """An associative array's key: the subscript expanded, its quotes removed; None where it is not known."""
    try:
        words = shlex.split(reading.expand(subscript))
    except ValueError:
        return None
    key = " ".join(words) if words else ""
    return None if "$" in key or "`" in key else key


def _index(reading: Any, subscript: str) -> int | None:
    """An indexed array's subscript, evaluated as arithmetic (`${L[i+1]}`, `${L[$i]}`); None where it is not known."""
    value = arithmetic(reading.expand(subscript), reading.env)
    return int(value) if re.fullmatch(r"-?\d+", value) else None


def expand_items(reading: Any, text: str) -> str:
    """`text` with each `${M[KEY]}` of an associative array (`${#M[KEY]}`: its length), and each `${L[EXPR]}` of an
    indexed one whose subscript is not a plain number, replaced by the element; else left as written."""
    def item(found: re.Match[str]) -> str:
        count, name, subscript = found.groups()
        if name in reading.assoc:
            key = _key(reading, subscript)
            value = None if key is None else reading.assoc[name].get(key, "")
        elif name in reading.arrays and name not in reading.unknown_heads and not re.fullmatch(r"-?\d+", subscript):
            index = _index(reading, subscript)
            elements = reading.arrays[name]
            value = None if index is None or index < -len(elements) else \
                (elements[index] if index < len(elements) else "")
        else:
            return found.group(0)
        if value is None:
            return found.group(0)
        return str(len(value)) if count else value if _SAFE.fullmatch(value) else found.group(0)

    return _ITEM.sub(item, text) if "[" in text else text


def associative_values(reading: Any, name: str, keys: bool) -> list[str] | None:
    """`${M[@]}` (`${!M[@]}` with `keys`) of an associative array: its one element (or none); None (left as written)
    for more, whose order is bash's hash order."""
    table = reading.assoc[name]
    if len(table) > 1:
        return None
    return list(table) if keys else list(table.values())
