"""pyproject.toml's requirements keep a user's stack: every Triton that CI tests is admitted, nothing
pins numpy or torch to one release, the range matches fa2triton.triton_compat.SUPPORTED, and the library asks for
nothing that the lab alone needs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parent.parent

tomllib = pytest.importorskip("tomllib") if sys.version_info >= (3, 11) else pytest.importorskip("tomli")


def _requirements() -> dict[str, Requirement]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in project["dependencies"]]
    return {r.name: r for r in reqs}


def _ci_tritons() -> list[str]:
    line = next(s for s in (REPO / ".ci" / "run").read_text().splitlines() if s.startswith("TRITONS=("))
    return line[len("TRITONS=("):line.index(")")].split()


def test_ci_runs_both_supported_tritons():
    assert _ci_tritons() == ["3.6.0", "3.9.0"]


@pytest.mark.parametrize("version", ["3.6.0", "3.9.0"])
def test_every_ci_triton_is_admitted(version):
    assert _requirements()["triton"].specifier.contains(version)


@pytest.mark.parametrize("version", ["3.5.1", "3.10.0"])
def test_untested_tritons_are_not(version):
    assert not _requirements()["triton"].specifier.contains(version)


def test_triton_range_is_the_runtime_guard():
    from fa2triton.triton_compat import SUPPORTED

    assert str(_requirements()["triton"].specifier) == ",".join(sorted(SUPPORTED.split(",")))


@pytest.mark.parametrize("name,version", [("numpy", "2.4.6"), ("numpy", "3.0.0"), ("torch", "2.13.0"),
                                          ("torch", "3.0.0")])
def test_no_upper_pins(name, version):
    """A current numpy or torch stays where the user has it (no '<' or '==' that would replace it)."""
    assert _requirements()[name].specifier.contains(version)


def test_the_library_needs_no_more_than_the_runtime_imports():
    """pyproject's dependencies are what the runtime may import from outside the standard library (the import walk,
    tests/test_import_layers.py, holds it to them), and the lab's needs are its extra, installed only with `[lab]`."""
    from test_import_layers import RUNTIME_DEPENDENCIES

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert set(_requirements()) == RUNTIME_DEPENDENCIES
    lab = {Requirement(r).name for r in project["optional-dependencies"]["lab"]}
    assert {"invoke", "pandas", "matplotlib", "tqdm", "nvidia-ml-py", "pytest"} <= lab
