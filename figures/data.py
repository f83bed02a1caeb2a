"""Reading results/ for the figures: where the files are, what they must contain, and the few
derived quantities every figure shares. Nothing here measures; every number comes from a CSV."""

from __future__ import annotations

import math
import os
import re
import sys
from pathlib import Path

import pandas as pd

from fa2lab import results, shapes
from fa2triton import gpu, versions
from fa2lab.provenance import file_stamp
from fa2lab.switches import default_kernels

REFERENCE = "reference"            # results/reference/: the article's numbers, transcribed
ADA = "rtx4070super"               # results/reference/<ADA>/
SDPA = "sdpa"                      # the version name the reference tables use for SDPA
STATUS_LABEL = {"out_of_smem": "out of smem", "skipped_registers": "skipped", "compile_error": "compile error",
                "wrong": "wrong"}


class ResultsError(Exception):
    """A results file is missing, malformed or lacks what a figure needs; the message names it."""


class MissingResults(ResultsError):
    """The results file does not exist (as opposed to existing and being malformed)."""


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
    measured = ("bench", "sweep", "hostpath", "ncu", "tuning", "torch", "ceilings", "experiments", "checks")
    return sorted(p.name for p in base.iterdir() if p.is_dir() and p.name != REFERENCE and not p.name.startswith(".")
                  and any((p / m).is_dir() for m in measured))


def harness_gpus(results_root: str | Path | None = None) -> list[str]:
    """The measured GPUs with harness rows (bench/): the ones REPORT.md's sections and README's table can report.
    The others hold only experiments, such as one comparison run on a GPU lent for an hour."""
    base = root(results_root)
    return [g for g in gpu_slugs(results_root) if any((base / g / "bench").glob("*.csv"))]


def load(path: Path, required: tuple[str, ...] = ()) -> pd.DataFrame:
    """fa2lab.results.read_csv, with every failure (missing, malformed, columns, no rows) as ResultsError."""
    try:
        df = results.read_csv(path, required=required)
    except FileNotFoundError as e:
        raise MissingResults(str(e)) from None
    except ValueError as e:
        raise ResultsError(str(e)) from None
    if df.empty:
        raise ResultsError(f"results file {path} has no rows")
    return df


SWEEP_COLUMNS = ("N", "causal", "q_tile", "k_tile", "num_warps", "num_stages", "status", "tflops")
BENCH_COLUMNS = ("version", "run_id", "N", "causal", "ms", "tflops", "sdpa_ms", "pct_of_sdpa")
HOSTPATH_COLUMNS = ("version", "run_id", "N", "causal", "ms", "graph_ms", "host_us",
                    "sdpa_ms", "sdpa_graph_ms", "sdpa_host_us")


SWEEP_VERSIONS = ("v0_baseline", "v4_exp2", "v7_hopper")   # the bodies of Round 1, Round 5 and v7's re-sweep


def sweep_versions(gpu_slug: str, results_root=None) -> list[str]:
    """The SWEEP_VERSIONS whose sweep CSV this GPU has; a ResultsError naming the files if it has none."""
    paths = {v: root(results_root) / gpu_slug / "sweep" / f"{v}.csv" for v in SWEEP_VERSIONS}
    found = [v for v, p in paths.items() if p.exists()]
    if not found:
        first = paths["v4_exp2"]   # the Round 5 sweep, data.sweep's default, named first
        others = [str(p) for p in paths.values() if p != first]
        raise ResultsError(f"results file {first} does not exist (nor {', '.join(others)}): run invoke sweep first")
    return found


def sweep(gpu_slug: str, version: str = "v4_exp2", results_root=None) -> tuple[pd.DataFrame, Path]:
    path = root(results_root) / gpu_slug / "sweep" / f"{version}.csv"
    return load(path, SWEEP_COLUMNS), path


def shape_rows(df: pd.DataFrame, path: Path, N: int | None, causal: bool) -> pd.DataFrame:
    """The rows of one shape (every N if N is None), or a ResultsError naming the file if it has none."""
    rows = df[(df["causal"].astype(int) == int(causal)) & ((df["N"] == N) if N is not None else True)]
    if rows.empty:
        raise ResultsError(f"results file {path} has no rows for {'' if N is None else f'N={N} '}{mask_name(causal)}")
    return rows


def version_bench_rows(gpu_slug: str, results_root=None, D: int = shapes.HEAD_DIM):
    """Per version in registry order: (its results/<gpu>/bench/<version>.csv, the default kernels' rows at head
    dimension D, or None where the file does not exist)."""
    folder = root(results_root) / gpu_slug / "bench"
    for v in versions.VERSIONS:
        path = folder / f"{v.name}.csv"
        yield path, (default_rows(at_head_dim(load(path, BENCH_COLUMNS), D)) if path.exists() else None)


