"""Variable-length workloads (harness/bench_varlen.py): what a new sequence length costs each version, cold and warm,
and how fast the later calls run, beside the issue's goals.

A run is one child process of bench_varlen.py: its (run_id, Triton cache, picks cache). It is complete when its
"total" row over all calls exists; a run cut short (calls without that row) is listed, not pooled. Per version and
how it chose its launches (`launch`: v7's table, or a race at run time) and cache state and plan size (calls per
run) the numbers are the median over its complete runs of each run's own value
(min–max where more than one); the goals judge only runs of their plan (GOAL_CALLS calls).
"""

from __future__ import annotations

import pandas as pd

from figures import data
from report.tables import NOT_YET, fmt, md_table, rel

VARLEN_COLUMNS = ("version", "run_id", "triton_cache", "pick_cache", "row", "group", "calls", "total_first_call_s",
                  "median_first_call_s", "max_first_call_s", "median_pct_of_sdpa")
RUN = ["version", "run_id", "triton_cache", "pick_cache"]
ALL = "all"                     # the "total" row's group over every call of a run
RACE = "race"                   # launches chosen at run time (autotuner or race), not from a table
WARM_MAX_S, WARM_MEDIAN_S = 1.0, 0.1   # warm: a new N's first call at most 1 s, its median at most 0.1 s
COLD_TOTAL_S = 30.0             # cold: every call's first-call seconds summed, at most 30 s (issue 49; was 60)
TUNED_PCT = 98.0                # after the first call, within 2% of tuning that N alone (pct_of_tuned >= 98)
GOAL_CALLS = 32 * 2 * 2         # the goals' plan: 32 lengths at D = 64 and 128, both masks (smaller runs: no verdict)
TASK = "python harness/bench_varlen.py --kernel <version>"


def varlen_rows(gpu, root) -> tuple[pd.DataFrame | None, list]:
    """Every results/<gpu>/varlen/<version>.csv, concatenated (None if there is none), and the files."""
    folder = data.root(root) / gpu / "varlen"
    paths = sorted(folder.glob("*.csv")) if folder.is_dir() else []
    if not paths:
        return None, [folder]
    frames = [data.load(p, VARLEN_COLUMNS) for p in paths]
    df = pd.concat(frames, ignore_index=True)
    for c in RUN:
        df[c] = df[c].fillna("").astype(str)
    # runs before v7's launch table have no launch_from column: they chose at run time
    df["launch"] = df["launch_from"].fillna(RACE).astype(str) if "launch_from" in df else RACE
    df["row"] = df["row"].astype(str)
    return df, paths


def runs(df: pd.DataFrame) -> tuple[pd.DataFrame, list[tuple]]:
    """(one "total"/"all" row per complete run, in file order; the incomplete runs as (version, run_id, Triton
    cache, picks cache, calls measured))."""
    total = df[(df.row == "total") & (df.group.astype(str) == ALL)].drop_duplicates(RUN, keep="last")
    done = set(map(tuple, total[RUN].to_numpy()))
    calls = df[df.row == "call"]
    cut = [(*k, len(g)) for k, g in calls.groupby(RUN, sort=False) if tuple(k) not in done]
    return total, cut


def _cell(v: pd.Series, spec: str, suffix: str = "") -> str:
    v = pd.to_numeric(v, errors="coerce").dropna()
    if not len(v):
        return "–"
    if len(v) == 1:
        return fmt(float(v.iloc[0]), spec, suffix)
    return f"{fmt(float(v.median()), spec, suffix)} ({fmt(float(v.min()), spec)}–{fmt(float(v.max()), spec, suffix)})"


def _goal(value: float, limit: float, spec: str, at_least: bool = False) -> str:
    if pd.isna(value):
        return "–"
    met = value >= limit if at_least else value <= limit
    sign = ("≥" if met else "<") if at_least else ("≤" if met else ">")
    return f"{'met' if met else 'missed'} ({fmt(value, spec)} s {sign} {fmt(limit, spec)} s)"


def varlen_table(gpu, root) -> tuple[list[list], list[tuple], str] | None:
    """Per version and cache state: complete runs, calls, total / median / largest first-call seconds, the median %
    of cuDNN of the later calls, the commit, and the goal of that cache state (met or missed, with the number); the
    incomplete runs; the tuned-alone goal's cell. None while no varlen file exists."""
    return tabulate(varlen_rows(gpu, root)[0])


