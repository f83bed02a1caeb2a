"""One style for every figure: sizes, colours per version (registry order), heatmap cells, saving,
and the command line each script shares."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from fa2triton import versions  # noqa: E402

from . import data  # noqa: E402

OUT = Path(__file__).resolve().parent / "out"
DPI = 150

plt.rcParams.update({
    "font.size": 10, "axes.titlesize": 11, "axes.labelsize": 10, "xtick.labelsize": 9, "ytick.labelsize": 9,
    "legend.fontsize": 9, "figure.titlesize": 13, "axes.grid": True, "grid.alpha": 0.3,
    "axes.spines.top": False, "axes.spines.right": False, "svg.fonttype": "none",
    "svg.hashsalt": "fa2lab",  # stable element ids: redrawing unchanged data gives an identical SVG
})

# One colour per version, in registry order (tab10 without its grey, which the FLASH backend's line uses),
# and fixed ones for the references.
VERSION_COLOURS = dict(zip(versions.NAMES, [c for i, c in enumerate(plt.get_cmap("tab10").colors) if i != 7]))
SDPA_COLOUR = "black"
SDPA_FLASH_COLOUR = "0.55"
HEATMAP_CMAP = "viridis"
EMPTY_CELL = "0.85"


def colour(version: str) -> str:
    return SDPA_COLOUR if version == data.SDPA else VERSION_COLOURS[version]


def label(version: str) -> str:
    return "SDPA" if version == data.SDPA else versions.get(version).label


def round_label(version: str) -> str:
    """The registry's round label of a version ("0", "4a", "beyond: 6"), as README and REPORT.md print it."""
    return versions.get(version).round_label


def round_text(version: str) -> str:
    """'round 4a', or the label itself where it is not a round of the article ('beyond: 6')."""
    r = round_label(version)
    return r if versions.get(version).beyond_article else f"round {r}"


def label_with_round(version: str) -> str:
    """'v3 causal skip (round 4a)'; 'SDPA' for SDPA."""
    return "SDPA" if version == data.SDPA else f"{label(version)} ({round_text(version)})"


# The version whose configurations each sweep chose (its round is the sweep's): Round 1 swept v0_baseline's
# body for v1, Round 5 v4_exp2's for v5, and v7 re-swept its own.
SWEEP_FOR = {"v0_baseline": "v1_tiles", "v4_exp2": "v5_final", "v7_hopper": "v7_hopper"}


def sweep_title(version: str, gpu_slug: str) -> str:
    """'v0_baseline sweep (round 1) on <gpu>' for a sweep figure's title."""
    chose = SWEEP_FOR.get(version)
    return f"{version} sweep{f' ({round_text(chose)})' if chose else ''} on {gpu_slug}"


def figure(nrows: int, ncols: int, panel=(4.0, 3.2), **kw):
    """A figure of nrows x ncols panels of the given size, with constrained layout, at the dpi it is saved at (text
    measured while drawing, as roofline.separate_labels does, then has the size it is saved with)."""
    return plt.subplots(nrows, ncols, figsize=(panel[0] * ncols, panel[1] * nrows), layout="constrained",
                        squeeze=False, dpi=DPI, **kw)


# No date and no matplotlib version in the files: the same rows give the same bytes (a clean `invoke figures`
# leaves git status clean), with svg.hashsalt above fixing the SVG's element ids.
METADATA = {".png": {"Software": None}, ".svg": {"Date": None, "Creator": None}}


