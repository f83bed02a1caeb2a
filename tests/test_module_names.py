"""Names say what things are: no Python module or code folder repeats another's name in another folder (fa2lab's
sweep beside sweeps/sweep.py said nothing of which was which). The kernel files share one name on purpose (each round
is a folder with the same file); __init__ and __main__ are Python's.
"""

from __future__ import annotations

import subprocess
from collections import defaultdict
from pathlib import Path, PurePosixPath

REPO = Path(__file__).resolve().parent.parent

SAME_ON_PURPOSE = {"__init__", "__main__", "flashattention_autograd_function_triton"}


def clashes(paths) -> dict[str, set[str]]:
    """name -> the modules ('a/b.py') and folders ('a/') that carry it, for every name carried more than once."""
    seen = defaultdict(set)
    for path in map(PurePosixPath, paths):
        if path.stem not in SAME_ON_PURPOSE:
            seen[path.stem].add(str(path))
        for parent in list(path.parents)[:-1]:
            seen[parent.name].add(f"{parent}/")
    return {name: found for name, found in seen.items() if len(found) > 1}


def code_files() -> list[str]:
    """The tracked and new Python files outside tests/ (git ls-files: the checkout's own, nothing ignored)."""
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"], cwd=REPO,
                         capture_output=True, text=True, check=True).stdout.split()
    return [f for f in out if not f.startswith("tests/") and (REPO / f).exists()]


def test_no_module_or_folder_repeats_anothers_name():
    assert clashes(code_files()) == {}


def test_clashes_finds_modules_and_folders():
    found = clashes(["a/sweep.py", "sweep/run.py", "b/run.py", "c/__init__.py", "d/__init__.py", "k/v0/x.py"])
    assert found == {"sweep": {"a/sweep.py", "sweep/"}, "run": {"sweep/run.py", "b/run.py"}}
