"""No import cycles anywhere in the msprobe package.

Every module's imports at module level (``if TYPE_CHECKING:`` blocks included: a cycle that only the
type checker sees still ties two modules together) are read with ``ast``; imports inside functions are
left out (they run late, on purpose). A cycle is any strongly connected group of modules.
"""

from __future__ import annotations

import ast
from pathlib import Path

import msprobe

ROOT = Path(msprobe.__file__).resolve().parent
PACKAGE = "msprobe"


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _top_level_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Imports of the module body, also inside module-level if/try blocks, never inside a def."""
    out: list[ast.Import | ast.ImportFrom] = []
    todo: list[ast.stmt] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            out.append(node)
        elif isinstance(node, ast.If | ast.Try):
            todo.extend(node.body)
            todo.extend(node.orelse)
            if isinstance(node, ast.Try):
                todo.extend(node.finalbody)
                for handler in node.handlers:
                    todo.extend(handler.body)
    return out


def _resolve(name: str, modules: set[str]) -> str | None:
    """The msprobe module ``name`` refers to (``a.b.c`` may be the attribute ``c`` of module ``a.b``)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def import_graph() -> dict[str, set[str]]:
    files = {_module_name(p): p for p in ROOT.rglob("*.py")}
    modules = set(files)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for mod, path in files.items():
        is_pkg = path.name == "__init__.py"
        for node in _top_level_imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                if node.level:
                    base = mod.split(".")
                    base = base if is_pkg else base[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    head = ".".join([*base, node.module] if node.module else base)
                else:
                    head = node.module or ""
                # ``from pkg import sub``: the submodule when there is one, else the package
                targets = [f"{head}.{a.name}" for a in node.names]
            for target in targets:
                if not target.startswith(PACKAGE):
                    continue
                dep = _resolve(target, modules)
                if dep is not None and dep != mod and not mod.startswith(dep + "."):
                    graph[mod].add(dep)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(graph[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph[nxt])))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    group.append(m)
                    if m == node:
                        break
                if len(group) > 1:
                    out.append(sorted(group))
    return out


def test_the_walk_sees_the_whole_package() -> None:
    graph = import_graph()
    assert len(graph) == len(list(ROOT.rglob("*.py")))
    assert "msprobe.dump.pytorch.encode" in graph["msprobe.dump.pytorch.service"]  # a known edge


def test_a_cycle_is_found() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles() -> None:
    found = cycles(import_graph())
    assert found == [], "import cycles: " + "; ".join(" <-> ".join(c) for c in found)
