"""invoke report on fixture results: the numbers in RESULTS.md are the fixture's, files are named,
and a missing or malformed results file is a clear error."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from figures import report
from test_figures import GPU, _bench_rows, _hostpath_rows, _sweep_rows, _write

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def results_root(tmp_path):
    root = tmp_path / "results"
    shutil.copytree(REPO / "results" / "reference", root / "reference")
    names = ["v0_baseline", "v1_tiles", "v2_autotune", "v3_causal_skip", "v4_exp2", "v5_final"]
    for i, v in enumerate(names):
        _write(root / GPU / "bench" / f"{v}.csv", _bench_rows(i, v))
    _write(root / GPU / "sweep" / "v4_exp2.csv", _sweep_rows())
    _write(root / GPU / "hostpath" / "v5_final.csv", _hostpath_rows("v5_final"))
    return root


def test_report_numbers_are_the_fixtures(results_root):
    text = report.build(results_root)
    summary, _ = report.bench_summary(GPU, results_root)
    v0 = report.get(summary, "v0_baseline", 4096, 0, "ms")
    v1 = report.get(summary, "v1_tiles", 4096, 0, "ms")
    assert f"{v0 / v1:.2f}×" in text                        # the round table and the ledger use the medians
    assert f"| 4096 | no | {v0:.3f} (" in text
    assert "results/reference/rtx4070super/results.csv" in text
    assert f"`results/{GPU}/sweep/v4_exp2.csv`" in text or "sweep/v4_exp2.csv" in text
    assert "128×64, 8w, 4s | 200.0" in text                   # the fixture's winner at N = 4096
    assert "Claims ledger" in text and text.count("not measured yet") >= 4


def test_ledger_verdicts_follow_the_data(results_root):
    summary, paths = report.bench_summary(GPU, results_root)
    claims = report.ledger(GPU, results_root, results_root, summary, paths, None)
    by_text = {c.text: c for c in claims}
    first = next(c for t, c in by_text.items() if t.startswith("Tiles, warps and stages"))
    # The fixture makes v0 only (1 + 0.6) / (1 + 0.5) slower than v1: far under the article's 3x.
    assert first.verdict == "does not hold" and "1.07×" in first.evidence
    assert len(claims) >= 15


def test_missing_or_malformed_results_are_named(tmp_path, results_root):
    with pytest.raises(report.data.ResultsError, match="nothing to report"):
        report.build(tmp_path / "empty")
    bad = results_root / GPU / "bench" / "v1_tiles.csv"
    bad.write_text("version,N\nv1_tiles,512\n")
    with pytest.raises(report.data.ResultsError, match=str(bad)):
        report.build(results_root)
