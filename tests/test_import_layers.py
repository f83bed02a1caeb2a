"""The runtime (fa2triton) imports nothing from the lab, and the import graph over runtime and lab has no circle.

The graph is read from the source with ast, nothing imported: every `import` and `from ... import` statement counts,
those inside functions too (an import made on first use still ties the two modules). An edge goes to the module an
import names (for `from X import Y`, X.Y where that is a module, else X); names outside the walked tree (torch, the
standard library, a kernel imported by its plain name from PYTHONPATH) make no edge. The runtime's imports from
outside the tree are also held to what `pip install .` brings without the lab's extras. The walker itself is tested
on synthetic trees below, so that a real violation cannot pass unseen.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
RUNTIME = ("fa2triton",)
LAB = ("fa2lab", "harness", "sweeps", "profiling", "figures", "report", "experiments", "scripts", "tasks")
RUNTIME_DEPENDENCIES = {"torch", "triton", "numpy"}   # pyproject's dependencies; the lab's extras are not among them


def module_names(root: Path, tops) -> dict[str, Path]:
    """Dotted name -> file for every .py under root/<top> (or root/<top>.py); a package's __init__ is the package."""
    out = {}
    for top in tops:
        paths = [root / f"{top}.py"] if (root / f"{top}.py").is_file() else sorted((root / top).rglob("*.py"))
        for path in paths:
            parts = path.relative_to(root).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imported(path: Path, name: str) -> list[tuple[str, ...]]:
    """What `path` (module `name`) imports, relative imports resolved: per imported name its candidates in order of
    preference, `from X import Y` as (X.Y, X) (Y a submodule, else a name in X), `import X.Y` as (X.Y,)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(a.name,) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            out += [(f"{base}.{a.name}", base) for a in node.names]
    return out


def graph(root: Path, tops) -> dict[str, set[str]]:
    """Module -> the modules of the tree it imports (module_names' names)."""
    modules = module_names(root, tops)
    edges = {}
    for name, path in modules.items():
        chosen = (next((c for c in candidates if c in modules), None) for candidates in imported(path, name))
        edges[name] = {c for c in chosen if c is not None and c != name}
    return edges


def outside(root: Path, tops) -> dict[str, set[str]]:
    """Module -> the top-level names it imports from outside the tree."""
    modules = module_names(root, tops)
    inside = {n.split(".")[0] for n in modules}
    return {name: {c[-1].split(".")[0] for c in imported(path, name) if c[-1].split(".")[0] not in inside}
            for name, path in modules.items()}


def layer_violations(edges: dict[str, set[str]], runtime=RUNTIME) -> list[str]:
    """'runtime module -> lab module' for every import from the runtime into anything else."""
    is_runtime = lambda n: n.split(".")[0] in runtime  # noqa: E731
    return sorted(f"{a} -> {b}" for a, bs in edges.items() if is_runtime(a) for b in bs if not is_runtime(b))


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The graph's circles: each strongly connected component of more than one module (Tarjan's algorithm)."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


# ------------------------------------------------------------------------------------------------ this tree

def test_the_runtime_imports_nothing_from_the_lab():
    assert layer_violations(graph(REPO, RUNTIME + LAB)) == []


def test_runtime_and_lab_import_each_other_in_no_circle():
    assert cycles(graph(REPO, RUNTIME + LAB)) == []


def test_the_runtime_needs_only_its_own_dependencies():
    """What the runtime imports from outside the tree: the standard library, torch, Triton and numpy (pyproject's
    dependencies), so that `pip install .` without the lab's extras runs it."""
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    extra = {f"{m}: {t}" for m, ts in outside(REPO, RUNTIME).items() for t in ts
             if t not in stdlib and t not in RUNTIME_DEPENDENCIES}
    assert extra == set()


def test_the_walk_sees_the_whole_runtime():
    """Every runtime file is a node, the kernels (loaded by path) and the Gluon package among them."""
    names = set(graph(REPO, RUNTIME))
    assert {"fa2triton", "fa2triton.api", "fa2triton.gluon.gluon_kernel",
            "fa2triton.kernels.v7_hopper.flashattention_autograd_function_triton"} <= names
    assert "fa2triton.gluon.gluon_forward_hopper" in graph(REPO, RUNTIME)[
        "fa2triton.kernels.v7_hopper.flashattention_autograd_function_triton"]


# ------------------------------------------------------------------------------------------------ the walker

def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


CLEAN = {
    "rt/__init__.py": "from .core import f\n",
    "rt/core.py": "import math\nfrom . import util\n",
    "rt/util.py": "import torch\n",
    "rt/sub/__init__.py": "",
    "rt/sub/deep.py": "from ..core import f\nfrom rt import util\n",
    "lab/__init__.py": "",
    "lab/run.py": "import rt.core\nfrom rt.sub import deep\n\ndef later():\n    from lab import report\n",
    "lab/report.py": "import pandas\nfrom rt import util\n",
}


def test_the_walker_passes_a_clean_tree_and_resolves_relative_imports(tmp_path):
    root = _tree(tmp_path, CLEAN)
    edges = graph(root, ("rt", "lab"))
    assert edges["rt"] == {"rt.core"} and edges["rt.core"] == {"rt.util"}
    assert edges["rt.sub.deep"] == {"rt.core", "rt.util"}
    assert edges["lab.run"] == {"rt.core", "rt.sub.deep", "lab.report"}
    assert layer_violations(edges, ("rt",)) == [] and cycles(edges) == []
    found = outside(root, ("rt", "lab"))
    assert found["rt.util"] == {"torch"} and found["lab.report"] == {"pandas"}


def test_the_walker_fails_a_runtime_module_that_imports_the_lab(tmp_path):
    """Even an import made inside a function (on first use) is an edge from the runtime into the lab."""
    root = _tree(tmp_path, {**CLEAN, "rt/util.py": "import torch\n\ndef g():\n    from lab.report import x\n"})
    assert layer_violations(graph(root, ("rt", "lab")), ("rt",)) == ["rt.util -> lab.report"]


def test_the_walker_finds_a_circle_through_a_lazy_import(tmp_path):
    root = _tree(tmp_path, {**CLEAN, "lab/report.py": "def h():\n    from .run import later\n"})
    assert cycles(graph(root, ("rt", "lab"))) == [["lab.report", "lab.run"]]


@pytest.mark.parametrize("text", ["from lab import report\n", "import lab.report as r\n",
                                  "from lab.report import x\n", "import lab\n"])
def test_the_walker_sees_each_form_of_import(tmp_path, text):
    root = _tree(tmp_path, {**CLEAN, "rt/sub/deep.py": text})
    target = "lab" if text == "import lab\n" else "lab.report"
    assert layer_violations(graph(root, ("rt", "lab")), ("rt",)) == [f"rt.sub.deep -> {target}"]
