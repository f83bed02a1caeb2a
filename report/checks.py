"""The non-square causal check, and the list of what has not been measured yet."""

from __future__ import annotations



from fa2triton import versions
from figures import data
from report.tables import NOT_YET, md_table, not_yet, numeric, optional, rel


# ---------------------------------------------------------------- the non-square causal check (issue 6)

NONSQUARE_COLUMNS = ("version", "config", "n_q", "n_k", "D", "dtype", "causal", "status", "git_commit")
NONSQUARE_STATUSES = ("passed", "failed", "skipped_smem")   # fa2lab.nonsquare.check_version's counts


def nonsquare(gpu, root):
    """(the rows of results/<gpu>/checks/nonsquare.csv, per version and set (quick or full) those of its latest git
    commit (by date, else by row order), the latest row per case, with `quick` (0 where the file has none); the
    newest row's commit; the file), or (None, None, path) if it has not been saved. A malformed file, or a status check_version does not
    write, is a ResultsError naming it."""
    path = data.root(root) / gpu / "checks" / "nonsquare.csv"
    df = optional(path, NONSQUARE_COLUMNS)
    if df is None:
        return None, None, path
    df = numeric(df.assign(quick=df["quick"] if "quick" in df else 0), path, ("n_q", "n_k", "D", "causal", "quick"))
    df = df.assign(quick=df["quick"].fillna(0).astype(int), status=df["status"].astype(str),
                   git_commit=df["git_commit"].astype(str), version=df["version"].astype(str))
    bad = sorted(set(df.status) - set(NONSQUARE_STATUSES))
    if bad:
        raise data.ResultsError(f"results file {path} has status value(s) {', '.join(bad)} "
                                f"(expected {', '.join(NONSQUARE_STATUSES)})")
    if "date" in df.columns:
        df = df.sort_values("date", kind="stable")
    # per version and set, the rows of its own latest commit (versions are checked in different calls)
    latest = df.groupby(["version", "quick"])["git_commit"].transform("last")
    rows = df[df.git_commit == latest]
    rows = rows.drop_duplicates(["version", "quick", "config", "n_q", "n_k", "D", "dtype", "causal"], keep="last")
    return rows, df["git_commit"].iloc[-1], path


def section_nonsquare(gpu, root) -> str:
    title = "### The non-square causal check (issue 6)"
    df, commit, path = nonsquare(gpu, root)
    if df is None:
        return not_yet(title, "invoke check-nonsquare --save", path)
    order = {v: i for i, v in enumerate(versions.NAMES)}
    rows = []
    for (v, quick), g in sorted(df.groupby(["version", "quick"]), key=lambda kv: (order.get(kv[0][0], len(order)),
                                                                                  kv[0][0], kv[0][1])):
        n = g.status.value_counts()
        rows.append([v, "quick" if quick else "full", f"`{g.git_commit.iloc[-1][:7]}`", len(g),
                     *(int(n.get(s, 0)) for s in NONSQUARE_STATUSES)])
    missing = [v for v in versions.NAMES if v not in set(df.version)]
    failed = df[df.status == "failed"]
    text = [title,
            "Cases per version at that version's latest git commit in the file (earlier commits' rows of the same "
            "version are left out), each through `apply` and the explicit tile configurations of fa2lab.nonsquare, "
            "against a float64 reference with the top-left causal mask; a configuration that does not fit in shared "
            f"memory is skipped, not failed. Source: `{rel(path)}`.", "",
            md_table(["version", "set", "commit", "cases", "passed", "failed", "skipped (shared memory)"], rows)]
    if missing:
        text += ["", f"Not checked natively: {', '.join(missing)}."]
    if len(failed):
        shown = failed.head(5)
        text += ["", f"Failed ({len(failed)}): " + "; ".join(
            f"{r.version} `{r.config}` {int(r.n_q)}×{int(r.n_k)} D={int(r.D)} {r.dtype} "
            f"{'causal' if r.causal else 'full'}"
            for r in shown.itertuples()) + ("; …" if len(failed) > len(shown) else "") + "."]
    return "\n".join(text)


def section_pending(gpu, root) -> str:
    base = data.root(root) / gpu
    todo = [("ncu", "the Nsight Compute profiles (Rounds 0, 2, 5)", "invoke profile --tool ncu --kernel all"),
            ("tuning", "the compile-cost and autotune-bias experiments (Round 3)",
             "invoke compile-cost; invoke autotune-bias"),
            ("checks", "the full non-square causal check", "invoke check-nonsquare --save")]
    lines = [f"- {what}: {NOT_YET} (`{cmd}` writes results/{gpu}/{sub}/)" for sub, what, cmd in todo
             if not (base / sub).is_dir()]
    if not list((base / "ceilings").glob("matmul_S*.csv")):
        lines.append(f"- the Round 2 matmul profile under Nsight Compute (the tensor-pipe counter against the "
                     f"roofline, per input type): {NOT_YET} (`invoke profile --tool ncu --kernel matmul` writes "
                     f"results/{gpu}/ceilings/matmul_S<size>.csv)")
    if not (base / "sweep" / "v0_baseline.csv").exists():
        lines.append(f"- the Round 1 sweep of v0_baseline's body: {NOT_YET} (`invoke sweep --kernel v0_baseline`); "
                     "v1–v4's sm_90 configurations are provisional until it lands")
    checked, _, _ = nonsquare(gpu, root) if (base / "checks").is_dir() else (None, None, None)
    if checked is not None:
        missing = [v for v in versions.NAMES if v not in set(checked.version)]
        if missing:
            lines.append(f"- the non-square causal check for {', '.join(missing)}: not in results/{gpu}/checks/"
                         "nonsquare.csv (`invoke check-nonsquare --save` checks them; a cut run resumes case by case "
                         "at the same commit)")
    sweep_bwd = base / "sweep_bwd" / "flash_backward_triton.csv"
    if sweep_bwd.exists():
        modes = set(optional(sweep_bwd, ("dq_mode",))["dq_mode"].astype(str))
        for mode in (m for m in ("separate", "atomic") if m not in modes):
            lines.append(f"- the backward sweep with {mode} dQ: {NOT_YET} (`invoke sweep-backward --dq-mode {mode}`)")
    return "### Not measured yet\n" + ("\n".join(lines) if lines else "Nothing: every experiment has results.")
