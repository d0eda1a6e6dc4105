#!/usr/bin/env python3
"""The house's structural figures (issue 27), measured on the source tree, with a ratchet.

Figures (on ``src/dpopt`` unless said otherwise):

* module size: lines per module (limit 1,000);
* function size: body lines of every function and method, without its docstring (limit 150);
* parameters per function, ``self``/``cls`` not counted (limit 16; the ``__init__`` of
  scikit-learn estimators is exempt: their parameters are their hyper-parameters);
* import cycles among dpopt modules, imports inside functions included (``if TYPE_CHECKING:``
  imports excluded: they never run): every module in a cycle, with the size of its cycle (the
  strongly connected component of the import graph);
* ``BaseException``: classes deriving from it and ``raise BaseException(...)`` (errors derive from
  ``dpopt.DPOptError``);
* control flow on error-message text: ``"..." in str(err)``, ``str(exc) == ...``,
  ``re.search(..., str(e))``, ``str(e).startswith(...)``, also through a variable holding
  ``str(err)``, where ``err`` is an ``except ... as err`` name, a parameter annotated with an
  exception type, or named ``e``/``err``/``exc``/``error``/``ex``;
* ``ruff format --check .`` over the repository (files it would reformat).

It prints a table of the figures and the offenders, and compares the offenders with the checked-in
baseline ``tools/house_baseline.json`` (today's known offenders and their sizes).  It exits 1 when an
offender is new or has grown, and when a baseline entry is fixed or has shrunk (so that the baseline
only shrinks: rerun with ``--shrink-baseline``, which removes fixed entries and lowers shrunk ones
but never adds or raises one); otherwise 0.  Standard library only (``ast``); ruff is run when
installed.

Usage: ``python3 tools/house_figures.py [--root DIR] [--baseline FILE] [--no-ruff] [--shrink-baseline]``
"""

from __future__ import annotations

import argparse
import ast
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

MODULE_LINES = 1000
FUNCTION_LINES = 150
PARAMETERS = 16
ERROR_NAMES = frozenset({"e", "err", "exc", "error", "ex"})
RE_FUNCTIONS = frozenset({"search", "match", "fullmatch", "findall", "finditer", "sub", "split"})
TEXT_METHODS = frozenset({"startswith", "endswith", "find", "index", "count", "__contains__"})
SKLEARN_BASES = frozenset({"BaseEstimator"})

CATEGORIES = {
    "module_lines": f"modules over {MODULE_LINES} lines",
    "function_lines": f"function bodies over {FUNCTION_LINES} lines (docstring excluded)",
    "parameters": f"functions with over {PARAMETERS} parameters",
    "import_cycles": "modules in an import cycle (value: modules in the cycle)",
    "base_exceptions": "BaseException subclasses and raises",
    "error_text_control_flow": "control flow on error-message text",
    "ruff_format": "files `ruff format --check` would reformat",
}

Figures = dict[str, dict[str, int]]


# ------------------------------------------------------------------------------ source files
class Module:
    """One parsed source module: its path relative to the root, dotted name and tree."""

    def __init__(self, root: Path, path: Path, package_root: Path):
        self.rel = path.relative_to(root).as_posix()
        parts = list(path.relative_to(package_root.parent).with_suffix("").parts)
        self.is_package = parts[-1] == "__init__"
        if self.is_package:
            parts.pop()
        self.name = ".".join(parts)
        self.text = path.read_text(encoding="utf-8")
        self.tree = ast.parse(self.text, filename=self.rel)


def load_modules(root: Path, package: str = "src/dpopt") -> list[Module]:
    package_root = root / package
    return [Module(root, p, package_root) for p in sorted(package_root.rglob("*.py"))]


def functions(
    tree: ast.AST,
) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef, ast.ClassDef | None]]:
    """``(qualified name, function, enclosing class or None)`` for every function, nested ones too."""

    def walk(
        node: ast.AST, prefix: str, cls: ast.ClassDef | None
    ) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef, ast.ClassDef | None]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                yield name, child, cls
                yield from walk(child, f"{name}.", None)
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.", child)
            else:
                yield from walk(child, prefix, cls)

    seen: dict[str, int] = {}
    for name, fn, cls in walk(tree, "", None):
        seen[name] = seen.get(name, 0) + 1  # redefinitions (property setters, branches) get #2, #3
        yield (name if seen[name] == 1 else f"{name}#{seen[name]}"), fn, cls


