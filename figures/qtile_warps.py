"""Query tile x num_warps from a sweep at N = 4096, both masks: each cell the best TFLOP/s over key
tiles and stages (the article's second heatmap: does every warp get its own 16-row slice?)."""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fa2lab import shapes  # noqa: E402
from fa2lab.sweep import TILES, WARPS  # noqa: E402
from figures import data, style  # noqa: E402

NAME = "qtile_warps"
N = 4096


def draw(gpu_slug: str, out_dir, results_root=None, version: str | None = None) -> list[Path]:
    """One file per sweep (data.SWEEP_VERSIONS) this GPU has, or only the version named."""
    return style.for_each_sweep(_draw_one, gpu_slug, out_dir, results_root, version)


def _draw_one(gpu_slug: str, out_dir, results_root, version: str) -> list[Path]:
    df, path = data.sweep(gpu_slug, version, results_root)
    fig, axes = style.figure(1, len(shapes.MASKS), panel=(4.3, 3.8))
    for j, causal in enumerate(shapes.MASKS):
        rows = data.shape_rows(df, path, N, causal)
        tflops, why, w = data.best_grid(rows, "q_tile", "num_warps", TILES, WARPS)
        cell = None if w is None else (w.q_tile, w.num_warps)
        im = style.grid_panel(axes[0, j], tflops, why, cell, f"N = {N}, {data.mask_name(causal)}",
                              "num_warps", "query tile (Q_TILE_SIZE)")
    style.outer_labels_only(axes)
    style.grid_colorbar(fig, im, axes)
    fig.suptitle(f"{version} sweep on {gpu_slug}: best TFLOP/s over key tiles × stages\n"
                 "per query tile and warp count (red box: best)")
    style.footnote(fig, style.provenance_line(df, path))
    return style.save(fig, out_dir, f"{NAME}_{version}")


def main(argv=None) -> int:
    return style.main_for(draw, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
