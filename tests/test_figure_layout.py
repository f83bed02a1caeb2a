"""What a reader sees of a figure: the Gluon rounds' figure is at most ~1600 px wide, its legend clear of the panels
and the title, its footnote one line naming the commits as a range; footnotes name a few commits each and many as a
range."""

from __future__ import annotations

from pathlib import Path

import matplotlib.image
import matplotlib.pyplot as plt
import pandas as pd
import pytest

from figures import gluon_rounds, style
from test_figures import GPU, results_root  # noqa: F401  (results_root: a fixture)

REPO = Path(__file__).resolve().parent.parent
MAX_WIDTH_PX = 1600


def _assert_readable(fig):
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    legend_ax = next(ax for ax in fig.axes if ax.get_legend() is not None and not ax.axison)
    legend = legend_ax.get_legend().get_window_extent(r)
    title = fig._suptitle.get_window_extent(r)
    footnote = fig.texts[-1]
    assert 0 <= title.x0 and title.x1 <= fig.bbox.width                 # the title fits the figure
    assert not legend.overlaps(title) and legend.y1 < title.y0
    assert not legend.overlaps(footnote.get_window_extent(r))
    for ax in fig.axes:
        if ax is not legend_ax:
            box = ax.get_window_extent(r)
            assert box.width > 200 and box.height > 150, ax.get_title()   # no collapsed axes
            assert not box.overlaps(legend), ax.get_title()
    assert "\n" not in footnote.get_text()
    assert footnote.get_window_extent(r).width <= fig.bbox.width
    plt.close(fig)


def test_gluon_rounds_reads_on_the_fixture(results_root, tmp_path):  # noqa: F811
    _assert_readable(gluon_rounds.build(GPU, results_root))
    png = gluon_rounds.draw(GPU, tmp_path, results_root)[0]
    assert matplotlib.image.imread(png).shape[1] <= MAX_WIDTH_PX


def test_gluon_rounds_of_the_committed_results_reads():
    """The committed H200 runs: 46 at the headline shape, 49 commits (once 50 hashes in the footnote)."""
    if not (REPO / "results" / "nvidia-h200" / "experiments" / "gluon.csv").exists():
        pytest.skip("no committed results/nvidia-h200/experiments/gluon.csv")
    fig = gluon_rounds.build("nvidia-h200")
    text = fig.texts[-1].get_text()
    assert "commits " in text and " to " in text
    _assert_readable(fig)


def test_gluon_families_and_their_colours():
    assert gluon_rounds.family("ws3x64x128/4s/preg/pp") == "ws3x64x128/4s"
    best = pd.DataFrame({"best": ["ws2x64/3s/a", "ws3x64/4s", "ws2x64/3s/b"]})
    colours = gluon_rounds.family_colours(best)
    assert list(colours) == ["ws2x64/3s", "ws3x64/4s"] and len(set(colours.values())) == 2
    assert style.colour("v7_hopper") not in gluon_rounds.FAMILY_COLOURS


def test_footnote_lists_a_few_commits_and_ranges_many():
    few = pd.DataFrame({"git_commit": ["bbbbbbb1", "aaaaaaa1"], "date": ["2026-01-02", "2026-01-01"]})
    assert style.commits_text(few) == "commit aaaaaaa, bbbbbbb"
    many = pd.DataFrame({"git_commit": [f"{c}{c}{c}{c}{c}{c}{c}x" for c in "edcba"] + [None],
                         "date": ["2026-01-05", "2026-01-01", "2026-01-03", "2026-01-02", "2026-01-04", None]})
    assert style.commits_text(many) == "commits ddddddd to eeeeeee (5)"   # first and last by date, not by name
    line = style.provenance_line(many, "results/x/experiments/gluon.csv")
    assert line.startswith("source: results/x/experiments/gluon.csv") and "ccccccc" not in line