# ------------------------------------------------------------------------------ sizes
def body_lines(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines from the first statement after the docstring to the end of the function."""
    body = fn.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        if isinstance(body[0].value.value, str):
            body = body[1:]
    if not body:
        return 0
    first = body[0]
    start = min([first.lineno, *(d.lineno for d in getattr(first, "decorator_list", []))])
    return (fn.end_lineno or fn.lineno) - start + 1


def sklearn_estimators(modules: list[Module]) -> set[str]:
    """Names of the classes deriving (through classes of the package) from scikit-learn's BaseEstimator."""
    bases: dict[str, set[str]] = {}
    for m in modules:
        for node in ast.walk(m.tree):
            if isinstance(node, ast.ClassDef):
                names = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
                bases.setdefault(node.name, set()).update(names)
    found: set[str] = set()
    changed = True
    while changed:
        changed = False
        for cls, bs in bases.items():
            if cls not in found and bs & (SKLEARN_BASES | found):
                found.add(cls)
                changed = True
    return found


def parameter_count(fn: ast.FunctionDef | ast.AsyncFunctionDef, in_class: bool) -> int:
    a = fn.args
    names = [*a.posonlyargs, *a.args]
    static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in fn.decorator_list)
    skip = 1 if in_class and not static and names and names[0].arg in ("self", "cls", "mcs") else 0
    return len(names) - skip + len(a.kwonlyargs) + (a.vararg is not None) + (a.kwarg is not None)


def size_figures(modules: list[Module]) -> Figures:
    estimators = sklearn_estimators(modules)
    out: Figures = {"module_lines": {}, "function_lines": {}, "parameters": {}}
    for m in modules:
        lines = len(m.text.splitlines())
        if lines > MODULE_LINES:
            out["module_lines"][m.rel] = lines
        for name, fn, cls in functions(m.tree):
            size = body_lines(fn)
            if size > FUNCTION_LINES:
                out["function_lines"][f"{m.rel}::{name}"] = size
            count = parameter_count(fn, cls is not None)
            exempt = cls is not None and fn.name == "__init__" and cls.name in estimators
            if count > PARAMETERS and not exempt:
                out["parameters"][f"{m.rel}::{name}"] = count
    return out


# ------------------------------------------------------------------------------ import cycles
def _type_checking_blocks(tree: ast.AST) -> set[int]:
    """ids of the import nodes under ``if TYPE_CHECKING:`` (they never run)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", "")
            if name == "TYPE_CHECKING":
                skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skip


def import_graph(modules: list[Module]) -> dict[str, set[str]]:
    """Edges module -> dpopt module it imports (anywhere in its code, functions included)."""
    names = {m.name for m in modules}
    graph: dict[str, set[str]] = {m.name: set() for m in modules}
    for m in modules:
        skip = _type_checking_blocks(m.tree)
        package = m.name if m.is_package else m.name.rpartition(".")[0]
        for node in ast.walk(m.tree):
            if id(node) in skip:
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*up, base] if base else up)
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.append(sub if sub in names else base)
            for t in targets:
                while t and t not in names:  # `import dpopt.a.b` names dpopt.a.b; unknown tails drop
                    t = t.rpartition(".")[0]
                if t and t != m.name:
                    graph[m.name].add(t)
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components (iterative), those with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return sorted(out)


# ------------------------------------------------------------------------------ error handling
def _is_str_of(node: ast.AST, errors: set[str]) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "str"
        and len(node.args) == 1
        and isinstance(node.args[0], ast.Name)
        and node.args[0].id in errors
    )


def _mentions_text(node: ast.AST, errors: set[str], tainted: set[str]) -> bool:
    return any(_is_str_of(n, errors) or (isinstance(n, ast.Name) and n.id in tainted) for n in ast.walk(node))


def _error_names(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    names = set(ERROR_NAMES)
    for a in [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]:
        ann = ast.unparse(a.annotation) if a.annotation is not None else ""
        if "Exception" in ann or "Error" in ann:
            names.add(a.arg)
    names.update(n.name for n in ast.walk(fn) if isinstance(n, ast.ExceptHandler) and n.name)
    return names


def error_text_uses(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Comparisons, ``re`` matches and prefix tests on an error's message text in ``fn``."""
    errors = _error_names(fn)
    tainted: set[str] = set()
    for node in ast.walk(fn):  # names holding (a transform of) str(err)
        if isinstance(node, ast.Assign) and _mentions_text(node.value, errors, set()):
            tainted.update(t.id for t in node.targets if isinstance(t, ast.Name))
    count = 0
    for node in ast.walk(fn):
        if isinstance(node, ast.Compare) and any(
            isinstance(op, ast.In | ast.NotIn | ast.Eq | ast.NotEq) for op in node.ops
        ):
            count += any(_mentions_text(x, errors, tainted) for x in [node.left, *node.comparators])
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            f = node.func
            is_re = isinstance(f.value, ast.Name) and f.value.id == "re" and f.attr in RE_FUNCTIONS
            if is_re and any(_mentions_text(a, errors, tainted) for a in node.args[1:2]):
                count += 1
            elif f.attr in TEXT_METHODS and _mentions_text(f.value, errors, tainted):
                count += 1
    return count


