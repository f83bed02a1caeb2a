"""Time per call by N, three or four ways, for v5-v7 (the lean host path) and SDPA measured in the same process:
do_bench (what the harness reports, cache flush included), CUDA-graph replay (the kernel without Python), the
host's own time per call (µs), and, where the harness wrote it, do_bench's per-call events without the flush.
Where do_bench sits at the host time, it measures the host."""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pandas as pd  # noqa: E402

from fa2lab import shapes  # noqa: E402
from figures import data, style  # noqa: E402

NAME = "host_vs_graph"
# (our column, SDPA's column in the same run, factor to µs, measure, line style, marker)
MEASURES = (("ms", "sdpa_ms", 1000.0, "do_bench (harness)", "-", "o"),
            ("graph_ms", "sdpa_graph_ms", 1000.0, "CUDA-graph replay", "--", "s"),
            ("host_us", "sdpa_host_us", 1.0, "host time per call", ":", "^"))
# drawn where the harness wrote it (protocols since commit e0fa889)
NOFLUSH = ("noflush_ms", "sdpa_noflush_ms", 1000.0, "do_bench without its flush", "-.", "D")


def measures(df: pd.DataFrame) -> tuple:
    """MEASURES, plus the no-flush timing where every row of the table has it for ours and SDPA."""
    has = all(c in df.columns and df[c].notna().all() for c in NOFLUSH[:2])
    return MEASURES + ((NOFLUSH,) if has else ())


def draw(gpu_slug: str, out_dir, results_root=None) -> list[Path]:
    found = data.hostpath_tables(gpu_slug, results_root)
    tables = [(df, path) for _, df, path in found]
    fig, axes = style.figure(len(found), len(shapes.MASKS), panel=(5.0, 3.6), sharey=True, sharex=True)
    for i, (version, df, path) in enumerate(found):
        for j, causal in enumerate(shapes.MASKS):
            ax = axes[i, j]
            rows = data.shape_rows(df, path, None, causal)
            for k, (ours, sdpa, scale, measure, ls, marker) in enumerate(measures(rows)):
                for col, who, colour in ((ours, style.label(version), style.colour(version)),
                                         (sdpa, "SDPA", style.SDPA_COLOUR)):
                    s = data.spread(rows, rows[col] * scale, by=("N",))
                    style.errorbar(ax, s["N"], s, 0.04 * (k - 1), linestyle=ls, marker=marker, color=colour,
                                   label=f"{who}: {measure}")
            ax.set_title(f"{version} file, {data.mask_name(causal)}")
            style.log2_N_axis(ax, shapes.SEQ_LENS)
            style.log_axis(ax)
            ax.margins(y=0.08)
            ax.set_xlabel("sequence length N")
            ax.set_ylabel("time per call (µs, log scale)")
        axes[i, -1].legend(loc="center left", bbox_to_anchor=(1.02, 0.5))
    style.outer_labels_only(axes)
    runs = [df["run_id"].nunique() for df, _ in tables]
    fig.suptitle(f"do_bench vs CUDA-graph replay vs host time per call on {gpu_slug} (B=4, H=8, D=64, bf16)\n"
                 f"median of {style.runs_text(runs)} of each file's latest protocol, bars min–max")
    both = pd.concat([df for df, _ in tables])
    same_folder = len({p.parent for _, p in tables}) == 1
    files = ("{" + ",".join(p.stem for _, p in tables) + "}.csv" if same_folder
             else ", ".join(f"{p.parent.name}/{p.name}" for _, p in tables))
    protocols = ", ".join(sorted(both["run_id"].astype(str).str.rsplit("/", n=1).str[0].unique()))
    return style.finish(fig, out_dir, NAME, [style.provenance_line(both, tables[0][1], files) + f"; protocol {protocols}",
                                             "SDPA is the one timed in the same processes as the kernel"])


def main(argv=None) -> int:
    return style.main_for(draw, __doc__, argv)


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
