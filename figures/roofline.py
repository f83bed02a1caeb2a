"""Roofline of every kernel profiled under Nsight Compute (the article's Step 5, Roofline Tensor Core):
achieved operations per second against arithmetic intensity, one point per kernel at L1, L2 and DRAM,
one panel per profiled shape, from results/<gpu>/ncu/<tag>.csv (profiling/run_profile.py --tool ncu).

Operations: the algorithm's count (predicted_flops: 4·B·H·N²·D, halved for causal), not the tensor-core
operations the hardware executed; time: gpu__time_duration.sum; bytes: L1's LSU writeback (global, local and
shared loads into registers: derived__l1tex__lsu_writeback_bytes_mem_lgds, ncu's own L1 roofline level; the
operands wgmma reads straight from shared memory are not in it), L2 -> SM reads (l1tex__m_xbar2l1tex_read_bytes.sum)
and DRAM reads + writes (dram__bytes_read.sum + dram__bytes_write.sum).
The flat roof is the bf16-in, fp32-accumulate tensor-core peak, TENSOR_FLOP_PER_CLK_PER_SM x SMs x the SM
clock Nsight Compute measured during the kernels. Bandwidth slopes are drawn only where the export carries
the peak-bandwidth metrics (bytes per cycle x that unit's cycles per second: dram__bytes.sum.peak_sustained x
dram__cycles_elapsed, derived__lts__lts2xbar_bytes.sum.peak_sustained x lts__cycles_elapsed for L2,
derived__l1tex__lsu_writeback_bytes_mem_lgds.sum.peak_sustained x l1tex__cycles_elapsed for L1); nothing here
is a datasheet constant.

Every Triton version's kernel is called flash_fwd_kernel, and Nsight Compute's default kernel name
(the function name without namespace) can give SDPA's kernel the same name, so rows are matched to
versions by launch order: the drivers launch each version once, in registry order, then SDPA."""

from __future__ import annotations

import re
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from fa2lab import shapes  # noqa: E402
from fa2triton import gpu, versions  # noqa: E402
from figures import data, style  # noqa: E402

NAME = "roofline"
TRITON_KERNEL = "flash_fwd_kernel"            # the @triton.jit function of every version
TAG = re.compile(r"^(?P<who>.+)_N(?P<N>\d+)_(?P<mask>causal|noncausal)$")
# run_profile.py --kernel all leaves v2 out (it runs v1's kernel with v1's configurations)
ALL = tuple(n for n in versions.NAMES if n != "v2_autotune")
TIME = "gpu__time_duration.sum"
L2 = "l1tex__m_xbar2l1tex_read_bytes.sum"
DRAM = ("dram__bytes_read.sum", "dram__bytes_write.sum")
CLOCK = "sm__cycles_elapsed.avg.per_second"
L1 = "derived__l1tex__lsu_writeback_bytes_mem_lgds.sum.per_second"   # bytes/s; x duration = bytes
# (level, marker, label, peak bytes per cycle metrics (the first the export has), that unit's cycles per second)
LEVELS = (("L1", "^", "L1 → registers (LSU writeback)",
           ("derived__l1tex__lsu_writeback_bytes_mem_lgds.sum.peak_sustained",), "l1tex__cycles_elapsed.avg.per_second"),
          ("L2", "o", "L2 → SM reads", ("derived__lts__lts2xbar_bytes.sum.peak_sustained", "lts__t_bytes.sum.peak_sustained"),
           "lts__cycles_elapsed.avg.per_second"),
          ("DRAM", "s", "DRAM reads + writes", ("dram__bytes.sum.peak_sustained",),
           "dram__cycles_elapsed.avg.per_second"))


