"""The package reads in the order the data flows: no module imports one above it.

Every ``import`` of hiseg code (at the top of a module or inside a function; imports under
``if TYPE_CHECKING:`` are for annotations only and are skipped) must go to a unit listed
*before* the importing one. A new module must be placed in the order to pass.

Two modules rank apart from their sub-package (``LOWERED``): ``hiseg.metrics.hierarchy``
(dendrogram purity, Dasgupta's cost) is core-level code (numpy, higra, :mod:`hiseg.core.graph`)
that the clustering estimator uses (``score_hierarchy``, the label-free choice of fit in
``hiseg.clustering.auto``), while the rest of ``hiseg.metrics`` is the image benchmark
above the segmentation layer. The measures belong with the other metrics (one place to find
every measure, as issue 30 asks) and the estimator must not import upward, so the module is
placed just below ``clustering``: it may import only what ``clustering`` may, and no other
module of ``hiseg.metrics`` (nor may they import anything above it, which they do not need).
``hiseg.metrics.entropy`` (Li & Pan's structural entropy, by which the estimator may
choose a hierarchy) is placed the same way, just above ``hiseg.metrics.hierarchy``, whose
``as_tree`` it reads. ``hiseg.export.manifest``, ``hiseg.export.guard`` and ``hiseg.export.runtime`` (an
exported folder's manifest, the check of its graphs and its onnxruntime backend) rank just below
``segmentation``: the Segmenter
runs them as one of its backends, while the exporter (``hiseg.export.onnx``) loads models
through the Segmenter and stays above it.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "hiseg"

#: top-level units, bottom first: the core, then the image side, then learning, then the surface
ORDER = ["_compat", "_params", "_shipped", "_lifetime", "_openmp", "io", "core", "clustering", "models", "segmentation",
         "metrics", "data", "training", "explorer", "export", "cli"]
#: modules inside the sub-packages, bottom first
SUB_ORDER = {
    "io": ["errors", "layout", "images", "labels", "files"],
    "core": ["_lazy", "_neighbors", "device", "graph", "builders", "lca", "ultrametric", "average_linkage", "ward",
             "cuts", "soft_cardinal", "triplets", "losses", "fitting"],
    "clustering": ["labels", "plotting", "refine", "auto", "params", "candidates", "estimator"],
    "models": ["weights", "fold", "boundary_net", "pdc_net", "backbone_net", "ensemble"],
    "segmentation": ["superpixels", "pooling", "merging", "saliency", "hostpool",
                     "pipeline", "backends", "result", "segmenter", "external", "record", "outputs", "predict_ddp"],
    "metrics": ["ratios", "summary", "_kernels_py", "kernels", "matching", "validation", "tables", "fop", "region", "seism",
                "predictions", "bsds", "report", "kcut", "hierarchy", "entropy"],
    "data": ["transforms", "targets", "synthetic", "folder", "bsds", "cache", "collate", "graphs", "datamodule", "edges"],
    "training": ["callbacks", "steps", "module", "config_files", "configs", "summary", "run_folders", "help_texts", "cli",
                 "help_render"],
    "explorer": ["page"],
    "export": ["manifest", "guard", "runtime", "onnx"],
    "cli": ["options", "record", "predict", "view", "evaluate", "ensemble", "export", "train", "__main__"],
}
#: modules of a package inside a sub-package, bottom first (they rank as that package among the
#: sub-package's modules, and among themselves in this order)
NESTED_ORDER = {("metrics", "kernels"): ["_jit", "thinning", "lapjvsp", "assignment", "labels", "contingency"]}
#: modules ranked apart from their sub-package: (package, module) -> the top-level unit they
#: sit just below (see the module docstring for why)
LOWERED = {("metrics", "hierarchy"): "clustering", ("metrics", "entropy"): "clustering",
           ("export", "manifest"): "segmentation", ("export", "guard"): "segmentation",
           ("export", "runtime"): "segmentation"}


def _imports(tree: ast.AST, package: list[str]):
    """Absolute dotted names of the hiseg modules (or names) imported by ``tree``."""
    def walk(node):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from (x for child in node.orelse for x in walk(child))
            return
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            yield from ([f"{mod}.{a.name}" for a in node.names] if not node.module else [mod])
        elif isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        for child in ast.iter_child_nodes(node):
            yield from walk(child)
    return [m for m in walk(tree) if m.split(".")[0] == "hiseg"]


def _rank(parts: list[str]):
    """(top-level rank, rank inside its sub-package, rank inside a package of it) of a module path
    under hiseg."""
    top = parts[0] if parts else "__init__"
    if tuple(parts[:2]) in LOWERED:  # ranks just below that unit, first of its own package (in LOWERED's order)
        return ORDER.index(LOWERED[tuple(parts[:2])]) - 0.5, list(LOWERED).index(tuple(parts[:2])) - len(LOWERED), None
    if top not in ORDER:
        return None
    sub = SUB_ORDER.get(top)
    inner = sub.index(parts[1]) if sub and len(parts) > 1 and parts[1] in sub else None
    nested = NESTED_ORDER.get(tuple(parts[:2]))
    deep = nested.index(parts[2]) if nested and len(parts) > 2 and parts[2] in nested else None
    return ORDER.index(top), inner, deep


def _modules():
    for p in sorted(PKG.rglob("*.py")):
        rel = list(p.relative_to(PKG).with_suffix("").parts)
        yield p, rel


def test_every_module_has_a_place():
    missing = []
    for _, rel in _modules():
        if rel[-1] == "__init__":
            continue
        if rel[0] not in ORDER or (rel[0] in SUB_ORDER and rel[1] not in SUB_ORDER[rel[0]]) or (
                len(rel) > 2 and rel[2] not in NESTED_ORDER.get(tuple(rel[:2]), [])):
            missing.append("/".join(rel))
    assert not missing, f"modules not placed in tests/package/test_layers.py's ORDER / SUB_ORDER: {missing}"


@pytest.mark.parametrize("path, rel", list(_modules()), ids=lambda x: "/".join(x) if isinstance(x, list) else "")
def test_imports_run_downward(path, rel):
    if rel[-1] == "__init__":
        return  # a package's __init__ re-exports its own modules
    own = _rank(rel)
    package = ["hiseg"] + rel[:-1]
    upward = []
    for target in _imports(ast.parse(path.read_text()), package):
        parts = target.split(".")[1:]
        r = _rank(parts)
        if r is None or parts[0] == rel[0] and (own[1] is None or r[1] is None):
            continue  # the package itself (``import hiseg``) or an unordered sibling
        if parts[:2] == rel[:2] and len(rel) > 2:  # inside one package of a sub-package
            if r[2] is None or own[2] is None or r[2] >= own[2]:
                upward.append(target)
        elif parts[0] == rel[0]:
            if r[1] >= own[1]:
                upward.append(target)
        elif r[0] >= own[0]:
            upward.append(target)
    assert not upward, f"hiseg/{'/'.join(rel)}.py imports from above it: {upward}"


def test_the_core_is_self_contained():
    """The paper's layer (``hiseg.core``) imports no other part of hiseg, at the top of a module
    or inside a function: it can be read, tested and reused alone (its one helper, the lazy torch
    import that keeps the onnxruntime path torch-free, lives inside it)."""
    outside = {f"core/{'/'.join(rel[1:])}.py": target for path, rel in _modules() if rel[0] == "core"
               for target in _imports(ast.parse(path.read_text()), ["hiseg"] + rel[:-1])
               if target.split(".")[:2] != ["hiseg", "core"]}
    assert not outside, f"hiseg.core imports from outside itself: {outside}"


def test_no_private_higra_call():
    """hiseg uses higra's public API only (no ``hg.cpp._...``): a higra release may rename
    its private functions at any time (see benchmarks/results/bpt_canonical.md)."""
    import re

    call = re.compile(r"\b(hg|higra)\.cpp\._\w+\s*\(")
    hits = [f"{p.relative_to(PKG.parent)}:{i + 1}" for p in sorted(PKG.rglob("*.py"))
            for i, line in enumerate(p.read_text().splitlines()) if call.search(line.split("#")[0])]
    assert not hits, f"private higra calls: {hits}"


#: the longest a function of hiseg/ may be (its whole ``def``, docstring included), and the
#: exceptions, each with its reason (issue 30: "no function over ~80 lines except where a
#: comment says why")
MAX_FUNCTION_LINES = 80
LONG_FUNCTIONS = {
    "core/builders.py:knn_graph": "its docstring is 47 of its 96 lines (the neighbour search and spanning edges "
                             "chosen per size, with their measured costs); the code is 49 lines",
    "metrics/bsds.py:evaluate": "its docstring is 57 of its 96 lines (every key of the result, as hiseg evaluate's "
                                "results.json holds them); the code is 30 lines, its steps in helpers",
}


def _functions():
    """(``path:qualified name``, lines of the whole def) of every function of hiseg/."""
    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    yield name, child.end_lineno - child.lineno + 1
                yield from walk(child, f"{name}.")
            else:
                yield from walk(child, prefix)

    for p, rel in _modules():
        for name, n in walk(ast.parse(p.read_text()), ""):
            yield f"{'/'.join(rel)}.py:{name}", n


def test_no_function_over_80_lines_without_a_reason():
    long = {name: n for name, n in _functions() if n > MAX_FUNCTION_LINES}
    unexplained = {k: v for k, v in long.items() if k not in LONG_FUNCTIONS}
    assert not unexplained, (f"functions over {MAX_FUNCTION_LINES} lines: {unexplained}; split them, or add "
                             "them to LONG_FUNCTIONS with the reason")
    stale = sorted(set(LONG_FUNCTIONS) - set(long))
    assert not stale, f"LONG_FUNCTIONS lists functions no longer over {MAX_FUNCTION_LINES} lines: {stale}"
    assert all(isinstance(r, str) and len(r) > 20 for r in LONG_FUNCTIONS.values()), "each exception needs a reason"


def test_the_package_root_holds_at_most_five_modules():
    """The tree shows the architecture (issue 40): the stages are packages; the root keeps at most five
    small modules besides ``__init__`` / ``__main__`` (shared tables and helpers below every stage)."""
    loose = sorted(p.name for p in PKG.glob("*.py") if p.name not in ("__init__.py", "__main__.py"))
    assert len(loose) <= 5, f"hiseg/ holds {len(loose)} loose modules: {loose}"


#: ``from X import _name`` across module borders that stay, each with its reason (issue 54: "no
#: module imports another module's private names")
PRIVATE_IMPORTS: dict = {}


def _private_imports(path: Path, rel: list[str]):
    """``"rel.py: module.name"`` of every ``from X import _name`` (anywhere in the module) where X
    is another hiseg module and ``_name`` is not a module itself (``from hiseg.core import
    _neighbors`` imports a private *module*, whose public names are fine) nor a dunder."""
    package = ["hiseg"] + rel[:-1]
    own = ".".join(["hiseg"] + (rel[:-1] if rel[-1] == "__init__" else rel))
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.ImportFrom):
            continue
        base = package[: len(package) - node.level + 1] if node.level else []
        mod = ".".join(base + ([node.module] if node.module else []))
        if mod.split(".")[0] != "hiseg" or mod == own:
            continue
        folder = PKG.parent.joinpath(*mod.split("."))
        for alias in node.names:
            name = alias.name
            if not name.startswith("_") or name.startswith("__") and name.endswith("__"):
                continue
            if (folder / f"{name}.py").exists() or (folder / name / "__init__.py").exists():
                continue  # a private module of that package
            yield f"{'/'.join(rel)}.py: {mod}.{name}"


def test_no_module_imports_another_modules_private_names():
    found = {hit for path, rel in _modules() for hit in _private_imports(path, rel)}
    unexplained = sorted(found - set(PRIVATE_IMPORTS))
    assert not unexplained, (f"private names imported across module borders: {unexplained}; give the shared "
                             "helper a public name (in its module or a small module of one purpose), or add it to "
                             "PRIVATE_IMPORTS with the reason")
    stale = sorted(set(PRIVATE_IMPORTS) - found)
    assert not stale, f"PRIVATE_IMPORTS lists imports that no longer exist: {stale}"
    assert all(isinstance(r, str) and len(r) > 20 for r in PRIVATE_IMPORTS.values()), "each exception needs a reason"
