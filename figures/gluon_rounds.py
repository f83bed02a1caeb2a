"""The Gluon forward's rounds (issue 6's experiment, experiments/run.py gluon), as % of SDPA's graph-replay time in
the same rounds (graph replay: the Gluon rows' do_bench can be the host's time). Top: at N = 4096 non-causal, every
configuration each run timed (grey), the run's best coloured by its family (warp groups x tiles / stages), and v7's
tl path from the same rounds, runs numbered in the order they ran. Bottom, per mask and N: each run's best Gluon
configuration and v7's tl path, each with a line through its median over the runs. One legend under the panels."""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from fa2lab import shapes  # noqa: E402
from figures import data, style  # noqa: E402

NAME = "gluon_rounds"
HEADLINE_N = 4096
SIZE = (10.0, 7.0)          # inches at style.DPI: 1500 px wide
OTHER_COLOUR = "0.7"        # every configuration a run timed
# the best configurations' families, in order of first appearance: none of them v7's (olive) or SDPA's (black)
FAMILY_COLOURS = ("#8e44ad", "#17becf", "#e377c2", "#ff7f0e", "#8c564b", "#1f77b4", "#d62728", "#2ca02c")


def family(variant: str) -> str:
    """A configuration's family, its first two fields: 'ws3x64x128/4s/preg/pp' -> 'ws3x64x128/4s'."""
    return "/".join(str(variant).split("/")[:2])


def family_colours(best) -> dict[str, str]:
    """{family: colour}, families in the order the runs first picked them (the colours cycle past eight)."""
    fams = list(dict.fromkeys(family(b) for b in best["best"]))
    return {f: FAMILY_COLOURS[i % len(FAMILY_COLOURS)] for i, f in enumerate(fams)}


def _by_run(ax, df, head, colours):
    run_no = range(1, len(head) + 1)
    for x, r in zip(run_no, head.itertuples()):
        g = df[(df.git_commit == r.git_commit) & (df.N == HEADLINE_N) & (df.causal == 0)
               & ~df.variant.isin(data.GLUON_NOT_CONFIGS)]
        ax.scatter([x] * len(g), g["graph_pct_of_sdpa"], s=10, color=OTHER_COLOUR, zorder=2, linewidths=0)
        ax.scatter([x], [r.best_pct], s=36, color=colours[family(r.best)], zorder=3, edgecolors="white",
                   linewidths=0.5)
    ax.plot(run_no, head["v7_pct"], marker="s", markersize=3, linewidth=1, color=style.colour("v7_hopper"))
    ax.axhline(100, color=style.SDPA_COLOUR, linestyle="--", linewidth=1)
    step = 5 if len(head) > 12 else 1
    ax.set_xticks([1, *range(step, len(head) + 1, step)] if step > 1 else list(run_no))
    ax.set_xlim(0, len(head) + 1)
    first, last = str(head["git_commit"].iloc[0])[:7], str(head["git_commit"].iloc[-1])[:7]
    ax.set_xlabel(f"run, in the order they ran (one commit each: run 1 = {first}, run {len(head)} = {last})")
    ax.set_ylabel("% of SDPA's graph-replay time")
    ax.set_title(f"N = {HEADLINE_N}, non-causal: every configuration of every run")


def _by_N(ax, best, causal, colours):
    b = best[best.causal == int(causal)]
    ax.scatter(b["N"] * 2 ** -0.06, b["best_pct"], s=14, c=[colours[family(v)] for v in b["best"]], zorder=3,
               linewidths=0)
    ax.scatter(b["N"] * 2 ** 0.06, b["v7_pct"], s=14, color=style.colour("v7_hopper"), zorder=3, linewidths=0)
    for col, colour in (("best_pct", "0.25"), ("v7_pct", style.colour("v7_hopper"))):
        med = b.groupby("N")[col].median()
        ax.plot(med.index, med.values, color=colour, linewidth=1.2)
    ax.axhline(100, color=style.SDPA_COLOUR, linestyle="--", linewidth=1)
    style.log2_N_axis(ax, sorted(b["N"].unique()))
    ax.set_xlabel("sequence length N")
    ax.set_title(f"{data.mask_name(causal)}: each run's best, by N ({b.git_commit.nunique()} runs)")


def _legend(ax, colours):
    """The figure's one legend, in a row of its own under the panels (an axes without axes)."""
    dot = dict(marker="o", linestyle="none", markeredgewidth=0)
    handles = [Line2D([], [], color=OTHER_COLOUR, markersize=5, **dot, label="every Gluon configuration (top)")]
    handles += [Line2D([], [], color=c, markersize=7, **dot, label=f"a run's best: {f}") for f, c in colours.items()]
    handles += [Line2D([], [], color="0.25", label="median of the runs' best (bottom)"),
                Line2D([], [], color=style.colour("v7_hopper"), marker="s", markersize=4,
                       label="v7's tl path, same rounds"),
                Line2D([], [], color=style.SDPA_COLOUR, linestyle="--", label="SDPA (cuDNN) = 100%")]
    ax.axis("off")
    ax.legend(handles=handles, loc="center", ncols=4, fontsize=8, frameon=False)


def build(gpu_slug: str, results_root=None):
    """The figure, not yet saved: the runs at the headline shape on top, both masks by N below, one legend under
    them, a one-line footnote (style.provenance_line: the commits as a range)."""
    df, path = data.gluon(gpu_slug, results_root)
    best = data.gluon_best(df)
    if best.empty:
        raise data.ResultsError(f"results file {path}: no run timed a Gluon configuration beside v7_tl and sdpa")
    colours = family_colours(best)
    fig = plt.figure(figsize=SIZE, layout="constrained", dpi=style.DPI)
    axes = fig.subplot_mosaic([["run", "run"], [str(m) for m in shapes.MASKS], ["legend", "legend"]],
                              height_ratios=(1.2, 1, 0.22))
    head = best[(best.N == HEADLINE_N) & (best.causal == 0)].reset_index(drop=True)
    _by_run(axes["run"], df, head, colours)
    for causal in shapes.MASKS:
        _by_N(axes[str(causal)], best, causal, colours)
    axes[str(shapes.MASKS[-1])].set_ylabel("")
    axes[str(shapes.MASKS[0])].set_ylabel("% of SDPA's graph-replay time")
    _legend(axes["legend"], colours)
    fig.suptitle(f"The Gluon forward's rounds on {gpu_slug} (B=4, H=8, D=64, bf16), against SDPA in the same rounds")
    style.footnote(fig, style.provenance_line(df, path))
    return fig


def draw(gpu_slug: str, out_dir, results_root=None) -> list[Path]:
    return style.save(build(gpu_slug, results_root), out_dir, NAME)


def main(argv=None) -> int:
    return style.main_for(draw, __doc__, argv)


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
