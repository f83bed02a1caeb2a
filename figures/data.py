"""Reading results/ for the figures: where the files are, what they must contain, and the few
derived quantities every figure shares. Nothing here measures; every number comes from a CSV."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pandas as pd

from fa2lab import gpu, results, shapes, versions

REFERENCE = "reference"            # results/reference/: the article's numbers, transcribed
ADA = "rtx4070super"               # results/reference/<ADA>/
SDPA = "sdpa"                      # the version name the reference tables use for SDPA
STATUS_LABEL = {"out_of_smem": "out of smem", "skipped_registers": "skipped", "compile_error": "compile error",
                "wrong": "wrong"}


class ResultsError(Exception):
    """A results file is missing, malformed or lacks what a figure needs; the message names it."""


def root(results_root: str | Path | None = None) -> Path:
    """The results folder: the argument, else $FA2_RESULTS (read now), else fa2lab's default."""
    if results_root is not None:
        return Path(results_root)
    return Path(os.environ.get("FA2_RESULTS", results.RESULTS))


def gpu_slugs(results_root: str | Path | None = None) -> list[str]:
    """Every measured GPU: the folders under results/ with harness, sweep or host-path results
    (not the transcribed reference, nor offline compiles such as results/offline-sm_90)."""
    base = root(results_root)
    if not base.is_dir():
        return []
    measured = ("bench", "sweep", "hostpath")
    return sorted(p.name for p in base.iterdir() if p.is_dir() and p.name != REFERENCE and not p.name.startswith(".")
                  and any((p / m).is_dir() for m in measured))


def load(path: Path, required: tuple[str, ...] = ()) -> pd.DataFrame:
    """fa2lab.results.read_csv, with every failure (missing, malformed, columns, no rows) as ResultsError."""
    try:
        df = results.read_csv(path, required=required)
    except (FileNotFoundError, ValueError) as e:
        raise ResultsError(str(e)) from None
    if df.empty:
        raise ResultsError(f"results file {path} has no rows")
    return df


SWEEP_COLUMNS = ("N", "causal", "q_tile", "k_tile", "num_warps", "num_stages", "status", "tflops")
BENCH_COLUMNS = ("version", "run_id", "N", "causal", "ms", "tflops", "sdpa_ms", "pct_of_sdpa")
HOSTPATH_COLUMNS = ("version", "run_id", "N", "causal", "ms", "graph_ms", "host_us",
                    "sdpa_ms", "sdpa_graph_ms", "sdpa_host_us")


def sweep(gpu_slug: str, version: str = "v4_exp2", results_root=None) -> tuple[pd.DataFrame, Path]:
    path = root(results_root) / gpu_slug / "sweep" / f"{version}.csv"
    return load(path, SWEEP_COLUMNS), path


def shape_rows(df: pd.DataFrame, path: Path, N: int | None, causal: bool) -> pd.DataFrame:
    """The rows of one shape (every N if N is None), or a ResultsError naming the file if it has none."""
    rows = df[(df["causal"].astype(int) == int(causal)) & ((df["N"] == N) if N is not None else True)]
    if rows.empty:
        raise ResultsError(f"results file {path} has no rows for {'' if N is None else f'N={N} '}{mask_name(causal)}")
    return rows


def bench(gpu_slug: str, results_root=None) -> tuple[pd.DataFrame, list[Path]]:
    """Every version's bench rows from its latest protocol run, in registry order.

    Versions without a file are left out (and named on stderr); none at all is a ResultsError
    naming the folder. A file with several protocols keeps the latest (see latest_protocol)."""
    folder = root(results_root) / gpu_slug / "bench"
    frames, paths, missing = [], [], []
    for v in versions.VERSIONS:
        path = folder / f"{v.name}.csv"
        if not path.exists():
            missing.append(path)
            continue
        frames.append(latest_protocol(load(path, BENCH_COLUMNS)))
        paths.append(path)
    if not frames:
        raise ResultsError(f"results file {missing[0]} does not exist (nor any other version's in {folder})")
    for path in missing:
        print(f"note: {path} does not exist; that version is left out", file=sys.stderr)
    return pd.concat(frames, ignore_index=True), paths


