"""What @triton.autotune costs (Round 3): seconds per call against the number of configurations, in fresh
processes, with an empty Triton cache and with the cache the first process left on disk, with and without
cache_results=True; from results/<gpu>/tuning/compile_cost.csv (sweeps/measure_compile_cost.py). Beside it the
article's table for the RTX 4070 SUPER (results/reference/rtx4070super/compile_cost.csv, transcribed).

Panels: the first call (N = 4096, non-causal), each new N in the same process (2048, 1024, 512: median,
bars min-max) and the first causal call (N = 4096); the article's four columns in a panel of their own."""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pandas as pd  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from figures import data, style  # noqa: E402

NAME = "compile_cost"
NEW_N = ("new_2048", "new_1024", "new_512")
# (cache, label, colour)
CACHES = (("empty", "empty cache", "#d95f02"), ("on_disk", "cache on disk (from the first process)", "#1b9e77"))
# (cache_results, label, line style, marker)
CACHE_RESULTS = ((0, "autotune", "-", "o"), (1, "autotune(cache_results=True)", "--", "D"))
# (our measure, panel title)
MEASURES = (("first_4096", "first call (N = 4096, non-causal)"),
            ("new_N", "each new N in the same process\n(2048, 1024, 512: median, bars min–max)"),
            ("first_causal_4096", "first causal call (N = 4096)"))
# (article column, label, colour, line style, marker)
ARTICLE = (("first_call_empty_cache_s", "first call, empty cache", CACHES[0][2], "-", "o"),
           ("first_call_cache_on_disk_s", "first call, cache on disk", CACHES[1][2], "-", "o"),
           ("each_new_N_s", "each new N", "0.35", ":", "^"),
           ("first_causal_call_empty_cache_s", "first causal call, empty cache", CACHES[0][2], "--", "v"))
ARTICLE_COLUMNS = ("configs",) + tuple(c for c, *_ in ARTICLE)


def latest(df: pd.DataFrame) -> pd.DataFrame:
    """One row per (n_configs, cache_results, cache): the latest by date (by row order without dates)."""
    df = df.assign(cache_results=df["cache_results"].astype(int), n_configs=df["n_configs"].astype(int))
    if "date" in df.columns:
        df = df.sort_values("date", kind="stable")
    return df.drop_duplicates(["n_configs", "cache_results", "cache"], keep="last")


def lines(df: pd.DataFrame) -> dict[tuple[str, int, str], pd.DataFrame]:
    """{(cache, cache_results, measure): DataFrame indexed by n_configs with median, min, max in seconds}
    for every combination the file has; 'new_N' is the median (min, max) of the three new-N calls."""
    df = latest(df)
    out = {}
    for (cache, cr), g in df.groupby(["cache", "cache_results"]):
        g = g.sort_values("n_configs").set_index("n_configs")
        for measure, _ in MEASURES:
            if measure == "new_N":
                v = g[list(NEW_N)].astype(float)
                t = pd.DataFrame({"median": v.median(axis=1), "min": v.min(axis=1), "max": v.max(axis=1)})
            else:
                v = g[measure].astype(float)
                t = pd.DataFrame({"median": v, "min": v, "max": v})
            out[(cache, int(cr), measure)] = t
    return out


def article(results_root=None) -> tuple[pd.DataFrame, Path]:
    """The article's table, indexed by its number of configurations."""
    ref, path = data.reference("compile_cost", results_root)
    missing = [c for c in ARTICLE_COLUMNS if c not in ref.columns]
    if missing:
        raise data.ResultsError(f"results file {path} lacks column(s) {', '.join(missing)}")
    return ref.set_index("configs").sort_index(), path


def draw(gpu_slug: str, out_dir, results_root=None) -> list[Path]:
    df, path = data.compile_cost(gpu_slug, results_root)
    ref, ref_path = article(results_root)
    series = lines(df)
    fig, axes = style.figure(2, 2, panel=(5.2, 3.9), sharey=True)
    panels = [axes[0, 0], axes[1, 0], axes[1, 1]]
    counts = sorted(set(latest(df)["n_configs"]) | set(ref.index.astype(int)))
    for ax, (measure, title) in zip(panels, MEASURES):
        for cache, cache_label, colour in CACHES:
            for cr, cr_label, ls, marker in CACHE_RESULTS:
                s = series.get((cache, cr, measure))
                if s is None:
                    continue
                style.errorbar(ax, s.index, s.reset_index(), 0.03 * (2 * cr - 1), color=colour, linestyle=ls,
                               marker=marker, label=f"{cr_label}, {cache_label}")
        ax.set_title(f"{gpu_slug}: {title}")
    ax = axes[0, 1]
    for column, lab, colour, ls, marker in ARTICLE:
        ax.plot(ref.index, ref[column], color=colour, linestyle=ls, marker=marker, markersize=4, linewidth=1.4,
                label=lab)
    ax.set_title("the article's RTX 4070 SUPER (transcribed):\nautotune, without cache_results")
    ax.legend(loc="upper left", fontsize=8)
    for ax in axes.flat:
        style.log2_N_axis(ax, counts)
        ax.set_xlabel("configurations in @triton.autotune (1 = no tuning)")
        ax.set_ylabel("seconds")
        ax.set_ylim(bottom=0)
    style.outer_labels_only(axes)
    axes[0, 1].set_xlabel("configurations in @triton.autotune (1 = no tuning)")
    handles = [Line2D([], [], color=colour, linewidth=2, label=lab) for _, lab, colour in CACHES]
    handles += [Line2D([], [], color="0.3", linestyle=ls, marker=marker, label=lab)
                for _, lab, ls, marker in CACHE_RESULTS]
    axes[0, 0].legend(handles=handles, loc="upper left", fontsize=8, title=f"{gpu_slug}, a fresh process per point",
                      title_fontsize=8)
    fig.suptitle(f"What @triton.autotune costs: {gpu_slug} beside the article's RTX 4070 SUPER\n"
                 "seconds per call in a fresh process (v4_exp2's kernel under a new @triton.autotune)")
    imports = pd.to_numeric(df["import_s"], errors="coerce") if "import_s" in df.columns else pd.Series(dtype=float)
    note = [style.provenance_line(df, path)
            + (f"; importing torch and triton (not in any call): median {imports.median():.2f} s"
               if imports.notna().any() else ""),
            f"RTX 4070 SUPER: {'/'.join(ref_path.parts[-4:])} (the article's table, transcribed by hand). "
            "Our configurations are the sweep's top k by geometric mean over shapes (fa2lab.autotuning.ranked_configs),",
            "the article's are its top k by how close each comes to the best on every shape. Ours time each call "
            "with time.perf_counter, inputs made inside the call (fa2lab.autotuning)."]
    return style.finish(fig, out_dir, NAME, note)


def main(argv=None) -> int:
    return style.main_for(draw, __doc__, argv)


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
