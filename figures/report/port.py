"""The Triton 3.9 port (scripts/compare_trees.py into port_triton39.csv): three trees timed in alternating fresh
processes, round by round: the block-pointer kernels on Triton 3.6 (BEFORE), the pointer port on 3.6 (PORT) and the
same checkout on 3.9 (T39). Two comparisons, each `compare_trees.ratios`: the port on 3.6 (PORT / BEFORE), and 3.9
against 3.6 (T39 / PORT). RESULTS.md gets one table per round (`section_port_brief`); the page every shape.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from figures import data
from figures.report import compare_trees as ct
from figures.report.tables import NOT_YET, md_table, rel

CSV = "port_triton39.csv"
BEFORE, PORT, T39 = "bp36", "t36", "t39"
COMPARISONS = ((BEFORE, PORT, "the port on Triton 3.6: pointer arithmetic ÷ block pointers"),
               (PORT, T39, "Triton 3.9 ÷ Triton 3.6, the same checkout"))
TASK = ("python scripts/compare_trees.py --csv port_triton39.csv --kernel all --tree bp36=<block-pointer checkout> "
        "--tree t36=. --tree t39=. --env t39:PYTHONPATH=<Triton 3.9>")
PAGE = "[its page](docs/results/triton-versions.md)"


def path_of(gpu, root) -> Path:
    return data.root(root) / gpu / "experiments" / CSV


def _load(gpu, root):
    path = path_of(gpu, root)
    return ct.load(path) if path.exists() else None


def _us(df, tree: str, r: dict) -> float:
    """`tree`'s median time in µs at r's version, mode and shape over its rounds: by graph replay, or by do_bench
    where nothing was captured (the backward)."""
    g = df[(df.tree == tree) & (df.version == r["version"]) & (df["mode"] == r["mode"]) & (df.N == r["N"])
           & (df.D == r["D"]) & (df.causal == r["causal"])]
    col = "graph_ms" if g.graph_ms.notna().any() else "ms"
    return 1e3 * statistics.median(g[col].dropna()) if len(g) else float("nan")


def _tritons(df, tree: str) -> str:
    t = df[df.tree == tree]
    return ", ".join(sorted(set(t.triton.astype(str)))) if "triton" in t else "?"


def comparison_table(df, a: str, b: str) -> str:
    """Every version, mode and shape that both trees measured (a round of either alone is left out)."""
    rows = [r for r in ct.ratios(df, a, b) if r["rounds"]]
    return md_table(["version", "mode", "N", "D", "causal", "rounds", f"µs, {a}", f"µs, {b}",
                     f"graph-replay ms {b} ÷ {a}", f"do_bench ms {b} ÷ {a}", f"% of cuDNN {b} ÷ {a}", "verdict"],
                    [[f"`{r['version']}`", r["mode"], r["N"], r["D"], "yes" if r["causal"] else "no", r["rounds"],
                      _us(df, a, r), _us(df, b, r), ct.cell(r["graph_ms"]), ct.cell(r["ms"]),
                      ct.cell(r["pct_of_sdpa"]), ct.verdict(r, b)] for r in rows])


def section_port(gpu, root) -> str:
    df = _load(gpu, root)
    if df is None:
        return f"{NOT_YET}: `{TASK}` writes `{rel(path_of(gpu, root))}`."
    parts = [f"Three trees, one fresh process per tree and round, the order rotating each round, each timing its own "
             f"versions and cuDNN on the same inputs (B = 4, H = 8, bf16) by do_bench (L2 flushed) and by CUDA-graph "
             f"replay: `{BEFORE}` the block-pointer kernels on Triton {_tritons(df, BEFORE)}, `{PORT}` the pointer "
             f"port on Triton {_tritons(df, PORT)}, `{T39}` the same checkout on Triton {_tritons(df, T39)}. µs: each "
             f"tree's median over its rounds, by graph replay (the backward: by do_bench); ratios: the median "
             f"(min–max) of the per-round ratios over the complete rounds. Verdict: within {100 * ct.LEVEL:.0f}% by graph replay and by % of cuDNN, else what each "
             f"says (a spread that holds 1 is level). Backward rows time the backward alone (cuDNN by do_bench "
             f"only). At small N, do_bench times the host path of the versions that launch through Triton's JIT "
             f"(v0–v4), and what it reads there changes from process to process: graph replay is the kernels' time. "
             f"Source: `{rel(path_of(gpu, root))}`."]
    for a, b, title in COMPARISONS:
        if not {a, b} <= set(df.tree):
            parts += ["", f"### {title}", "", f"{NOT_YET} (no `{a}` or no `{b}` rows)."]
            continue
        parts += ["", f"### {title}", "", comparison_table(df, a, b)]
    return "\n".join(parts)


def section_port_brief(gpu, root) -> str:
    """RESULTS.md's table: per version and mode, % of cuDNN on each tree at the largest N measured (D = 64, both
    masks), with the verdicts of both comparisons."""
    df = _load(gpu, root)
    if df is None or not {PORT, T39} <= set(df.tree):
        return f"Triton 3.6 against 3.9, per round: {NOT_YET} (`{TASK}`)."
    N = int(df.N.max())
    found = {(a, b): {(r["version"], r["mode"], r["causal"]): r for r in ct.ratios(df, a, b)
                      if r["N"] == N and r["D"] == 64} for a, b, _ in COMPARISONS if {a, b} <= set(df.tree)}
    keys = sorted({k for rows in found.values() for k in rows})
    table = []
    for version, mode, causal in keys:
        r = {"version": version, "mode": mode, "N": N, "D": 64, "causal": causal}
        verdicts = [ct.verdict(found[(a, b)][(version, mode, causal)], b)
                    if (version, mode, causal) in found.get((a, b), {}) else "–" for a, b, _ in COMPARISONS]
        table.append([f"`{version}`", mode, "yes" if causal else "no", _us(df, BEFORE, r), _us(df, PORT, r),
                      _us(df, T39, r), *verdicts])
    return "\n".join([
        f"Triton 3.6 and 3.9 side by side, per round ({PAGE}): µs at N = {N}, D = 64, B = 4, H = 8 (each tree's "
        f"median over rounds of alternating fresh processes, by graph replay; the backward by do_bench), for the "
        f"block-pointer kernels on 3.6, the pointer port on 3.6 and on 3.9, with the verdicts of port ÷ block "
        f"pointers and 3.9 ÷ 3.6 from the per-round ratios (within 1%, or what the time and % of cuDNN say). The "
        f"autotuned versions choose their configuration in each process, so a tree's median time and the ratios of "
        f"the rounds can point different ways; the verdicts follow the ratios:", "",
        md_table(["version", "mode", "causal", f"µs {BEFORE}", f"µs {PORT}", f"µs {T39}", "port ÷ block pointers",
                  "3.9 ÷ 3.6"], table)])