def latest_protocol(df: pd.DataFrame) -> pd.DataFrame:
    """The rows of the latest protocol in a harness file: run ids are '<protocol>/<run>' (or a bare
    label); the protocol whose newest row has the latest date wins (by row order without dates)."""
    protocol = df["run_id"].astype(str).str.rsplit("/", n=1).str[0]
    order = df["date"] if "date" in df.columns else pd.Series(range(len(df)), index=df.index)
    newest = order.groupby(protocol).max()
    return df[protocol == newest.idxmax()]


def hostpath(gpu_slug: str, version: str, results_root=None) -> tuple[pd.DataFrame, Path]:
    """One version's host-path rows from its latest protocol."""
    path = root(results_root) / gpu_slug / "hostpath" / f"{version}.csv"
    return latest_protocol(load(path, HOSTPATH_COLUMNS)), path


def reference(name: str, results_root=None, gpu_slug: str = ADA) -> tuple[pd.DataFrame, Path]:
    path = root(results_root) / REFERENCE / gpu_slug / f"{name}.csv"
    return load(path, ("provenance",)), path


def flops(df: pd.DataFrame) -> pd.Series:
    """The harness's FLOP count per row: the flops column where there is one, else recomputed."""
    def one(r):
        B, H, D = (int(r[c]) if c in r and pd.notna(r[c]) else d
                   for c, d in (("B", shapes.BATCH), ("H", shapes.HEADS), ("D", shapes.HEAD_DIM)))
        return shapes.flops(B, H, int(r["N"]), D, bool(int(r["causal"])))

    computed = df.apply(one, axis=1) if len(df) else pd.Series(dtype=float)
    return df["flops"].fillna(computed) if "flops" in df.columns else computed


def tensor_peak_tflops(arch: str, sm_count: float, clock_mhz: float) -> float:
    """bf16-in, fp32-accumulate tensor-core peak from the CSV's arch, SM count and SM clock."""
    m = re.fullmatch(r"sm_(\d+)(\d)", str(arch))
    if not m or (int(m[1]), int(m[2])) not in gpu.TENSOR_FLOP_PER_CLK_PER_SM:
        raise ResultsError(f"no tensor-core rate known for architecture {arch!r} "
                           "(fa2lab.gpu.TENSOR_FLOP_PER_CLK_PER_SM)")
    return gpu.TENSOR_FLOP_PER_CLK_PER_SM[(int(m[1]), int(m[2]))] * sm_count * clock_mhz * 1e6 / 1e12


def mask_name(causal) -> str:
    return "causal" if int(causal) else "non-causal"


def best_grid(df: pd.DataFrame, rows: str, cols: str, row_values, col_values):
    """The best ok TFLOP/s for every (rows, cols) cell over everything else, the reason a cell
    has no ok configuration (the statuses it had instead), and the winning row overall.

    Returns (tflops, why, winner): two DataFrames indexed by row_values x col_values (tflops NaN
    and why a label where no configuration was ok; why '' elsewhere) and the winner as a Series
    of the sweep row (None if nothing was ok)."""
    ok = df[df["status"] == "ok"]
    tflops = (ok.groupby([rows, cols])["tflops"].max().unstack(cols)
              .reindex(index=list(row_values), columns=list(col_values)))
    why = pd.DataFrame("", index=tflops.index, columns=tflops.columns, dtype=object)
    for r in tflops.index:
        for c in tflops.columns:
            if pd.isna(tflops.loc[r, c]):
                statuses = df[(df[rows] == r) & (df[cols] == c)]["status"].value_counts()
                why.loc[r, c] = "\n".join(STATUS_LABEL.get(s, s) for s in statuses.index) or "not run"
    winner = ok.loc[ok["tflops"].idxmax()] if len(ok) else None
    return tflops, why, winner


def spread(df: pd.DataFrame, value, by=("N", "causal")) -> pd.DataFrame:
    """Median, min and max of a column (or of a Series aligned with df) per group."""
    values = df[value] if isinstance(value, str) else value
    g = values.groupby([df[b] for b in by])
    return pd.DataFrame({"median": g.median(), "min": g.min(), "max": g.max()}).reset_index()
