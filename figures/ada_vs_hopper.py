"""The article's RTX 4070 SUPER (Ada) numbers beside ours, per version and shape: as % of SDPA, and
as % of the bf16-in, fp32-accumulate tensor-core peak. Ada's come from the article's Results table
(results/reference/rtx4070super/, transcribed), ours from results/<gpu>/bench/.

Both GPUs are treated alike: median ms per version and shape, SDPA pooled over every version's runs,
% of SDPA = SDPA's median / the version's median. Ours are each version's latest harness protocol, so SDPA's
median pools the runs of every version's protocol (at different commits); REPORT.md's tables take the median of
each run's own ratio, SDPA from the same run, and can differ from this where SDPA's time differed between
protocols. The footnote names the runs pooled. Ada's peak is the article's 72.2 TFLOP/s at
2.52 GHz; ours is TENSOR_FLOP_PER_CLK_PER_SM x sm_count x the median SM clock of the rows."""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from fa2lab import shapes  # noqa: E402
from fa2triton import versions  # noqa: E402
from figures import data, style  # noqa: E402

NAME = "ada_vs_hopper"
KEYS = ["N", "causal"]
ADA_COLOUR, OURS_COLOUR = "#d95f02", "#1b9e77"


def ada_table(results_root=None) -> pd.DataFrame:
    """Per version (and 'sdpa') and shape: ms, tflops, pct_of_sdpa, pct_of_peak, from the article."""
    ref, path = data.reference("results", results_root)
    gpu, gpu_path = data.reference("gpu", results_root)
    facts = dict(zip(gpu["quantity"], gpu["value"]))
    if "tensor_peak_tflops" not in facts:
        raise data.ResultsError(f"results file {gpu_path} lacks the quantity tensor_peak_tflops")
    t = ref[["version", "N", "causal", "ms"]].copy()
    t["tflops"] = data.flops(t) / (t["ms"] * 1e-3) / 1e12
    sdpa = t[t["version"] == data.SDPA].set_index(KEYS)["ms"]
    t["pct_of_sdpa"] = 100 * t.set_index(KEYS).index.map(sdpa).to_numpy() / t["ms"]
    t["pct_of_peak"] = 100 * t["tflops"] / float(facts["tensor_peak_tflops"])
    t.attrs["peak"] = f"{float(facts['tensor_peak_tflops']):g} TFLOP/s at {float(facts['tensor_peak_clock_mhz']):g} MHz"
    return t


def our_table(gpu_slug: str, results_root=None) -> pd.DataFrame:
    """The same columns from our bench rows (medians over runs; SDPA pooled over every version's runs)."""
    df, _ = data.bench(gpu_slug, results_root)
    for c in ("arch", "sm_count", "sm_clock_mhz_median"):
        if c not in df.columns:
            raise data.ResultsError(f"results files in {data.root(results_root) / gpu_slug / 'bench'} lack column {c}")
    sdpa = df.assign(version=data.SDPA, ms=df["sdpa_ms"])
    rows = []
    for (v, N, causal), g in pd.concat([df, sdpa]).groupby(["version", "N", "causal"], sort=False):
        ms = g["ms"].median()
        tflops = data.flops(g).iloc[0] / (ms * 1e-3) / 1e12
        peak = data.tensor_peak_tflops(g["arch"].iloc[0], g["sm_count"].median(), g["sm_clock_mhz_median"].median())
        rows.append({"version": v, "N": N, "causal": int(causal), "ms": ms, "tflops": tflops,
                     "pct_of_peak": 100 * tflops / peak, "peak": peak})
    t = pd.DataFrame(rows)
    sdpa_ms = t[t["version"] == data.SDPA].set_index(KEYS)["ms"]
    t["pct_of_sdpa"] = 100 * t.set_index(KEYS).index.map(sdpa_ms).to_numpy() / t["ms"]
    t.attrs["runs"] = style.runs_text(df.groupby("version")["run_id"].nunique())
    t.attrs["pooling"], t.attrs["pooled_runs"] = pooling(df)
    t.attrs["peak"] = f"{t['peak'].min():.0f}–{t['peak'].max():.0f} TFLOP/s at the rows' median SM clocks"
    return t


def _span(short: list[str]) -> str:
    """'v0–v4' for three or more versions in a row of the registry, else 'v5, v6'."""
    ranks = [[n.split("_")[0] for n in versions.NAMES].index(s) for s in short]
    if len(short) >= 3 and ranks == list(range(ranks[0], ranks[0] + len(ranks))):
        return f"{short[0]}–{short[-1]}"
    return ", ".join(short)


