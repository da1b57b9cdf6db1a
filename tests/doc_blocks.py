"""The docs' examples as a test reads them: fenced blocks, the command lines in them, the markers
that say how a block is checked, and the runner that executes a page's examples in order.

Pages: README.md, docs/*.md, examples/*/README.md. A block is checked by what it is:

- ```` ```bash ```` (or ``sh``): every command line runs, in the page's order, in a scratch folder
  of the page (``opgen`` is ``sys.executable -m opgen``, ``python`` is ``sys.executable``; comment
  lines and ``pip install`` are skipped). Lines join at a trailing ``\\`` and inside open quotes.
- ```` ```python ````: runs, in the page's order, in one namespace per page (a notebook page).
- ```` ```yaml ````: loaded by the loader its ``load:`` marker names (:data:`LOADERS`).
- ```` ```json ````: parses (``//`` comments removed).
- any other block: its lines that start with ``opgen`` are synopses; their options must exist.

Markers are HTML comments on the lines just above a block's opening fence (invisible on the
rendered page):

- ``<!-- not run: REASON -->``: the block cannot run here (a GPU, the Hub, a trainer the main
  environment does not install, a placeholder of yours). It is still checked as far as the code
  can without running it: an opgen command line by the CLI's own click parser (commands, options,
  argument counts), another program's script or file by its path, a Python block by compiling it and
  binding its calls of opgen functions to their signatures, a YAML block by parsing it.
- ``<!-- not run (TEXT): REASON -->``: the block's lines that hold TEXT are checked so, the
  others run.
- ``<!-- file: NAME -->``: the block's text is written to NAME in the scratch folder at its place
  in the page (a later command reads it).
- ``<!-- with: CODE -->``: a Python block runs after CODE, which defines the placeholders the block
  leaves to the reader (``my_model``).
- ``<!-- load: KIND -->``: a YAML block is loaded as a KIND (:data:`LOADERS`).

A page's commands run after the README's builds: a path the README builds (``out/eval-suite``,
``out/sft-eco``) that the page uses without building it is copied in first.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import importlib.util
import inspect
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import click
import yaml
from opgen.cli import cli

import opgen
from opgen import curriculum, generate, library, recipe
from opgen.fit import inputs

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "examples").glob("*/README.md"))]
SHELL = {"bash", "sh"}
# The checkout's folders a page's commands may name (datasets/probes.yaml, examples/fit/make_sweep.py,
# scripts/setup-verl.sh): linked into each scratch folder, as if it ran in the checkout.
CHECKOUT = ("datasets", "examples", "scripts", "schemas")
# A hang guard, never a speed claim: one command or block that runs longer has hung.
HANG_S = 1800

_FENCE = re.compile(r"^(`{3,})([\w-]*)\s*$")
_MARK = re.compile(r"^<!--\s*(not run|file|with|load)(?:\s*\(([^)]+)\))?\s*:\s*(.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    page: str  # relative to the checkout
    line: int  # the opening fence's line, 1-based
    lang: str
    text: str
    marks: dict[str, str] = field(default_factory=dict)
    # (text a line holds, reason) of ``<!-- not run (TEXT): REASON -->``: those lines are not run
    skips: tuple[tuple[str, str], ...] = ()

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def not_run(self) -> str | None:
        """Why the whole block is not run (None: it runs, except lines ``skips`` names)."""
        return self.marks.get("not run")


@dataclass(frozen=True)
class Command:
    """One command line of a shell block (a synopsis: a line of another block starting with ``opgen``)."""
    block: Block
    line: int  # its first line in the page
    text: str
    synopsis: bool = False

    @property
    def where(self) -> str:
        return f"{self.block.page}:{self.line}"

    @property
    def not_run(self) -> str | None:
        return self.block.not_run or next((why for text, why in self.block.skips if text in self.text), None)


def rel(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


def blocks(page: Path) -> list[Block]:
    lines = page.read_text(encoding="utf-8").splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, lang = m.groups()
        j = i + 1
        while j < len(lines) and lines[j].strip() != fence:
            j += 1
        marks: dict[str, str] = {}
        skips: list[tuple[str, str]] = []
        k = i - 1
        while k >= 0 and (mark := _MARK.match(lines[k].strip())):
            key, only, value = mark.groups()
            if only:
                skips.append((only, value))
            else:
                marks.setdefault(key, value)
            k -= 1
        out.append(Block(rel(page), i + 1, lang, "\n".join(lines[i + 1:j]), marks, tuple(skips)))
        i = j + 1
    return out


def all_blocks() -> list[Block]:
    return [b for page in PAGES for b in blocks(page)]


def python_context(block: Block) -> str:
    """The code a Python block runs after: the page's earlier Python blocks, then its ``with:``."""
    page = [b for b in blocks(ROOT / block.page) if b.lang == "python"]
    earlier = [b.marks.get("with", "") + "\n" + b.text for b in page[:page.index(block)]]
    return "\n".join([*earlier, block.marks.get("with", "")])


