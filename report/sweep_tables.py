"""The sweeps of Rounds 1 and 5 and v7's re-sweep, each beside the article's winners, and the shared-memory budget."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from figures import data
from report.tables import NOT_YET, ada, fmt, md_table, not_yet, numeric, optional, rel


# (swept body, round, the article's transcribed winners of that round (None: the article has no such round),
# the section's title; {n}: ", <count> configurations per shape" once the sweep has run)
SWEEPS = (("v0_baseline", "Round 1", "sweep_winners_round1", "Round 1 sweep winners (v0_baseline's body{n})"),
          ("v4_exp2", "Round 5", "sweep_winners_round5", "Round 5 sweep winners (v4_exp2's body{n})"),
          ("v7_hopper", "Round 7", None, "Round 7: v7's re-sweep (v7_hopper's own body, pinned one configuration "
                                         "at a time{n})"))
PIPELINE_QK = "PIPELINE_QK"   # v7's loop order, recorded by the sweep beside the tiles (fa2lab.forward_sweep)
PICK_ROLES = (("single", "single winner"), ("per_shape", "per-shape winners"), ("shortlist", "short list"))


def config_key(df: pd.DataFrame) -> pd.Series:
    """'q_tile,k_tile,num_warps,num_stages' per sweep row: the key pick-configs writes."""
    return (df.q_tile.astype(int).astype(str) + "," + df.k_tile.astype(int).astype(str) + ","
            + df.num_warps.astype(int).astype(str) + "," + df.num_stages.astype(int).astype(str))


def sweep_winners(gpu, root, version: str = "v4_exp2"):
    """(every row, the best ok row per shape, the file) of one sweep; (None, None, path) if it has not run.
    A malformed file, or one without a single ok configuration, is a ResultsError naming it."""
    path = data.root(root) / gpu / "sweep" / f"{version}.csv"
    if not path.exists():
        return None, None, path
    df, path = data.sweep(gpu, version, root)
    df = numeric(df, path, ("N", "causal", "q_tile", "k_tile", "num_warps", "num_stages"))
    df["tflops"] = pd.to_numeric(df["tflops"], errors="coerce")
    ok = df[(df.status == "ok") & df.tflops.notna()]
    if ok.empty:
        raise data.ResultsError(f"results file {path} has no ok configuration")
    best = ok.loc[ok.groupby(["N", "causal"])["tflops"].idxmax()]
    return df, best, path


def sweep_picks(gpu, root, version: str):
    """(role -> configurations in rank order, the picks row frame, the file) from <version>.picks.csv
    (sweeps/pick_configs.py); ({}, None, path) if it has not been written."""
    path = data.root(root) / gpu / "sweep" / f"{version}.picks.csv"
    df = optional(path, ("role", "rank", "config"))
    if df is None:
        return {}, None, path
    df = numeric(df, path, ("rank",)).sort_values("rank", kind="stable")
    return {role: list(g.config.astype(str)) for role, g in df.groupby("role", sort=False)}, df, path


def ada_winner(ref: pd.DataFrame | None, N, causal) -> str:
    a = ref[(ref.N == N) & (ref.causal == causal)] if ref is not None else pd.DataFrame()
    if a.empty:
        return "–"
    a = a.iloc[0]
    parts = [f"{int(a.q_tile)}×{int(a.k_tile)}"] + [f"{int(a[c])}{u}" for c, u in
                                                     (("num_warps", "w"), ("num_stages", "s")) if pd.notna(a.get(c))]
    return ", ".join(parts) + (f": {a.tflops:.1f}" if pd.notna(a.get("tflops")) else "")


def section_one_sweep(gpu, root, ref_root, version, rnd, ref_name, title) -> str:
    df, best, path = sweep_winners(gpu, root, version)
    if df is None:
        return not_yet("### " + title.format(n=""), f"invoke sweep --kernel {version}", path)
    ref, ref_path = ada(ref_name, ref_root) if ref_name else (None, None)
    per_shape = int(df.groupby(["N", "causal"]).size().max())
    counts = df.groupby("status").size() / df.groupby(["N", "causal"]).ngroups
    picks, picks_df, picks_path = sweep_picks(gpu, root, version)
    ok = df[(df.status == "ok") & df.tflops.notna()].assign(key=lambda d: config_key(d))
    single = (picks.get("single") or [None])[0]
    short = picks.get("shortlist", [])
    pipelined = PIPELINE_QK in df.columns
    rows = []
    for r in best.sort_values(["causal", "N"]).itertuples():
        shape = ok[(ok.N == r.N) & (ok.causal == r.causal)]
        t_single = shape[shape.key == single].tflops.max() if single else float("nan")
        t_short = shape[shape.key.isin(short)].tflops.max() if short else float("nan")
        row = [r.N, "yes" if r.causal else "no", f"{r.q_tile}×{r.k_tile}, {r.num_warps}w, {r.num_stages}s"]
        if pipelined:
            row.append(fmt(pd.to_numeric(best.loc[r.Index, PIPELINE_QK], errors="coerce"), ".0f"))
        row += [f"{r.tflops:.1f}", fmt(getattr(r, "pct_of_sdpa", float("nan")), ".0f", "%"),
                f"{fmt(t_single, '.1f')} ({fmt(100 * t_single / r.tflops, '.0f', '%')})",
                f"{fmt(t_short, '.1f')} ({fmt(100 * t_short / r.tflops, '.0f', '%')})"]
        if ref_name:
            row.append(ada_winner(ref, r.N, r.causal))
        rows.append(row)
    if picks_df is None:
        picks_text = (f"Picks: {NOT_YET} (`invoke pick-configs --kernel {version}` writes `{rel(picks_path)}`).")
    else:
        made = picks_df.iloc[-1]
        origin = "the latest picks"   # their date and commit are in the file
        from_csv = str(made["source_csv"]) if "source_csv" in picks_df and pd.notna(made["source_csv"]) else ""
        picks_text = (f"Picks from `{rel(picks_path)}` ({origin}"
                      + (f"; made from `{from_csv}`" if from_csv else "") + "): "
                      + "; ".join(f"{label} ({len(picks.get(role, []))}): "
                                  + (", ".join(f"`{c}`" for c in picks[role]) if picks.get(role) else "–")
                                  for role, label in PICK_ROLES) + ".")
        if from_csv and Path(from_csv).name != path.name:
            picks_text += f" The picks name another sweep file than `{rel(path)}`."
    header = ["N", "causal", "best (ours)"] + ([PIPELINE_QK] if pipelined else []) + [
        "TFLOP/s", "% of SDPA", "single winner: TFLOP/s", "short list's best: TFLOP/s"] + (
        ["best on Ada (TFLOP/s)"] if ref_name else [])
    sources = f"Source: `{rel(path)}`" + (f"; Ada: `{rel(ref_path) if ref_path else '–'}`" if ref_name else
                                          f" (the article has no {rnd})")
    return "\n".join([
        "### " + title.format(n=f", {per_shape} configurations per shape"),
        f"Per shape: {', '.join(f'{n:.0f} {s}' for s, n in counts.items())}. {sources}. The single winner's and "
        "the short list's columns give their TFLOP/s at each shape from the same sweep, in brackets as a share of "
        "that shape's best." + (f" {PIPELINE_QK}: the winner's loop order as the sweep recorded it (1: the next "
                                "Q Kᵀ issued before the softmax, 0: v6's order)." if pipelined else ""), "",
        md_table(header, rows),
        "", picks_text])


SMALL_N_NOTE = ("At N ≤ 1024 the harness's do_bench times the host more than the kernel on this machine "
                "(see the host path's page), so those winners are within the noise of Python's per-call cost.")


def section_sweep(gpu, root, ref_root) -> str:
    parts = [section_one_sweep(gpu, root, ref_root, *s) for s in SWEEPS]
    return "\n\n".join(parts) + "\n\n" + SMALL_N_NOTE


def section_budget(gpu, root, ref_root) -> str:
    from fa2triton import budget
    from fa2triton.budget import Config

    path = data.root(root) / gpu / "budget" / "v1_tiles.csv"
    try:
        df = data.load(path, ("config", "dtype", "D", "status", "shared_formula", "shared_compiled", "arch"))
    except data.ResultsError:
        return f"### The shared-memory budget\n{NOT_YET}: `invoke budget --save` writes {rel(path)}."
    rows = []
    for r in df.itertuples():
        cfg, elem = Config.parse(r.config), 4 if r.dtype == "fp32" else 2
        compiled = int(r.shared_compiled) if pd.notna(r.shared_compiled) else None
        rows.append([r.config, r.dtype, int(r.D), int(r.shared_formula),
                     budget.predicted_shared_bytes(cfg, int(r.D), elem, r.arch), compiled or "–",
                     int(r.progs_per_sm_smem) if pd.notna(r.progs_per_sm_smem) else "–",
                     int(r.n_regs) if pd.notna(r.n_regs) else "–",
                     (budget.explain(cfg, compiled, int(r.D), elem, r.arch) if compiled else "") +
                     ("" if r.status == "ok" else f" ({r.status})")])
    return "\n".join(["### The shared-memory budget",
                      f"Source: `{rel(path)}` (formula and compiled bytes as measured; the prediction and the "
                      "explanation are fa2triton.budget's, recomputed here).", "",
                      md_table(["config", "dtype", "D", "formula B", "predicted B", "compiled B", "programs/SM (smem)",
                                "regs", "difference"], rows)])
