"""Figures are deterministic: drawing the same rows twice gives the same PNG and SVG bytes, with no date and no
matplotlib version in their metadata (so `invoke figures` on a clean clone leaves git status clean)."""

from __future__ import annotations

import re

from figures import gluon_rounds, style, versions_bench
from test_figures import GPU, results_root  # noqa: F401  (results_root: a fixture)


def test_the_same_rows_give_the_same_bytes(results_root, tmp_path):  # noqa: F811
    for module in (versions_bench, gluon_rounds):
        first = module.draw(GPU, tmp_path / "a", results_root)
        second = module.draw(GPU, tmp_path / "b", results_root)
        assert [p.suffix for p in first] == [".png", ".svg"]
        for a, b in zip(first, second):
            assert a.read_bytes() == b.read_bytes(), a.name


def test_no_date_and_no_version_in_the_metadata(results_root, tmp_path):  # noqa: F811
    png, svg = versions_bench.draw(GPU, tmp_path, results_root)
    svg_text = svg.read_text()
    assert "<dc:date>" not in svg_text and "Matplotlib v" not in svg_text
    assert b"Software" not in png.read_bytes()[:4096] and b"Matplotlib" not in png.read_bytes()
    ids = re.findall(r'id="([^"]+)"', svg_text)
    assert ids and style.plt.rcParams["svg.hashsalt"]            # element ids come from a fixed salt