def error_figures(modules: list[Module]) -> Figures:
    base: set[str] = {"BaseException"}
    classes = [(m, n) for m in modules for n in ast.walk(m.tree) if isinstance(n, ast.ClassDef)]
    changed = True
    while changed:  # classes deriving from BaseException through classes of the package
        changed = False
        for _, node in classes:
            names = {b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases}
            if node.name not in base and names & base:
                base.add(node.name)
                changed = True
    out: Figures = {"base_exceptions": {}, "error_text_control_flow": {}}
    for m, node in classes:
        if node.name in base:
            out["base_exceptions"][f"{m.rel}::class {node.name}"] = 1
    for m in modules:
        for name, fn, _ in functions(m.tree):
            raises = sum(
                1
                for n in ast.walk(fn)
                if isinstance(n, ast.Raise)
                and n.exc is not None
                and (n.exc.func if isinstance(n.exc, ast.Call) else n.exc).__class__ is ast.Name
                and getattr(n.exc.func if isinstance(n.exc, ast.Call) else n.exc, "id", "") == "BaseException"
            )
            if raises:
                out["base_exceptions"][f"{m.rel}::raise in {name}"] = raises
            uses = error_text_uses(fn)
            if uses:
                out["error_text_control_flow"][f"{m.rel}::{name}"] = uses
    return out