def label_rows(df: pd.DataFrame, path: Path) -> pd.DataFrame:
    """The rows of the file's last run, each with `who` (a version name or 'sdpa') and `run`.

    The file's name says which versions ran (<version>_N..., or all_N... for every version but v2);
    a run is those versions' flash_fwd_kernel rows in order, then SDPA's row(s); a flash_fwd_kernel after
    SDPA starts the next run (run_profile appends every run to the same file). Files written since
    run_profile names kernels by their NVTX range carry `version` and `run_id`: those are used instead."""
    if {"version", "run_id"} <= set(df.columns) and df["version"].notna().all() and (df["version"] != "").all():
        last = df[df["run_id"] == df["run_id"].iloc[-1]].copy()   # the copy: a wide read_csv frame is fragmented
        return last.assign(who=last["version"].astype(str), run=0)
    m = TAG.match(path.name.removesuffix(".csv"))
    if not m or (m["who"] != "all" and m["who"] not in versions.NAMES):
        raise data.ResultsError(f"results file {path}: cannot tell which version(s) ran from its name "
                                "(expected <version>_N<N>_<causal|noncausal>.csv or all_N...)")
    expected = ALL if m["who"] == "all" else (m["who"],)
    who, run, i, runs, after_sdpa = [], [], 0, 0, False
    for name in df["kernel"].astype(str).str.strip():
        triton = name == TRITON_KERNEL
        if triton and after_sdpa:          # the next run begins
            i, runs, after_sdpa = 0, runs + 1, False
        if triton and i < len(expected):
            who.append(expected[i])
            i += 1
        else:
            who.append(data.SDPA)
            after_sdpa = True
        run.append(runs)
    out = df.assign(who=who, run=run)
    return out[out["run"] == runs]


def points(df: pd.DataFrame, path: Path) -> pd.DataFrame:
    """Per labelled row: time (s), ops (predicted FLOPs), achieved TFLOP/s, and the intensity (FLOP/byte)
    at L2 and DRAM (NaN where the export has no value)."""
    t = data.metric(df, path, TIME)
    nan = pd.Series(np.nan, index=df.index)
    l2 = data.metric(df, path, L2, required=False)
    reads, writes = (data.metric(df, path, m, required=False) for m in DRAM)
    if l2 is None and (reads is None or writes is None):
        raise data.ResultsError(f"results file {path} lacks column {L2} [<unit>] and {' + '.join(DRAM)}: "
                                "no level to place the kernels at")
    l2 = nan if l2 is None else l2
    dram = nan if reads is None or writes is None else reads + writes
    l1_rate = data.metric(df, path, L1, required=False)
    l1 = nan if l1_rate is None else l1_rate * t
    ops = pd.to_numeric(df["predicted_flops"], errors="coerce")
    out = df[["who", "N", "causal"]].assign(ops=ops, seconds=t, tflops=ops / t / 1e12, intensity_L1=ops / l1,
                                            intensity_L2=ops / l2, intensity_DRAM=ops / dram,
                                            l1_bytes=l1, l2_bytes=l2, dram_bytes=dram)
    bad = out[~np.isfinite(out["tflops"]) | (out["seconds"] <= 0)]
    if len(bad):
        raise data.ResultsError(f"results file {path} has rows without a usable {TIME} or predicted_flops "
                                f"(kernels: {', '.join(sorted(set(bad['who'])))})")
    return out


def load(gpu_slug: str, results_root=None) -> tuple[pd.DataFrame, list[Path], pd.DataFrame]:
    """(points of every kernel and shape, the files read, their labelled rows). A kernel profiled for one
    shape in several files is taken from the first file in name order (all_N... before <version>_N...). Only the
    harness's head dimension (rows without a D column came before run_profile's --D): a file of another D is
    not read."""
    frames, rows, paths = [], [], []
    for df, path in data.ncu(gpu_slug, results_root):
        labelled = data.at_head_dim(label_rows(df, path))
        if labelled.empty:
            continue
        frames.append(points(labelled, path).assign(source=path.name))
        rows.append(labelled)
        paths.append(path)
    pts = pd.concat(frames, ignore_index=True)
    pts["causal"] = pts["causal"].astype(int)
    pts = pts.drop_duplicates(["who", "N", "causal"], keep="first")
    return pts, paths, pd.concat(rows, ignore_index=True)


def _first(rows: pd.DataFrame, *columns):
    for c in columns:
        if c in rows.columns and rows[c].notna().any():
            return rows[c].dropna().iloc[-1], c
    return None, None


