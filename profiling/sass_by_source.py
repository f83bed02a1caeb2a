"""Two cubins of one kernel (two Tritons, two ptxas) compared by source function: each SASS instruction goes to the
Python function whose line nvdisasm's line info names (Triton's own library code to its file), and per function the
table gives both builds' instruction, uniform-datapath, IMAD.MOV, barrier, fence, local-memory and branch counts.
Where a kernel's key loops are equal (profiling/version_sass.py), this says which code outside them differs.

    python profiling/sass_by_source.py A.cubin B.cubin [--labels 3.6,3.9] [--top 20]

No GPU; the cubins need line info (Triton's own compiles and version_sass.py's `assemble` have it).
docs/port-triton39.md, "Still slower on 3.9", holds its tables.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections import Counter, defaultdict
from functools import lru_cache
from pathlib import Path

_LINE = re.compile(r'^\s*//## File "([^"]+)", line (\d+)')
_INS = re.compile(r"^\s+/\*([0-9a-f]+)\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)")
# per function: the opcode classes counted (a key counts opcodes equal to it or starting with it and ".")
KEYS = ("IMAD.MOV", "BAR", "FENCE", "MEMBAR", "STL", "LDL", "BRA", "SYNCS", "UTMA")


@lru_cache(maxsize=None)
def _functions(path: str) -> list[tuple[int, int, str]]:
    """(first line, last line, qualified name) of every function in a Python file; [] if it cannot be read."""
    try:
        tree = ast.parse(Path(path).read_text())
    except (OSError, SyntaxError):
        return []
    out = []

    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    out.append((child.lineno, child.end_lineno, name))
                walk(child, name + ".")
    walk(tree, "")
    return out


def where(path: str, line: int) -> str:
    """'file.py:function' for a source line (the innermost function holding it); Triton's files by name only."""
    if "/triton/" in path:
        return f"triton/{Path(path).name}"
    inside = [f for f in _functions(path) if f[0] <= line <= f[1]]
    name = min(inside, key=lambda f: f[1] - f[0])[2] if inside else "?"
    return f"{Path(path).name}:{name}"


def attribute(sass: str) -> dict[str, Counter]:
    """Per source function, its instructions' opcode counts (key '' = all) from `nvdisasm -g` text."""
    out: dict[str, Counter] = defaultdict(Counter)
    here = "?"
    for ln in sass.splitlines():
        m = _LINE.match(ln)
        if m:
            here = where(m.group(1), int(m.group(2)))
            continue
        m = _INS.match(ln)
        if m:
            op = m.group(3)
            c = out[here]
            c[""] += 1
            c["uniform"] += (op[0] == "U" and not op.startswith(("UTMA", "UBLK"))) or op == "R2UR"
            for k in KEYS:
                c[k] += op == k or op.startswith(k + ".") or (k == "BAR" and op.startswith("BAR"))
    return out


def cell_of(a: dict[str, Counter], b: dict[str, Counter], name: str, key: str) -> str:
    """'x' where both builds count the same, else 'x → y'."""
    x, y = a.get(name, Counter())[key], b.get(name, Counter())[key]
    return str(x) if x == y else f"{x} → {y}"


def table(a: dict[str, Counter], b: dict[str, Counter], labels: tuple[str, str], top: int) -> str:
    """Markdown: the `top` functions with the largest difference in instructions, then the total; cells 'A → B'."""
    names = sorted(set(a) | set(b), key=lambda n: (-abs(b.get(n, Counter())[""] - a.get(n, Counter())[""]), n))

    total_a, total_b = sum(a.values(), Counter()), sum(b.values(), Counter())
    cols = ("", "uniform", *KEYS)
    head = ["source function", *("instructions" if k == "" else k for k in cols)]
    lines = [f"{labels[0]} → {labels[1]}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for n in names[:top]:
        lines.append("| " + " | ".join([f"`{n}`", *(cell_of(a, b, n, k) for k in cols)]) + " |")
    a_all, b_all = {"all": total_a}, {"all": total_b}
    lines.append("| " + " | ".join(["all", *(cell_of(a_all, b_all, "all", k) for k in cols)]) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cubins", type=Path, nargs=2, help="two cubins of one kernel (A, then B)")
    ap.add_argument("--labels", default="A,B", help="names of the two builds, comma-separated")
    ap.add_argument("--top", type=int, default=20, help="functions shown, by largest difference")
    args = ap.parse_args(argv)
    for c in args.cubins:
        if not c.is_file():
            ap.error(f"{c}: no such file")
    labels = tuple(args.labels.split(","))
    if len(labels) != 2:
        ap.error(f"--labels takes two names, got {args.labels!r}")
    if __package__ in (None, ""):
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from fa2lab.compile_offline import tool_path
    from profiling.version_sass import _tool

    nvdisasm = tool_path("nvdisasm")
    a, b = (attribute(_tool(nvdisasm, "-g", "-c", str(c))) for c in args.cubins)
    print(table(a, b, labels, args.top), end="")
    return 0


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