def _complete(text: str) -> bool:
    try:
        shlex.split(text, comments=True)
    except ValueError:  # an open quote: the command goes on
        return False
    return True


def _logical_lines(block: Block) -> list[tuple[int, str]]:
    """(first line in the page, text) of each command of a shell block, comment lines left out."""
    out: list[tuple[int, str]] = []
    acc, start = "", 0
    for n, raw in enumerate(block.text.splitlines(), start=block.line + 1):
        if not acc:
            if not raw.strip() or raw.lstrip().startswith("#"):
                continue
            start = n
        acc += raw
        if acc.endswith("\\"):
            acc = acc[:-1] + " "
            continue
        if not _complete(acc):
            acc += "\n"
            continue
        out.append((start, acc.strip()))
        acc = ""
    if acc:
        out.append((start, acc.strip()))
    return out


_PIP = re.compile(r"^pip3? install\b[^&|;]*(?:&&\s*|$)")


def commands(block: Block) -> list[Command]:
    """The command lines of a shell block (``pip install`` taken off), or a block's synopses."""
    if block.lang in SHELL:
        found = []
        for line, text in _logical_lines(block):
            text = _PIP.sub("", text).strip()
            if text:
                found.append(Command(block, line, text))
        return found
    found, lines = [], block.text.splitlines()
    for n, raw in enumerate(lines):
        if raw.startswith("opgen "):
            text = raw
            for more in lines[n + 1:]:
                if not more.startswith((" ", "\t")):
                    break
                text += " " + more.strip()
            found.append(Command(block, block.line + 1 + n, text, synopsis=True))
    return found


def all_commands() -> list[Command]:
    return [c for b in all_blocks() for c in commands(b)]


_INLINE = re.compile(r"(?<!`)`(opgen [a-z][\w-]*(?:[ =][^`]*)?)`(?!`)")


def inline_commands(page: Path) -> list[Command]:
    """The prose's quoted command lines (`` `opgen build r --only s` ``), checked as synopses."""
    text = page.read_text(encoding="utf-8")
    out = []
    for m in _INLINE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        out.append(Command(Block(rel(page), line, "inline", m.group(1)), line, " ".join(m.group(1).split()),
                           synopsis=True))
    return out


# ------------------------------------------------------------------ checking without running


