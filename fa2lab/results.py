"""Result files: where they live, appending rows with provenance, reading them back."""

from __future__ import annotations

import csv
import os
from pathlib import Path

from .paths import REPO

RESULTS = Path(os.environ.get("FA2_RESULTS", REPO / "results"))


def gpu_dir(gpu_slug: str | None = None) -> Path:
    """results/<gpu>/ for this GPU (or the one named)."""
    if gpu_slug is None:
        from fa2triton.gpu import facts

        gpu_slug = facts().slug
    return RESULTS / gpu_slug


def append_rows(path: str | Path, rows: list[dict]) -> Path:
    """Append rows to a CSV, writing the header on first use.

    A row with columns the file does not have yet rewrites the file once with the
    union of the columns, so nothing already measured is lost.
    """
    path = Path(path)
    if not rows:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    columns = list(dict.fromkeys(k for r in rows for k in r))
    if path.exists() and path.stat().st_size > 0:
        with path.open(newline="") as f:
            reader = csv.DictReader(f)
            existing = list(reader.fieldnames or [])
            missing = [c for c in columns if c not in existing]
            if missing:
                old = list(reader)
                header = existing + missing
                tmp = path.with_suffix(path.suffix + ".tmp")
                with tmp.open("w", newline="") as g:
                    w = csv.DictWriter(g, fieldnames=header)
                    w.writeheader()
                    w.writerows(old)
                os.replace(tmp, path)
                existing = header
        with path.open("a", newline="") as f:
            w = csv.DictWriter(f, fieldnames=existing, extrasaction="ignore")
            w.writerows(rows)
            f.flush()
            os.fsync(f.fileno())
    else:
        with path.open("w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=columns)
            w.writeheader()
            w.writerows(rows)
    return path


def read_csv(path: str | Path, required: tuple[str, ...] = ()):
    """Read a results CSV as a DataFrame, with a clear error naming the file when it is
    missing, empty or lacks a required column."""
    import pandas as pd

    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"results file {path} does not exist (run the task that writes it first)")
    # Numbers come back exactly as written (csv writes repr(float)): pandas 3 parses them so by default,
    # pandas 2's default C parser can be off by one ulp, which flips a rounding tie in a table cell.
    exact = {"float_precision": "round_trip"} if int(pd.__version__.split(".")[0]) < 3 else {}
    try:
        df = pd.read_csv(path, **exact)
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as e:
        raise ValueError(f"results file {path} is malformed: {e}") from None
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise ValueError(f"results file {path} lacks column(s) {', '.join(missing)}")
    return df