def bench(gpu_slug: str, results_root=None, D: int = shapes.HEAD_DIM) -> tuple[pd.DataFrame, list[Path]]:
    """Every version's bench rows at head dimension D (at_head_dim) from its latest protocol run of the default
    kernels (default_rows), in registry order.

    Versions without a file are left out (and named on stderr); none at all is a ResultsError
    naming the folder. Each shape keeps its latest protocol of at least MIN_PROTOCOL_RUNS runs
    (latest_protocol_per_shape)."""
    frames, paths, missing = [], [], []
    for path, rows in version_bench_rows(gpu_slug, results_root, D):
        if rows is None or not len(rows):   # no file, or only other head dimensions' rows
            missing.append(path)
            continue
        frames.append(latest_protocol_per_shape(rows))
        paths.append(path)
    if not frames:
        raise ResultsError(f"results file {missing[0]} does not exist (nor any other version's in {missing[0].parent})")
    for path in missing:
        print(f"note: {path} does not exist; that version is left out", file=sys.stderr)
    return pd.concat(frames, ignore_index=True), paths


def at_head_dim(df: pd.DataFrame, D: int = shapes.HEAD_DIM) -> pd.DataFrame:
    """The rows at head dimension D; rows without a D (a file or rows from before the scripts took --D) are the
    harness's."""
    if "D" not in df.columns:
        return df if D == shapes.HEAD_DIM else df.iloc[0:0]
    return df[pd.to_numeric(df["D"], errors="coerce").fillna(shapes.HEAD_DIM) == D]