def _segments(text: str) -> list[list[str]]:
    """The simple commands of a line: split at ``&&``, ``||``, ``;``, ``|``, ``&``, redirections
    and leading ``VAR=value`` assignments taken off."""
    lex = shlex.shlex(text, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    lex.commenters = "#"
    segments: list[list[str]] = [[]]
    skip = False
    for tok in lex:
        if skip:
            skip = False
            continue
        if tok in ("&&", "||", ";", "|", "&"):
            segments.append([])
        elif tok in (">", ">>", "<", ">&", "&>"):  # a redirection: its target is no argument
            skip = True
            if segments[-1] and segments[-1][-1].isdigit():  # 2>...
                segments[-1].pop()
        else:
            segments[-1].append(tok)
    out = []
    for seg in segments:
        while seg and re.match(r"^[A-Za-z_]\w*=", seg[0]):
            seg = seg[1:]
        if seg:
            out.append(seg)
    return out


def _opgen_command(argv: list[str]):
    """(the click command, its context, the rest of argv, the command's name) after walking the
    groups; ValueError naming an unknown command."""
    cmd = cli
    ctx = click.Context(cmd, info_name="opgen", **cmd.context_settings)
    path = ["opgen"]
    while isinstance(cmd, click.Group) and argv and not argv[0].startswith("-"):
        sub = cmd.get_command(ctx, argv[0])
        if sub is None:
            raise ValueError(f"{' '.join(path)}: no command {argv[0]!r} (commands: "
                             f"{', '.join(cmd.list_commands(ctx))})")
        path.append(argv[0])
        ctx = click.Context(sub, info_name=argv[0], parent=ctx, **sub.context_settings)
        cmd, argv = sub, argv[1:]
    return cmd, ctx, argv, " ".join(path)


def check_opgen_argv(argv: list[str], *, loose: bool = False) -> str | None:
    """None if the CLI's own parser takes ``argv`` (without ``opgen``): the command exists, every
    option is one of its options with a value where it needs one, no extra argument, nothing
    required missing. ``loose`` (a synopsis, or a line with ``...``): options only."""
    try:
        cmd, ctx, rest, name = _opgen_command(argv)
    except ValueError as exc:
        return str(exc)
    if isinstance(cmd, click.Group):
        return None if loose or "--help" in rest or "-h" in rest else f"{name}: a group, not a command"
    if loose:
        return None if ctx.ignore_unknown_options else _check_synopsis(cmd, rest, name)
    if "--help" in rest or "-h" in rest:
        return None
    parser = cmd.make_parser(ctx)
    try:
        opts, extra, _ = parser.parse_args(list(rest))
    except click.UsageError as exc:
        return f"{name}: {exc.format_message()}"
    if extra and not ctx.allow_extra_args:
        return f"{name}: unexpected extra arguments {extra}"
    for param in cmd.params:
        if param.required and param.name not in opts:
            return f"{name}: missing {param.get_error_hint(ctx)}"
    return None


def _check_synopsis(cmd, tokens: list[str], name: str) -> str | None:
    """Every ``--option`` a synopsis names is one of the command's; a choice written ``a|b|c``
    after it lists the option's choices."""
    known: dict[str, click.Parameter] = {}
    for p in cmd.params:
        for o in (*p.opts, *p.secondary_opts):
            known[o] = p
    for n, tok in enumerate(tokens):
        tok = tok.strip("[]()")
        for part in re.split(r"[/|](?=-)", tok) if tok.startswith("-") else [tok]:
            opt = part.split("=")[0]
            if not re.match(r"^--?[A-Za-z]", opt):
                continue
            if opt not in known:
                return f"{name}: no option {opt}"
            after = tokens[n + 1].strip("[]()") if n + 1 < len(tokens) else ""
            param = known[opt]
            if "|" in after and isinstance(getattr(param, "type", None), click.Choice):
                listed, choices = set(after.split("|")), set(map(str, param.type.choices))
                if listed != choices:
                    return f"{name}: {opt} {after}: its choices are {'|'.join(sorted(choices))}"
    return None


def check_command(cmd: Command) -> str | None:
    """What is wrong with a command line as written, checked without running it; None if nothing."""
    # what the shell would put in place of ``$(...)`` and the reader in place of ``...`` is not
    # known here: such a line's options are checked, not its arguments
    text = re.sub(r"\$\([^)]*\)", " ", cmd.text).replace("...", " ")
    loose = cmd.synopsis or text != cmd.text
    try:
        segments = _segments(text) if not cmd.synopsis else [shlex.split(text.replace("|", "\\|"))]
    except ValueError as exc:
        return f"cannot split the line: {exc}"
    for seg in segments:
        prog, args = seg[0], seg[1:]
        if prog in ("python", "python3") and args[:2] == ["-m", "opgen"]:
            prog, args = "opgen", args[2:]
        if prog == "opgen":
            problem = check_opgen_argv(args, loose=loose)
            if problem:
                return problem
        elif prog in ("python", "python3", "bash", "sh") and args and not args[0].startswith("-"):
            if not (ROOT / args[0]).is_file():
                return f"{prog} {args[0]}: no such file in the checkout"
        elif prog.startswith(("examples/", "scripts/", "./")) and not (ROOT / prog).is_file():
            return f"{prog}: no such file in the checkout"
    return None


# -------------------------------------------------------------- Python: bound without running


def _opgen_object(module: str, attr: str) -> object:
    """What ``from module import attr`` binds (an attribute, or else a submodule)."""
    mod = importlib.import_module(module)
    return getattr(mod, attr) if hasattr(mod, attr) else importlib.import_module(f"{module}.{attr}")


def _stored_names(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return names


def opgen_names(tree: ast.AST) -> tuple[dict[str, object], list[str]]:
    """(name -> the opgen module or object it is bound to by the block's imports, import problems)."""
    env: dict[str, object] = {}
    problems: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] != "opgen":
                    continue
                try:
                    mod = importlib.import_module(a.name)
                except ImportError as exc:
                    problems.append(f"import {a.name}: {exc}")
                    continue
                env[a.asname or "opgen"] = mod if a.asname else importlib.import_module("opgen")
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "opgen":
            for a in node.names:
                try:
                    env[a.asname or a.name] = _opgen_object(node.module, a.name)
                except (ImportError, AttributeError) as exc:
                    problems.append(f"from {node.module} import {a.name}: {exc}")
    return env, problems


def _chain(node: ast.expr) -> list[str] | None:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return [node.id, *reversed(parts)]
    return None


def _resolve(chain: list[str], env: dict[str, object]) -> tuple[object, str | None]:
    obj = env[chain[0]]
    for n, attr in enumerate(chain[1:], start=1):
        try:
            obj = getattr(obj, attr)
        except AttributeError:
            if inspect.ismodule(obj):
                try:
                    obj = importlib.import_module(f"{obj.__name__}.{attr}")
                    continue
                except ImportError:
                    pass
            return None, f"{'.'.join(chain[:n + 1])}: no such attribute"
        if not (inspect.ismodule(obj) or inspect.isclass(obj) or callable(obj)):
            return obj, None
    return obj, None


def _unimported_modules(tree: ast.AST, given: str) -> list[str]:
    """Names a block reads as modules (``yaml.safe_load``) that nothing in it imports or binds."""
    before = ast.parse(given)
    bound = _stored_names(tree) | _stored_names(before) | set(dir(builtins))
    for node in (*ast.walk(tree), *ast.walk(before)):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bound |= {a.asname or a.name.split(".")[0] for a in node.names}
    used = {n.value.id for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
            and isinstance(n.value.ctx, ast.Load)}
    return [f"{name}.…: the module {name} is used but not imported" for name in sorted(used - bound)
            if importlib.util.find_spec(name) is not None]


def check_python(code: str, given: str = "") -> list[str]:
    """Problems of a Python example found without running it: it compiles; its imports of opgen
    resolve; each call of an opgen function or class binds to its signature (names, counts); no
    module is used without an import. ``given``: the code before it (its ``with:`` marker, the
    page's earlier Python blocks)."""
    try:
        tree = ast.parse(code)
        ast.parse(given)
    except SyntaxError as exc:
        return [f"does not compile: {exc}"]
    env, problems = opgen_names(ast.parse(given + "\n" + code))
    problems += _unimported_modules(tree, given)
    for name in _stored_names(tree) - {a.asname or a.name.split(".")[0] for n in ast.walk(tree)
                                        if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}:
        env.pop(name, None)
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Call, ast.Attribute)):
            continue
        chain = _chain(node.func if isinstance(node, ast.Call) else node)
        if not chain or chain[0] not in env:
            continue
        obj, problem = _resolve(chain, env)
        if problem:
            problems.append(problem)
            continue
        if not isinstance(node, ast.Call) or not callable(obj) or inspect.ismodule(obj):
            continue
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            continue
        try:
            sig = inspect.signature(obj)
        except (TypeError, ValueError):
            continue
        try:
            sig.bind(*[None] * len(node.args), **{k.arg: None for k in node.keywords if k.arg})
        except TypeError as exc:
            problems.append(f"{ast.unparse(node)[:120]}: {exc} (signature {'.'.join(chain)}{sig})")
    return list(dict.fromkeys(problems))


