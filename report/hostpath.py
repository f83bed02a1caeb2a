"""The host path: do_bench against CUDA-graph replay, a call's host time step by step, and the library's calls
(fa2triton.api's attention() and flash_attn_func()) against FlashAttentionTriton.apply (issue 47)."""

from __future__ import annotations


import pandas as pd

from fa2triton import versions
from figures import data
from profiling.host_steps import BACKWARD_STEPS, PARTS, REPEAT_STEPS, STEPS as HOST_STEPS
from report.tables import NOT_YET, fmt, latest_rows, md_table, not_yet, numeric, optional, rel, span


def hostpath_table(gpu, root):
    """The host-path rows of each version that has them; [] when none has (a malformed file is an error)."""
    try:
        return data.hostpath_tables(gpu, root)
    except data.MissingResults:
        return []


def section_hostpath(gpu, root) -> str:
    frames = hostpath_table(gpu, root)
    if not frames:
        return f"### Host path\n{NOT_YET}: `invoke bench` with graphs writes results/{gpu}/hostpath/."
    # do_bench without its flush (harness column noflush_ms, added after the first H200 protocol)
    noflush = any("noflush_ms" in df.columns and df["noflush_ms"].notna().any() for _, df, _ in frames)
    rows = []
    for v, df, _ in frames:
        for (causal, N), g in df.groupby(["causal", "N"]):
            row = [v, N, "yes" if causal else "no", g.ms.median() * 1e3]
            if noflush:
                row.append(g.noflush_ms.median() * 1e3 if "noflush_ms" in g else float("nan"))
            row += [g.graph_ms.median() * 1e3, g.host_us.median(), g.sdpa_ms.median() * 1e3]
            if noflush:
                row.append(g.sdpa_noflush_ms.median() * 1e3 if "sdpa_noflush_ms" in g else float("nan"))
            rows.append(row + [g.sdpa_graph_ms.median() * 1e3, g.sdpa_host_us.median()])
    header = ["version", "N", "causal", "do_bench", *(["no flush"] if noflush else []), "graph", "host/call",
              "SDPA do_bench", *(["SDPA no flush"] if noflush else []), "SDPA graph", "SDPA host/call"]
    return "\n".join([
        "### do_bench against CUDA-graph replay, and the host's time per call (issue 8)",
        "µs, medians of the latest protocol; sources: " + ", ".join(f"`{rel(p)}`" for _, _, p in frames) + "."
        + (" 'no flush': per-call CUDA events like do_bench's, without its 256 MB cache flush between calls "
           "(fa2lab.timers.bench_noflush_ms): do_bench − no flush is what the flush costs the next call, "
           "no flush − graph what a graph saves per call." if noflush else ""), "",
        md_table(header, rows)])


# ---------------------------------------------------------------- the host path step by step (issue 8)

HOST_STEPS_COLUMNS = ("version", "N", "causal", "step", "us_median", "us_min", "us_max")
# (column, minuend, subtrahend): the differences profiling/host_steps.py's docstring reads ("apply - cache_hit is
# what the autograd.Function and the lookup add; cache_hit - allocate is the launch"), and ours against SDPA's
HOST_STEP_DIFFS = (("apply's own (apply − cache_hit)", "apply", "cache_hit"),
                   ("launch (cache_hit − allocate)", "cache_hit", "allocate"),
                   ("ours − SDPA (apply − sdpa)", "apply", "sdpa"))


def host_steps(gpu, root, latest: bool = True):
    """(the latest row per version, shape and step of results/<gpu>/hostpath/steps.csv, every row if not `latest`;
    the file); (None, path) if `invoke host-steps` has not run; a malformed file is a ResultsError naming it."""
    path = data.root(root) / gpu / "hostpath" / "steps.csv"
    df = optional(path, HOST_STEPS_COLUMNS)
    if df is None:
        return None, path
    df = numeric(df, path, ("N", "causal", "us_median", "us_min", "us_max"))
    df = df.assign(version=df["version"].astype(str), step=df["step"].astype(str))
    return (latest_rows(df, ("version", "N", "causal", "step")) if latest else df), path


