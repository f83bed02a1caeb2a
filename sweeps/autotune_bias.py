"""Round 3: does the autotuner pick right after an idle GPU? (`invoke autotune-bias`).

v5's candidates for this GPU, at the harness's first shape (N = 512, non-causal) by default.
For each setting (plain; one second of GPU warm-up first; 5x longer timing per candidate),
`--processes` fresh processes each pause `--pause` seconds (the GPU idles and its clock
drops), autotune once, and report what they picked and how they timed each candidate.
A last process times every candidate carefully on a warm GPU. One row per process to
results/<gpu>/tuning/autotune_bias.csv; rerunning continues.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SETTINGS = {"plain": {}, "warmup": {"warmup": 1}, "long_bench": {"long_bench": 1}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--processes", type=int, default=10)
    ap.add_argument("--pause", type=float, default=20.0, help="idle seconds before tuning (the article's 20)")
    ap.add_argument("--N", type=int, default=512)
    ap.add_argument("--causal", type=int, default=0)
    args = ap.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("autotune-bias needs a CUDA GPU; results/<gpu>/tuning/autotune_bias.csv holds the H200's",
              file=sys.stderr)
        return 2
    from fa2lab.provenance import environment, now
    from fa2lab.results import append_rows, gpu_dir, read_csv
    from fa2lab.switches import load

    candidates = ";".join(c.key for c in load("v5_final").CANDIDATES)
    out = gpu_dir() / "tuning" / "autotune_bias.csv"
    have = read_csv(out) if out.exists() else None
    base = {"N": args.N, "causal": args.causal, "configs": candidates}
    from fa2lab.autotuning import run_child

    for setting, extra in SETTINGS.items():
        done = 0 if have is None else int(((have["setting"] == setting) & (have["N"] == args.N)).sum())
        for i in range(done, args.processes):
            r = run_child("bias", pause=args.pause, N=args.N, causal=args.causal, configs=candidates, **extra)
            append_rows(out, [{"setting": setting, "process": i, **base, "picked": r["picked"],
                               "timings_ms": json.dumps(r["timings_ms"]), "pause_s": args.pause,
                               "date": now(), **environment()}])
            print(f"{setting:>10} #{i}: picked {r['picked']}", flush=True)
    if have is None or not (have["setting"] == "careful").any():
        r = run_child("careful", N=args.N, causal=args.causal, configs=candidates)
        best = min(r["careful_ms"], key=r["careful_ms"].get)
        append_rows(out, [{"setting": "careful", "process": 0, **base, "picked": best,
                           "timings_ms": json.dumps(r["careful_ms"]), "pause_s": 0, "date": now(), **environment()}])
        print(f"careful timing: best {best}; {r['careful_ms']}")
    return 0


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