# ------------------------------------------------------- signatures quoted in the prose


@dataclass(frozen=True)
class Quote:
    page: str
    line: int
    text: str  # the code span, whitespace collapsed

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


_SPAN = re.compile(r"(?<!`)`([^`]+)`(?!`)")
_CALLISH = re.compile(r"^[A-Za-z_][\w.]*\(.*\)(\s*->\s*.+)?$", re.S)


def quotes(page: Path) -> list[Quote]:
    """The prose's code spans that look like a call or a signature (``name(...)``), outside blocks."""
    text = page.read_text(encoding="utf-8")
    fenced = [(b.line, b.line + b.text.count("\n") + 2) for b in blocks(page)]
    out = []
    for m in _SPAN.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        span = " ".join(m.group(1).split())
        if _CALLISH.match(span) and not any(a <= line <= b for a, b in fenced):
            out.append(Quote(rel(page), line, span))
    return out


def _page_names(page: Path) -> dict[str, object]:
    env: dict[str, object] = {}
    for b in blocks(page):
        if b.lang == "python":
            try:
                env.update(opgen_names(ast.parse(b.text))[0])
            except SyntaxError:
                pass
    return env


def _lookup(name: str, env: dict[str, object]) -> tuple[object, bool] | None:
    """(the object a quoted name means, whether it is a method read from its class), or None."""
    first, *rest = name.split(".")
    roots: list[tuple[object, bool]] = []
    if first == "opgen":
        roots.append((opgen, False))
    elif first in env:
        roots.append((env[first], False))
    else:
        if hasattr(opgen, first):
            roots.append((getattr(opgen, first), False))
        for owner in (*[v for v in env.values() if inspect.isclass(v)], generate.Generator):
            if hasattr(owner, first):
                roots.append((getattr(owner, first), True))
    for obj, method in roots:
        try:
            for attr in rest:
                obj = getattr(obj, attr) if hasattr(obj, attr) else importlib.import_module(f"{obj.__name__}.{attr}")
        except (AttributeError, ImportError):
            continue
        if callable(obj):
            return obj, method or (len(rest) > 0 and inspect.isclass(_owner(name, env)))
    return None


