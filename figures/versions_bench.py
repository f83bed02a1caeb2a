"""TFLOP/s per N for every version, SDPA (default backend) and SDPA's FLASH_ATTENTION backend, from
the bench protocol: medians over runs with min-max bars, one column per mask; below, each version's
% of SDPA (median of the per-run ratios, as the protocol reports it)."""

from __future__ import annotations

import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pandas as pd  # noqa: E402

from fa2lab import protocol, shapes  # noqa: E402
from figures import data, style  # noqa: E402

NAME = "versions_bench"


def series(df: pd.DataFrame) -> list[tuple[str, str, str, pd.DataFrame]]:
    """(key, label, colour, median/min/max TFLOP/s per N and mask) for every version and both SDPAs.
    SDPA is pooled over every version's runs (it ran in each of them)."""
    flop = data.flops(df)
    out = [(v, style.label_with_round(v), style.colour(v), data.spread(g, data.flops(g) / (g["ms"] * 1e-3) / 1e12))
           for v, g in df.groupby("version", sort=False)]
    out.append((data.SDPA, "SDPA (default backend)", style.SDPA_COLOUR,
                data.spread(df, flop / (df["sdpa_ms"] * 1e-3) / 1e12)))
    if "sdpa_flash_ms" in df.columns and df["sdpa_flash_ms"].notna().any():
        fa = df[df["sdpa_flash_ms"].notna()]
        out.append(("sdpa_flash", "SDPA, FLASH_ATTENTION backend", style.SDPA_FLASH_COLOUR,
                    data.spread(fa, data.flops(fa) / (fa["sdpa_flash_ms"] * 1e-3) / 1e12)))
    return out


def draw(gpu_slug: str, out_dir, results_root=None) -> list[Path]:
    df, paths = data.bench(gpu_slug, results_root)
    runs = df.groupby("version")["run_id"].nunique()
    summary = pd.DataFrame(protocol.summarise(df.to_dict("records")))
    lines = series(df)
    # a small shift along N (in octaves) per series, so that their bars do not hide each other
    offset = {key: 0.05 * (k - (len(lines) - 1) / 2) for k, (key, *_) in enumerate(lines)}
    fig, axes = style.figure(2, len(shapes.MASKS), panel=(5.6, 4.0), sharex=True)
    for j, causal in enumerate(shapes.MASKS):
        top, bottom = axes[0, j], axes[1, j]
        for key, lab, col, s in lines:
            s = s[s["causal"].astype(int) == int(causal)]
            dashed = {"linestyle": "--"} if key.startswith(data.SDPA) else {}
            style.errorbar(top, s["N"], s, offset[key], color=col, label=lab, **dashed)
        for v, s in summary[summary["causal"] == int(causal)].groupby("version", sort=False):
            s = s.rename(columns={"pct_of_sdpa": "median", "pct_min": "min", "pct_max": "max"})
            style.errorbar(bottom, s["N"], s, offset[v], color=style.colour(v), label=style.label_with_round(v))
        bottom.axhline(100, color=style.SDPA_COLOUR, linestyle="--", linewidth=1)
        top.set_title(f"{data.mask_name(causal)}")
        style.log_axis(top)
        top.set_ylabel("TFLOP/s (log scale)")
        bottom.set_ylabel("% of SDPA (default backend)")
        bottom.set_xlabel("sequence length N")
        style.log2_N_axis(bottom, shapes.SEQ_LENS)
    style.outer_labels_only(axes)
    axes[0, -1].legend(loc="center left", bbox_to_anchor=(1.02, 0.5))
    fig.suptitle(f"Every version against SDPA on {gpu_slug} (B=4, H=8, D=64, bf16): "
                 f"median of {style.runs_text(runs)} per version, bars min–max")
    return style.finish(fig, out_dir, NAME, [style.provenance_line(df, paths[0], "<version>.csv"), style.HOST_NOTE])


def main(argv=None) -> int:
    return style.main_for(draw, __doc__, argv)


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
