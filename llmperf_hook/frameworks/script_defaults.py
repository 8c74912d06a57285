"""The default a user's own training script gives one of its argparse options, read from its source (never imported or
run), for a script that takes Megatron-style flags but parses them itself.

Megatron's own parser requires some options that a plain torch / DeepSpeed script of the user's need not
(`--max-position-embeddings`: megatron/training/arguments.py `_check_arg_is_not_none(args,
'max_position_embeddings')` for learned absolute positions). A script counts as parsing its own options when it builds
an `argparse.ArgumentParser` itself and imports nothing of Megatron (whose parse_args then runs instead): the rule
tune/script_options also applies. Its `add_argument('--max-position-embeddings', type=int, default=None)` (the
cpu-testbed's train_gpt.py, which then sizes its table `args.max_position_embeddings or args.seq_length`) is then read,
and its `--vocab-size` default stands where Megatron would require a tokenizer or --vocab-size. The default is the one
argparse leaves in the attribute (`args.max_position_embeddings`): whichever option stores it (`dest=`), as the
parser's `set_defaults(...)` calls change it, any literal (`default=-1`); _namespace_default cites Lib/argparse.py.
"""

from __future__ import annotations

import ast
import functools
import os
from dataclasses import dataclass, replace
from typing import Callable

from llmperf_hook.frameworks.flags import FlagValues
from llmperf_hook.frameworks.script_tree import script_tree
from llmperf_hook.provenance import Source, SourceKind


@dataclass(frozen=True)
class ScriptDefault:
    """What the script's own parser does with an option the command does not give."""

    defined: bool
    """The script's parser defines the option."""
    value: object
    """Its default when that is a literal (`default=2048`, `default=None`, no default: None); else None too."""
    literal: bool
    """The default is a literal the source states (not a name or a call, whose value only running tells)."""


def own_parser_default(script: str, option: str, exact: bool = False) -> ScriptDefault | None:
    """The default `script`'s own argparse parser gives the attribute `option` names (`--max-position-embeddings`:
    `args.max_position_embeddings`, whichever option strings store it; with `exact`, only where the parser defines
    `option` as written), as argparse gives it (_namespace_default); None when the script is not a readable Python file
    with a parser of its own (Megatron's parser, or none built in the file), so that the framework's own rule holds."""
    tree = script_tree(script) if script.endswith(".py") else None
    if tree is None or not parses_its_own_flags(tree):
        return None
    dest = option.lstrip("-").replace("-", "_")  # `--max-position-embeddings`, `--max_position_embeddings` alike
    calls, parsers = _parser_calls(tree)
    if exact and not any(option in _option_strings(call) for call in calls if call.func.attr == "add_argument"):
        return ScriptDefault(False, None, True)
    return _namespace_default(calls, dest, parsers)


Parser = tuple[int, str, bool, bool]
"""A parser of the file: the function that builds it (0: the module), the name it is built into (`p =
argparse.ArgumentParser()`, `t = sub.add_parser('train')`), True, and whether it is a subcommand's (add_parser);
where the source does not say which (a helper's `parser` parameter, `p = build()`), the function around the call, its
receiver's text, False and False."""


@functools.lru_cache(maxsize=32)
def _parser_calls(tree: ast.Module) -> tuple[tuple[ast.Call, ...], dict[int, Parser]]:
    """The tree's `add_argument` / `set_defaults` calls in the order the script runs them (_run_order), and the parser
    each is made on (_parsers, by the call's id); cached per tree, which script_tree shares per file content (a
    predict asks for a dozen dests)."""
    functions, defined = _enclosing_functions(tree)
    calls = sorted((node for node in ast.walk(tree) if isinstance(node, ast.Call) and
                    isinstance(node.func, ast.Attribute) and node.func.attr in ("add_argument", "set_defaults")),
                   key=_run_order(tree, functions, defined))
    return tuple(calls), _parsers(tree, calls, functions, defined)


_GROUPS = ("add_argument_group", "add_mutually_exclusive_group")
"""What adds to the parser it is made from (Lib/argparse.py _ActionsContainer: a group's actions are its parser's)."""


