"""bash's associative arrays and array elements by key or computed index, as a launch script's lookup tables use them:
`declare -A TP=([7b]=1 [70b]=8)`, `TP[13b]=2`, then `--tensor-model-parallel-size ${TP[$MODEL]}` (bash manual 6.7
Arrays: "Associative arrays are created using declare -A name"; `name[subscript]=value` assigns one element, and
`${name[subscript]}` expands it, the subscript of an indexed array being arithmetic).

bash keeps an associative array's keys in its own hash order (bash 5.2: `declare -A M=([small]=2 [big]=4 [a]=1)`
lists `small a big`), which `${M[@]}` and `${!M[@]}` follow (hash_order). A key or index only running the script gives
leaves the element as written.

An indexed array is held as a list by index, None where no element is set (`A=([0]=a [5]=b)`, `unset 'A[1]'`: bash's
indexed arrays are sparse, manual 6.7), no unset slot at its end.
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
_ELEMENT = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\[((?:[^\]\\]|\\.)+)\](\+?)=(.*)$", re.DOTALL)
"""`NAME[SUBSCRIPT]=value`: one element assigned (`+=`: appended to, bash manual 3.4)."""
_PAIR = re.compile(r"^\[((?:[^\]\\]|\\.)+)\]=(.*)$", re.DOTALL)
"""`[KEY]=value`: a word of `declare -A M=( ... )`."""
_SAFE = re.compile(r"[\w.,:/@%+=-]*")
"""A value that needs no quoting where it is put back into the command's text."""


def declare_associative(reading: Any, words: list[str]) -> None:
    """`declare -A NAME ...`: each NAME an associative array (empty where it was none), but an indexed one outside a
    function, which stays (converts_indexed)."""
    for word in words[1:]:
        name = word.split("=", 1)[0]
        if not word.startswith(("-", "+")) and re.fullmatch(r"[A-Za-z_]\w*", name) and \
                not converts_indexed(reading, name):
            reading.assoc.setdefault(name, {})
            reading.arrays.pop(name, None)
            reading.undecidable.discard(name)


def converts_indexed(reading: Any, name: str) -> bool:
    """Whether `declare -A NAME` would turn the script's indexed array NAME associative: bash refuses ('cannot convert
    indexed to associative array', the declaration fails and NAME stays; bash 5.2.15 run). In a function it declares
    the function's own NAME, which llmperf does not keep apart, so NAME is taken as declared there."""
    return name in reading.arrays and not reading.frames


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
    name, subscript, append, written = found.groups()
    value = reading.expand(written)
    if uncertain or "$(" in written or "`" in written or "$" in value:
        forget(reading, name)
    elif name in reading.assoc:
        key = _key(reading, subscript)
        if key is None:
            forget(reading, name)
        else:
            reading.assoc[name][key] = reading.assoc[name].get(key, "") + value if append else value
    else:
        _set_index(reading, name, index_of(reading, subscript), value, bool(append))
    return True


def _set_index(reading: Any, name: str, index: int | None, value: str, append: bool = False) -> None:
    """Element `index` of the indexed array NAME set (`append`: appended to; a plain variable's value is its element
    0; `A[-1]=x`, the highest index)."""
    elements = reading.arrays.get(name, [reading.env[name]] if name in reading.env else [])
    index = index + len(elements) if index is not None and index < 0 else index
    if append and index is not None and 0 <= index < len(elements):
        value = (elements[index] or "") + value
    slots = None if name in reading.undecidable or index is None or index < 0 else placed_at(elements, index, value)
    if slots is None:  # elements only running the script tells
        forget(reading, name)
        return
    reading.arrays[name] = slots
    reading.env.pop(name, None)


MOST_SLOTS = 4096
"""The highest index + 1 an indexed array is followed to (`A[100000]=x` leaves A unknown): it is held as a list by
index, None where no element is set, so that each expansion stays linear in its size."""


def present(slots: list[str | None]) -> list[str]:
    """An indexed array's elements in index order (`${A[@]}`: the indices set, bash manual 6.7)."""
    return [slot for slot in slots if slot is not None]


