"""The Gluon forward's rounds (issue 6's experiment, experiments/run.py gluon): left, every configuration
each run timed at N = 4096 non-causal, the run's best marked and named, with v7's tl path from the same
rounds; right, per N and mask, each run's best Gluon configuration and v7's tl path (a line through its
median over the runs). All as % of SDPA's
graph-replay time in the same rounds (graph replay: the Gluon rows' do_bench can be the host's time)."""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fa2lab import shapes  # noqa: E402
from figures import data, style  # noqa: E402

NAME = "gluon_rounds"
HEADLINE_N = 4096
GLUON_COLOUR = "#8e44ad"


def draw(gpu_slug: str, out_dir, results_root=None) -> list[Path]:
    df, path = data.gluon(gpu_slug, results_root)
    best = data.gluon_best(df)
    if best.empty:
        raise data.ResultsError(f"results file {path}: no run timed a Gluon configuration beside v7_tl and sdpa")
    fig, axes = style.figure(1, 3, panel=(4.6, 3.6))
    ax = axes[0, 0]
    head = best[(best.N == HEADLINE_N) & (best.causal == 0)].reset_index(drop=True)
    for x, r in head.iterrows():
        g = df[(df.git_commit == r.git_commit) & (df.N == HEADLINE_N) & (df.causal == 0)
               & ~df.variant.isin(data.GLUON_NOT_CONFIGS)]
        ax.scatter([x] * len(g), g["graph_pct_of_sdpa"], s=12, color="0.6", zorder=2,
                   label="every Gluon configuration" if x == 0 else None)
        ax.scatter([x], [r.best_pct], s=40, color=GLUON_COLOUR, zorder=3,
                   label="the run's best (named below)" if x == 0 else None)
    ax.plot(range(len(head)), head["v7_pct"], marker="s", color=style.colour("v7_hopper"),
            label="v7's tl path, same rounds")
    ax.axhline(100, color=style.SDPA_COLOUR, linestyle="--", label="SDPA (cuDNN) = 100%")
    ax.set_xticks(range(len(head)), [f"{c}: {b}" for c, b in zip(head["git_commit"].astype(str), head["best"])],
                  rotation=40, ha="right", fontsize=6.5)
    ax.set_xlabel("run (commit), in the order they ran")
    ax.set_ylabel("% of SDPA's graph-replay time")
    ax.set_title(f"N = {HEADLINE_N}, non-causal, by run")
    ax.legend(fontsize=7, loc="lower right")
    for j, causal in enumerate(shapes.MASKS):
        ax = axes[0, j + 1]
        b = best[best.causal == int(causal)]
        ax.scatter(b["N"] * 2 ** -0.03, b["best_pct"], s=14, color=GLUON_COLOUR,
                   label="each run's best Gluon (runs timed different configurations)")
        ax.scatter(b["N"] * 2 ** 0.03, b["v7_pct"], s=14, color=style.colour("v7_hopper"), label="v7's tl path")
        med = b.groupby("N")["v7_pct"].median()
        ax.plot(med.index, med.values, color=style.colour("v7_hopper"), linewidth=1)
        ax.axhline(100, color=style.SDPA_COLOUR, linestyle="--")
        style.log2_N_axis(ax, sorted(b["N"].unique()))
        ax.set_xlabel("sequence length N")
        ax.set_title(f"{data.mask_name(causal)}: every run (line: v7's median)")
        ax.legend(fontsize=6.5, loc="best")
    fig.suptitle(f"The Gluon forward's rounds on {gpu_slug} (B=4, H=8, D=64, bf16): % of SDPA's graph-replay "
                 "time in the same interleaved rounds")
    return style.finish(fig, out_dir, NAME, style.provenance_line(df, path))


def main(argv=None) -> int:
    return style.main_for(draw, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