def tabulate(df: pd.DataFrame | None) -> tuple[list[list], list[tuple], str] | None:
    """varlen_table of the rows varlen_rows read (None for none)."""
    if df is None:
        return None
    total, cut = runs(df)
    rows = []
    total = total.assign(calls=pd.to_numeric(total.calls, errors="coerce"))
    for (version, launch, cache, calls), g in total.groupby(["version", "launch", "triton_cache", "calls"],
                                                            sort=False):
        if "git_commit" in g and "date" in g:   # the code under test is the latest commit's: its runs alone
            g = g[g.git_commit == g.sort_values("date").git_commit.iloc[-1]]
        med_total = pd.to_numeric(g.total_first_call_s, errors="coerce").median()
        med_max = pd.to_numeric(g.max_first_call_s, errors="coerce").median()
        med_median = pd.to_numeric(g.median_first_call_s, errors="coerce").median()
        if calls != GOAL_CALLS:
            goal = f"– (not the goals' {GOAL_CALLS} calls)"
        elif cache == "warm":
            goal = (f"largest {_goal(med_max, WARM_MAX_S, '.2f')}; median "
                    f"{_goal(med_median, WARM_MEDIAN_S, '.3f')}")
        elif cache == "cold":
            goal = f"total {_goal(med_total, COLD_TOTAL_S, '.1f')}"
        else:
            goal = "–"
        commits = (", ".join(dict.fromkeys(f"`{c[:7]}`" for c in g.git_commit.astype(str))) if "git_commit" in g
                   else "–")
        rows.append([f"`{version}`", launch, cache, len(g), _cell(g.calls, ".0f"), _cell(g.total_first_call_s, ".1f"),
                     _cell(g.median_first_call_s, ".3f"), _cell(g.max_first_call_s, ".2f"),
                     _cell(g.median_pct_of_sdpa, ".1f", "%"), goal, commits])
    compare = df[df.row == "compare"]
    if "pct_of_tuned" in compare.columns and len(compare):
        parts = []
        for version, g in compare.groupby("version", sort=False):
            pct = pd.to_numeric(g.pct_of_tuned, errors="coerce").dropna()
            parts.append(f"`{version}` {int((pct >= TUNED_PCT).sum())} of {len(pct)} compared calls at ≥ "
                         f"{TUNED_PCT:.0f}% (least {fmt(float(pct.min()), '.1f', '%')}): "
                         + ("met" if (pct >= TUNED_PCT).all() else "missed"))
        tuned = "; ".join(parts)
    else:
        tuned = "not measured (no `compare` rows)"
    return rows, cut, tuned


HEADER = ["version", "launch", "cache", "runs", "calls", "total first-call s", "median s", "largest s",
          "median % of cuDNN, later calls", "goal", "commit"]
POOLING = ("per version, launch choice (v7's table, or a race at run time) and cache state (Triton's and the picks' caches empty: cold; filled by the cold run: warm), "
           "over the latest commit's complete runs (a run's \"total\" row over all calls exists), each run's own value "
           "(the median, min–max, where several)")


def varlen_brief(gpu, root) -> str:
    """REPORT.md's line and small table: the runs of the goals' plan (the page has the smaller plans and the
    incomplete runs' list)."""
    found = varlen_table(gpu, root)
    if found is None:
        return f"Variable-length workloads: {NOT_YET} (`{TASK}`)."
    rows, cut, tuned = found
    rows = [r for r in rows if not r[9].startswith("–")]   # the goals' plan only; the page has the smaller ones
    return "\n".join([f"Variable-length workloads ([the page](docs/report/varlen.md)): first calls and later calls per "
                      f"version and cache state over the complete runs ({len(cut)} incomplete, not pooled); within 2% of tuning N alone: {tuned}.", "", md_table(HEADER, rows)])


def section_varlen(gpu, root) -> str:
    df, paths = varlen_rows(gpu, root)
    found = tabulate(df)
    if found is None:
        return f"{NOT_YET}: `{TASK}` writes `{rel(paths[0])}/<version>.csv`."
    rows, cut, tuned = found
    out = [f"Seeded random lengths, each at every head dimension and mask, in one process per run: the first call's "
           f"seconds (tuning and compiling for that length included) and the later calls' do_bench median against "
           f"cuDNN; {POOLING}. Goals: warm, a new N's first call at most {WARM_MAX_S:.0f} s (largest) and at most "
           f"{WARM_MEDIAN_S} s (median); cold, every call's first-call seconds at most {COLD_TOTAL_S:.0f} s in all; "
           f"after the first call, within 2% of tuning that N alone (`compare` rows, pct_of_tuned ≥ {TUNED_PCT:.0f}). "
           f"Source: {', '.join(f'`{rel(p)}`' for p in paths)}.", "", md_table(HEADER, rows), "",
           f"Within 2% of tuning that N alone: {tuned}."]
    if cut:
        out += ["", "Incomplete runs (calls without a \"total\" row over all calls; not pooled):", "",
                md_table(["version", "run", "Triton cache", "picks cache", "calls measured"],
                         [[f"`{v}`", f"`{r}`", t, p, n] for v, r, t, p, n in cut])]
    return "\n".join(out)