def placed_at(slots: list[str | None], index: int, value: str | None) -> list[str | None] | None:
    """`slots` with element `index` set to `value` (None: unset), no unset slot left at the end (so that `A+=(x)`
    goes one past the highest index set, as bash's does); None past MOST_SLOTS."""
    if index >= MOST_SLOTS:
        return None
    out = [*slots, *[None] * (index + 1 - len(slots))]
    out[index] = value
    while out and out[-1] is None:
        out.pop()
    return out


def placed(reading: Any, held: list[str | None], words: list[str]) -> list[str | None] | None:
    """The slots of `NAME=( words )` (`NAME+=( ... )`: after `held`): each word the element one past the last one set,
    a `[N]=value` word element N (bash manual 6.7: "the index of the element assigned is the last index assigned to by
    the statement plus one"); None where an index is not known or out of range."""
    slots: list[str | None] | None = held
    at = len(held)
    for word in words:
        pair = _PAIR.match(word)
        index = index_of(reading, pair.group(1)) if pair else at
        if index is None or index < 0 or slots is None:
            return None
        slots = placed_at(slots, index, pair.group(2) if pair else word)
        at = index + 1
    return slots


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


def index_of(reading: Any, subscript: str) -> int | None:
    """An indexed array's subscript, evaluated as arithmetic (`${L[i+1]}`, `${L[$i]}`); None where it is not known."""
    expanded = reading.expand(subscript)
    value = arithmetic(expanded, reading.env) if expanded.strip() else "0"  # `${A[$1]}` without $1: element 0
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
            index = index_of(reading, subscript)
            elements = reading.arrays[name]
            value = None if index is None or index < -len(elements) else \
                (elements[index] if index < len(elements) else None) or ""
        else:
            return found.group(0)
        if value is None:
            return found.group(0)
        return str(len(value)) if count else value if _SAFE.fullmatch(value) else found.group(0)

    return _ITEM.sub(item, text) if "[" in text else text


def associative_values(reading: Any, name: str, keys: bool) -> list[str] | None:
    """`${M[@]}` (`${!M[@]}` with `keys`) of an associative array, in the order bash lists them (hash_order); None
    (left as written) where bash would have grown its table."""
    table = reading.assoc[name]
    if len(table) >= _GROWS_AT or not all(key.isascii() for key in table):  # _fnv1: a byte past 127 hashes as the
        return None  # machine's C `char` has it (negative on x86-64, not on aarch64)
    ordered = hash_order(table)
    return ordered if keys else [table[key] for key in ordered]


_BUCKETS = 1024
"""bash's buckets for an associative array (assoc.h ASSOC_HASH_BUCKETS; hashlib.c hash_create)."""
_GROWS_AT = 2 * _BUCKETS
"""hashlib.c HASH_SHOULDGROW: at nbuckets * HASH_REHASH_FACTOR (2) entries the table is rehashed, which this does
not follow."""


def _fnv1(key: str) -> int:
    """hashlib.c hash_string: 32-bit FNV-1 (multiply by the FNV prime 16777619, then xor each byte) from the offset
    basis 2166136261. ASCII keys only: hash_string xors `*s`, a `char`, which sign-extends a byte past 127 where
    char is signed (x86-64; R89: bash 5.2.15 there orders keys with `é` so), not where it is unsigned (aarch64)."""
    value = 2166136261
    for byte in key.encode():
        value = ((value * 16777619) & 0xFFFFFFFF) ^ byte
    return value


def hash_order(table: dict[str, str]) -> list[str]:
    """The keys of an associative array (`table`, in the order they were first set) as bash 5.2 lists them: bucket by
    bucket (FNV-1 hash modulo 1024), each bucket's keys newest first (hashlib.c hash_insert puts a new key at the head
    of its bucket's list; assoc.c assoc_to_word_list walks the buckets in order). Checked against bash 5.2.15 on 300
    random key sets, also after an `unset` and re-insertion."""
    buckets: dict[int, list[str]] = {}
    for key in table:
        buckets.setdefault(_fnv1(key) & (_BUCKETS - 1), []).insert(0, key)
    return [key for bucket in sorted(buckets) for key in buckets[bucket]]