def default_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The rows of runs made with every FA2_V7_* kernel switch at its default (fa2lab.switches.default_kernels): a
    run with an option switched on stays in its file and out of the tables of the default kernels."""
    return df[df["switches"].map(default_kernels)] if "switches" in df.columns else df


# A protocol of fewer runs than this (a one-off run for the peer column, say) does not replace the latest full one in
# the harness tables; a file with no protocol that long keeps its latest of any length.
MIN_PROTOCOL_RUNS = 3


def latest_protocol(df: pd.DataFrame, min_runs: int = 1) -> pd.DataFrame:
    """The rows of the latest protocol in a harness file: run ids are '<protocol>/<run>' (or a bare
    label); the protocol whose newest row has the latest date wins (by row order without dates), among those of at
    least `min_runs` runs where there are any."""
    protocol = df["run_id"].astype(str).str.rsplit("/", n=1).str[0]
    order = df["date"] if "date" in df.columns else pd.Series(range(len(df)), index=df.index)
    newest = order.groupby(protocol).max()
    if min_runs > 1:
        runs = df["run_id"].astype(str).groupby(protocol).nunique().reindex(newest.index)
        if (runs >= min_runs).any():
            newest = newest[runs >= min_runs]
    return df[protocol == newest.idxmax()]


def latest_protocol_per_shape(df: pd.DataFrame, keys=("causal", "N"), min_runs: int = MIN_PROTOCOL_RUNS):
    """Each shape's (rows of one `keys` value) own latest_protocol: a later protocol that timed a few shapes refreshes
    those shapes only."""
    if not len(df):
        return df
    return pd.concat([latest_protocol(shape, min_runs) for _, shape in df.groupby(list(keys))])


def peer_measured_rows(gpu_slug: str, results_root=None, D: int = shapes.HEAD_DIM) -> pd.DataFrame:
    """Every version's bench rows at head dimension D of the default kernels whose peer was measured (fa4_status
    'ok'), at the latest commit that has such rows for that version: the runs the peer column pools, whatever
    protocol they belong to."""
    frames = []
    for _, rows in version_bench_rows(gpu_slug, results_root, D):
        if rows is None or "fa4_status" not in rows.columns:
            continue
        rows = latest_commit(rows[rows["fa4_status"].astype(str).str.strip() == "ok"])
        if len(rows):
            frames.append(rows)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["version", "N", "causal"])


def latest_commit(df: pd.DataFrame, min_runs: int = 1) -> pd.DataFrame:
    """The rows measured at the commit of the newest row (by date, the last in file order among rows of that date; by
    row order without dates), among the commits of at least `min_runs` runs (distinct run_id) where there are any."""
    if not len(df) or "git_commit" not in df.columns:
        return df
    commits = df["git_commit"].astype(str)
    order = df["date"] if "date" in df.columns else pd.Series(range(len(df)), index=df.index)
    if min_runs > 1 and "run_id" in df.columns:
        runs = df["run_id"].groupby(commits).nunique()
        full = commits.map(runs) >= min_runs
        order = order[full] if full.any() else order
    return df[commits == commits[order[order == order.max()].index[-1]]]


HOSTPATH_VERSIONS = ("v5_final", "v6_longest_first", "v7_hopper")   # the versions with the lean host path


def hostpath(gpu_slug: str, version: str, results_root=None) -> tuple[pd.DataFrame, Path]:
    """One version's rows with do_bench, CUDA-graph and host-per-call times, each shape's from its latest protocol:
    the harness file's (bench/<version>.csv) when its rows carry all three for it and SDPA, else the
    earlier results/<gpu>/hostpath/<version>.csv."""
    bench = root(results_root) / gpu_slug / "bench" / f"{version}.csv"
    if bench.exists():
        df = default_rows(load(bench, BENCH_COLUMNS))
        if all(c in df.columns for c in HOSTPATH_COLUMNS):
            timed = df.dropna(subset=["graph_ms", "host_us", "sdpa_graph_ms", "sdpa_host_us"])
            if len(timed):
                return latest_protocol_per_shape(timed), bench
    path = root(results_root) / gpu_slug / "hostpath" / f"{version}.csv"
    return latest_protocol_per_shape(load(path, HOSTPATH_COLUMNS)), path


def hostpath_tables(gpu_slug: str, results_root=None) -> list[tuple[str, pd.DataFrame, Path]]:
    """(version, rows, file) for each HOSTPATH_VERSIONS version that has them. A version with neither file
    is left out; a malformed file is a ResultsError naming it, and so is having none at all."""
    found, first_missing = [], None
    for v in HOSTPATH_VERSIONS:
        try:
            found.append((v, *hostpath(gpu_slug, v, results_root)))
        except MissingResults as e:
            first_missing = first_missing or e
    if not found:
        raise first_missing
    return found


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
                           "(fa2triton.gpu.TENSOR_FLOP_PER_CLK_PER_SM)")
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


def _binomial_cdf(k: int, n: int) -> float:
    """P(X <= k) for X ~ Binomial(n, 1/2)."""
    return sum(math.comb(n, i) for i in range(k + 1)) / 2.0 ** n


def median_interval(values, level: float = 0.95) -> tuple[float, float]:
    """A distribution-free interval for the median of the population the values were drawn from: the order
    statistics x_(j) and x_(n-j+1) with P(Binomial(n, 1/2) < j) <= (1 - level) / 2. With too few values for the
    level (n < 6 at 95%) it is (nan, nan)."""
    x = sorted(float(v) for v in values)
    n = len(x)
    j = max((i for i in range(n) if _binomial_cdf(i, n) <= (1 - level) / 2), default=None)
    return (x[j], x[n - 1 - j]) if j is not None else (math.nan, math.nan)


def sign_test(values, reference: float) -> tuple[int, int, float]:
    """How many values lie below and above `reference`, and the two-sided sign test's p-value for a median equal to
    it (values equal to it are left out)."""
    below = sum(float(v) < reference for v in values)
    above = sum(float(v) > reference for v in values)
    n = below + above
    p = min(1.0, 2 * _binomial_cdf(min(below, above), n)) if n else 1.0
    return below, above, p


# ---- Nsight Compute exports, compile cost, torch.profiler traces (figures 5, 6, 7) ----

NCU_COLUMNS = ("kernel", "N", "causal", "predicted_flops")
COMPILE_COST_COLUMNS = ("n_configs", "cache_results", "cache", "first_4096", "new_2048", "new_1024", "new_512",
                        "first_causal_4096")
CACHES = ("empty", "on_disk")

# SI prefixes of Nsight Compute's auto-scaled units ("usecond", "Mbyte", "cycle/nsecond", "Ghz"), and the
# binary ones in case a version writes them ("Kibyte").
_PREFIX = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1.0, "K": 1e3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
           "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40}
_TIME_ABBREV = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}
_BASE_UNITS = ("byte", "second", "cycle", "hz", "inst", "sector", "request", "warp", "thread", "register", "block")


def unit_scale(unit: str) -> float:
    """The factor from an ncu unit to its base unit: 'usecond' -> 1e-6, 'Gbyte' -> 1e9, 'cycle/nsecond' -> 1e9,
    'Mhz' -> 1e6, 'ns' -> 1e-9, '' or '%' -> 1. Raises ValueError for a unit it does not know."""
    unit = str(unit).strip()
    if unit in ("", "%"):
        return 1.0
    scale = 1.0
    for k, part in enumerate(unit.split("/")):
        if part in _TIME_ABBREV:   # `--print-units base` writes durations as 'ns'
            scale = scale * _TIME_ABBREV[part] if k == 0 else scale / _TIME_ABBREV[part]
            continue
        for prefix in sorted(_PREFIX, key=len, reverse=True):
            if part.startswith(prefix) and part[len(prefix):].lower() in _BASE_UNITS:
                scale = scale * _PREFIX[prefix] if k == 0 else scale / _PREFIX[prefix]
                break
        else:
            raise ValueError(f"unknown unit {unit!r}")
    return scale


def metric(df: pd.DataFrame, path: Path, name: str, required: bool = True) -> pd.Series | None:
    """One ncu metric in base units (bytes, seconds, per second), from the columns the ncu summary writes as
    '<metric> [<unit>]'. Rows appended by runs whose export scaled the unit differently sit in another column
    ('[usecond]' beside '[msecond]'); each is converted and the first value a row has is kept. A metric no
    column holds is a ResultsError naming the file (None if not required)."""
    pattern = re.compile(re.escape(name) + r"(?: \[(?P<unit>[^\]]*)\])?$")
    out = None
    for column in df.columns:
        m = pattern.fullmatch(str(column))
        if not m:
            continue
        try:
            scale = unit_scale(m["unit"] or "")
        except ValueError as e:
            raise ResultsError(f"results file {path}: column {column!r}: {e}") from None
        values = pd.to_numeric(df[column], errors="coerce") * scale
        out = values if out is None else out.combine_first(values)
    if out is None and required:
        raise ResultsError(f"results file {path} lacks column {name} [<unit>]")
    return out


GLUON_COLUMNS = ("variant", "N", "causal", "graph_ms", "graph_pct_of_sdpa", "git_commit", "date")
GLUON_SAME_RUN = ("v7_tl", SDPA)   # experiment gluon's references, timed in the same rounds
GLUON_NOT_CONFIGS = (*GLUON_SAME_RUN, "v7_gluon")   # rows that are not one of the module's configurations
# Runs whose "v7_tl" rows timed v7's default path, which was already the Gluon path there: the experiment
# forced the tl path only from the next commit on (results/nvidia-h200/logs/s16_call2_*.log shows it: v7_tl
# and v7_gluon equal at every N). Those rows are left in the file, and out of every comparison.
GLUON_V7_TL_WAS_DEFAULT = ("aafdf46",)


def gluon(gpu_slug: str, results_root=None, D: int = shapes.HEAD_DIM) -> tuple[pd.DataFrame, Path]:
    """results/<gpu>/experiments/gluon.csv (experiments/run.py gluon), the rows at head dimension D (rows
    without the column came before its --D: the harness's), the latest row per (run, variant, shape), with
    `run_start` (the run's first date) to order the runs by; an empty frame where no run timed D. A run is a commit,
    or a commit and its Triton where that commit ran under several."""
    path = root(results_root) / gpu_slug / "experiments" / "gluon.csv"
    df = at_head_dim(load(path, GLUON_COLUMNS), D)
    df = df[~((df["variant"] == "v7_tl") & df["git_commit"].astype(str).isin(GLUON_V7_TL_WAS_DEFAULT))]
    if "triton" in df and len(df):   # one commit run under several Tritons: a run each, named with its Triton
        tri = df["triton"].astype(str)
        several = tri.groupby(df["git_commit"]).transform("nunique") > 1
        df = df.assign(git_commit=df["git_commit"].astype(str).where(~several, df["git_commit"].astype(str)
                                                                     + " (Triton " + tri + ")"))
    df = df.sort_values("date", kind="stable").drop_duplicates(["git_commit", "variant", "N", "causal"], keep="last")
    return df.assign(run_start=df.groupby("git_commit")["date"].transform("min")), path


def gluon_best(df: pd.DataFrame) -> pd.DataFrame:
    """Per run and shape that timed both same-run references: the Gluon configuration with the least
    graph-replay time (`best`), its row, and v7's tl path's and SDPA's graph % in the same rounds; runs in
    the order they ran."""
    rows = []
    for (start, commit, causal, N), g in df.groupby(["run_start", "git_commit", "causal", "N"], sort=True):
        g = g.set_index("variant")
        ours = g[~g.index.isin(GLUON_NOT_CONFIGS)]
        if ours.empty or not set(GLUON_SAME_RUN) <= set(g.index):
            continue
        best = ours["graph_ms"].astype(float).idxmin()
        rows.append({"run_start": start, "git_commit": commit, "N": int(N), "causal": int(causal), "best": best,
                     "configs": len(ours), "best_pct": float(g.at[best, "graph_pct_of_sdpa"]),
                     "v7_pct": float(g.at["v7_tl", "graph_pct_of_sdpa"])})
    return pd.DataFrame(rows)


def ncu(gpu_slug: str, results_root=None, folder_name: str = "ncu",
        D: int | None = shapes.HEAD_DIM) -> list[tuple[pd.DataFrame, Path]]:
    """Every Nsight Compute summary in results/<gpu>/ncu/ (<tag>.csv, written by profiling/run_profile.py
    --tool ncu; the raw exports beside them, <tag>.raw.csv, are not summaries), in name order; ncu_bwd/
    for the backward's (--mode bwd). Only the default kernels' rows (default_rows): those of runs made with a switch
    away from its default (fa2lab.switches.default_kernels) stay in the files and out of the tables. Only the rows
    at head dimension D (at_head_dim; default the harness's; None: every D)."""
    folder = root(results_root) / gpu_slug / folder_name
    paths = sorted(p for p in folder.glob("*.csv") if not p.name.endswith(".raw.csv")) if folder.is_dir() else []
    if not paths:
        raise ResultsError(f"results file {folder / '<tag>.csv'} does not exist (no Nsight Compute summary; "
                           "run invoke profile --tool ncu first)")
    out = []
    for p in paths:
        df = default_rows(load(p, NCU_COLUMNS))
        df = df if D is None else at_head_dim(df, D)
        if len(df):
            out.append((df, p))
    return out


def switched_runs(summary: Path) -> set[str]:
    """The run ids (as run_profile.py writes them into file names: fa2lab.provenance.file_stamp) of the runs in one ncu
    summary that were made with a kernel switch away from its default; empty where the file or its columns are
    missing."""
    if not summary.exists():
        return set()
    df = pd.read_csv(summary, usecols=lambda c: c in ("run_id", "switches"))
    if not {"run_id", "switches"} <= set(df.columns):
        return set()
    return {file_stamp(r) for r, s in zip(df["run_id"], df["switches"]) if not default_kernels(s)}


def device_facts(gpu_slug: str, results_root=None) -> tuple[dict, Path | None]:
    """arch, sm_count and max_sm_clock_mhz from the provenance columns of this GPU's harness rows (the first
    bench file, in registry order, that has them): ({}, None) if none does."""
    folder = root(results_root) / gpu_slug / "bench"
    for v in versions.VERSIONS:
        path = folder / f"{v.name}.csv"
        if not path.exists():
            continue
        try:
            df = load(path, ("arch", "sm_count"))
        except ResultsError:
            continue
        row = df.dropna(subset=["arch", "sm_count"])
        if len(row):
            keys = [k for k in ("arch", "sm_count", "max_sm_clock_mhz") if k in row.columns]
            return {k: row.iloc[-1][k] for k in keys}, path
    return {}, None


def compile_cost(gpu_slug: str, results_root=None) -> tuple[pd.DataFrame, Path]:
    """results/<gpu>/tuning/compile_cost.csv (sweeps/measure_compile_cost.py): one row per fresh process."""
    path = root(results_root) / gpu_slug / "tuning" / "compile_cost.csv"
    df = load(path, COMPILE_COST_COLUMNS)
    bad = sorted(set(df["cache"].astype(str)) - set(CACHES))
    if bad:
        raise ResultsError(f"results file {path} has cache value(s) {', '.join(bad)} (expected {' or '.join(CACHES)})")
    return df, path


def torch_trace(gpu_slug: str, results_root=None) -> tuple[list[dict], Path]:
    """The events of the newest Chrome trace in results/<gpu>/torch/ (<tag>.trace.json, written by
    profiling/run_profile.py --tool torch through torch.profiler's export_chrome_trace): newest by
    modification time, ties broken by name."""
    import json

    folder = root(results_root) / gpu_slug / "torch"
    paths = list(folder.glob("*.trace.json")) if folder.is_dir() else []
    if not paths:
        raise ResultsError(f"results file {folder / '<tag>.trace.json'} does not exist (no torch.profiler trace; "
                           "run invoke profile --tool torch first)")
    path = max(paths, key=lambda p: (p.stat().st_mtime, p.name))
    try:
        trace = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ResultsError(f"results file {path} is malformed: {e}") from None
    events = trace.get("traceEvents") if isinstance(trace, dict) else trace   # Chrome also allows a bare array
    if not isinstance(events, list) or not any(isinstance(e, dict) for e in events):
        raise ResultsError(f"results file {path} has no traceEvents")
    return [e for e in events if isinstance(e, dict)], path
