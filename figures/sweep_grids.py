"""Two views of a sweep at N = 4096, one panel per mask, one file per sweep this GPU has (<view>_<version>.png):

- qtile_warps (the article's second heatmap): query tile x num_warps, each cell the best TFLOP/s over key tiles
  and stages (does every warp get its own 16-row slice?);
- warps_stages (the article's third): num_warps x num_stages for each mask's winning tile, each cell one
  configuration's TFLOP/s."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

if __package__ in (None, ""):  # run as a file: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fa2lab import shapes  # noqa: E402
from fa2lab.forward_sweep import STAGES, TILES, WARPS  # noqa: E402
from figures import data, style  # noqa: E402
from figures.tile_heatmap import tile_matrix  # noqa: E402

N = 4096


def qtile_warps_grid(df, path, causal):
    """(tflops, why, winner cell, panel title, x label, y label): query tile x num_warps, best over the rest."""
    rows = data.shape_rows(df, path, N, causal)
    tflops, why, w = data.best_grid(rows, "q_tile", "num_warps", TILES, WARPS)
    cell = None if w is None else (w.q_tile, w.num_warps)
    return tflops, why, cell, f"N = {N}, {data.mask_name(causal)}", "num_warps", "query tile (Q_TILE_SIZE)"


def warps_stages_grid(df, path, causal):
    """The same for num_warps x num_stages of the shape's winning tile (a ResultsError if nothing there is ok)."""
    data.shape_rows(df, path, N, causal)
    _, _, w = tile_matrix(df, N, causal)
    if w is None:
        raise data.ResultsError(f"results file {path} has no ok configuration at N={N} {data.mask_name(causal)}")
    tile = df[(df["N"] == N) & (df["causal"].astype(int) == int(causal))
              & (df["q_tile"] == w.q_tile) & (df["k_tile"] == w.k_tile)]
    tflops, why, _ = data.best_grid(tile, "num_warps", "num_stages", WARPS, STAGES)
    return (tflops, why, (w.num_warps, w.num_stages),
            f"N = {N}, {data.mask_name(causal)}: tile {int(w.q_tile)}×{int(w.k_tile)}", "num_stages", "num_warps")


@dataclass(frozen=True)
class View:
    """One figure of this module, drawn like a figure module (NAME, draw) by make_all."""
    NAME: str
    grid: Callable      # (sweep rows, their file, causal) -> (tflops, why, winner cell, title, x label, y label)
    caption: str        # the second line of the title

    def draw(self, gpu_slug: str, out_dir, results_root=None, version: str | None = None) -> list[Path]:
        """One file per sweep (data.SWEEP_VERSIONS) this GPU has, or only the version named."""
        return style.for_each_sweep(self._draw_one, gpu_slug, out_dir, results_root, version)

    def _draw_one(self, gpu_slug: str, out_dir, results_root, version: str) -> list[Path]:
        df, path = data.sweep(gpu_slug, version, results_root)
        fig, axes = style.figure(1, len(shapes.MASKS), panel=(4.3, 3.8))
        for j, causal in enumerate(shapes.MASKS):
            tflops, why, cell, title, xlabel, ylabel = self.grid(df, path, causal)
            im = style.grid_panel(axes[0, j], tflops, why, cell, title, xlabel, ylabel)
        style.outer_labels_only(axes)
        style.grid_colorbar(fig, im, axes)
        fig.suptitle(f"{style.sweep_title(version, gpu_slug)}: {self.caption}")
        return style.finish(fig, out_dir, f"{self.NAME}_{version}", style.provenance_line(df, path))


QTILE_WARPS = View("qtile_warps", qtile_warps_grid,
                   "best TFLOP/s over key tiles × stages\nper query tile and warp count (red box: best)")
WARPS_STAGES = View("warps_stages", warps_stages_grid,
                    "TFLOP/s by warps and stages\nfor each mask's winning tile (red box: best)")
VIEWS = (QTILE_WARPS, WARPS_STAGES)


def draw(gpu_slug: str, out_dir, results_root=None, version: str | None = None) -> list[Path]:
    """Both views."""
    return [p for view in VIEWS for p in view.draw(gpu_slug, out_dir, results_root, version)]


def main(argv=None) -> int:
    return style.main_for(draw, __doc__, argv)


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