def _owner(name: str, env: dict[str, object]):
    head = name.rsplit(".", 1)[0]
    found = _lookup(head, env) if "." in name else None
    return found[0] if found else None


def _annotation(text: str) -> str:
    return re.sub(r"\b(?:[A-Za-z_]\w*\.)+([A-Za-z_]\w*)", r"\1", text.replace(" ", "").replace("'", ""))


def _is_literal(node: ast.expr) -> bool:
    try:
        _literal(node)
    except (ValueError, TypeError, SyntaxError):
        return False
    return True


def _literal(node: ast.expr):
    """A default as the quote writes it; ValueError for a placeholder (``N``, ``...``)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):  # "a" | "b": the choices, default first
        return _literal(node.left)
    value = ast.literal_eval(node)
    if value is Ellipsis:
        raise ValueError("a placeholder")
    return value


def check_quote(quote: Quote, env: dict[str, object]) -> str | None:
    """What is wrong with a quoted call or signature against ``inspect.signature`` of what it names;
    None if nothing (or if it names nothing of opgen's)."""
    head = quote.text.split("(", 1)[0]
    found = _lookup(head, env)
    if found is None:
        return None
    obj, method = found
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return None
    params = list(sig.parameters.values())
    if method and not inspect.isclass(obj) and params and params[0].name == "self":
        params = params[1:]
        sig = sig.replace(parameters=params)
    text = quote.text
    if text == f"{head}()":
        return None  # the function's name, as prose writes it
    partial = "..." in text  # the quote leaves parameters (or arguments) out
    text = re.sub(r",\s*\.\.\.(?=\s*\))|(?<=\()\s*\.\.\.\s*,\s*|(?<=\()\s*\.\.\.\s*(?=\))", "", text)
    try:
        call = ast.parse(text, mode="eval").body
    except SyntaxError:
        call = None
    if isinstance(call, ast.Call):
        try:
            (sig.bind_partial if partial else sig.bind)(*[None] * len(call.args),
                                                        **{k.arg: None for k in call.keywords if k.arg})
        except TypeError as exc:
            return f"{quote.text}: {exc}; {head}{sig}"
        named = [a.id for a in call.args if isinstance(a, ast.Name)]
        if not (named and named == [p.name for p in params[:len(call.args)]]
                and any(_is_literal(k.value) for k in call.keywords)):
            return None
        # its parameters' own names, and defaults: a signature written as a call (name=None)
    try:
        fn = ast.parse(f"def {head.rsplit('.', 1)[-1]}{text[len(head):]}: pass").body[0]
    except SyntaxError:
        return None
    assert isinstance(fn, ast.FunctionDef)
    return _compare(quote, head, fn, sig, partial)


def _compare(quote: Quote, head: str, fn: ast.FunctionDef, sig: inspect.Signature, partial: bool) -> str | None:
    real = sig.parameters
    args = fn.args
    shown = [(a, "positional") for a in args.posonlyargs + args.args] + [(a, "keyword") for a in args.kwonlyargs]
    defaults = dict(zip([a.arg for a in args.posonlyargs + args.args][::-1], args.defaults[::-1]))
    defaults.update({a.arg: d for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None})
    names = list(real)
    where = f"{quote.text}: against {head}{sig}"
    order = []
    for a, kind in shown:
        if a.arg not in real:
            return f"{where}: no parameter {a.arg!r}"
        p = real[a.arg]
        order.append(names.index(a.arg))
        if kind == "keyword" and p.kind is not p.KEYWORD_ONLY:
            return f"{where}: {a.arg} is not keyword-only"
        if kind == "positional" and p.kind is p.KEYWORD_ONLY:
            return f"{where}: {a.arg} is keyword-only (after *)"
        if a.annotation is not None and isinstance(p.annotation, str) and \
                _annotation(ast.unparse(a.annotation)) != _annotation(p.annotation):
            return f"{where}: {a.arg} is {p.annotation}, not {ast.unparse(a.annotation)}"
        if a.arg in defaults:
            try:
                value = _literal(defaults[a.arg])
            except (ValueError, TypeError, SyntaxError):
                continue  # a placeholder (workers=N)
            if p.default is p.empty or p.default != value:
                return f"{where}: {a.arg}'s default is {'none' if p.default is p.empty else repr(p.default)}"
    if order != sorted(order):
        return f"{where}: the parameters are in another order"
    missing = [n for n in names if n not in {a.arg for a, _ in shown}
               and real[n].kind not in (real[n].VAR_POSITIONAL, real[n].VAR_KEYWORD)]
    if missing and not partial and fn.args.kwarg is None:  # ``**kw`` in a quote: "and other keywords"
        return f"{where}: it leaves out {', '.join(missing)} (list them, or end the list with ...)"
    if fn.returns is not None and isinstance(sig.return_annotation, str) and \
            _annotation(ast.unparse(fn.returns)) != _annotation(sig.return_annotation):
        return f"{where}: it returns {sig.return_annotation}, not {ast.unparse(fn.returns)}"
    return None


# ------------------------------------------------------------------------------ YAML loaders


def _load_library(path: Path) -> None:
    library.load(str(path))


def _load_recipe(path: Path) -> None:
    recipe.load(str(path))


def _recipe_keys(path: Path) -> None:
    """The recipe's keys and values against schemas/recipe.schema.json (no file it names is read)."""
    errors = list(recipe._validator().iter_errors(yaml.safe_load(path.read_text(encoding="utf-8"))))
    if errors:
        raise ValueError("; ".join(f"{'.'.join(map(str, e.path))}: {e.message}" for e in errors))


def _fit_runs(path: Path) -> None:
    inputs.read_runs_table(path)


def _curriculum(path: Path) -> None:
    curriculum.from_config(yaml.safe_load(path.read_text(encoding="utf-8")))


LOADERS = {
    "library": _load_library,  # an operator library (opgen.library.load)
    "recipe": _load_recipe,  # a recipe (opgen.recipe.load)
    "recipe-keys": _recipe_keys,  # a recipe's keys checked against its schema (files it names not read)
    "fit-runs": _fit_runs,  # opgen fit's --runs table
    "curriculum": _curriculum,  # a curriculum (opgen.curriculum.from_config)
}


def parse_json(text: str):
    """A JSON example, its ``// comments`` (outside strings) taken off."""
    lines = []
    for line in text.splitlines():
        quoted = escaped = False
        for i, ch in enumerate(line):
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = quoted
            elif ch == '"':
                quoted = not quoted
            elif not quoted and line.startswith("//", i):
                line = line[:i]
                break
        lines.append(line)
    return json.loads("\n".join(lines))


# ------------------------------------------------------------------------------- running a page


@dataclass(frozen=True)
class Step:
    kind: str  # "shell" | "python" | "file"
    where: str
    text: str
    given: str = ""
    name: str = ""


def steps(page: Path) -> list[Step]:
    """What running ``page`` does, in its order: commands, Python blocks, files written."""
    out: list[Step] = []
    for b in blocks(page):
        if "file" in b.marks:
            out.append(Step("file", b.where, b.text + "\n", name=b.marks["file"]))
        if b.not_run:
            continue
        if b.lang in SHELL:
            out.extend(Step("shell", c.where, c.text) for c in commands(b) if not c.not_run)
        elif b.lang == "python":
            out.append(Step("python", b.where, b.text, given=b.marks.get("with", "")))
    return out


def runnable(page: Path) -> bool:
    return any(s.kind != "file" for s in steps(page))


_OUT = re.compile(r"--out[ =](out/[\w.-]+)")


def readme_builds() -> dict[str, str]:
    """{build folder: the README command that builds it}."""
    return {m.group(1): s.text for s in steps(ROOT / "README.md") if s.kind == "shell"
            and s.text.startswith("opgen build") and (m := _OUT.search(s.text))}


def needs(page: Path) -> list[str]:
    """The README's build folders that ``page`` uses without building them itself."""
    text = [s.text for s in steps(page) if s.kind != "file"]
    made = {m.group(1) for t in text for m in _OUT.finditer(t)}
    return [d for d in readme_builds() if d not in made and any(re.search(rf"\b{re.escape(d)}\b", t) for t in text)]


def scratch(folder: Path, python: str = sys.executable) -> dict[str, str]:
    """Make ``folder`` look like the checkout for a page's commands; the environment to run them in."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in CHECKOUT:
        link = folder / name
        if not link.exists():
            link.symlink_to(ROOT / name)
    bin_ = folder / ".bin"
    bin_.mkdir(exist_ok=True)
    for name, line in (("opgen", f'exec {shlex.quote(python)} -m opgen "$@"'),
                       ("python", f'exec {shlex.quote(python)} "$@"'), ("python3", f'exec {shlex.quote(python)} "$@"')):
        (bin_ / name).write_text(f"#!/bin/sh\n{line}\n")
        (bin_ / name).chmod(0o755)
    # a library store of the page's own: `opgen ops add` and builds never write the user's
    return {**os.environ, "PATH": f"{bin_}{os.pathsep}{os.environ.get('PATH', '')}",
            "OPGEN_HOME": str(folder / ".opgen-home")}


def run_page(page: Path, folder: Path) -> int:
    """Run ``page``'s steps in ``folder`` (the current process's working directory), stopping at
    the first that fails; print what ran. Called in a subprocess by tests/test_docs_commands.py."""
    env = scratch(folder)
    os.chdir(folder)  # the Python blocks' files too (run by hand from the checkout, it would be the checkout)
    os.environ.update(env)  # the Python blocks run here: the same PATH and library store as the commands
    namespace: dict[str, object] = {"__name__": "__main__"}
    for step in steps(page):
        print(f"{step.where} {step.kind}: {step.name or step.text.splitlines()[0][:100]}", flush=True)
        if step.kind == "file":
            (folder / step.name).parent.mkdir(parents=True, exist_ok=True)
            (folder / step.name).write_text(step.text, encoding="utf-8")
        elif step.kind == "shell":
            try:
                done = subprocess.run(["bash", "-o", "pipefail", "-c", step.text], cwd=folder, env=env,
                                      capture_output=True, text=True, timeout=HANG_S)
            except subprocess.TimeoutExpired:
                print(f"FAILED {step.where}: did not end within {HANG_S} s (hung)\n{step.text}")
                return 1
            if done.returncode != 0:
                print(f"FAILED {step.where}: exit {done.returncode}\n{step.text}\n--- stdout\n{done.stdout[-4000:]}"
                      f"\n--- stderr\n{done.stderr[-4000:]}")
                return 1
        else:
            try:
                exec(compile(step.given + "\n" + step.text, step.where, "exec"), namespace)
            except BaseException as exc:  # any failure of the example is the report
                print(f"FAILED {step.where}: {type(exc).__name__}: {exc}\n{step.text}\n"
                      f"{traceback.format_exc()[-4000:]}")
                return 1
    return 0


def _shown(text: str) -> str:
    return " ".join(re.sub(r"\s#.*", "", text).split())[:100]


def not_run() -> list[str]:
    """One line per documented command or block that is parsed but not run here, with why."""
    out = []
    for b in all_blocks():
        if b.lang in SHELL:
            out += [f"{c.where}: {c.not_run}: {_shown(c.text)}" for c in commands(b) if c.not_run]
        elif b.lang in ("python", "yaml") and b.not_run:
            out.append(f"{b.where}: {b.not_run}: a {b.lang} block")
    return out


def copy_builds(src: Path, dest: Path, folders: list[str]) -> None:
    for d in folders:
        shutil.copytree(src / d, dest / d, symlinks=True)


if __name__ == "__main__":  # python tests/doc_blocks.py PAGE FOLDER
    sys.exit(run_page(ROOT / sys.argv[1], Path(sys.argv[2]).resolve()))