def roof_parts(rows: pd.DataFrame, path: Path, gpu_slug: str, results_root=None) -> dict:
    """What the tensor-core roof is made of, for the labelled ncu rows: arch and sms from the rows' provenance
    columns (or the export's device__attribute_* metrics), else from this GPU's harness rows (facts_path says which
    file); clock_mhz, the median sm__cycles_elapsed.avg.per_second ncu measured (clock_range: its min and max), else
    the rows' max_sm_clock_mhz (clock_range None); peak (TFLOP/s) and rate (FLOP/clock/SM), or peak None and
    `why`."""
    arch, _ = _first(rows, "arch")
    major, minor = (data.metric(rows, path, f"device__attribute_compute_capability_{x}", required=False)
                    for x in ("major", "minor"))
    if arch is None and major is not None and minor is not None and (major + minor).notna().any():
        arch = f"sm_{int(major.dropna().iloc[-1])}{int(minor.dropna().iloc[-1])}"
    sms, _ = _first(rows, "sm_count")
    count = data.metric(rows, path, "device__attribute_multiprocessor_count", required=False)
    if sms is None and count is not None and count.notna().any():
        sms = count.dropna().iloc[-1]
    facts_path = None
    if arch is None or sms is None:
        facts, facts_path = data.device_facts(gpu_slug, results_root)
        arch = arch if arch is not None else facts.get("arch")
        sms = sms if sms is not None else facts.get("sm_count")
    clock_hz = data.metric(rows, path, CLOCK, required=False)
    clock_range = None
    if clock_hz is not None and clock_hz.notna().any():
        clock_mhz = float(clock_hz.median()) / 1e6
        clock_range = (float(clock_hz.min()) / 1e6, float(clock_hz.max()) / 1e6)
    else:
        clock_mhz, _ = _first(rows, "max_sm_clock_mhz")
        if clock_mhz is None:
            clock_mhz = data.device_facts(gpu_slug, results_root)[0].get("max_sm_clock_mhz")
    parts = {"arch": arch, "sms": sms, "clock_mhz": float(clock_mhz) if clock_mhz else None,
             "clock_range": clock_range, "facts_path": facts_path, "peak": None, "rate": None}
    if arch is None or sms is None or not clock_mhz:
        return {**parts, "why": "the export has no architecture, SM count or SM clock, and no harness rows of this "
                                "GPU give them"}
    try:
        peak = data.tensor_peak_tflops(str(arch), float(sms), float(clock_mhz))
    except data.ResultsError as e:
        return {**parts, "why": str(e)}
    m = re.fullmatch(r"sm_(\d+)(\d)", str(arch))
    return {**parts, "peak": peak, "rate": gpu.TENSOR_FLOP_PER_CLK_PER_SM[(int(m[1]), int(m[2]))]}


def roof(rows: pd.DataFrame, path: Path, gpu_slug: str, results_root=None) -> tuple[float | None, str]:
    """(tensor-core peak in TFLOP/s or None, how it was obtained, in a sentence) for the labelled ncu rows
    (roof_parts)."""
    r = roof_parts(rows, path, gpu_slug, results_root)
    if r["peak"] is None:
        return None, f"No tensor-core roof: {r['why']}"
    if r["clock_range"] is not None:
        lo, hi = r["clock_range"]
        clock_note = (f"{r['clock_mhz']:.0f} MHz, the median SM clock Nsight Compute measured during these kernels "
                      f"({lo:.0f}–{hi:.0f} MHz)")
    else:
        clock_note = f"{r['clock_mhz']:.0f} MHz, the GPU's maximum SM clock (NVML)"
    facts_note = ("" if r["facts_path"] is None else f"; architecture and SM count from "
                  f"results/{gpu_slug}/bench/{r['facts_path'].name} (same GPU)")
    return r["peak"], (f"Tensor-core peak (bf16 in, fp32 accumulate) {r['peak']:.0f} TFLOP/s = {r['rate']} "
                       f"FLOP/clock/SM ({r['arch']}, fa2triton.gpu) × {int(r['sms'])} SMs × {clock_note}{facts_note}")


def bandwidths(rows: pd.DataFrame, path: Path) -> dict[str, float]:
    """Peak bandwidth (bytes/s) per level where the export carries both metrics (median over rows)."""
    out = {}
    for level, _, _, per_cycle, cycles in LEVELS:
        b = data.metric(rows, path, cycles, required=False)
        for name in per_cycle:
            a = data.metric(rows, path, name, required=False)
            if a is not None and b is not None and (a * b).notna().any():
                out[level] = float((a * b).median())
                break
    return out


def _who_label(who: str) -> str:
    return style.label_with_round(who) if who in versions.NAMES or who == data.SDPA else who


ROOF_GID = "roof"     # gid of the roof labels' text artists: roof:tensor, roof:<level>
ROOF_GAP = 3.0        # every slope enters its panel at least this factor below the tensor-core roof
ENTRY_ROOM = 2.5      # and this factor above the panel's bottom (room for its label under the entry)
LABEL_PAD_PX = 3      # the least gap between two roof labels (pixels, at the figure's dpi)


