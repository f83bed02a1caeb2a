"""The one-screen summary that opens REPORT.md, and the numbers README's generated block prints.

Each number here comes from one function, and each table says in a phrase what it pools: `headline` (every version
at N = 4096 against SDPA and against the FA3-class peer), `goal_pools` (v7 against cuDNN at the harness shapes),
`backward_headline` (the backward at N = 4096), `peer_goal_rounds` (v7 against the peer from N = 2048 up, from
the interleaved experiment's rounds; `peer_goal` from the harness's runs where that experiment has no rows) and
`backward_goal` (v7's backward against cuDNN and the peer from N = 2048 up, from the backward harness's runs).
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from fa2lab import shapes
from fa2triton import versions
from figures import data
from report.backward import DEFAULT_DQ_MODE, backward_summary
from report.goal import GOAL_LEVEL, _goal_table, goal_pools, goal_rows, goal_verdict
from report.tables import NOT_YET, PEER, fmt, md_table, numeric, peer_rows, rel

HEADLINE_N = 4096
SDPA_ROW = "SDPA (same runs)"   # headline's last row: the reference's own ms and TFLOP/s
PEER_GOAL_MIN_N = 2048         # the peer goal's shapes: N from here up, D = 64 and 128, both masks
PEER_GOAL_D = (64, 128)


@dataclass
class Spread:
    """A median of per-run ratios (%), with its min, max and how many runs it pools; NaN where none."""
    median: float
    lo: float
    hi: float
    runs: int

    def text(self, spec: str = ".0f") -> str:
        if not self.runs:
            return "–"
        return f"{fmt(self.median, spec, '%')} ({fmt(self.lo, spec)}–{fmt(self.hi, spec, '%')})"


def spread(rows: pd.DataFrame, col: str) -> Spread:
    v = pd.to_numeric(rows[col], errors="coerce").dropna() if col in rows else pd.Series(dtype=float)
    if not len(v):
        return Spread(float("nan"), float("nan"), float("nan"), 0)
    runs = rows.loc[v.index, "run_id"].nunique() if "run_id" in rows else len(v)
    return Spread(float(v.median()), float(v.min()), float(v.max()), int(runs))


def _median(rows: pd.DataFrame, col: str) -> float:
    v = pd.to_numeric(rows[col], errors="coerce").dropna() if col in rows else pd.Series(dtype=float)
    return float(v.median()) if len(v) else float("nan")


def headline(gpu, root, N: int = HEADLINE_N) -> tuple[list[dict], str, list]:
    """Per version (registry order) at N: each mask's median ms and TFLOP/s over the runs' rows, the median (min–max)
    of the per-run % of SDPA's default backend and, over the rows whose peer was measured, of the per-run % of the
    peer; then SDPA's own row (version SDPA_ROW: its ms and TFLOP/s pooled over every version's rows, the run count
    summed); the phrase saying what it pools; the files. README's block and REPORT.md's summary both print this."""
    df, paths = data.bench(gpu, root)
    measured = data.peer_measured_rows(gpu, root)
    out = []
    none = Spread(float("nan"), float("nan"), float("nan"), 0)
    for v in versions.VERSIONS:
        rows = df[(df.version == v.name) & (df.N == N)]
        if not len(rows):
            continue
        peer = peer_rows(measured[(measured.version == v.name) & (measured.N == N)])
        out.append({"version": v.name, "round": getattr(v, "round_label", None) or str(v.round),
                    **{f"ms_{c}": _median(rows[rows.causal == c], "ms") for c in (0, 1)},
                    **{f"tflops_{c}": _median(rows[rows.causal == c], "tflops") for c in (0, 1)},
                    **{f"sdpa_{c}": spread(rows[rows.causal == c], "pct_of_sdpa") for c in (0, 1)},
                    **{f"peer_{c}": spread(peer[peer.causal == c], "pct_of_fa4") for c in (0, 1)}})
    if out:
        rows = df[df.N == N]
        out.append({"version": SDPA_ROW, "round": "–",
                    **{f"ms_{c}": _median(rows[rows.causal == c], "sdpa_ms") for c in (0, 1)},
                    **{f"tflops_{c}": _median(rows[rows.causal == c], "sdpa_tflops") for c in (0, 1)},
                    **{f"sdpa_{c}": Spread(float("nan"), float("nan"), float("nan"),
                                           sum(r[f"sdpa_{c}"].runs for r in out)) for c in (0, 1)},
                    **{f"peer_{c}": none for c in (0, 1)}})
    pooling = (f"each version's latest protocol of ≥ {data.MIN_PROTOCOL_RUNS} runs (`results/{gpu}/bench/`, "
               f"D = {shapes.HEAD_DIM}; the peer: its runs at the latest commit that measured it), the median (min–max) "
               f"of each run's ratio")
    return out, pooling, paths


def peer_measured(rows: list[dict]) -> bool:
    return any(r[f"peer_{c}"].runs for r in rows for c in (0, 1))


def versions_table(rows: list[dict]) -> str:
    """headline's rows as one table: per mask ms, TFLOP/s and % of SDPA, the runs, the peer's % (VERSIONS_LEGEND
    says what each column is)."""
    peer = peer_measured(rows)
    body = []
    for r in rows:
        ref = r["version"] == SDPA_ROW
        line = [r["version"] if ref else f"`{r['version']}`", r["round"]]
        for c in (0, 1):
            line += [fmt(r[f"ms_{c}"], ".3f"), fmt(r[f"tflops_{c}"], ".0f"), "–" if ref else r[f"sdpa_{c}"].text()]
        line.append(f"{r['sdpa_0'].runs} / {r['sdpa_1'].runs}")
        line += ([r["peer_0"].text(), r["peer_1"].text()] if peer else ["–" if ref else NOT_YET])
        body.append(line)
    header = ["version", "round", "ms, non-causal", "TFLOP/s, non-causal", "% of SDPA, non-causal", "ms, causal",
              "TFLOP/s, causal", "% of SDPA, causal", "runs"]
    header += [f"% of {PEER}, non-causal", f"% of {PEER}, causal"] if peer else [f"% of {PEER}"]
    return md_table(header, body)


def versions_legend(N: int = HEADLINE_N) -> str:
    """One line per column of versions_table, as a Markdown list."""
    return "\n".join(f"- {line}" for line in (
        "version, round: the kernel folder under `fa2triton/kernels/` and the article's round that made it (beyond: past the "
        f"article); {SDPA_ROW}: SDPA's own times in the same runs, pooled over every version's rows.",
        f"ms, TFLOP/s: the median over the runs of the harness's do_bench time at N = {N} (B = {shapes.BATCH}, "
        f"H = {shapes.HEADS}, D = {shapes.HEAD_DIM}, {shapes.DTYPE_NAME}) and of its FLOP count (4·B·H·N²·D, halved "
        "for causal) over that time.",
        "% of SDPA: per run, SDPA's default backend's ms (timed in the same process) over the version's; the median "
        "(min–max) over the runs. Over 100%: faster than SDPA.",
        "runs: the protocol runs pooled (non-causal / causal), each a fresh process with the versions interleaved.",
        f"% of {PEER}: the same per-run ratio against {PEER}, timed in the same runs, at the latest commit that "
        "measured it; – where not measured."))


def goal_cells(gpu, root) -> tuple[list[tuple[str, dict, dict]], object]:
    """Per pool of goal_pools: (what it pools, {(N, causal 'no'/'yes'): (median, interval, verdict)}, the verdicts by
    (N, causal)), and v7's harness file. README's block and the summary both print these cells."""
    pools, path = goal_pools(gpu, root)
    tables = []
    for _, what, df in pools:
        rows, verdicts = _goal_table(df)
        tables.append((what, {(r[0], r[1]): (r[3].split(" ")[0], r[4], r[8]) for r in rows}, verdicts))
    return tables, path


def goal_compact(gpu, root) -> tuple[str, str]:
    """(v7 against cuDNN at every harness shape, one row per shape: median, interval and verdict for each pool of
    goal_pools; the goal's sentence for the widest pool), or (a line saying it is not measured yet, '')."""
    tables, path = goal_cells(gpu, root)
    if not tables:
        return f"v7 against cuDNN: {NOT_YET} (`invoke bench --kernel v7_hopper` writes `{rel(path)}`).", ""
    keys = list(tables[0][1])
    body = [[N, c] + [x for _, cells, _ in tables for x in cells.get((N, c), ("–", "–", "–"))] for N, c in keys]
    what = "; ".join(f"{chr(65 + i)}: {w}" for i, (w, _, _) in enumerate(tables))
    header = ["N", "causal"] + [h for i in range(len(tables)) for h in (f"{chr(65 + i)}: median", "interval",
                                                                        "verdict")]
    verdicts = tables[-1][2]
    ahead = sum(v == "ahead" for v in verdicts.values())
    behind = sum(v == "behind" for v in verdicts.values())
    not_slower = sum(v == "not slower" for v in verdicts.values())
    sentence = (f"Pooled over {tables[-1][0]}: ahead at {ahead} of {len(verdicts)} shapes, behind at {behind}. "
                + goal_verdict(ahead, behind, len(verdicts), not_slower))
    return (f"Each run's own ratio SDPA ms ÷ v7 ms, median and its {100 * GOAL_LEVEL:.0f}% interval, pooled over {what} "
            f"(`{rel(path)}`; the verdict as in the goal section below).\n\n" + md_table(header, body)), sentence


def backward_headline(gpu, root, N: int = HEADLINE_N) -> tuple[list[dict], str]:
    """Per version with backward rows, its default dQ mode (else its most recently measured one) at N: the median over
    the runs of that mode's latest protocol of each run's backward-only % of SDPA's default backend, of its
    FLASH_ATTENTION backend, and of the peer where measured; and the phrase saying what it pools."""
    summary, paths, folder = backward_summary(gpu, root)
    if summary is None:
        return [], f"{NOT_YET} (`invoke bench --mode bwd` writes `{rel(folder)}/<version>.csv`)"
    out = []
    for v in versions.NAMES:
        g = summary[(summary.version == v) & (summary.N == N)]
        if not len(g):
            continue
        # the default mode where it was measured, else the latest (protocols are '<UTC time>-<id>': it sorts last)
        mode = DEFAULT_DQ_MODE if (g.dq_mode == DEFAULT_DQ_MODE).any() else g.sort_values("protocol").dq_mode.iloc[-1]
        g = g[g.dq_mode == mode]
        row = {"version": v, "dq_mode": mode, "runs": int(g.runs.max())}
        for c in (0, 1):
            r = g[g.causal == c]
            row[f"b_{c}"] = float(r.b_pct.iloc[0]) if len(r) else float("nan")
            row[f"b_fa_{c}"] = float(r.b_pct_fa.iloc[0]) if len(r) else float("nan")
            row[f"peer_{c}"] = float(r.b_pct_peer.iloc[0]) if len(r) and "b_pct_peer" in r else float("nan")
        out.append(row)
    pooling = (f"each version's default dQ mode, the latest protocol of that mode in `{rel(folder)}/` "
               "(D = 64): the median over its runs of each run's own backward-only ratio")
    return out, pooling


def backward_table(rows: list[dict]) -> str:
    peer = any(pd.notna(r[f"peer_{c}"]) for r in rows for c in (0, 1))
    body = [[f"`{r['version']}`", r["dq_mode"], r["runs"], fmt(r["b_0"], ".0f", "%"), fmt(r["b_1"], ".0f", "%"),
             fmt(r["b_fa_0"], ".0f", "%"), fmt(r["b_fa_1"], ".0f", "%")]
            + ([fmt(r["peer_0"], ".0f", "%"), fmt(r["peer_1"], ".0f", "%")] if peer else [NOT_YET]) for r in rows]
    return md_table(["backward", "dQ", "runs", "% of cuDNN, non-causal", "causal", "% of FLASH, non-causal", "causal"]
                    + ([f"% of {PEER}, non-causal", "causal"] if peer else [f"% of {PEER}"]), body)


def peer_goal(gpu, root) -> tuple[list[list], str] | None:
    """v7 against the peer at N >= PEER_GOAL_MIN_N, D = 64 and 128, both masks: per shape the runs, the median
    (min–max) of each run's % of the peer, its interval and the verdict (ahead: the interval above 100%; behind:
    below; level: it holds 100%, within the spread). Pooled over every v7 run of the default kernels whose peer was
    measured, at the latest commit with such runs. None while no row has fa4_status == 'ok'."""
    every, path = goal_rows(gpu, root)
    if every is None:
        return None
    df = data.load(path, data.BENCH_COLUMNS)
    df = peer_rows(data.default_rows(df))
    if "pct_of_fa4" not in df.columns or not len(df):
        return None
    df = data.latest_commit(df)
    D = pd.to_numeric(df["D"], errors="coerce").fillna(shapes.HEAD_DIM) if "D" in df else shapes.HEAD_DIM
    df = df.assign(D=D)
    df = df[(df.N >= PEER_GOAL_MIN_N) & df.D.isin(PEER_GOAL_D)]
    rows = []
    for (d, causal, N), g in df.groupby(["D", "causal", "N"]):
        pct = pd.to_numeric(g.pct_of_fa4, errors="coerce").dropna()
        lo, hi = data.median_interval(pct, GOAL_LEVEL)
        verdict = ("too few runs" if pd.isna(lo) else "ahead" if lo > 100 else "behind" if hi < 100
                   else "level within the spread")
        rows.append([int(N), int(d), "yes" if causal else "no", g.run_id.nunique(),
                     f"{fmt(pct.median(), '.1f', '%')} ({fmt(pct.min(), '.1f')}–{fmt(pct.max(), '.1f', '%')})",
                     f"{fmt(lo, '.2f')}–{fmt(hi, '.2f', '%')}", verdict])
    pooling = (f"every v7 run of the default kernels whose peer was measured (fa4_status ok), at the latest commit "
               f"with such runs, in `{rel(path)}`")
    return rows, pooling


PEER_GOAL_COLUMNS = ("round", "N", "D", "causal", "fa4_status", "pct_of_fa4", "graph_pct_of_fa4", "pct_of_sdpa",
                     "graph_pct_of_sdpa")


def rounds_verdict(s: Spread) -> str:
    """Ahead when even the worst round is above 100%, behind when even the best is below, level otherwise."""
    return "–" if not s.runs else "ahead" if s.lo > 100 else "behind" if s.hi < 100 else "level"


def last_process(g: pd.DataFrame) -> pd.DataFrame:
    """One shape's rows of one process: from the last restart of its round numbers on (file order)."""
    r = pd.to_numeric(g["round"], errors="coerce").to_numpy()
    starts = [0] + [i for i in range(1, len(r)) if not r[i] > r[i - 1]]
    return g.iloc[starts[-1]:]


def by_triton(df: pd.DataFrame, newest_only: bool = False):
    """(Triton major.minor, its rows) for each Triton the rows were measured under, oldest first (all as one '–'
    where the file has no triton column); with newest_only the newest Triton's alone."""
    if "triton" not in df.columns:
        return [("–", df)]
    minor = df["triton"].astype(str).str.extract(r"^(\d+\.\d+)")[0].fillna("–")
    groups = sorted(df.groupby(minor), key=lambda kv: tuple(int(x) for x in kv[0].split(".")) if kv[0] != "–" else ())
    return groups[-1:] if newest_only else groups


def peer_goal_rounds(gpu, root, newest_only: bool = False) -> tuple[list[list], str] | None:
    """v7 against the peer from experiments/peer_goal.py's rows (one per round and shape, one process) at the goal's
    shapes (N >= PEER_GOAL_MIN_N; the experiment also times N = 512 and 1024 by default): per Triton and shape the
    rounds, the median (min–max) of the per-round % of the peer by do_bench and by graph replay with a verdict each
    (rounds_verdict), of the % of cuDNN by both, and the commit. Per Triton the rows at its latest commit with
    fa4_status ok, the last process's rounds per shape (newest_only: the newest Triton's); None while the file has
    no such row."""
    path = data.root(root) / gpu / "experiments" / "peer_goal.csv"
    if not path.exists():
        return None
    df = numeric(peer_rows(data.load(path, PEER_GOAL_COLUMNS)), path, [c for c in PEER_GOAL_COLUMNS if c != "fa4_status"])
    df = df[df.N >= PEER_GOAL_MIN_N]
    if not len(df):
        return None
    rows, counts = [], set()
    for triton, by in by_triton(df, newest_only):
        by = data.latest_commit(by)
        commit = by.git_commit.astype(str).iloc[0][:7] if "git_commit" in by.columns else "–"
        for (d, causal, N), g in by.groupby(["D", "causal", "N"]):
            g = last_process(g)
            cells = {c: spread(g.assign(run_id=range(len(g))), c) for c in PEER_GOAL_COLUMNS[5:]}
            counts.add(len(g))
            rows.append([int(N), int(d), "yes" if causal else "no", len(g), cells["pct_of_fa4"].text(".1f"),
                         rounds_verdict(cells["pct_of_fa4"]), cells["graph_pct_of_fa4"].text(".1f"),
                         rounds_verdict(cells["graph_pct_of_fa4"]), cells["pct_of_sdpa"].text(".1f"),
                         cells["graph_pct_of_sdpa"].text(".1f"), triton, f"`{commit}`"])
    n = "–".join(str(c) for c in sorted(counts)) if len(counts) > 1 else str(counts.pop())
    pooling = (f"the {n} interleaved rounds in one process (v7, the peer and cuDNN on the same inputs, the order "
               f"rotating each round) at each Triton's latest commit (last column), `{rel(path)}`")
    return rows, pooling


def section_peer_goal(gpu, root, newest_only: bool = True) -> str:
    """REPORT.md's table (the newest Triton's rows); the peer page's has every Triton's (section_peer_goals)."""
    rounds = peer_goal_rounds(gpu, root, newest_only)
    if rounds is not None:
        rows, pooling = rounds
        return "\n".join([
            f"### v7's forward against the FA3-class peer ({PEER}), N ≥ {PEER_GOAL_MIN_N}",
            f"Each round's own ratio {PEER} ms ÷ v7 ms (and cuDNN ms ÷ v7 ms), pooled over {pooling}: the median "
            "(min–max) over the rounds; verdict: ahead when every round is above 100%, behind when every round is "
            "below, level otherwise (within the spread). Where the peer's do_bench time is far above its graph "
            "replay's (N = 2048), do_bench times its host path, and graph replay compares the kernels. "
            + ("Newest Triton; all, and both kernels under Nsight Compute: [the peer profile]"
               "(docs/report/peer-profile.md)." if newest_only else ""), "",
            md_table(["N", "D", "causal", "rounds", f"% of {PEER}", "verdict", "graph replay", "verdict",
                      "% of cuDNN", "graph replay", "Triton", "commit"], rows)])
    found = peer_goal(gpu, root)
    if found is None:
        return ""
    rows, pooling = found
    return "\n".join([f"### v7's forward against the FA3-class peer ({PEER}), N ≥ {PEER_GOAL_MIN_N}",
                      f"Each run's own ratio {PEER} ms ÷ v7 ms, pooled over {pooling}: the median (min–max), a "
                      f"{100 * GOAL_LEVEL:.0f}% interval for the median, and the verdict (ahead: the interval above "
                      "100%; behind: below; level within the spread: it holds 100%).", "",
                      md_table(["N", "D", "causal", "runs", f"% of {PEER}", "interval", "verdict"], rows)])


BWD_GOAL_COLUMNS = ("run_id", "N", "causal", "bwd_pct_of_sdpa", "fwd_bwd_pct_of_sdpa")
BWD_GOAL_PEER = ("bwd_pct_of_fa4", "fwd_bwd_pct_of_fa4")
BWD_GOAL_HOST = ("bwd_host_us", "sdpa_bwd_host_us")
BWD_GOAL_MIN_N = 512          # issue 48's backward goals: N = 512-2048 (with the host's time) and N >= 2048
BWD_HOST_GOAL_MAX_N = 2048    # above it the GPU's queue sets host_us_per_call, not the host


def backward_goal(gpu, root, version: str = "v7_hopper", min_n: int = PEER_GOAL_MIN_N,
                  newest_only: bool = False) -> tuple[list[list], str] | None:
    """v7's backward against cuDNN and the peer at N >= min_n, D = 64 and 128, both masks, from the
    backward harness's rows of its default dQ mode: per Triton and shape its latest protocol of at least
    MIN_PROTOCOL_RUNS runs (each run a process that times v7, cuDNN and the peer on the same inputs); per shape the
    median (min–max) of each run's backward-only % of cuDNN, of its host speed as a % of cuDNN's (cuDNN's host µs per
    call ÷ v7's, up to BWD_HOST_GOAL_MAX_N) and of the % of the peer (over the runs where it ran), each with
    rounds_verdict, then the forward + backward step's two (newest_only: the newest Triton's rows). None while the
    file has no such rows."""
    path = data.root(root) / gpu / "bench_bwd" / f"{version}.csv"
    if not path.exists():
        return None
    df = data.load(path, BWD_GOAL_COLUMNS)
    df = numeric(df.assign(D=df["D"] if "D" in df else shapes.HEAD_DIM), path,
                 ["N", "D", "causal", *BWD_GOAL_COLUMNS[3:], *(c for c in (*BWD_GOAL_PEER, *BWD_GOAL_HOST) if c in df)])
    df = df.assign(D=df.D.fillna(shapes.HEAD_DIM))   # rows from before the D column: the harness's
    df = df[(df.N >= min_n) & df.D.isin(PEER_GOAL_D)]
    if "dq_mode" in df:   # the default backward, not a --dq-mode experiment
        df = df[df.dq_mode.astype(str) == DEFAULT_DQ_MODE]
    if set(BWD_GOAL_HOST) <= set(df.columns):
        host = (100.0 * df.sdpa_bwd_host_us / df.bwd_host_us).where(df.N <= BWD_HOST_GOAL_MAX_N)
        df = df.assign(host_pct_of_sdpa=host)
    rows = []
    for triton, by_t in by_triton(df, newest_only):   # each Triton's rows together, sorted by D, mask, N
        block = []
        for (d, causal, N), shape in by_t.groupby(["D", "causal", "N"]):
            g = data.latest_protocol(shape, data.MIN_PROTOCOL_RUNS)   # (a later protocol may time fewer shapes)
            commit = f"`{g.git_commit.astype(str).iloc[0][:7]}`" if "git_commit" in g else "–"
            peer = peer_rows(g)
            bwd, host = spread(g, "bwd_pct_of_sdpa"), spread(g, "host_pct_of_sdpa")
            bwd_peer = spread(peer, "bwd_pct_of_fa4")
            step, step_peer = spread(g, "fwd_bwd_pct_of_sdpa"), spread(peer, "fwd_bwd_pct_of_fa4")
            block.append([int(N), int(d), "yes" if causal else "no", g.run_id.nunique(), bwd.text(".1f"),
                          rounds_verdict(bwd), host.text(".1f"), rounds_verdict(host), bwd_peer.text(".1f"),
                          rounds_verdict(bwd_peer), step.text(".1f"), step_peer.text(".1f"), triton, commit])
        rows += sorted(block, key=lambda r: (r[1], r[2], r[0]))
    if not rows:
        return None
    pooling = (f"each (Triton, shape)'s latest protocol of at least {data.MIN_PROTOCOL_RUNS} runs in `{rel(path)}`, "
               "at the last column's commit")
    return rows, pooling


def section_backward_goal(gpu, root, min_n: int = PEER_GOAL_MIN_N, newest_only: bool = True) -> str:
    """REPORT.md's table from N = 2048 (min_n), the newest Triton's; the backward page's from BWD_GOAL_MIN_N, every
    Triton's (section_backward_goals)."""
    found = backward_goal(gpu, root, min_n=min_n, newest_only=newest_only)
    if found is None:
        return ""
    rows, pooling = found
    return "\n".join([
        f"### v7's backward against cuDNN and {PEER}, N ≥ {min_n}",
        f"Each run's own ratio cuDNN ms ÷ v7 ms and {PEER} ms ÷ v7 ms, backward alone (autograd on a kept graph) and "
        f"the forward + backward step, and up to N = {BWD_HOST_GOAL_MAX_N} the host's speed (cuDNN's host µs per "
        f"backward ÷ v7's, the GPU's queue never drained), pooled over {pooling}: the median (min–max) over the "
        "runs; verdict: ahead when every run is above 100%, behind when every run is below, level otherwise "
        f"(within the spread). Issue 48 asks: cuDNN's speed and host speed at N = {BWD_GOAL_MIN_N}–"
        f"{BWD_HOST_GOAL_MAX_N}, cuDNN's speed from N = {PEER_GOAL_MIN_N} (moonshot: the peer's)."
        + (" Newest Triton ([all](docs/report/backward.md))." if newest_only else ""),
        "",
        md_table(["N", "D", "causal", "runs", "bwd % of cuDNN", "verdict", "host % of cuDNN's", "verdict",
                  f"bwd % of {PEER}", "verdict", "fwd+bwd % of cuDNN", f"fwd+bwd % of {PEER}", "Triton", "commit"],
                 rows)])


def section_backward_goals(gpu, root) -> str:
    """The backward page's table: issue 48's backward goals at every N from BWD_GOAL_MIN_N, under every Triton."""
    return section_backward_goal(gpu, root, BWD_GOAL_MIN_N, newest_only=False)


def section_peer_goals(gpu, root) -> str:
    """The peer profile page's first table: the forward against the peer under every Triton measured."""
    return section_peer_goal(gpu, root, newest_only=False)


def section_summary(gpu, root, claims) -> str:
    """REPORT.md's first screen for one GPU."""
    rows, pooling, _ = headline(gpu, root)
    goal, sentence = goal_compact(gpu, root)
    bwd, bwd_pooling = backward_headline(gpu, root)
    held = sum(c.verdict.startswith("holds") for c in claims)
    pending = sum(c.verdict == NOT_YET for c in claims)
    out = ["### Summary",
           f"Every version at N = {HEADLINE_N} against SDPA's default backend (cuDNN here) and {PEER}; pooled over "
           f"{pooling}.", "", versions_table(rows), "", versions_legend(), "",
           "v7 against cuDNN at every harness shape. " + goal, ""]
    if sentence:
        out += [sentence, ""]
    out += [f"The backward at N = {HEADLINE_N}; pooled over {bwd_pooling}.", ""]
    out += [backward_table(bwd), ""] if bwd else []
    for section in (section_peer_goal(gpu, root), section_backward_goal(gpu, root)):
        out += [section, ""] if section else []
    out += [f"Claims ledger: {held} of the article's claims hold here, {len(claims) - held - pending} do not "
            f"(or only partly), {pending} not measured yet ([the ledger](#claims-ledger))."]
    return "\n".join(out)
