"""num_warps x num_stages for the winning tile of a sweep at N = 4096, one panel per mask: each cell
one configuration's TFLOP/s (the article's third heatmap)."""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fa2lab import shapes  # noqa: E402
from fa2lab.sweep import STAGES, WARPS  # noqa: E402
from figures import data, style  # noqa: E402
from figures.tile_heatmap import tile_matrix  # noqa: E402

NAME = "warps_stages"
N = 4096


def draw(gpu_slug: str, out_dir, results_root=None, version: str | None = None) -> list[Path]:
    """One file per sweep (data.SWEEP_VERSIONS) this GPU has, or only the version named."""
    return style.for_each_sweep(_draw_one, gpu_slug, out_dir, results_root, version)


def _draw_one(gpu_slug: str, out_dir, results_root, version: str) -> list[Path]:
    df, path = data.sweep(gpu_slug, version, results_root)
    fig, axes = style.figure(1, len(shapes.MASKS), panel=(4.3, 3.8))
    for j, causal in enumerate(shapes.MASKS):
        data.shape_rows(df, path, N, causal)
        _, _, w = tile_matrix(df, N, causal)
        if w is None:
            raise data.ResultsError(f"results file {path} has no ok configuration at N={N} {data.mask_name(causal)}")
        tile = df[(df["N"] == N) & (df["causal"].astype(int) == int(causal))
                  & (df["q_tile"] == w.q_tile) & (df["k_tile"] == w.k_tile)]
        tflops, why, _ = data.best_grid(tile, "num_warps", "num_stages", WARPS, STAGES)
        im = style.grid_panel(axes[0, j], tflops, why, (w.num_warps, w.num_stages),
                              f"N = {N}, {data.mask_name(causal)}: tile {int(w.q_tile)}×{int(w.k_tile)}",
                              "num_stages", "num_warps")
    style.outer_labels_only(axes)
    style.grid_colorbar(fig, im, axes)
    fig.suptitle(f"{version} sweep on {gpu_slug}: TFLOP/s by warps and stages\n"
                 "for each mask's winning tile (red box: best)")
    style.footnote(fig, style.provenance_line(df, path))
    return style.save(fig, out_dir, f"{NAME}_{version}")


def main(argv=None) -> int:
    return style.main_for(draw, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