def host_step_table(df: pd.DataFrame) -> tuple[list[str], list[dict]]:
    """(the steps that have data, in profiling/host_steps.py's order then any other; per (version, N, causal)
    in registry order a dict: version, N, causal, step -> (median, min, max) µs, and each difference's µs)."""
    steps = [s for s in HOST_STEPS if s in set(df.step)] + [s for s in dict.fromkeys(df.step) if s not in HOST_STEPS]
    order = {v: i for i, v in enumerate(versions.NAMES)}
    out = []
    for (v, N, causal), g in df.groupby(["version", "N", "causal"]):
        by = g.set_index("step")
        times = {s: (float(by.us_median[s]), float(by.us_min[s]), float(by.us_max[s])) for s in by.index}
        diffs = {name: times[a][0] - times[b][0] if a in times and b in times else float("nan")
                 for name, a, b in HOST_STEP_DIFFS}
        out.append({"version": v, "N": int(N), "causal": int(causal), "times": times, "diffs": diffs})
    out.sort(key=lambda r: (order.get(r["version"], len(order)), r["version"], r["causal"], r["N"]))
    return steps, out


def section_host_steps(gpu, root) -> str:
    title = "### Where a call's host time goes, step by step (issue 8)"
    df, path = host_steps(gpu, root)
    if df is None:
        return not_yet(title, "invoke host-steps", path)
    # the backward's steps have their own section, per commit: a before tree's rows, timed last, must not stand for
    # the newest code here
    steps, table = host_step_table(df[~df.step.isin((*BACKWARD_STEPS, *(p for ps in PARTS.values() for p in ps)))])
    rows = []
    for r in table:
        t = r["times"]
        rows.append([r["version"], r["N"], "yes" if r["causal"] else "no"]
                    + [span(*t[s], ".1f") if s in t else "–" for s in steps]
                    + [fmt(r["diffs"][name], "+.1f") for name, _, _ in HOST_STEP_DIFFS])
    return "\n".join([
        title,
        "µs per call, each step timed alone as the harness times host_us (calls back to back, the GPU queue never "
        "drained): the median over the repeats (min–max), the latest row per step. The steps are "
        "profiling/host_steps.py's (sdpa: SDPA's forward; attention, flash_attn_func: fa2triton's calls on views of "
        "apply's inputs; apply: FlashAttentionTriton.apply, as the harness calls it: "
        "through autograd's Function machinery in rows from before "
        "fa2triton.lean_path.LeanApply, and without it from then on, since no input needs a gradient; apply_grad: the "
        "same with Q requiring one; function_nop: an "
        "empty autograd.Function; cache_hit: the cached launch called directly; signature: the lookup; allocate: "
        "O and L; descriptors: v7's TMA descriptors; launch: Triton's launcher alone). The backward's steps are in "
        "the backward's own section, by commit. The last three columns are differences of the medians. Source: "
        + f"`{rel(path)}`.", "",
        md_table(["version", "N", "causal", *steps, *(name for name, _, _ in HOST_STEP_DIFFS)], rows)])


# ---------------------------------------------------------------- the backward's repeat path by piece (issue 48)

BACKWARD_STEPS_TIMED = ("sdpa_backward", "backward", "backward_nop", "bwd_split", "bwd_inside", *REPEAT_STEPS)
BACKWARD_STEP_COLUMNS = tuple(p for s in BACKWARD_STEPS_TIMED for p in PARTS.get(s, (s,)))
BACKWARD_TASK = ("invoke host-steps --kernel v7_hopper --N 512,1024,2048 --steps "
                 + ",".join(BACKWARD_STEPS_TIMED))


