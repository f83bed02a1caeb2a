"""The Triton 3.9 port (scripts/compare_trees.py into port_triton39.csv): three trees timed in alternating fresh
processes, round by round: the block-pointer kernels on Triton 3.6 (BEFORE), the pointer port on 3.6 (PORT) and the
same checkout on 3.9 (T39). Two comparisons, each `compare_trees.ratios`: the port on 3.6 (PORT / BEFORE), and 3.9
against 3.6 (T39 / PORT). REPORT.md gets a row per version (`section_port_brief`); the page every shape.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from figures import data
from report import no_regression as ct
from report.tables import NOT_YET, fmt, md_table, rel

CSV = "port_triton39.csv"
BEFORE, PORT, T39, T39P, T39Q, T39T, T39S, T39M = "bp36", "t36", "t39", "t39p", "t39q", "t39t", "t39s", "t39m"
COMPARISONS = (   # (A, B, the page's title of B ÷ A, REPORT.md's column)
    (BEFORE, PORT, "the port on Triton 3.6: pointer arithmetic ÷ block pointers", "port ÷ block pointers"),
    (PORT, T39, "Triton 3.9 ÷ Triton 3.6, the same checkout", "3.9 ÷ 3.6"),
    (T39P, T39, "Triton 3.9: the Triton backward's PTX passes ÷ the commit before them", "3.9: passes ÷ before"),
    (T39, T39Q, "Triton 3.9 with its legacy ptxas (CUDA 12.9) ÷ with ptxas-blackwell (13.4), the same checkout",
     "3.9: ptxas 12.9 ÷ 13.4"),
    (T39T, T39, "Triton 3.9: the forward's row sums chained ÷ the commit before them",
     "3.9: chained sums ÷ trees"),
    (T39S, T39, "Triton 3.9: the forward's row maxima chained too ÷ its row sums alone", "3.9: + maxima ÷ sums"),
    (T39M, T39, "Triton 3.9: the forward's turn waits unsynced and its tl kernel's passes ÷ the commit before them",
     "3.9: turn waits, tl passes ÷ before"))
TREES = {BEFORE: "the block-pointer kernels", PORT: "the pointer port", T39: "the same checkout",
         T39P: "the commit before the Triton backward's fence and descriptor passes",
         T39Q: "this checkout with Triton 3.9's legacy ptxas",
         T39T: "the commit before the chained row sums", T39S: "the commit with the chained row sums alone",
         T39M: "the commit before the turn-wait marks and the tl forward's passes"}
TASK = ("python scripts/compare_trees.py --csv port_triton39.csv --kernel all --tree bp36=<block-pointer checkout> "
        "--tree t36=. --tree t39=. --env t39:PYTHONPATH=<Triton 3.9>")
PAGE = "[its page](docs/report/compare_trees.md#the-triton-39-port)"


def path_of(gpu, root) -> Path:
    return data.root(root) / gpu / "experiments" / CSV


def _load(gpu, root):
    path = path_of(gpu, root)
    return ct.load(path) if path.exists() else None


def _us(df, tree: str, r: dict, pooled_by: str | None = None) -> float:
    """`tree`'s median time in µs at r's version, mode and shape over the rounds that no_regression.pooled keeps for
    `pooled_by` (default: the tree itself, its latest commit's), in the time a comparison is judged by
    (no_regression.JUDGED_BY)."""
    g = df[(df.version == r["version"]) & (df["mode"] == r["mode"]) & (df.N == r["N"]) & (df.D == r["D"])
           & (df.causal == r["causal"])]
    g = ct.pooled(g, pooled_by or tree)
    g = g[g.tree == tree]
    col = next(c for c, _ in ct.JUDGED_BY if g[c].notna().any() or c == "ms")
    return 1e3 * statistics.median(g[col].dropna()) if len(g) else float("nan")


def _tritons(df, tree: str) -> str:
    t = df[df.tree == tree]
    return ", ".join(sorted(set(t.triton.astype(str)))) if "triton" in t else "?"


def with_a(df, a: str):
    """The rows of the rounds (of each run: git_commit) in which tree `a` ran, so that `ratios` pools B's latest commit
    among the rounds that can pair with A (a later run of B alone does not retire a comparison)."""
    key = [c for c in ("git_commit", "round") if c in df]
    ran = df[df.tree == a][key].drop_duplicates()
    return df.merge(ran, on=key)


def ratios(df, a: str, b: str) -> list[dict]:
    """no_regression.ratios of B ÷ A over the rounds in which A ran (with_a)."""
    return ct.ratios(with_a(df, a), a, b)


def comparison_table(df, a: str, b: str) -> str:
    """Every version, mode and shape that both trees measured (a round of either alone is left out)."""
    paired = with_a(df, a)   # the ratios and the µs from the same rounds
    rows = [r for r in ct.ratios(paired, a, b) if r["rounds"]]
    return md_table(["version", "mode", "N", "D", "causal", "rounds", f"µs, {a}", f"µs, {b}",
                     f"graph-replay ms {b} ÷ {a}", f"do_bench ms {b} ÷ {a}", f"% of cuDNN {b} ÷ {a}", "verdict"],
                    [[f"`{r['version']}`", r["mode"], r["N"], r["D"], "yes" if r["causal"] else "no", r["rounds"],
                      _us(paired, a, r, b), _us(paired, b, r, b), ct.gpu_cell(r), ct.cell(r["ms"]),
                      ct.cell(r["pct_of_sdpa"]), ct.verdict(r, b)] for r in rows]) + launch_note(paired, a, b)


def launch_note(df, a: str, b: str) -> str:
    """Where v7 did not launch from its table (a race in each process, "tuned"), the shapes at which the two trees
    ran different launches: there the ratio is the launches' as much as the Tritons'."""
    if not {"path", "config", "choice"} <= set(df.columns):
        return ""
    mine, theirs = ct.launches(df, a), ct.launches(df, b)
    raced = sorted({c for _, said in (*mine.values(), *theirs.values()) for c in said})
    if not raced:
        return ""
    apart = [f"N = {k[2]}, D = {k[3]}, {'causal' if k[4] else 'non-causal'}" for k in mine
             if k in theirs and mine[k][0] != theirs[k][0]]
    return (f"\n\nv7's first calls chose their launches in each process (choice {', '.join(f'`{c}`' for c in raced)}, "
            f"not its launch table's), and the trees ran different launches at {len(apart)} shapes"
            + (f": {'; '.join(apart)}." if apart else "."))


def section_port(gpu, root) -> str:
    df = _load(gpu, root)
    if df is None:
        return f"{NOT_YET}: `{TASK}` writes `{rel(path_of(gpu, root))}`."
    trees = ", ".join(f"`{t}` {what} (Triton {_tritons(df, t)})" for t, what in TREES.items() if t in set(df.tree))
    parts = [f"Trees timed in one fresh process per tree and round, the order rotating each round, each timing its "
             f"own versions and cuDNN on the same inputs (B = 4, H = 8, bf16) by do_bench (L2 flushed) and by "
             f"CUDA-graph replay: {trees}; a tree after the first three was timed only in the rounds that name "
             f"it. µs: each "
             f"tree's median over the rounds a comparison pools (the brief table: its latest commit's), by graph "
             f"replay (the backward: its kernels' own GPU time where the rows have it, else do_bench); ratios: the "
             f"median (min–max) of the per-round ratios over the complete rounds. Verdict: within "
             f"{100 * ct.LEVEL:.0f}% by graph replay (the backward: kernel time) and by % of cuDNN, else what each "
             f"says (a spread that holds 1 is level). Backward rows time the backward alone, by do_bench and by "
             f"torch.profiler's kernel durations. At small N, do_bench times the host path of the versions "
             f"that launch through Triton's JIT (v0–v4), and what it reads there changes from process to process: "
             f"graph replay is the kernels' time. "
             f"Source: `{rel(path_of(gpu, root))}`."]
    for a, b, title, _ in COMPARISONS:
        if not {a, b} <= set(df.tree):
            parts += ["", f"### {title}", "", f"{NOT_YET} (no `{a}` or no `{b}` rows)."]
            continue
        parts += ["", f"### {title}", "", comparison_table(df, a, b)]
    return "\n".join(parts)


def short(r: dict | None) -> str:
    """A comparison in a few words, by its time ratio alone (graph replay, else do_bench): "–" unmeasured, "1 round",
    "level" within 1% or where the rounds' spread holds 1, else faster or slower by the median's percentage."""
    if r is None or not r["rounds"]:
        return "–"
    if r["rounds"] < 2:
        return "1 round"
    xs = ct.timed(r)[1]
    m = statistics.median(xs)
    if abs(m - 1) <= ct.LEVEL or min(xs) <= 1 <= max(xs):
        return "level"
    return f"{'slower' if m > 1 else 'faster'} {100 * abs(m - 1):.1f}%"


def section_port_brief(gpu, root) -> str:
    """REPORT.md's table: per version and mode at the largest N measured (D = 64), each tree's time and both
    comparisons in short, non-causal / causal in each cell."""
    df = _load(gpu, root)
    if df is None or not {PORT, T39} <= set(df.tree):
        return f"Triton 3.6 against 3.9, per round: {NOT_YET} (`{TASK}`)."
    N = int(df.N.max())
    found = {(a, b): {(r["version"], r["mode"], r["causal"]): r for r in ratios(df, a, b)
                      if r["N"] == N and r["D"] == 64} for a, b, *_ in COMPARISONS if {a, b} <= set(df.tree)}
    table, unjudged = [], []
    for version, mode in sorted({k[:2] for rows in found.values() for k in rows}):
        def both(f):
            return " / ".join(f(c) for c in (0, 1))

        def us(tree):
            return both(lambda c: fmt(_us(df, tree, {"version": version, "mode": mode, "N": N, "D": 64, "causal": c}),
                                      ".0f"))

        verdicts = [both(lambda c, k=k: short(found.get(k, {}).get((version, mode, c))))
                    for k in ((a, b) for a, b, *_ in COMPARISONS)]
        if not any(w not in ("–", "1 round") for v in verdicts for w in v.split(" / ")):   # nothing judged
            unjudged.append(f"`{version}`")
            continue
        table.append([f"`{version}`", mode, us(BEFORE), us(PORT), us(T39), *verdicts])
    return "\n".join([
        f"Triton 3.6 and 3.9 side by side, per round ({PAGE}): µs at N = {N}, D = 64, non-causal / causal "
        f"(medians; graph replay, the backward do_bench); verdicts from the per-round time ratios"
        + (f" ({', '.join(dict.fromkeys(unjudged))}: too few rounds)" if unjudged else "") + ":", "",
        md_table(["version", "mode", f"µs {BEFORE}", f"µs {PORT}", f"µs {T39}", *(c[3] for c in COMPARISONS)],
                 table)])
