"""The refactor's no-regression check (scripts/compare_trees.py): checkouts' versions timed in alternating fresh
processes, round by round; per version, mode and shape the ratio after / before of each complete round (both trees
measured in it). Rows from before the script timed several versions are v7's forward.

`ratios` is the one implementation: this page and `python scripts/compare_trees.py --summary` both print it. The same
machinery judges v7's launch table against its race (issue 49: one checkout twice, FA2_V7_LAUNCH_FROM=race in one),
within 2% (`section_launch_table`).
"""

from __future__ import annotations

import statistics
from pathlib import Path

import pandas as pd

from figures import data
from report.tables import NOT_YET, md_table, numeric, rel

COLUMNS = ("N", "D", "causal", "round", "tree", "tree_commit", "ms", "pct_of_sdpa", "graph_ms")
KEY = ("version", "mode", "N", "D", "causal")   # one comparison per key
# do_bench ms, % of cuDNN (do_bench), graph-replay ms (the forward), the kernels' own GPU ms (backward: torch.profiler)
METRICS = ("ms", "pct_of_sdpa", "graph_ms", "kernel_ms")
LEVEL = 0.01                                  # within 1%: level
TASK = "python scripts/compare_trees.py --tree before=<old checkout> --tree after=."


def load(path: Path) -> pd.DataFrame:
    df = data.load(Path(path), COLUMNS)
    if "kernel_ms" not in df:   # rows from before the backward's kernels were timed apart
        df["kernel_ms"] = float("nan")
    df = numeric(df, path, ("N", "D", "causal", "round", *METRICS))
    for col, old in (("version", "v7_hopper"), ("mode", "fwd"),   # rows from when only v7's forward was timed
                     ("path", ""), ("config", ""), ("choice", "")):    # and from before rows said the launch
        df[col] = df[col].fillna(old).astype(str) if col in df else old
    return df.assign(tree=df.tree.astype(str), tree_commit=df.tree_commit.fillna("").astype(str))


def labels(df: pd.DataFrame, a: str | None = None, b: str | None = None) -> tuple[str, str]:
    """(A, B): the given labels, else before and after where both are present, else the first two in file order; a
    label with no rows is a ResultsError."""
    seen = list(dict.fromkeys(df.tree))
    if a is None or b is None:
        a, b = ("before", "after") if {"before", "after"} <= set(seen) else (seen + ["", ""])[:2]
    for t in (a, b):
        if t not in seen:
            raise data.ResultsError(f"compare_trees rows have no tree {t!r} (trees: {', '.join(seen) or 'none'})")
    return a, b


def pooled(df: pd.DataFrame, b: str) -> pd.DataFrame:
    """The rounds that measured B at its latest commit (the last in file order), in the run that measured it (the
    checkout that drove it: git_commit): a later checkout of B starts a new comparison, and the rounds of an earlier
    one are history, not pooled with it, even where their round numbers repeat. `ratios` asks this per version, mode
    and shape, so a later run of some shapes does not retire another version's or shape's rounds."""
    mine = df[df.tree == b]
    if not len(mine):
        return df
    if "git_commit" in df and pd.notna(mine.git_commit.iloc[-1]):   # the run's rows: a later run may number its
        df = df[df.git_commit == mine.git_commit.iloc[-1]]              # rounds as an earlier one did
        mine = df[df.tree == b]
    rounds = set(mine[mine.tree_commit == mine.tree_commit.iloc[-1]]["round"])
    return df[df["round"].isin(rounds)]


def ratios(df: pd.DataFrame, a: str, b: str) -> list[dict]:
    """Per (version, mode, N, D, causal): the complete rounds of B's latest commit for that version, mode and shape
    (`pooled`) and, for each metric, the per-round ratios B / A (a round counts when both trees have that shape's row
    in it; the last row per round and tree where a round was re-run)."""
    out = []
    df = df[df.tree.isin([a, b])]
    df = pd.concat([pooled(g, b) for _, g in df.groupby(list(KEY), sort=False)]) if len(df) else df
    for (version, mode, N, D, c), g in df.groupby(list(KEY), sort=False):
        key = {"version": version, "mode": mode, "N": int(N), "D": int(D), "causal": int(c)}
        per = g.drop_duplicates(["round", "tree"], keep="last").pivot(index="round", columns="tree", values=list(METRICS))
        if a not in per["ms"] or b not in per["ms"]:
            out.append({**key, "rounds": 0, **{m: [] for m in METRICS}})
            continue
        per = per[per["ms"][a].notna() & per["ms"][b].notna()]
        out.append({**key, "rounds": len(per), **{m: (per[m][b] / per[m][a]).dropna().tolist() for m in METRICS}})
    return sorted(out, key=lambda r: tuple(r[k] for k in KEY))


def cell(xs: list[float], spec: str = ".3f") -> str:
    return f"{statistics.median(xs):{spec}} ({min(xs):{spec}}–{max(xs):{spec}})" if xs else "–"


