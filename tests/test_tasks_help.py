"""Every `invoke` task answers --help with its usage (the task's options), and exits 0: a reader's first step."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _tasks() -> list[str]:
    out = subprocess.run([sys.executable, "-m", "invoke", "--list"], capture_output=True, text=True, cwd=REPO,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    names = [m[1] for line in out.stdout.splitlines() if (m := re.match(r"^  (\S+)", line))]   # not continuations
    assert len(names) >= 10, out.stdout
    return names


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_every_task_answers_help(flag):
    bad = []
    for name in _tasks():
        out = subprocess.run([sys.executable, "-m", "invoke", name, flag], capture_output=True, text=True, cwd=REPO,
                             timeout=120)
        if out.returncode != 0 or f"Usage: inv[oke] [--core-opts] {name}" not in out.stdout:
            bad.append(f"{name}: rc {out.returncode}, {(out.stdout + out.stderr).strip()[:120]!r}")
    assert not bad, "\n".join(bad)


def test_every_experiment_answers_help():
    """python experiments/<module>.py --help for every registered experiment (experiments/__init__.py)."""
    sys.path.insert(0, str(REPO))
    import experiments

    bad = []
    for name, (module, _) in experiments.EXPERIMENTS.items():
        out = subprocess.run([sys.executable, str(REPO / "experiments" / f"{module}.py"), "--help"], capture_output=True,
                             text=True, cwd=REPO, timeout=120)
        if out.returncode != 0 or "usage:" not in out.stdout or "results/<gpu>/experiments/" not in out.stdout:
            bad.append(f"{name}: rc {out.returncode}, {(out.stdout + out.stderr).strip()[-200:]!r}")
    assert not bad, "\n".join(bad)


# invoke --list gives each description what 80 columns leave beside the longest task name (invoke.Program's
# print_columns: leading indent 2, padding 3, one spare column); a first line longer than that is cut mid-sentence.
LIST_COLUMNS = 80


def test_every_task_s_first_line_is_one_short_sentence():
    import invoke

    sys.path.insert(0, str(REPO))
    import tasks

    found = {name: obj for name, obj in vars(tasks).items() if isinstance(obj, invoke.Task)}
    assert len(found) >= 10
    width = LIST_COLUMNS - max(len(n.replace("_", "-")) for n in found) - 2 - 3 - 1
    bad = []
    for name, t in sorted(found.items()):
        lines = (t.__doc__ or "").strip().splitlines()
        first = lines[0] if lines else ""
        if not first or len(first) > width or first[-1] not in ".?" or (len(lines) > 1 and lines[1].strip()):
            bad.append(f"{name}: {first!r} ({len(first)} > {width} columns, or not one whole line ending in . or ?)")
    assert not bad, "\n".join(bad)


def test_invoke_list_prints_one_line_per_task():
    out = subprocess.run([sys.executable, "-m", "invoke", "--list"], capture_output=True, text=True, cwd=REPO,
                         timeout=120, env={**os.environ, "COLUMNS": str(LIST_COLUMNS)})
    body = [ln for ln in out.stdout.splitlines()[1:] if ln.strip()]
    assert body and all(re.match(r"^  \S+ +\S.*[.?]$", ln) for ln in body), out.stdout   # no continuation lines


def test_an_unknown_version_is_one_line_naming_the_known_ones():
    """`invoke TASK --kernel v9` for every task with --kernel: exit 2 and one line, not a traceback."""
    import inspect

    import invoke

    sys.path.insert(0, str(REPO))
    import tasks
    from fa2triton import versions

    with_kernel = sorted(name.replace("_", "-") for name, obj in vars(tasks).items()
                         if isinstance(obj, invoke.Task) and "kernel" in inspect.signature(obj.body).parameters)
    assert {"test", "bench", "sweep", "profile", "inspect"} <= set(with_kernel)
    bad = []
    for name in with_kernel:
        out = subprocess.run([sys.executable, "-m", "invoke", name, "--kernel", "v9"], capture_output=True,
                             text=True, cwd=REPO, timeout=120)
        said = (out.stdout + out.stderr).strip()
        if (out.returncode != 2 or len(said.splitlines()) != 1 or "'v9'" not in said
                or not all(v in said for v in versions.NAMES)):
            bad.append(f"{name}: rc {out.returncode}, {said[-300:]!r}")
    assert not bad, "\n".join(bad)


def _scripts() -> list[Path]:
    """The lab's command-line scripts: every module under scripts/, profiling/ and sweeps/ run as __main__."""
    return sorted(p for folder in ("scripts", "profiling", "sweeps") for p in (REPO / folder).glob("*.py")
                  if 'if __name__ == "__main__"' in p.read_text() or p.parent.name == "scripts")


def test_every_script_answers_help():
    """python <script> --help prints its usage and exits 0, without a GPU (each script parses its arguments first)."""
    scripts = _scripts()
    assert len(scripts) >= 15, scripts
    bad = []
    for path in scripts:
        out = subprocess.run([sys.executable, str(path), "--help"], capture_output=True, text=True, cwd=REPO,
                             timeout=120, env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
        if out.returncode != 0 or "usage:" not in out.stdout:
            bad.append(f"{path.relative_to(REPO)}: rc {out.returncode}, {(out.stdout + out.stderr).strip()[-200:]!r}")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("script", ["compare_trees.py", "merge_rows.py", "gluon_smoke.py"])
def test_every_script_answers_help_without_the_package_installed(script, tmp_path):
    """python -S scripts/<script> --help from another folder: no site-packages, so nothing installed (the lab's fa2lab
    included) is importable but what the script puts on its own path (the GPU machine runs the scripts that way)."""
    out = subprocess.run([sys.executable, "-S", str(REPO / "scripts" / script), "--help"], capture_output=True,
                         text=True, cwd=tmp_path, timeout=120, env={k: v for k, v in os.environ.items()
                                                                     if k != "PYTHONPATH"})
    assert out.returncode == 0 and "usage:" in out.stdout, (out.stdout + out.stderr)[-300:]
