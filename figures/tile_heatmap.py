"""Query tile x key tile heatmap from a sweep: each cell the best TFLOP/s over warps and stages,
one panel per (N, mask), the winner boxed, cells with no ok configuration labelled by why."""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fa2lab import shapes  # noqa: E402
from fa2lab.forward_sweep import TILES  # noqa: E402
from figures import data, style  # noqa: E402

NAME = "tile_heatmap"


def tile_matrix(df, N: int, causal: bool):
    """(tflops, why, winner) for one shape of a sweep: q_tile x k_tile best TFLOP/s over warps and
    stages, the reason for each cell with nothing ok, and the winning sweep row (see data.best_grid)."""
    rows = df[(df["N"] == N) & (df["causal"].astype(int) == int(causal))]
    return data.best_grid(rows, "q_tile", "k_tile", TILES, TILES)


def winner_text(w) -> str:
    return f"{int(w.q_tile)}×{int(w.k_tile)}, {int(w.num_warps)} warps, {int(w.num_stages)} stages"


def draw(gpu_slug: str, out_dir, results_root=None, version: str | None = None) -> list[Path]:
    """One file per sweep (data.SWEEP_VERSIONS) this GPU has, or only the version named."""
    return style.for_each_sweep(_draw_one, gpu_slug, out_dir, results_root, version)


def _draw_one(gpu_slug: str, out_dir, results_root, version: str) -> list[Path]:
    df, path = data.sweep(gpu_slug, version, results_root)
    fig, axes = style.figure(len(shapes.MASKS), len(shapes.SEQ_LENS), panel=(3.9, 3.6))
    for i, causal in enumerate(shapes.MASKS):
        for j, N in enumerate(shapes.SEQ_LENS):
            data.shape_rows(df, path, N, causal)
            tflops, why, w = tile_matrix(df, N, causal)
            cell = None if w is None else (w.q_tile, w.k_tile)
            title = f"N = {N}, {data.mask_name(causal)}\nwinner: " + (winner_text(w) if w is not None else "none")
            im = style.grid_panel(axes[i, j], tflops, why, cell, title, "key tile (K_TILE_SIZE)",
                                  "query tile (Q_TILE_SIZE)")
    style.outer_labels_only(axes)
    style.grid_colorbar(fig, im, axes)
    fig.suptitle(f"{style.sweep_title(version, gpu_slug)}: best TFLOP/s over num_warps × num_stages per tile "
                 "(red box: the shape's winner)")
    return style.finish(fig, out_dir, f"{NAME}_{version}", [style.provenance_line(df, path), style.HOST_NOTE])


def main(argv=None) -> int:
    return style.main_for(draw, __doc__, argv)


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
