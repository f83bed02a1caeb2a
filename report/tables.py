"""Shared helpers of the report: markdown tables, number formats, results files read once, the harness summary.

Every section module formats its cells with these, so a number prints the same wherever it appears."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from figures import data


REPO = Path(__file__).resolve().parents[1]
NOT_YET = "not measured yet"
PEER = "flash-attn-4"   # the FA3-class peer the harness times beside SDPA (columns fa4_*)
PEER_OK = "ok"          # fa4_status of a row whose peer columns were measured


@dataclass
class Claim:
    text: str           # the article's claim, with its numbers
    verdict: str        # holds / does not hold / partly / not measured yet
    evidence: str       # our numbers
    source: str         # the file(s) they come from


def rel(path) -> str:
    """A path as the repository names it (results/ may be a link to another folder: its own name is kept)."""
    p = Path(path)
    for candidate in (Path(os.path.abspath(p)), p.resolve()):
        try:
            return str(candidate.relative_to(REPO))
        except ValueError:
            continue
    return str(p)


def md_table(header: list[str], rows: list[list]) -> str:
    def cell(x):
        if isinstance(x, float):
            return "–" if math.isnan(x) else f"{x:,.3f}" if abs(x) < 10 else f"{x:,.1f}"
        return str(x)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(x) for x in r) + " |" for r in rows]
    return "\n".join(lines)


def fmt(x, spec: str = ".2f", suffix: str = "") -> str:
    """A number for a table cell, '–' where there is none (None or NaN)."""
    if x is None or (isinstance(x, (float, np.floating)) and math.isnan(x)):
        return "–"
    return f"{x:{spec}}{suffix}"


def span(median, lo, hi, spec=".0f", suffix="") -> str:
    """'median (lo–hi)' for a spread over runs or calls."""
    return f"{fmt(median, spec, suffix)} ({fmt(lo, spec)}–{fmt(hi, spec, suffix)})"


def optional(path: Path, required: tuple[str, ...] = ()) -> pd.DataFrame | None:
    """A results file that a section reads: None if it does not exist yet (the section then says
    not measured yet); a ResultsError naming the file if it is malformed or lacks a column."""
    if not Path(path).exists():
        return None
    return data.load(Path(path), required)


def numeric(df: pd.DataFrame, path: Path, columns) -> pd.DataFrame:
    """The columns as numbers; a value that is not a number is a ResultsError naming the file."""
    out = df.copy()
    for c in columns:
        v = pd.to_numeric(out[c], errors="coerce")
        bad = v.isna() & out[c].notna()
        if bad.any():
            raise data.ResultsError(f"results file {path}: column {c} has a value that is not a number "
                                    f"({out[c][bad].iloc[0]!r})")
        out[c] = v
    return out


def latest_rows(df: pd.DataFrame, keys) -> pd.DataFrame:
    """One row per key, the latest by date (by row order without dates): re-runs append to the same file."""
    if "date" in df.columns:
        df = df.sort_values("date", kind="stable")
    return df.drop_duplicates(list(keys), keep="last")


def not_yet(title: str, task: str, path) -> str:
    return f"{title}\n{NOT_YET}: `{task}` writes `{rel(path)}`."


# ---------------------------------------------------------------- data, one place each

def bench_summary(gpu: str, root) -> tuple[pd.DataFrame, list[Path]]:
    """Per version and shape: median ms, TFLOP/s, % of SDPA (median of per-run ratios, min, max)."""
    df, paths = data.bench(gpu, root)
    g = df.groupby(["version", "causal", "N"])
    out = g.agg(ms=("ms", "median"), ms_min=("ms", "min"), ms_max=("ms", "max"), tflops=("tflops", "median"),
                sdpa_ms=("sdpa_ms", "median"), pct=("pct_of_sdpa", "median"), pct_min=("pct_of_sdpa", "min"),
                pct_max=("pct_of_sdpa", "max"), runs=("ms", "size"))
    if "pct_of_sdpa_flash" in df.columns:
        out["pct_fa"] = g["pct_of_sdpa_flash"].median()
    return out.reset_index(), paths


def ada(name: str, root):
    try:
        return data.reference(name, root)
    except data.ResultsError:
        return None, None


def get(summary: pd.DataFrame, version: str, N: int, causal: int, col: str) -> float:
    row = summary[(summary.version == version) & (summary.N == N) & (summary.causal == causal)]
    return float(row[col].iloc[0]) if len(row) else float("nan")


def ada_ms(ref: pd.DataFrame | None, version: str, N: int, causal: int) -> float:
    if ref is None:
        return float("nan")
    row = ref[(ref.version == version) & (ref.N == N) & (ref.causal == causal)]
    return float(row.ms.iloc[0]) if len(row) else float("nan")


def peer_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The rows whose peer (flash-attn-4) columns were measured: fa4_status == 'ok'."""
    if "fa4_status" not in df.columns:
        return df.iloc[0:0]
    return df[df["fa4_status"].astype(str).str.strip() == PEER_OK]