def _parsers(tree: ast.AST, calls: tuple[ast.Call, ...], functions: dict[int, int],
             defined: dict[int, ast.AST]) -> dict[int, Parser]:
    """The parser each of `calls` adds to: its receiver's name resolved in its function, then in the module (unless
    the function takes that name as a parameter), through `g = p.add_argument_group(...)`, to the name an
    `ArgumentParser(...)` call was assigned; not known (Parser) where it resolves to nothing built in the file."""
    built: dict[tuple[int, str], ast.expr] = {}
    made: list[tuple[tuple[int, str], ast.Call]] = []  # each `NAME = ...ArgumentParser(...)`, for its `parents=`
    declared = _globals(defined)
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) and \
                isinstance(node.value, ast.Call):
            function, name = functions.get(id(node.value), 0), node.targets[0].id
            key = (0 if name in declared.get(function, ()) else function, name)  # `global p` assigns the module's
            built.setdefault(key, node.value)
            made += [(key, node.value)] if _name(node.value.func).endswith("ArgumentParser") else []

    def parameters(function: int) -> set[str]:
        arguments = getattr(defined.get(function), "args", None)
        return {a.arg for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs)} if arguments else set()

    def resolve(function: int, receiver: ast.expr, depth: int = 0) -> tuple[int, str] | None:
        if isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Attribute) and depth < 8 and \
                receiver.func.attr in _GROUPS:
            return resolve(function, receiver.func.value, depth + 1)
        if not isinstance(receiver, ast.Name):
            return None
        local = (function, receiver.id) in built or receiver.id in parameters(function)
        scope = function if local and receiver.id not in declared.get(function, ()) else 0
        value = built.get((scope, receiver.id))
        if value is None or depth >= 8:
            return None
        if _name(value.func).endswith("ArgumentParser") or _name(value.func) == "add_parser":
            return scope, receiver.id
        return resolve(scope, value, depth + 1)

    family = _families(made, resolve)
    out: dict[int, Parser] = {}
    for call in calls:
        function, receiver = functions.get(id(call), 0), call.func.value  # type: ignore[attr-defined]
        found = resolve(function, receiver)
        found = family.get(found, found) if found else None  # a parser joined by `parents=` to others
        out[id(call)] = (*found, True, _name(built[found].func) == "add_parser") if found else \
            (function, ast.unparse(receiver), False, False)
    return out


def _globals(defined: dict[int, ast.AST]) -> dict[int, set[str]]:
    """The names each function declares `global` (its assignments to them bind the module's names)."""
    return {function: {name for child in ast.walk(node) if isinstance(child, ast.Global) for name in child.names}
            for function, node in defined.items()}


_Key = tuple[int, str]
"""A parser built in the file: the function that builds it and the name it is built into."""


def _families(made: list[tuple[_Key, ast.Call]], resolve: Callable[[int, ast.expr], _Key | None]) -> \
        dict[_Key, _Key | None]:
    """Parsers joined by `parents=[...]` as one: ArgumentParser.__init__ adds each parent's actions (the same Action
    objects, _add_container_actions) and its _defaults to the new parser, so a set_defaults of either reaches the
    options of both (Lib/argparse.py). A parent the source does not name (`parents=[base()]`) maps the child to
    None: on every parser, as a parser the source does not tie to one."""
    family: dict[_Key, _Key | None] = {}

    def head(key: _Key | None) -> _Key | None:
        while key is not None and family.get(key, key) != key:
            key = family[key]
        return key

    for key, call in made:
        parents = next((kw.value for kw in call.keywords if kw.arg == "parents"), None)
        for each in [] if parents is None else getattr(parents, "elts", [parents]):
            child, parent = head(key), resolve(key[0], each)
            if child is not None and head(parent) != child:
                family[child] = head(parent)
    return {key: head(key) for key in family}


_DEF = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def _enclosing_functions(tree: ast.AST) -> tuple[dict[int, int], dict[int, ast.AST]]:
    """The id of the innermost function around each call of `tree` (0: none), and each function by its id: `parser`
    in two functions is two parsers (`def train_args(): parser = ArgumentParser()` and `def eval_args(): ...`)."""
    found: dict[int, int] = {}
    defined: dict[int, ast.AST] = {}
    stack: list[tuple[ast.AST, int]] = [(tree, 0)]
    while stack:
        node, function = stack.pop()
        if isinstance(node, ast.Call):
            found[id(node)] = function
        if isinstance(node, _DEF):
            defined[id(node)] = node
        stack.extend((child, id(node) if isinstance(node, _DEF) else function) for child in ast.iter_child_nodes(node))
    return found, defined