def panel_kernels(who) -> str:
    """What one panel holds, for its title: 'every version but v2 (it runs v1's kernel), and SDPA', or 'only
    v7 hopper and SDPA profiled at this shape'."""
    kernels = [w for w in who if w != data.SDPA]
    sdpa = data.SDPA in who
    if set(ALL) <= set(kernels):
        return "every version but v2 (it runs v1's kernel)" + (", and SDPA" if sdpa else "")
    names = [style.label(w) if w in versions.NAMES else w for w in kernels] + (["SDPA"] if sdpa else [])
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    return f"only {listed} profiled at this shape"


def roof_labels(ax) -> list:
    """The roof labels (text artists) drawn in one panel: the tensor-core roof's first, then one per slope."""
    texts = [t for t in ax.texts if str(t.get_gid() or "").startswith(ROOF_GID + ":")]
    return sorted(texts, key=lambda t: t.get_gid() != f"{ROOF_GID}:tensor")


def separate_labels(fig):
    """In the drawn layout, move any slope label that would overlap a roof label above it (or the tensor-core
    roof's) down until it does not: labels are placed at the slopes' entries, which two close bandwidths put
    within a text height of each other."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        labels = roof_labels(ax)
        if not labels:
            continue
        fixed = [t for t in labels if t.get_gid() == f"{ROOF_GID}:tensor"]
        placed = [t.get_window_extent(renderer) for t in fixed]
        for t in sorted((t for t in labels if t not in fixed), key=lambda t: -t.get_window_extent(renderer).y1):
            box = t.get_window_extent(renderer)
            while hit := [b for b in placed if box.overlaps(b)]:
                x, y = ax.transData.transform(t.get_position())
                dy = box.y1 - min(b.y0 for b in hit) + LABEL_PAD_PX
                t.set_position(ax.transData.inverted().transform((x, y - dy)))
                box = t.get_window_extent(renderer)
            placed.append(box)


def _panel_points(p: pd.DataFrame, order) -> list[tuple[str, str, float, float]]:
    """(who, marker, intensity, TFLOP/s) of every point one panel draws."""
    out = []
    for who in order:
        r = p[p["who"] == who]
        for level, marker, *_ in LEVELS:
            if not r.empty and np.isfinite(r[f"intensity_{level}"].iloc[0]):
                out.append((who, marker, float(r[f"intensity_{level}"].iloc[0]), float(r["tflops"].iloc[0])))
    return out


def _footnote(gpu_slug: str, parts: dict, bw: dict, paths: list[Path], rows: pd.DataFrame) -> str:
    """Two lines: what the axes and markers count; where the roofs and the points come from."""
    what = ("Bytes: L1 = loads into registers through L1 (LSU writeback; not wgmma's operands from shared memory: "
            "the far-right triangles), L2 = L2 → SM reads, DRAM = reads + writes; FLOP = 4·B·H·N²·D, halved for causal.")
    if parts["peak"] is None:
        roofs = f"No tensor-core roof: {parts['why']}"
    else:
        clock = "median SM clock under ncu" if parts["clock_range"] is not None else "the GPU's maximum SM clock"
        roofs = (f"Roof: {parts['peak']:.0f} TFLOP/s = {parts['rate']} FLOP/clock/SM ({parts['arch']}) × "
                 f"{int(parts['sms'])} SMs × {parts['clock_mhz']:.0f} MHz ({clock})")
    missing = [lev for lev, *_ in LEVELS if lev not in bw]
    roofs += "; slopes: ncu's peak bandwidths" + (f" (none for {', '.join(missing)}: not in the export)"
                                                  if missing else "") + "."
    named = {"version", "run_id"} <= set(rows.columns)
    prov = [part for part in style.provenance_line(rows, paths[0]).split("; ")[1:]
            if part.split(" ", 1)[0] in ("triton", "torch")]
    source = (f"Source: results/{gpu_slug}/ncu/ ({len(paths)} file{'s' if len(paths) > 1 else ''}, last run of "
              f"each, kernels by {'NVTX range' if named else 'launch order'})")
    return what + "\n" + roofs + " " + "; ".join([source, *prov])


def build(gpu_slug: str, results_root=None):
    """The roofline figure, not yet saved: a grid of panels (two a row), one per profiled shape."""
    pts, paths, rows = load(gpu_slug, results_root)
    parts = roof_parts(rows, paths[0], gpu_slug, results_root)
    peak = parts["peak"]
    bw = bandwidths(rows, paths[0])
    shapes_ = sorted(set(zip(pts["N"], pts["causal"])))
    order = [w for w in (*versions.NAMES, data.SDPA) if w in set(pts["who"])]
    panels = []
    for N, causal in shapes_:
        p = pts[(pts["N"] == N) & (pts["causal"] == causal)]
        drawn = _panel_points(p, order)
        xs = [x for *_, x, _ in drawn]
        lo, hi = min(xs) / 4, max(xs) * 4
        if peak is not None and bw:   # every slope enters from the left edge, well under the roof
            lo = min(lo, peak * 1e12 / (ROOF_GAP * max(bw.values())))
        panels.append((N, causal, drawn, lo, hi))
    ys = [y for *_, drawn, _, _ in panels for *_, y in drawn] + ([peak] if peak is not None else [])
    ymin = min(ys) / 3
    if bw:
        ymin = min([ymin] + [min(bw.values()) * lo / 1e12 / ENTRY_ROOM for *_, lo, _ in panels])
    ylim = (ymin, max(ys) * 1.8)

    ncols = 1 if len(panels) == 1 else 2
    nrows = -(-len(panels) // ncols)
    fig, axes = style.figure(nrows, ncols, panel=(6.8, 4.4), sharey=True)
    for ax in axes.flat[len(panels):]:
        ax.set_visible(False)
    label_box = {"boxstyle": "square,pad=0.15", "facecolor": "white", "edgecolor": "none", "alpha": 0.85}
    for ax, (N, causal, drawn, lo, hi) in zip(axes.flat, panels):
        for who, marker, x, y in drawn:
            ax.plot(x, y, marker=marker, linestyle="none", markersize=7, color=style.colour(who),
                    markeredgecolor="white", markeredgewidth=0.6)
        if peak is not None:
            ax.axhline(peak, color="0.2", linewidth=1.6)
            ax.text(hi / 1.15, peak * 1.05, f"tensor-core peak {peak:.0f} TFLOP/s", fontsize=8, ha="right",
                    va="bottom", gid=f"{ROOF_GID}:tensor", in_layout=False)
        for level, bytes_per_s in bw.items():
            x = np.geomspace(lo, hi, 200)
            y = bytes_per_s * x / 1e12
            keep = y <= (peak if peak is not None else np.inf)
            ax.plot(x[keep], y[keep], color="0.45", linestyle="--", linewidth=1)
            if keep.any():   # under the slope's entry at the left edge
                ax.text(x[keep][0] * 1.12, y[keep][0], f"{level} peak {bytes_per_s / 1e12:.1f} TB/s (ncu)",
                        fontsize=7.5, color="0.3", ha="left", va="top", bbox=label_box, gid=f"{ROOF_GID}:{level}",
                        in_layout=False)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, hi)
        ax.set_ylim(*ylim)
        ax.set_xlabel("arithmetic intensity (algorithm's FLOP / byte)")
        ax.set_ylabel("achieved TFLOP/s (algorithm's FLOPs / ncu duration)")
        config = sorted({str(c) for c in rows[(rows["N"] == N) & (rows["causal"].astype(int) == causal)]
                         .get("config", pd.Series(dtype=object)).dropna() if str(c).strip()})
        ax.set_title(f"N = {N}, {data.mask_name(causal)}\n{panel_kernels(dict.fromkeys(w for w, *_ in drawn))}"
                     + (f"\nconfiguration {', '.join(config)} pinned" if config else ""))
    style.outer_labels_only(axes)
    handles = [Line2D([], [], color=style.colour(w), marker="o", linestyle="none", markersize=7,
                      label=_who_label(w)) for w in order]
    handles += [Line2D([], [], color="0.4", marker=marker, linestyle="none", markersize=7, markerfacecolor="none",
                       label=f"{lab} (marker)") for _, marker, lab, *_ in LEVELS]
    fig.legend(handles=handles, loc="outside right center")
    fig.suptitle(f"Roofline of each kernel under Nsight Compute on {gpu_slug} "
                 f"(B={shapes.BATCH}, H={shapes.HEADS}, D={shapes.HEAD_DIM}, bf16)")
    style.footnote(fig, _footnote(gpu_slug, parts, bw, paths, rows))
    separate_labels(fig)
    return fig


def draw(gpu_slug: str, out_dir, results_root=None) -> list[Path]:
    return style.save(build(gpu_slug, results_root), out_dir, NAME)


def main(argv=None) -> int:
    return style.main_for(draw, __doc__, argv)


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
