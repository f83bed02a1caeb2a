"""Every `invoke` task answers --help with its usage (the task's options), and exits 0: a reader's first step."""

from __future__ import annotations

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
