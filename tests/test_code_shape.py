"""The code's shape (issue 49): no module docstring over 30 lines (a docstring says what the code does and its
invariants, and links the page holding the numbers), and no runtime file much over 700 lines (one idea per file;
the round snapshots under fa2triton/kernels/ are whole on purpose and stay under it too)."""

from __future__ import annotations

import ast

from test_module_names import REPO, code_files

DOCSTRING_LINES = 30
RUNTIME_LINES = 720   # "~700": a runtime file past this holds more than one idea


def long_docstrings(paths) -> dict[str, int]:
    """path -> its module docstring's line count, for each docstring over DOCSTRING_LINES."""
    found = {}
    for path in paths:
        doc = ast.get_docstring(ast.parse((REPO / path).read_text()), clean=False)
        if doc and doc.count("\n") + 1 > DOCSTRING_LINES:
            found[path] = doc.count("\n") + 1
    return found


def test_no_module_docstring_over_30_lines():
    assert long_docstrings(code_files()) == {}


def test_no_runtime_file_over_700_lines():
    sizes = {p: len((REPO / p).read_text().splitlines()) for p in code_files() if p.startswith("fa2triton/")}
    assert {p: n for p, n in sizes.items() if n > RUNTIME_LINES} == {}


def test_long_docstrings_counts_lines(tmp_path, monkeypatch):
    monkeypatch.setattr(__import__(__name__), "REPO", tmp_path)
    (tmp_path / "a.py").write_text('"""' + "x\n" * 30 + 'y"""\n')
    (tmp_path / "b.py").write_text('"""one line"""\n')
    assert long_docstrings(["a.py", "b.py"]) == {"a.py": 31}