def section_backward_steps(gpu, root) -> str:
    """The backward's host path piece by piece: per version, shape and mask its whole autograd backward beside
    SDPA's and each piece of its repeat (profiling/host_steps.py's bwd_* steps), with what autograd and the
    Function add around the repeat (backward − bwd_repeat); one row per commit that timed them, latest first,
    earlier commits' whole backward included (the before of each piece's change) where a later one has pieces."""
    title = "### The backward's host path, piece by piece (issue 48)"
    df, path = host_steps(gpu, root, latest=False)
    if df is None or not df.step.isin(REPEAT_STEPS).any():
        return not_yet(title, BACKWARD_TASK, path)
    df = df[df.step.isin(BACKWARD_STEP_COLUMNS)].assign(git_commit=df.get("git_commit", "?"),
                                                       triton=df["triton"].astype(str) if "triton" in df else "?")
    order = {v: i for i, v in enumerate(versions.NAMES)}
    rows = []
    pieces = set(map(tuple, df[df.step.isin(REPEAT_STEPS)][["version", "N", "causal"]].values.tolist()))
    for (v, N, causal, commit, triton), g in df.groupby(["version", "N", "causal", "git_commit", "triton"],
                                                        sort=False):
        if (v, N, causal) not in pieces or not set(g.step) & {"backward", *REPEAT_STEPS}:
            continue
        by = latest_rows(g, ("step",)).set_index("step")
        t = {s: (float(by.us_median[s]), float(by.us_min[s]), float(by.us_max[s])) for s in by.index}
        own = t["backward"][0] - t["bwd_repeat"][0] if "backward" in t and "bwd_repeat" in t else float("nan")
        vs_sdpa = t["backward"][0] / t["sdpa_backward"][0] if "backward" in t and "sdpa_backward" in t else float("nan")
        rows.append(((order.get(v, len(order)), v, int(causal), int(N), -len(rows)),
                     [v, int(N), "yes" if causal else "no", str(commit)[:7], triton]
                     + [span(*t[s], ".1f") if s in t else "–" for s in BACKWARD_STEP_COLUMNS]
                     + [fmt(vs_sdpa, ".2f"), fmt(own, "+.1f")]))
    rows.sort(key=lambda r: r[0])
    return "\n".join([
        title,
        "µs per call, timed as the steps above (the median over the repeats, min–max), one row per commit and Triton. "
        "backward: autograd.grad through FlashAttentionTriton (all three gradients wanted), sdpa_backward: through "
        "SDPA; backward_nop: through a Function that launches nothing (autograd's floor); bwd_enter, bwd_body, "
        "bwd_leave: `backward` cut where the Function's backward starts and ends (the engine's hand-off to its device "
        "thread, our backward, the hand-back); bwd_in_lookup, bwd_in_buffers, bwd_in_delta, bwd_in_main, bwd_in_rest: "
        "bwd_body cut where the repeat's pieces start and end, as they run inside autograd (the saved tensors, key "
        "and lookup; the buffers; the launches; the cast and the return); the other bwd_ steps are the pieces of its "
        "repeat "
        "(fa2triton.flash_backward_triton.BackwardLaunch) in the default dq mode, each alone: bwd_key the key and "
        "lookup, bwd_buffers the allocations, bwd_zero_fill the fp32 dQ accumulator's fill (no longer in the path "
        "from issue 48 on: the Delta launch zeroes it), bwd_delta and bwd_main the launches, bwd_cast dQ's cast from "
        "fp32, bwd_repeat the whole repeat. backward ÷ sdpa_backward compares the two in one process (the host's "
        "speed differs from process to process). The last column is backward − bwd_repeat: autograd's and the "
        "Function's share while the call is host-bound (once the GPU's time sets `backward`, at the larger N, it is "
        "not). Rows of earlier commits without pieces are the whole backward before the pieces' changes. Source: "
        + f"`{rel(path)}`.", "",
        md_table(["version", "N", "causal", "commit", "triton", *BACKWARD_STEP_COLUMNS, "backward ÷ sdpa_backward",
                  "autograd's own (backward − bwd_repeat)"],
                 [r[1] for r in rows])])