# the time a comparison is judged by, the first a row has: graph replay (the forward), the kernels' own GPU time (the
# backward, where its rows have it), do_bench
JUDGED_BY = (("graph_ms", "graph replay"), ("kernel_ms", "kernel time"), ("ms", "do_bench"))


def timed(r: dict) -> tuple[str, list[float]]:
    """The time ratios a comparison is judged by (JUDGED_BY) and their name."""
    col, name = next((c, n) for c, n in JUDGED_BY if r[c] or c == "ms")
    return name, r[col]


def gpu_cell(r: dict) -> str:
    """The GPU-time ratio's cell: graph replay's, else the kernels' own (marked), else '–'."""
    return cell(r["graph_ms"]) if r["graph_ms"] else (f"{cell(r['kernel_ms'])} (kernels)" if r["kernel_ms"] else "–")


def verdict(r: dict, b: str = "after", level: float = LEVEL) -> str:
    """'within 1%' (`level`) when the median ratio is within it by graph replay and by % of cuDNN; else, for each
    measure off by more, 'level (spread)' when its rounds' min-max holds 1 (a difference under the spread is noise), or
    by how much B is slower or faster."""
    if not r["rounds"]:
        return "no complete round"
    if r["rounds"] < 2:
        return "one round: no spread to judge by"
    by = timed(r)
    graph, pct = statistics.median(by[1]), statistics.median(r["pct_of_sdpa"])
    if abs(graph - 1) <= level and abs(pct - 1) <= level:
        return f"within {100 * level:.0f}%"
    said = []
    for name, values, m, slower in ((*by, graph, graph > 1),                             # a time ratio > 1: slower
                                    ("% of cuDNN", r["pct_of_sdpa"], pct, pct < 1)):       # a % ratio < 1: slower
        if abs(m - 1) <= level:
            continue
        if min(values) <= 1 <= max(values):
            said.append(f"{name}: level (the spread holds 1)")
        else:
            said.append(f"{name}: {b} {'slower' if slower else 'faster'} by {100 * abs(m - 1):.1f}%")
    return "; ".join(said)


def table(rows: list[dict], b: str = "after", level: float = LEVEL) -> str:
    return md_table(["version", "mode", "N", "D", "causal", "rounds", "do_bench ms", "% of cuDNN", "graph-replay ms",
                     "verdict"],
                    [[f"`{r['version']}`", r["mode"], r["N"], r["D"], "yes" if r["causal"] else "no", r["rounds"],
                      cell(r["ms"]),
                      cell(r["pct_of_sdpa"]), gpu_cell(r), verdict(r, b, level)] for r in rows])


def path_of(gpu, root, csv_name: str = "compare_trees.csv") -> Path:
    return data.root(root) / gpu / "experiments" / csv_name


def compare(gpu, root) -> tuple[pd.DataFrame, str, str, list[dict]] | None:
    path = path_of(gpu, root)
    if not path.exists():
        return None
    df = load(path)
    a, b = labels(df)
    return pooled(df, b), a, b, ratios(df, a, b)


def within_count(gpu, root) -> str:
    """REPORT.md's one line: how many shapes are within 1%, and where the page is."""
    found = compare(gpu, root)
    link = "[its page](docs/report/compare_trees.md)"
    if found is None:
        return f"The refactor's no-regression check: {NOT_YET} (`{TASK}`)."
    _, a, b, rows = found
    within = sum(verdict(r, b).startswith("within") for r in rows)
    return (f"v7's latest no-regression check ({link}), {b} ÷ {a}: within {100 * LEVEL:.0f}% by "
            f"graph replay and % of cuDNN at {within} of {len(rows)} shapes.")


def section_compare_trees(gpu, root) -> str:
    found = compare(gpu, root)
    if found is None:
        return f"{NOT_YET}: `{TASK}` writes `{rel(path_of(gpu, root))}`."
    df, a, b, rows = found
    trees = []
    for t in (a, b):
        g = df[df.tree == t]
        trees.append([t, ", ".join(f"`{c}`" for c in dict.fromkeys(g.tree_commit)), g["round"].nunique()])
    complete = max((r["rounds"] for r in rows), default=0)
    return "\n".join([
        f"Two checkouts' v7 ({a} and {b}), one fresh process per tree and round, the trees alternating, each timing its "
        f"own v7 and cuDNN on the same inputs by do_bench and by CUDA-graph replay. Per shape, over the complete rounds "
        f"(both trees measured in that round; up to {complete} here), the median (min–max) of each round's ratio "
        f"{b} ÷ {a}: of do_bench ms, of % of cuDNN and of graph-replay ms. Verdict: within {100 * LEVEL:.0f}% when the "
        f"median is within {100 * LEVEL:.0f}% by graph replay and by % of cuDNN, else what each says. "
        f"Source: `{rel(path_of(gpu, root))}`.", "",
        md_table(["tree", "commit", "rounds measured"], trees), "", table(rows, b)])