# ------------------------------------------------------------------------------ ruff format
def ruff_figures(root: Path) -> tuple[Figures, str]:
    ruff = shutil.which("ruff")
    command = [ruff] if ruff else [sys.executable, "-m", "ruff"]
    try:
        proc = subprocess.run(
            [*command, "format", "--check", "."], cwd=root, capture_output=True, text=True, timeout=300
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {}, f"ruff format --check not run ({type(exc).__name__})"
    if proc.returncode not in (0, 1):
        return {}, "ruff format --check not run (ruff is not installed or failed)"
    files = {
        line.removeprefix("Would reformat: ").strip(): 1
        for line in proc.stdout.splitlines()
        if line.startswith("Would reformat: ")
    }
    return {"ruff_format": files}, ""


# ------------------------------------------------------------------------------ report
def measure(root: Path, *, ruff: bool = True) -> tuple[Figures, dict[str, object], list[str]]:
    modules = load_modules(root)
    figures: Figures = {}
    figures.update(size_figures(modules))
    graph = import_graph(modules)
    cycles = strongly_connected(graph)
    figures["import_cycles"] = {m: len(c) for c in cycles for m in c}
    figures.update(error_figures(modules))
    notes: list[str] = []
    if ruff:
        found, note = ruff_figures(root)
        figures.update(found)
        if note:
            notes.append(note)
    totals: dict[str, object] = {
        "modules": len(modules),
        "largest module": max((len(m.text.splitlines()), m.rel) for m in modules),
        "longest function body": max(
            ((body_lines(fn), f"{m.rel}::{n}") for m in modules for n, fn, _ in functions(m.tree)),
            default=(0, ""),
        ),
        "import edges": sum(len(v) for v in graph.values()),
        "import cycles": [" <-> ".join(c) for c in cycles],
    }
    return figures, totals, notes


def compare(figures: Figures, baseline: Figures, skipped: set[str]) -> tuple[list[str], list[str]]:
    """``(regressions, stale baseline entries)``."""
    regressions: list[str] = []
    stale: list[str] = []
    for cat in CATEGORIES:
        if cat in skipped:
            continue
        now, then = figures.get(cat, {}), baseline.get(cat, {})
        for key, value in sorted(now.items()):
            if key not in then:
                regressions.append(f"new {cat}: {key} ({value})")
            elif value > then[key]:
                regressions.append(f"grown {cat}: {key} ({then[key]} -> {value})")
        for key, value in sorted(then.items()):
            if key not in now:
                stale.append(f"fixed {cat}: {key} (was {value}): remove it from the baseline")
            elif now[key] < value:
                stale.append(f"shrunk {cat}: {key} ({value} -> {now[key]}): lower it in the baseline")
    return regressions, stale


def shrink(figures: Figures, baseline: Figures, skipped: set[str]) -> Figures:
    """The baseline without fixed entries and with shrunk ones lowered (never adds or raises)."""
    out: Figures = {}
    for cat in CATEGORIES:
        then = baseline.get(cat, {})
        if cat in skipped:
            out[cat] = dict(then)
            continue
        now = figures.get(cat, {})
        out[cat] = {k: min(v, now[k]) for k, v in sorted(then.items()) if k in now}
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    here = Path(__file__).resolve().parent
    parser.add_argument("--root", type=Path, default=here.parent, help="repository root")
    parser.add_argument("--baseline", type=Path, default=None, help="default: tools/house_baseline.json")
    parser.add_argument("--no-ruff", action="store_true", help="skip `ruff format --check`")
    parser.add_argument(
        "--shrink-baseline", action="store_true", help="remove fixed entries, lower shrunk ones, then check"
    )
    args = parser.parse_args(argv)
    root = args.root.resolve()
    baseline_path = args.baseline or root / "tools" / "house_baseline.json"
    figures, totals, notes = measure(root, ruff=not args.no_ruff)
    skipped = {"ruff_format"} if args.no_ruff or "ruff_format" not in figures else set()
    baseline: Figures = json.loads(baseline_path.read_text()) if baseline_path.is_file() else {}
    if args.shrink_baseline:
        baseline = shrink(figures, baseline, skipped)
        baseline_path.write_text(json.dumps(baseline, indent=2, sort_keys=True) + "\n")
        print(f"wrote {baseline_path}")

    print("house figures (issue 27)")
    for key, value in totals.items():
        print(f"  {key}: {value}")
    print(f"\n  {'figure':<62} {'now':>5} {'baseline':>9}")
    for cat, title in CATEGORIES.items():
        shown = "skipped" if cat in skipped else str(len(figures.get(cat, {})))
        print(f"  {title:<62} {shown:>5} {len(baseline.get(cat, {})):>9}")
    for cat, title in CATEGORIES.items():
        if figures.get(cat):
            print(f"\n{title}:")
            for key, value in sorted(figures[cat].items(), key=lambda kv: (-kv[1], kv[0])):
                print(f"  {value:>6}  {key}")
    for note in notes:
        print(f"\nnote: {note}")
    regressions, stale = compare(figures, baseline, skipped)
    if regressions or stale:
        print(f"\nFAIL against {baseline_path.name}:")
        for line in regressions + stale:
            print(f"  {line}")
        if stale:
            print("  (run `python3 tools/house_figures.py --shrink-baseline` to drop fixed entries)")
        return 1
    print(f"\nOK: no offender is new or larger than in {baseline_path.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