def save(fig, out_dir: str | Path, name: str, svg: bool = True) -> list[Path]:
    """Write out_dir/name.png (dpi 150) and out_dir/name.svg, creating out_dir, without dates or versions in their
    metadata (METADATA); close the figure."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{name}.png"] + ([out_dir / f"{name}.svg"] if svg else [])
    for p in paths:
        fig.savefig(p, dpi=DPI, bbox_inches="tight", metadata=METADATA[p.suffix])
    plt.close(fig)
    return paths


def grid_panel(ax, tflops, why, winner_cell, title: str, xlabel: str, ylabel: str):
    """One heatmap panel: each cell coloured by its share of the panel's best, annotated with its
    TFLOP/s; cells with nothing ok in grey with the reason; the winner boxed. Returns the image."""
    values = tflops.to_numpy(dtype=float)
    best = np.nanmax(values) if np.isfinite(values).any() else 1.0
    im = ax.imshow(100 * values / best, cmap=HEATMAP_CMAP, vmin=0, vmax=100, origin="upper", aspect="auto")
    ax.set_facecolor(EMPTY_CELL)
    for i, r in enumerate(tflops.index):
        for j, c in enumerate(tflops.columns):
            v = values[i, j]
            if np.isfinite(v):
                ax.text(j, i, f"{v:.0f}", ha="center", va="center", fontsize=8,
                        color="white" if v < 0.6 * best else "black",
                        fontweight="bold" if (r, c) == winner_cell else None)
            else:
                ax.text(j, i, why.loc[r, c], ha="center", va="center", fontsize=6.5, color="0.25")
    if winner_cell is not None:
        i, j = list(tflops.index).index(winner_cell[0]), list(tflops.columns).index(winner_cell[1])
        ax.add_patch(plt.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=2.5))
    ax.set_xticks(range(len(tflops.columns)), [str(c) for c in tflops.columns])
    ax.set_yticks(range(len(tflops.index)), [str(r) for r in tflops.index])
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(False)
    for side in ("top", "right"):
        ax.spines[side].set_visible(True)
    return im


def outer_labels_only(axes):
    """Keep axis labels on the left column and the bottom row of a grid of panels."""
    for ax in axes.flat:
        ss = ax.get_subplotspec()
        if not ss.is_first_col():
            ax.set_ylabel("")
        if not ss.is_last_row():
            ax.set_xlabel("")


HOST_NOTE = ("Times near the host's own time per call (host_vs_graph.png) measure Python and the launch, "
             "not the kernel: at small N, treat the differences as noise.")


def errorbar(ax, x, s, offset: float = 0.0, **kw):
    """Medians with min-max bars from a data.spread() frame, shifted by `offset` octaves along a log2 N
    axis so that series at the same N do not hide each other."""
    xs = np.asarray(x, dtype=float) * 2 ** offset
    kw = {"marker": "o", "markersize": 4, "capsize": 2, "linewidth": 1.4, **kw}
    return ax.errorbar(xs, s["median"], yerr=[s["median"] - s["min"], s["max"] - s["median"]], **kw)


def log2_N_axis(ax, Ns):
    ax.set_xscale("log", base=2)
    ax.set_xticks(Ns, [str(n) for n in Ns])
    ax.minorticks_off()


def log_axis(ax, axis: str = "y"):
    """A log axis with plain numbers (10, 20, 50, 100, ...) instead of powers of ten."""
    from matplotlib.ticker import LogLocator, NullFormatter, ScalarFormatter

    target = ax.yaxis if axis == "y" else ax.xaxis
    (ax.set_yscale if axis == "y" else ax.set_xscale)("log")
    target.set_major_locator(LogLocator(base=10, subs=(1, 2, 5)))
    target.set_major_formatter(ScalarFormatter())
    target.set_minor_formatter(NullFormatter())


def runs_text(counts) -> str:
    lo, hi = int(min(counts)), int(max(counts))
    return f"{lo} run{'s' if hi > 1 else ''}" if lo == hi else f"{lo}–{hi} runs"


def grid_colorbar(fig, im, axes):
    fig.colorbar(im, ax=axes, shrink=0.8, label="% of the panel's best (cell text: TFLOP/s)")


MAX_COMMITS_LISTED = 3   # more commits than this: the footnote gives their count and first and last, not each


def commits_text(df) -> str:
    """'commit a, b' (short hashes) for up to MAX_COMMITS_LISTED commits; else 'commits 1234567 to 89abcde (49)',
    the first and last by their rows' earliest date (by name without dates)."""
    rows = df[df["git_commit"].notna()]
    short = rows["git_commit"].astype(str).str[:7]
    if "date" in rows.columns:
        first = rows["date"].astype(str).groupby(short).min()            # text: NaN beside dates breaks pandas 2's min
        order = list(first.sort_values(kind="stable").index)
    else:
        order = sorted(short.unique())
    if len(order) <= MAX_COMMITS_LISTED:
        return f"commit {', '.join(sorted(order))}"
    return f"commits {order[0]} to {order[-1]} ({len(order)})"