# ---------------------------------------------------------------- v7's launch table against its race (issue 49)

LAUNCH_CSV = "launch_table.csv"
LAUNCH_TREES = ("race", "table")   # (A, B): the table's time ÷ the race's
LAUNCH_LEVEL = 0.02                # issue 49's goal: the table's launches within 2% of the race's at every shape
LAUNCH_TASK = ("python scripts/compare_trees.py --csv launch_table.csv --tree table=. --tree race=. "
               "--env race:FA2_V7_LAUNCH_FROM=race --rounds 3")


def level_of(csv_name: str) -> float:
    """The verdict's level for a comparison file: 2% for the launch table against the race, else 1%."""
    return LAUNCH_LEVEL if csv_name == LAUNCH_CSV else LEVEL


def launches(df: pd.DataFrame, tree: str) -> dict[tuple, tuple[str, list[str]]]:
    """Per KEY: (the launches `tree`'s first calls chose, "path label" with distinct ones joined by " / ", and the
    choices v7 made them by other than "table": rows from a table that had no launch for the shape)."""
    out = {}
    for key, g in df[df.tree == tree].groupby(list(KEY), sort=False):
        said = (g.path + " " + g.config).str.strip()
        launched = " / ".join(dict.fromkeys(x for x in said if x)) or "–"
        out[tuple(key)] = (launched, sorted(set(g.choice) - {"table", ""}))
    return out


def launch_rows(gpu, root) -> tuple[Path, list[dict], dict, dict] | None:
    """(the file, `ratios` table ÷ race, the table tree's launches, the race tree's), or None before any run. A run cut
    before one tree's first process has shapes of no complete round; a file of neither tree is a ResultsError."""
    path = path_of(gpu, root, LAUNCH_CSV)
    if not path.exists():
        return None
    df = load(path)
    a, b = LAUNCH_TREES
    if not {a, b} & set(df.tree):
        raise data.ResultsError(f"{path}: no rows of the trees {a!r} or {b!r} (trees: {', '.join(set(df.tree))})")
    return path, ratios(df, a, b), launches(df, b), launches(df, a)


def launch_verdict(r: dict, table_launch: tuple[str, list[str]]) -> str:
    """`verdict` at 2%, and where the table tree did not launch from the table, which way it chose instead."""
    said = verdict(r, LAUNCH_TREES[1], LAUNCH_LEVEL)
    other = table_launch[1]
    return said + (f"; the table tree's launch was {', '.join(other)}, not the table's" if other else "")


def launch_brief(gpu, root) -> str:
    """REPORT.md's few words: at how many shapes the table is within 2% of the race."""
    found = launch_rows(gpu, root)
    if found is None:
        return f"Launch table ÷ race: {NOT_YET}."
    _, rows, mine, _ = found
    within = sum(launch_verdict(r, mine.get(tuple(r[k] for k in KEY), ("", []))).startswith("within") for r in rows)
    # "of 16", not "of 16 shapes": REPORT.md's paragraph has no room for more (tests/test_launch_vs_race.py)
    return f"Launch table ÷ race: within {100 * LAUNCH_LEVEL:.0f}% at {within} of {len(rows)}."


def section_launch_table(gpu, root) -> str:
    found = launch_rows(gpu, root)
    if found is None:
        return f"{NOT_YET}: `{LAUNCH_TASK}` writes `{rel(path_of(gpu, root, LAUNCH_CSV))}`."
    path, rows, mine, theirs = found
    table_rows = []
    for r in rows:
        key = tuple(r[k] for k in KEY)
        table_rows.append([f"`{r['version']}`", r["mode"], r["N"], r["D"], "yes" if r["causal"] else "no", r["rounds"],
                           mine.get(key, ("–", []))[0], theirs.get(key, ("–", []))[0], cell(r["ms"]),
                           cell(r["pct_of_sdpa"]), cell(r["graph_ms"]), launch_verdict(r, mine.get(key, ("", [])))])
    return "\n".join([
        "v7's first call of each shape launching what its launch table holds (`table`, the default) against timing and "
        "racing its candidates as `invoke pick-launch` does (`race`, FA2_V7_LAUNCH_FROM=race): one checkout in "
        "alternating fresh processes, each timing v7 and cuDNN on the same inputs. Per shape, over the complete "
        "rounds, the median (min–max) of each round's ratio table ÷ race; issue 49's goal is within "
        f"{100 * LAUNCH_LEVEL:.0f}% by graph replay and by % of cuDNN at every shape. Source: `{rel(path)}`.", "",
        md_table(["version", "mode", "N", "D", "causal", "rounds", "table's launch", "race's launch", "do_bench ms",
                  "% of cuDNN", "graph-replay ms", "verdict"], table_rows)])
