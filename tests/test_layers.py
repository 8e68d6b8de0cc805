"""The package layers, read from the source: which package may import which, no cycles, no local imports.

The rules (each package's opening docstring states its own):

    specimpl   never imports harness                 core      nothing else of harness
    (every harness package may import specimpl, the floor: samplers and models)
    stats      core                                  laws      stats, core
    controls   laws, stats, core                     verify    controls, laws, stats, core
    speedup    laws, stats, core                     samples   verify's plan and row types (battery, family), and
                                                               controls, laws, stats, core
    api        verify, samples, laws, stats, core    (the Python API; harness/__init__ loads it lazily)

A function-local import of a project module hides a cycle or an upward import; the only ones allowed load
an optional or heavy dependency lazily (ALLOWED_LOCAL).  The test fails on any forbidden edge
(test_the_checker_catches_a_forbidden_import shows it does).
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("harness", "specimpl")
MAY_IMPORT = {
    "harness.core": {"harness.core"},
    "harness.stats": {"harness.stats", "harness.core"},
    "harness.laws": {"harness.laws", "harness.stats", "harness.core"},
    "harness.controls": {"harness.controls", "harness.laws", "harness.stats", "harness.core"},
    "harness.verify": {"harness.verify", "harness.controls", "harness.laws", "harness.stats", "harness.core"},
    "harness.speedup": {"harness.speedup", "harness.laws", "harness.stats", "harness.core"},
    "harness.samples": {"harness.samples", "harness.verify.battery", "harness.verify.family", "harness.controls",
                        "harness.laws", "harness.stats", "harness.core"},
    "harness.api": {"harness.api", "harness.verify", "harness.samples", "harness.laws", "harness.stats",
                    "harness.core"},
    "specimpl": {"specimpl"},
}
for _layer in MAY_IMPORT:  # specimpl (the samplers and their models) is the floor every harness package stands on
    if _layer.startswith("harness."):
        MAY_IMPORT[_layer] = MAY_IMPORT[_layer] | {"specimpl"}
# module -> project module it may import inside a function (an optional/heavy dependency behind it)
ALLOWED_LOCAL = {("specimpl.hf", "specimpl.hf_cache"),  # hf_cache imports transformers; specimpl.hf must not
                 ("harness", "harness.api")}  # `import harness` stays cheap: the API (torch, pandas) loads on first use


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}


def resolve(name: str, known) -> str | None:
    """The longest prefix of ``name`` that is a module (``from a.b import c``: a.b.c if c is a module)."""
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(source: str, known) -> list[tuple[str, int, bool]]:
    """(imported project module, line, inside a function) for every import statement of ``source``."""
    tree = ast.parse(source)
    out = []

    def visit(node, in_func):
        for child in ast.iter_child_nodes(node):
            inner = in_func or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.Import):
                names = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module:
                names = [f"{child.module}.{a.name}" for a in child.names]
            else:
                visit(child, inner)
                continue
            for n in names:
                target = resolve(n, known) if n.split(".")[0] in PACKAGES else None
                if target:
                    out.append((target, child.lineno, in_func))
    visit(tree, False)
    return out


def layer_of(mod: str) -> str | None:
    return max((lay for lay in MAY_IMPORT if mod == lay or mod.startswith(lay + ".")), key=len, default=None)


def allowed(src: str, dst: str) -> bool:
    lay = layer_of(src)
    if lay is None:  # harness/__init__, __main__, cli: the top (commands are named by strings)
        return True
    return any(dst == a or dst.startswith(a + ".") for a in MAY_IMPORT[lay])


def violations(extra: dict[str, str] | None = None) -> list[str]:
    """Every forbidden import; ``extra`` adds source text to a module (for the checker's own test)."""
    known = modules()
    bad = []
    for mod, path in sorted(known.items()):
        src = path.read_text(encoding="utf-8") + ((extra or {}).get(mod, ""))
        for dst, line, local in imports_of(src, known):
            if dst == mod:
                continue
            where = f"{path.relative_to(ROOT)}:{line}"
            if not allowed(mod, dst):
                bad.append(f"{where}: {mod} imports {dst} (layer {layer_of(mod)} may import {sorted(MAY_IMPORT[layer_of(mod)])})")
            if local and (mod, dst) not in ALLOWED_LOCAL:
                bad.append(f"{where}: {mod} imports {dst} inside a function")
    return bad


def cycles() -> list[list[str]]:
    """Strongly connected components (size > 1) of the module-level import graph (Tarjan)."""
    known = modules()
    graph = {m: sorted({d for d, _, _ in imports_of(p.read_text(encoding="utf-8"), known) if d != m})
             for m, p in known.items()}
    index, low, stack, on, comps = {}, {}, [], set(), []

    def strong(v):
        index[v] = low[v] = len(index)
        stack.append(v); on.add(v)
        for w in graph.get(v, []):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))
    for v in graph:
        if v not in index:
            strong(v)
    return comps


def test_every_import_respects_the_layers():
    assert violations() == []


def test_no_import_cycles():
    assert cycles() == []


@pytest.mark.parametrize("mod, line", [
    ("harness.stats.chi2", "\nfrom harness.verify.battery import Accumulator\n"),      # stats reaching up
    ("harness.verify.family", "\nfrom harness.speedup.costmodel import CostModel\n"),   # verify <-> speedup
    ("specimpl.speculative", "\nimport harness.core.errors\n"),                         # specimpl -> harness
    ("harness.laws.ngram", "\ndef f():\n    from harness.laws.rounds import RoundLaw\n"),  # a local import
])
def test_the_checker_catches_a_forbidden_import(mod, line):
    assert violations({mod: line}), f"adding {line.strip()!r} to {mod} must be reported"


def test_every_package_states_what_it_may_import():
    for lay in MAY_IMPORT:
        if lay.startswith("harness."):
            doc = ast.get_docstring(ast.parse((ROOT / lay.replace(".", "/") / "__init__.py").read_text()))
            assert doc and "May import" in doc, f"{lay}/__init__.py must say what it may import"
