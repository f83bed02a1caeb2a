"""Timeline of the profiled region from torch.profiler (where Nsight Systems is not available): GPU kernels as
bars on a time axis, one row per CUDA stream, under a row of the CPU's record_function ranges
('<version> N=... causal=...', 'sdpa N=... causal=...'); each kernel coloured by the range its launch ran in.
From the newest results/<gpu>/torch/<tag>.trace.json (profiling/run_profile.py --tool torch, written by
torch.profiler's export_chrome_trace).

A kernel ("cat": "kernel") is matched to its launch by args.correlation: the CUDA runtime or driver call
("cat": "cuda_runtime" / "cuda_driver", e.g. cudaLaunchKernel, cuLaunchKernelEx) with the same correlation,
else the start of the "ac2g" flow with that id; the range is the innermost user_annotation on the launching
thread that encloses the launch."""

from __future__ import annotations

import re
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

from fa2triton import versions  # noqa: E402
from figures import data, style  # noqa: E402

NAME = "timeline"
RANGE = re.compile(r"^(?P<who>\S+) N=(?P<N>\d+) causal=(?P<causal>[01])$")   # profiling.drivers.range_name
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")
NO_RANGE = "no enclosing range"
NO_RANGE_COLOUR = "0.7"


def _float(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def _key(x):
    """Correlation and flow ids as one hashable type (ints in torch's traces; strings tolerated)."""
    try:
        return int(x)
    except (TypeError, ValueError):
        return str(x)


def parse(events: list[dict], path: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(kernels, ranges) of a Chrome trace, times in µs as the trace has them.

    ranges: who, name, pid, tid, start, end (user_annotation events named like the drivers' ranges).
    kernels: name, device, stream, start, end, correlation, launch ('runtime', 'flow' or ''), range, who."""
    complete = [e for e in events if e.get("ph") == "X" and _float(e.get("ts")) is not None
                and _float(e.get("dur")) is not None]
    ranges = pd.DataFrame([{"who": m["who"], "name": e["name"], "pid": e.get("pid"), "tid": e.get("tid"),
                            "start": _float(e["ts"]), "end": _float(e["ts"]) + _float(e["dur"])}
                           for e in complete if e.get("cat") == "user_annotation"
                           and (m := RANGE.match(str(e.get("name", ""))))],
                          columns=["who", "name", "pid", "tid", "start", "end"])
    launches = {_key(e["args"]["correlation"]): e for e in complete
                if e.get("cat") in LAUNCH_CATS and "correlation" in (e.get("args") or {})}
    flows = {_key(e["id"]): e for e in events
             if e.get("ph") == "s" and e.get("cat") == "ac2g" and "id" in e and _float(e.get("ts")) is not None}
    rows = []
    for e in complete:
        if e.get("cat") != "kernel":
            continue
        args = e.get("args") or {}
        corr = _key(args.get("correlation")) if "correlation" in args else None
        src, how = (launches[corr], "runtime") if corr in launches else (
            (flows[corr], "flow") if corr in flows else (None, ""))
        rng = _enclosing(ranges, src) if src is not None else None
        rows.append({"name": str(e.get("name", "")), "device": args.get("device", e.get("pid")),
                     "stream": args.get("stream", e.get("tid")), "start": _float(e["ts"]),
                     "end": _float(e["ts"]) + _float(e["dur"]), "correlation": corr, "launch": how,
                     "range": "" if rng is None else rng["name"], "who": "" if rng is None else rng["who"]})
    if not rows:
        raise data.ResultsError(f"results file {path} has no GPU kernel events (\"cat\": \"kernel\"): was it "
                                "recorded on a GPU with ProfilerActivity.CUDA?")
    return pd.DataFrame(rows), ranges


def _enclosing(ranges: pd.DataFrame, launch: dict):
    """The innermost range enclosing the launch's start, on the launching thread if one there does."""
    ts = _float(launch.get("ts"))
    inside = ranges[(ranges["start"] <= ts) & (ranges["end"] >= ts)]
    same = inside[(inside["pid"] == launch.get("pid")) & (inside["tid"] == launch.get("tid"))]
    inside = same if len(same) else inside
    if inside.empty:
        return None
    return inside.loc[(inside["end"] - inside["start"]).idxmin()]


def colour(who: str) -> str:
    if who in versions.NAMES or who == data.SDPA:
        return style.colour(who)
    return NO_RANGE_COLOUR if not who else "0.45"


def label(who: str) -> str:
    if who in versions.NAMES or who == data.SDPA:
        return style.label(who)
    return who or NO_RANGE


def short_name(kernel: str) -> str:
    """'void pytorch_flash::flash_fwd_kernel<...>(Flash_fwd_params)' -> 'pytorch_flash::flash_fwd_kernel'."""
    name = re.sub(r"^void ", "", kernel.strip())
    depth, out = 0, []
    for ch in name:   # drop template arguments and parameters
        if ch in "<(":
            depth += 1
        elif ch in ">)":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out).strip() or kernel


def short_label(who: str) -> str:
    return "SDPA" if who == data.SDPA else (who.split("_")[0] if who else "?")


def _bars(ax, y, rows, t0, span_ms, fit_ms):
    """One row of bars (µs rows -> ms), coloured by range; a bar too narrow to see is drawn as a line of its
    colour; bars at least fit_ms wide carry their short label and duration."""
    for r in rows.itertuples():
        start, width = (r.start - t0) / 1e3, (r.end - r.start) / 1e3
        ax.broken_barh([(start, width)], (y - 0.36, 0.72), facecolors=colour(r.who), edgecolor="white",
                       linewidth=0.4)
        if width < 2e-3 * span_ms:
            ax.plot([start, start], [y - 0.36, y + 0.36], color=colour(r.who), linewidth=0.8)
        elif width >= fit_ms:
            ax.text(start + width / 2, y, f"{short_label(r.who)}\n{width:.2f} ms", ha="center", va="center",
                    fontsize=7, color="white" if r.who else "black", clip_on=True)


def launches(events: list[dict], kernels: pd.DataFrame, ranges: pd.DataFrame) -> pd.DataFrame:
    """The launch calls that launched a kernel, with the range they ran in (who) and their times (µs)."""
    corr = set(kernels["correlation"].dropna())
    rows = []
    for e in events:
        args = e.get("args") or {}
        if (e.get("ph") == "X" and e.get("cat") in LAUNCH_CATS and "correlation" in args
                and _key(args["correlation"]) in corr and _float(e.get("ts")) is not None):
            rng = _enclosing(ranges, e)
            rows.append({"start": _float(e["ts"]), "end": _float(e["ts"]) + (_float(e.get("dur")) or 0.0),
                         "who": "" if rng is None else rng["who"]})
    return pd.DataFrame(rows, columns=["start", "end", "who"])


def draw(gpu_slug: str, out_dir, results_root=None) -> list[Path]:
    events, path = data.torch_trace(gpu_slug, results_root)
    kernels, ranges = parse(events, path)
    calls = launches(events, kernels, ranges)
    t0 = min([kernels["start"].min()] + ([ranges["start"].min()] if len(ranges) else []))
    span_ms = (max([kernels["end"].max()] + ([ranges["end"].max()] if len(ranges) else [])) - t0) / 1e3
    cpu_rows = sorted({(p, t) for p, t in zip(ranges["pid"], ranges["tid"])}, key=str)
    gpu_rows = sorted({(d, s) for d, s in zip(kernels["device"], kernels["stream"])}, key=str)
    labels = [f"CPU: record_function ranges{f' (thread {t})' if len(cpu_rows) > 1 else ''}" for _, t in cpu_rows]
    labels += [f"GPU {d}, stream {s}: kernels" for d, s in gpu_rows]
    zoom = len(ranges) > 0
    fig, axes = style.figure(2 if zoom else 1, 1, panel=(13.0, 2.2),
                             gridspec_kw={"height_ratios": [0.5 + 0.75 * len(labels), 1.7]} if zoom else {})
    ax = axes[0, 0]
    fit = 0.04 * span_ms
    for y, (p, t) in enumerate(cpu_rows):
        _bars(ax, y, ranges[(ranges["pid"] == p) & (ranges["tid"] == t)], t0, span_ms, fit)
    for k, (d, s) in enumerate(gpu_rows):
        _bars(ax, len(cpu_rows) + k, kernels[(kernels["device"] == d) & (kernels["stream"] == s)], t0, span_ms, fit)
    ax.set_yticks(range(len(labels)), labels)
    ax.set_ylim(len(labels) - 0.5, -0.5)
    ax.set_xlim(-0.01 * span_ms, 1.01 * span_ms)
    ax.set_xlabel("time since the first range or kernel (ms)")
    ax.grid(axis="y", visible=False)
    if zoom:   # the CPU side, where the ranges are too short to see next to the kernels
        lo, hi = (ranges["start"].min() - t0) / 1e3, (ranges["end"].max() - t0) / 1e3
        pad = 0.02 * (hi - lo)
        ax.axvspan(lo - pad, hi + pad, color="0.9", zorder=0)
        zax = axes[1, 0]
        _bars(zax, 0, ranges, t0, hi - lo, 0.045 * (hi - lo))
        _bars(zax, 1, calls, t0, hi - lo, np.inf)
        zax.set_yticks([0, 1], ["CPU: record_function ranges", "CPU: launch calls\n(runtime / driver API)"])
        zax.set_ylim(1.5, -0.5)
        zax.set_xlim(lo - pad, hi + pad)
        zax.set_xlabel("time since the first range or kernel (ms), zoomed to the CPU ranges (grey band above)")
        zax.grid(axis="y", visible=False)
    present = set(kernels["who"]) | set(ranges["who"])
    order = [w for w in (*versions.NAMES, data.SDPA) if w in present]
    order += sorted(w for w in present if w and w not in order) + ([""] if "" in present else [])
    fig.legend(handles=[Patch(color=colour(w), label=label(w)) for w in order], loc="outside right upper",
               title="range (colour)")
    shapes_ = sorted({(int(m["N"]), int(m["causal"])) for m in map(RANGE.match, ranges["name"])})
    what = ", ".join(f"N = {N}, {data.mask_name(c)}" for N, c in shapes_) or "no ranges"
    fig.suptitle(f"torch.profiler timeline on {gpu_slug} ({what})\n"
                 "each kernel coloured by the record_function range it was launched in")
    matched = kernels["launch"].value_counts()
    names = ", ".join(sorted({short_name(n) for n in kernels["name"]}))
    note = [f"source: results/{gpu_slug}/torch/{path.name} (the newest trace there); {len(kernels)} kernels: "
            f"{matched.get('runtime', 0)} matched to their launch call by args.correlation, "
            f"{matched.get('flow', 0)} by the ac2g flow, {int((kernels['launch'] == '').sum())} not matched; "
            f"{int((kernels['who'] == '').sum())} outside any range",
            f"kernels: {names}",
            "A CPU range ends when its call returns; launches are asynchronous, so the GPU bars, not the CPU ones, "
            "are the kernels' time."]
    return style.finish(fig, out_dir, NAME, note)


def main(argv=None) -> int:
    return style.main_for(draw, __doc__, argv)


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