def _run_order(tree: ast.AST, functions: dict[int, int], defined: dict[int, ast.AST]) -> \
        Callable[[ast.Call], tuple[int, ...]]:
    """A sort key that puts calls in the order the script runs them, as far as its source tells: a call inside a
    function runs where the function is first called (by its name, from outside it), so `main()` calling `build()`
    runs build's add_argument before main's later set_defaults wherever each `def` stands; a function called
    nowhere keeps its place in the file."""
    first: dict[str, ast.Call] = {}
    for node in sorted((n for n in ast.walk(tree) if isinstance(n, ast.Call)), key=lambda n: (n.lineno, n.col_offset)):
        first.setdefault(_name(node.func), node)

    def key(call: ast.Call, depth: int = 0) -> tuple[int, ...]:
        own = (call.lineno, call.col_offset)
        function = defined.get(functions.get(id(call), 0))
        name = getattr(function, "name", "")  # a lambda has none
        site = first.get(name) if name else None
        if site is None or depth > 16 or functions.get(id(site)) == id(function):
            return own
        return (*key(site, depth + 1), *own)

    return key


def _namespace_default(calls: tuple[ast.Call, ...], dest: str, parsers: dict[int, Parser]) -> ScriptDefault:
    """What `parse_args` leaves in `dest` when the command gives none of its options, from the parser's
    `add_argument` / `set_defaults` calls as they run (_run_order; Lib/argparse.py, CPython 3.11): an option's dest is
    its `dest=`, else its first long option string without the dashes, `-` made `_` (_get_optional_kwargs);
    `set_defaults(NAME=V)` sets the default of every option of dest NAME added before it to the same parser and
    becomes the default of one added to it after without `default=` (set_defaults, _add_action's `if 'default' not
    in kwargs`), and gives NAME that value where no option stores it (parse_known_args: 'add any parser defaults that
    aren't present'); of two options with one dest, the first added sets it (parse_known_args sets an action's
    default only where the namespace has none yet). Options of that dest that two parsers of the file (entry points)
    state apart: which parses the job, only running tells (literal False). Parsers are told apart by where each is
    built (`parsers`, _parsers); a call whose parser the source does not say (a helper given the parser) counts as
    on every parser, as `eval_parser.set_defaults(...)` does not reach `train_parser`'s options. A subcommand's
    parser (`sub.add_parser('train')`) fills the namespace only when the command chooses it, over the main parser's
    values (_SubParsersAction.__call__): where it and another parser both state the dest, only the command tells."""
    defaults: list[tuple[Parser, ast.expr]] = []  # each set_defaults of dest, and its parser
    actions: list[list[ast.expr | None]] = []  # each option's default node (None: argparse's None) and its type
    owners: list[Parser] = []  # each option's parser
    keyed: set[Parser] = set()
    for call in calls:
        keywords = {kw.arg: kw.value for kw in call.keywords}
        parser = parsers[id(call)]
        if call.func.attr == "set_defaults":
            if None in keywords or dest in keywords:  # `set_defaults(**cfg)`: any dest, to what only running gives
                defaults.append((parser, keywords.get(dest, ast.Name("?"))))
                for action, owner in zip(actions, owners):
                    action[0] = defaults[-1][1] if _same(parser, owner) else action[0]
            continue
        options = _option_strings(call)
        if options and options[0].startswith("-") and _dest(options, keywords.get("dest")) == dest:
            before = next((value for owner, value in reversed(defaults) if _same(owner, parser)), None)
            actions.append([keywords["default"] if "default" in keywords else before, keywords.get("type")])
            owners.append(parser)
            keyed.add(parser)
    stating = {parser for parser, _ in defaults} | set(owners)
    if len(stating) > 1 and any(parser[3] for parser in stating):  # the subcommand the job gives tells
        return ScriptDefault(bool(actions), None, False)
    if not actions:
        return ScriptDefault(False, *_literal(defaults[-1][1], None)) if defaults else ScriptDefault(False, None, True)
    found = {_literal(default, kind) for default, kind in actions[:1 if len(keyed) == 1 else None]}
    return ScriptDefault(True, *found.pop()) if len(found) == 1 else ScriptDefault(True, None, False)