def pooling(df: pd.DataFrame) -> tuple[str, int]:
    """(which runs our table pools, e.g. 'v0–v4: 3 runs each at 260ca6e; v7: 18 runs at 4a3517c', and how many
    runs that is in all), from the rows: versions in registry order, grouped by run count and commit(s)."""
    groups: dict[tuple[int, str], list[str]] = {}
    for v, g in df.groupby("version", sort=False):
        recorded = g["git_commit"].dropna() if "git_commit" in g.columns else []
        commits = ", ".join(sorted({str(c)[:7] for c in recorded})) or "an unrecorded commit"
        groups.setdefault((g["run_id"].nunique(), commits), []).append(v.split("_")[0])
    text = "; ".join(f"{_span(vs)}: {n} run{'s' if n > 1 else ''}{' each' if len(vs) > 1 else ''} at {c}"
                     for (n, c), vs in groups.items())
    return text, int(df.groupby("version")["run_id"].nunique().sum())


def _panel(ax, ada, ours, order, metric, title):
    x = np.arange(len(order))
    width = 0.4
    for k, (t, col, lab) in enumerate(((ada, ADA_COLOUR, "RTX 4070 SUPER (article)"), (ours, OURS_COLOUR, "ours"))):
        vals = t.set_index("version").reindex(order)[metric].to_numpy(dtype=float)
        bars = ax.bar(x + (k - 0.5) * width, vals, width, color=col, label=lab)
        ax.bar_label(bars, labels=["" if np.isnan(v) else f"{v:.0f}" for v in vals], fontsize=6.5, padding=1)
    ax.set_xticks(x, ["SDPA" if v == data.SDPA else v.split("_")[0] for v in order])
    ax.set_title(title)
    ax.grid(axis="x", visible=False)


def _figure(ada, ours, metric, ylabel, order, gpu_slug, ours_label, note, out_dir, name, title_tail=""):
    fig, axes = style.figure(len(shapes.MASKS), len(shapes.SEQ_LENS), panel=(3.6, 2.9), sharey=True)
    for i, causal in enumerate(shapes.MASKS):
        for j, N in enumerate(shapes.SEQ_LENS):
            sel = [t[(t["N"] == N) & (t["causal"] == int(causal))] for t in (ada, ours)]
            _panel(axes[i, j], *sel, order, metric, f"N = {N}, {data.mask_name(causal)}")
            axes[i, j].set_ylabel(ylabel)
    top = max(t[t["version"].isin(order)][metric].max() for t in (ada, ours))
    axes[0, 0].set_ylim(0, 1.1 * top)
    if metric == "pct_of_sdpa":
        for ax in axes.flat:
            ax.axhline(100, color=style.SDPA_COLOUR, linestyle="--", linewidth=1)
    style.outer_labels_only(axes)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, [lab.replace("ours", ours_label) for lab in labels], loc="outside right upper")
    fig.suptitle(f"{ylabel}: the article's RTX 4070 SUPER beside {gpu_slug}, per version and shape{title_tail}")
    return style.finish(fig, out_dir, name, note)


def draw(gpu_slug: str, out_dir, results_root=None) -> list[Path]:
    ada, ours = ada_table(results_root), our_table(gpu_slug, results_root)
    order = [v for v in versions.NAMES if v in set(ours["version"])]
    note = ["RTX 4070 SUPER: the article's table, results/reference/rtx4070super/results.csv (medians of 10 runs). "
            f"{gpu_slug}: each version's latest harness protocol, results/{gpu_slug}/bench/ "
            f"({ours.attrs['pooling']}).",
            f"% of SDPA = SDPA's median ms pooled over all {ours.attrs['pooled_runs']} of those runs / the version's "
            "median ms (both GPUs); REPORT.md's tables and the article's own % column: the median of each run's own "
            "ratio, SDPA from the same run."]
    paths = _figure(ada, ours, "pct_of_sdpa", "% of SDPA", order, gpu_slug, gpu_slug, note, out_dir, f"{NAME}_sdpa",
                    "\nSDPA's median pooled over every version's latest harness runs (footnote)")
    note_peak = (f"Tensor-core peak, bf16 in, fp32 accumulate: RTX 4070 SUPER {ada.attrs['peak']} (the article's "
                 f"figure; the harness ran at 2.61–2.68 GHz); {gpu_slug} {ours.attrs['peak']}.\n"
                 "TFLOP/s = the harness's FLOP count / median ms.")
    paths += _figure(ada, ours, "pct_of_peak", "% of tensor-core peak", order + [data.SDPA], gpu_slug, gpu_slug,
                     note_peak, out_dir, f"{NAME}_peak")
    return paths


def main(argv=None) -> int:
    return style.main_for(draw, __doc__, argv)


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