def provenance_line(df, path, name: str | None = None) -> str:
    """A footnote: which file (its name replaced by `name` if given), and the GPU, triton and torch
    versions, git commit(s) (commits_text: a range past a few) and first date of the rows the figure was drawn from."""
    parts = Path(path).parts[-3:]
    parts = ["source: results/" + "/".join(parts[:-1] + ((name,) if name else parts[-1:]))]
    for col in ("gpu", "triton", "torch"):
        if col in df.columns and df[col].notna().any():
            parts.append(f"{col} {', '.join(sorted({str(v) for v in df[col].dropna().unique()}))}")
    if "git_commit" in df.columns and df["git_commit"].notna().any():
        parts.append(commits_text(df))
    if "date" in df.columns and df["date"].notna().any():
        parts.append(str(df["date"].dropna().astype(str).min())[:10])   # text: NaN beside dates breaks pandas 2's min
    return "; ".join(parts)


def footnote(fig, text: str):
    fig.text(0.0, -0.01, text, fontsize=7.5, color="0.35", ha="left", va="top", transform=fig.transFigure)


def finish(fig, out_dir, name: str, notes) -> list[Path]:
    """The end of every figure: its footnote (a string, or lines joined one per line) under it, then save()."""
    footnote(fig, notes if isinstance(notes, str) else "\n".join(notes))
    return save(fig, out_dir, name)


def parse_cli(description: str, argv=None) -> tuple[list[str], Path, str | None]:
    """The command line every figure script shares: --gpu (repeatable; default: every folder under
    results/ except reference), --results (the results folder), --out (the folder holding <gpu>/).
    Returns (gpus, out, results_root)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--gpu", action="append", help="GPU folder under results/ (repeatable; default: all)")
    p.add_argument("--results", default=None, help="results folder (default: $FA2_RESULTS or results/)")
    p.add_argument("--out", default=str(OUT), help="output folder; figures go to OUT/<gpu>/")
    args = p.parse_args(argv)
    gpus = args.gpu or data.gpu_slugs(args.results)
    if not gpus:
        print(f"no GPU folders under {data.root(args.results)}: nothing to draw", file=sys.stderr)
    return gpus, Path(args.out), args.results


def main_for(draw, description: str, argv=None) -> int:
    """One script's main(): draw for every GPU asked for, print the files written. A GPU whose results
    file is missing or malformed is skipped with a message naming the file; exit 1 only if nothing
    was drawn."""
    gpus, out, results_root = parse_cli(description, argv)
    drawn = 0
    for slug in gpus:
        try:
            for path in draw(slug, out / slug, results_root):
                print(path)
                drawn += 1
        except data.ResultsError as e:
            print(f"{slug}: skipped: {e}", file=sys.stderr)
    return 0 if drawn else 1


def for_each_sweep(draw_one, gpu_slug: str, out_dir, results_root=None, version: str | None = None) -> list[Path]:
    """Draw a sweep figure once per sweep this GPU has (or for the version named), as
    <NAME>_<version>.png: Round 1 swept v0_baseline's body, Round 5 v4_exp2's."""

    written = []
    for v in [version] if version else data.sweep_versions(gpu_slug, results_root):
        written += draw_one(gpu_slug, out_dir, results_root, v)
    return written
