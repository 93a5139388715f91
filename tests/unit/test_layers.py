"""The house's layout, pinned: no import loop, no upward import, a short root, small modules.

Imports are read from the source (AST), the deferred ones inside functions included
and those under ``if TYPE_CHECKING:`` left out. A submodule importing an ancestor
package (``from .. import logs``) is not an edge into that package's ``__init__``:
its ancestors are always imported before it anyway.

The layers are listed bottom to top; a module may import its own layer and those
below it, never one above. Each subsystem package's ``__init__`` docstring says the
same in words (ARCHITECTURE.md has the map).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = "dormant"

#: Bottom to top. A module's layer is that of the longest prefix listed here; an entry
#: starting with "=" is one module, not a prefix.
LAYERS: tuple[tuple[str, ...], ...] = (
    # the vocabulary every layer uses
    (
        "dormant.errors",
        "dormant.records",
        "dormant.logs",
        "dormant.urls",
        "dormant.metrics",
        "dormant.text",
        "dormant.config",
        "dormant.tokens",
        "dormant.inbox",
        # content parts: their records, checks and model rendering (models use them)
        "dormant.parts",
    ),
    ("dormant.models",),
    ("dormant.tenants",),
    ("dormant.tools",),
    ("dormant.approvals",),
    ("dormant.journal",),
    ("dormant.memory",),
    ("dormant.view",),
    ("dormant.subject", "dormant.agent"),
    ("dormant.store",),
    # the user's handle on long-term memory (Memory.open opens a store by URL), and the
    # memory package's public names, which include it ("=": that module only)
    ("dormant.memory.facade", "=dormant.memory"),
    ("dormant.slices", "dormant.retention"),
    ("dormant.governor",),
    ("dormant.ops",),
    ("dormant.runtime",),
    ("dormant.server",),
    ("dormant.cli", "dormant.bench"),
    # the public API re-exports from every layer
    ("dormant",),
)

MAX_ROOT_MODULES = 15
MAX_MODULE_LINES = 600


def modules() -> dict[str, tuple[Path, bool]]:
    """Every module of the package: dotted name -> (file, is a package)."""
    found: dict[str, tuple[Path, bool]] = {}
    for path in (SRC / PACKAGE).rglob("*.py"):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts = parts[:-1]
        found[".".join(parts)] = (path, is_package)
    return found


def _type_checking_nodes(tree: ast.Module) -> set[int]:
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", "")
            if name == "TYPE_CHECKING":
                for child in node.body:
                    skipped.update(id(n) for n in ast.walk(child))
    return skipped


def _targets(node: ast.Import | ast.ImportFrom, base: str) -> Iterator[str]:
    if isinstance(node, ast.Import):
        yield from (alias.name for alias in node.names)
        return
    if node.level:
        parts = base.split(".")
        parts = parts[: len(parts) - (node.level - 1)]
        module = ".".join(parts + ([node.module] if node.module else []))
    else:
        module = node.module or ""
    yield module
    for alias in node.names:
        yield f"{module}.{alias.name}"


def import_graph() -> dict[str, set[str]]:
    """Run-time import edges between the package's modules (deferred ones included)."""
    mods = modules()
    edges: dict[str, set[str]] = {name: set() for name in mods}
    for name, (path, is_package) in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        skipped = _type_checking_nodes(tree)
        base = name if is_package else name.rsplit(".", 1)[0]
        for node in ast.walk(tree):
            if id(node) in skipped or not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            for target in _targets(node, base):
                while target and target not in mods:
                    target = target.rsplit(".", 1)[0] if "." in target else ""
                if not target or target == name:
                    continue
                if mods[target][1] and name.startswith(target + "."):
                    continue  # an ancestor package: imported before this module anyway
                edges[name].add(target)
    return edges


def loops(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for root in edges:
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of the longest prefix of ``module``."""
    best, best_len = -1, -1
    for i, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if prefix.startswith("="):
                if module == prefix[1:]:
                    return i
            elif (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = i, len(prefix)
    return best


def test_no_import_loop() -> None:
    assert loops(import_graph()) == []


def test_every_module_has_a_layer() -> None:
    unplaced = [m for m in modules() if layer_of(m) < 0]
    assert unplaced == []


def test_no_upward_import() -> None:
    upward = sorted(
        f"{source} -> {target}"
        for source, targets in import_graph().items()
        for target in targets
        if layer_of(target) > layer_of(source)
    )
    assert upward == []


def test_a_short_root() -> None:
    root = [m for m, (_, is_package) in modules().items() if m.count(".") == 1 and not is_package]
    assert len(root) <= MAX_ROOT_MODULES, sorted(root)


def test_no_module_over_600_lines() -> None:
    long = {
        name: n
        for name, (path, _) in modules().items()
        if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


def test_every_subsystem_says_what_it_owns() -> None:
    silent = [
        name
        for name, (path, is_package) in modules().items()
        if is_package and name.count(".") == 1 and not ast.get_docstring(ast.parse(path.read_text()))
    ]
    assert silent == []


@pytest.mark.parametrize(
    ("edges", "loop"),
    [
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}, [["a", "b", "c"]]),
        ({"a": {"b"}, "b": set()}, []),
    ],
)
def test_the_loop_finder_finds_loops(edges: dict[str, set[str]], loop: list[list[str]]) -> None:
    assert loops(edges) == loop


def test_layers_order_the_packages() -> None:
    assert (
        layer_of("dormant.errors") < layer_of("dormant.store.sqlite.backend") < layer_of("dormant.cli.main")
    )
    assert layer_of("dormant.memory.facade") > layer_of("dormant.store") > layer_of("dormant.memory.core")