# ---------------------------------------------------------------- the library's calls against apply (issue 47)

API_STEPS = ("attention", "flash_attn_func")   # fa2triton.api's calls, timed beside apply on views of its inputs
API_TASK = "invoke host-steps --kernel v7_hopper --N 512,1024,2048,4096 --steps sdpa,apply,attention,flash_attn_func"


def api_verdict(apply: tuple, call: tuple) -> str:
    """A call's host µs against apply's, each (median, min, max) over one run's repeats: level when the two min–max
    ranges overlap (the difference is within the rows' spread), else by how much the call costs more or less."""
    (m0, lo0, hi0), (m1, lo1, hi1) = apply, call
    if lo1 <= hi0 and lo0 <= hi1:
        return "level (the ranges overlap)"
    d = m1 - m0
    return f"{'more' if d > 0 else 'less'} by {abs(d):.1f} µs ({100 * abs(d) / m0:.0f}%)"


def api_table(df: pd.DataFrame) -> list[dict]:
    """Per (version, N, causal) in registry order, the latest run (one date per timed block, host_steps.py) that timed
    apply beside an API step: {version, N, causal, times: {step: (median, min, max) µs}} for apply and those steps."""
    order = {v: i for i, v in enumerate(versions.NAMES)}
    df = df[df.step.isin(("apply", *API_STEPS))]
    date = df["date"].astype(str) if "date" in df else pd.Series("", index=df.index)
    out = []
    for (v, N, causal), g in df.assign(date=date).groupby(["version", "N", "causal"]):
        runs = [d for d, b in g.groupby("date") if "apply" in set(b.step) and set(API_STEPS) & set(b.step)]
        if not runs:
            continue
        by = latest_rows(g[g.date == max(runs)], ("step",)).set_index("step")
        times = {s: (float(by.us_median[s]), float(by.us_min[s]), float(by.us_max[s])) for s in by.index}
        out.append({"version": v, "N": int(N), "causal": int(causal), "times": times})
    return sorted(out, key=lambda r: (order.get(r["version"], len(order)), r["version"], r["causal"], r["N"]))


def section_api_host(gpu, root) -> str:
    title = "### attention() and flash_attn_func() against FlashAttentionTriton.apply (issue 47)"
    df, path = host_steps(gpu, root, latest=False)
    table = api_table(df) if df is not None else []
    if not table:
        return not_yet(title, API_TASK, path)
    rows, met = [], {s: [0, 0] for s in API_STEPS}
    for r in table:
        t, apply = r["times"], r["times"]["apply"]
        row = [r["version"], r["N"], "yes" if r["causal"] else "no", span(*apply, ".1f")]
        for s in API_STEPS:
            if s not in t:
                row += ["–", "–", "–"]
                continue
            said = api_verdict(apply, t[s])
            met[s][0] += not said.startswith("more")
            met[s][1] += 1
            row += [span(*t[s], ".1f"), fmt(t[s][0] - apply[0], "+.1f"), said]
        rows.append(row)
    goal = "; ".join(f"{s}() at {k} of {n}" for s, (k, n) in met.items() if n)
    return "\n".join([
        title,
        "Host µs per call, timed as the harness times host_us, each call interleaved with apply's in one run of "
        "profiling/host_steps.py on the same storage: apply on (B·H, N, D), attention() on its (B, H, N, D) view, "
        "flash_attn_func() on the (B, N, H, D) view, so the wrapper is all that differs. Median over the repeats "
        "(min–max), the latest run that timed them beside apply; verdict: level when the two rows' min–max ranges "
        "overlap, else by how much the call costs more or less than apply. Issue 47's goal, no more host time per call "
        f"than apply (level or less): {goal}. Source: `{rel(path)}`.", "",
        md_table(["version", "N", "causal", "apply", *(h for s in API_STEPS for h in (s, f"{s} − apply", "verdict"))],
                 rows)])
