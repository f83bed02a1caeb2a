"""The harness table of every version beside the article's Ada table, and what each round was worth at N = 4096."""

from __future__ import annotations


import pandas as pd

from fa2triton import versions
from figures import data
from report.tables import ada_ms, fmt, get, md_table, optional, rel, span


# ---------------------------------------------------------------- sections

def section_versions(gpu, root, summary, paths, ref, ref_path) -> str:
    names = [v.name for v in versions.VERSIONS if v.name in set(summary.version)]
    rows = []
    for causal in (0, 1):
        for N in sorted(set(summary.N)):
            r = [N, "yes" if causal else "no"]
            for v in names:
                r.append(f"{get(summary, v, N, causal, 'ms'):.3f} ({get(summary, v, N, causal, 'pct'):.0f}%)")
            r.append(f"{get(summary, names[0], N, causal, 'sdpa_ms'):.3f}")
            rows.append(r)
    runs = int(summary.runs.max())
    text = [f"### Every version, the unchanged harness ({gpu})",
            f"Median ms over {runs} interleaved run(s) of the latest protocol, and in brackets the median of "
            "each run's own ratio to SDPA (default backend, same process). Source: "
            + (f"`{rel(paths[0].parent)}/<version>.csv`." if paths else "–."), "",
            md_table(["N", "causal", *names, "SDPA"], rows)]
    N = 4096 if 4096 in set(summary.N) else max(summary.N)
    srows = []
    for v in names:
        r = [v, fmt(get(summary, v, N, 0, "runs"), ".0f")]
        for causal in (0, 1):
            r += [span(get(summary, v, N, causal, "ms"), get(summary, v, N, causal, "ms_min"),
                       get(summary, v, N, causal, "ms_max"), ".3f"),
                  span(get(summary, v, N, causal, "pct"), get(summary, v, N, causal, "pct_min"),
                       get(summary, v, N, causal, "pct_max"), ".0f", "%"),
                  fmt(get(summary, v, N, causal, "pct_fa") if "pct_fa" in summary else float("nan"), ".0f", "%")]
        srows.append(r)
    text += ["", f"The spread over the runs at N = {N}: median (min–max) of the ms and of each run's own ratio to "
             "SDPA's default backend, and the median ratio to the FLASH_ATTENTION backend (same files).", "",
             md_table(["version", "runs", "ms, non-causal", "% of SDPA", "% of FLASH", "ms, causal", "% of SDPA",
                       "% of FLASH"], srows)]
    if ref is not None:
        arows = []
        for causal in (0, 1):
            for N in sorted(set(ref.N)):
                arows.append([N, "yes" if causal else "no"] + [ada_ms(ref, v, N, causal) for v in names]
                             + [ada_ms(ref, data.SDPA, N, causal)])
        text += ["", f"The article's table on the RTX 4070 SUPER (ms, medians of ten runs; `{rel(ref_path)}`):", "",
                 md_table(["N", "causal", *names, "SDPA"], arows)]
    return "\n".join(text)


ROUNDS = [("Tiles, warps and stages", "v0_baseline", "v1_tiles"),
          ("Autotuning the v1 configurations", "v1_tiles", "v2_autotune"),
          ("Causal tile-skipping", "v1_tiles", "v3_causal_skip"),
          ("exp2", "v3_causal_skip", "v4_exp2"),
          ("Re-tuning with autotune", "v4_exp2", "v5_final"),
          ("Longest-first launch order", "v5_final", "v6_longest_first"),
          ("TMA descriptors, next Q Kᵀ issued before the softmax (candidate)", "v6_longest_first", "v7_hopper")]


def speedup(summary, ref, a, b, causal, N=4096):
    ours = get(summary, a, N, causal, "ms") / get(summary, b, N, causal, "ms")
    theirs = ada_ms(ref, a, N, causal) / ada_ms(ref, b, N, causal)
    return ours, theirs


def configs_note(gpu, root) -> str:
    """Which configurations v1–v4 ran in the harness: those picked from the Round 1 sweep of v0_baseline if
    its picks file is older than every run of the latest protocol, else provisional ones (from the dates)."""
    picks_path = data.root(root) / gpu / "sweep" / "v0_baseline.picks.csv"
    picks = optional(picks_path, ("role", "config", "date"))
    if picks is None:
        return ("The Round 1 sweep of v0_baseline has not run on this GPU, so v1–v4 use provisional "
                "configurations (their configs.json says which), and the rounds up to v4 compare those.")
    bench, _ = data.bench(gpu, root)
    picked = pd.to_datetime(picks["date"], utc=True, errors="coerce").max()
    first = pd.to_datetime(bench["date"], utc=True, errors="coerce").min() if "date" in bench else pd.NaT
    if pd.isna(picked) or pd.isna(first):
        return (f"The Round 1 picks (`{rel(picks_path)}`) or the harness rows carry no date, so whether v1–v4 ran "
                "the swept configurations cannot be told from the files.")
    if first > picked:
        return (f"The latest protocol's runs come after the Round 1 picks (`{rel(picks_path)}`, by the files' "
                "dates), so v1–v4 ran the configurations picked "
                "from this GPU's v0_baseline sweep.")
    return (f"The latest protocol's runs predate the Round 1 picks (`{rel(picks_path)}`, by the files' dates), "
            "so v1–v4 ran provisional configurations.")


def section_rounds(gpu, root, summary, paths, ref) -> str:
    rows = []
    for label, a, b in ROUNDS:
        if a not in set(summary.version) or b not in set(summary.version):
            continue
        nc, nc_ada = speedup(summary, ref, a, b, 0)
        c, c_ada = speedup(summary, ref, a, b, 1)
        rows.append([label, f"{a} → {b}", fmt(nc, ".2f", "×"), fmt(c, ".2f", "×"), fmt(nc_ada, ".2f", "×"),
                     fmt(c_ada, ".2f", "×")])
    return "\n".join(["### What each round was worth at N = 4096",
                      "Ratio of median times (ours from the harness files above; Ada's from the article's table, "
                      "which has no v6 or v7). " + configs_note(gpu, root), "",
                      md_table(["change", "versions", "ours, non-causal", "ours, causal", "Ada, non-causal",
                                "Ada, causal"], rows)])
