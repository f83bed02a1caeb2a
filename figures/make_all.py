"""Draw every figure for one or more GPUs from results/ and print the files written. A figure whose
results file is missing or malformed is skipped with a message naming the file; the exit status is
non-zero only if nothing at all could be drawn."""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from figures import (ada_vs_hopper, compile_cost, data, gluon_rounds, host_vs_graph, roofline,  # noqa: E402
                     style, sweep_grids, tile_heatmap, timeline, versions_bench)

# Each a figure module, or one view of a module that draws several (NAME and draw(gpu, out_dir, results_root)).
FIGURES = (tile_heatmap, *sweep_grids.VIEWS, versions_bench, ada_vs_hopper, host_vs_graph,
           roofline, compile_cost, timeline, gluon_rounds)


def make_all(gpus: list[str], out: Path, results_root=None) -> tuple[list[Path], list[str]]:
    """(files written, one message per skipped figure)."""
    written, skipped = [], []
    for slug in gpus:
        for module in FIGURES:
            try:
                written += module.draw(slug, Path(out) / slug, results_root)
            except data.ResultsError as e:
                skipped.append(f"{slug}: skipped {module.NAME}: {e}")
    return written, skipped


def main(argv=None) -> int:
    gpus, out, results_root = style.parse_cli(__doc__, argv)
    written, skipped = make_all(gpus, out, results_root)
    for path in written:
        print(path)
    for message in skipped:
        print(message, file=sys.stderr)
    print(f"{len(written)} files written, {len(skipped)} figure(s) skipped", file=sys.stderr)
    return 0 if written else 1


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