def _same(one: Parser, other: Parser) -> bool:
    """Whether two calls may be on one parser: the same, or either not known."""
    return not (one[2] and other[2]) or one == other


def _option_strings(call: ast.Call) -> tuple[str, ...]:
    return tuple(a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str))


def _dest(options: tuple[str, ...], dest: ast.expr | None) -> str | None:
    """An option's dest (Lib/argparse.py _get_optional_kwargs): `dest=`, else its first long option string (else its
    first) without its leading dashes, each `-` made `_`; None for a `dest=` only running gives."""
    if dest is not None:
        return dest.value if isinstance(dest, ast.Constant) and isinstance(dest.value, str) else None
    longs = [option for option in options if len(option) > 1 and option[1] == "-"]
    return (longs or list(options))[0].lstrip("-").replace("-", "_")


def _literal(default: ast.expr | None, kind: ast.expr | None) -> tuple[object, bool]:
    """A default's value and whether the source states it (`default=-1` and other literals, ast.literal_eval; not a
    name or a call). A string default goes through the option's `type` as a command-line value would (Lib/argparse.py
    parse_known_args: `self._get_value(action, action.default)` for a str default), so `type=int, default='2048'`
    gives the script 2048."""
    if default is None:
        return None, True
    try:
        value = ast.literal_eval(default)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None, False
    if isinstance(value, str) and _name(kind or ast.Constant(None)) == "int":
        try:
            return int(value), True
        except ValueError:
            return None, False
    return (value, True) if isinstance(value, (int, float, str, bool, type(None))) else (None, False)


def own_parser_shape(script: str) -> bool:
    """`script` parses Megatron's dashed --num-layers and --hidden-size itself, each with a number default: run with
    neither it trains that shape (examples/cpu-testbed/train_gpt.py: 2 x 128), so it is priced as a Megatron-style
    script with its own defaults (with_own_defaults), not refused for want of a model shape."""
    for option in ("--num-layers", "--hidden-size"):
        own = own_parser_default(script, option, exact=True)  # --num_layers: a parser of other flags (resolve.py)
        if own is None or not isinstance(own.value, int) or isinstance(own.value, bool):
            return False
    return True


def parses_its_own_flags(tree: ast.AST) -> bool:
    """The script builds an `argparse.ArgumentParser` itself (not Hugging Face's HfArgumentParser of dataclass
    fields) and imports nothing of Megatron (whose parse_args would run instead): its own parser defines its options
    and their defaults. The one rule for frameworks (here) and tune/script_options."""
    called = {_name(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    return "ArgumentParser" in called and "HfArgumentParser" not in called and not _imports_megatron(tree)


def _imports_megatron(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name.split(".")[0] == "megatron" for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "megatron" and not node.level:
            return True
    return False


def _name(node: ast.AST) -> str:
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""


OWN_PARSER_DESTS = ("num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size", "num_query_groups",
                    "seq_length", "max_position_embeddings", "vocab_size", "micro_batch_size", "global_batch_size",
                    "tensor_model_parallel_size", "pipeline_model_parallel_size")
"""Megatron-style options whose default a script with its own parser gives when the command leaves them out: the
script runs with them (examples/cpu-testbed/train_gpt.py with no shape flags trains 2 layers x 128, 4 heads, seq
128, micro-batch 2, vocabulary 1024), so llmperf prices that job instead of asking for flags the script never
needed."""


def with_own_defaults(flags: FlagValues, script: str, dests: tuple[str, ...] = OWN_PARSER_DESTS) -> FlagValues:
    """`flags` with each of `dests` the command does not give set to `script`'s own argparse default, where the script
    parses its own flags and that default is a number (`--vocab-size`, default=32000: what its parser gives)."""
    values, sources = dict(flags.values), dict(flags.sources)
    for dest in dests:
        own = None if flags.has(dest) else own_parser_default(script, "--" + dest.replace("_", "-"))
        if own is not None and isinstance(own.value, int) and not isinstance(own.value, bool):
            values[dest] = own.value
            sources[dest] = Source(SourceKind.DEFAULT, f"{os.path.basename(script)}'s own argparse default")
    return flags if values == flags.values else replace(flags, values=values, sources=sources)
