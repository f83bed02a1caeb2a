"""Round 3: what @triton.autotune costs (`invoke compile-cost`).

For 1, 2, 4, 8 and 16 of the sweep's configurations (ranked by their worst shape), in fresh
processes: first with an empty TRITON_CACHE_DIR, then again with the cache that run left on
disk; each with and without cache_results=True. Each process times its first call
(N = 4096), each new N (2048, 1024, 512) and the first causal call. One row per process to
results/<gpu>/tuning/compile_cost.csv; rerunning skips what is there.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--counts", default="1,2,4,8,16")
    ap.add_argument("--sweep", default="", help="sweep CSV to rank from (default results/<gpu>/sweep/v4_exp2.csv)")
    args = ap.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("compile-cost needs a CUDA GPU; results/<gpu>/tuning/compile_cost.csv holds the H200's", file=sys.stderr)
        return 2
    from fa2lab.provenance import environment, now
    from fa2lab.results import append_rows, gpu_dir, read_csv
    from fa2lab.autotuning import ranked_configs, run_child

    out = gpu_dir() / "tuning" / "compile_cost.csv"
    done = set()
    if out.exists():
        df = read_csv(out)
        done = {(int(r.n_configs), int(r.cache_results), r.cache) for r in df.itertuples()}
    sweep = args.sweep or gpu_dir() / "sweep" / "v4_exp2.csv"
    counts = [int(k) for k in args.counts.split(",")]
    ranked = ranked_configs(sweep, max(counts))
    for k in counts:
        configs = ";".join(c.key for c in ranked[:k])
        for cache_results in (0, 1):
            cache_dir = tempfile.mkdtemp(prefix="triton-cost-")
            for cache in ("empty", "on_disk"):
                if (k, cache_results, cache) in done:
                    continue
                env = dict(os.environ, TRITON_CACHE_DIR=cache_dir)
                t = run_child("cost", env=env, configs=configs, cache_results=cache_results)
                row = {"n_configs": k, "configs": configs, "cache_results": cache_results, "cache": cache,
                       **{f"{key}": round(v, 4) for key, v in t.items()}, "date": now(), **environment()}
                append_rows(out, [row])
                print(f"{k:>2} configs, cache_results={cache_results}, {cache:>7} cache: first call "
                      f"{t['first_4096']:.2f} s, new N {t['new_2048']:.2f} s, first causal {t['first_causal_4096']:.2f} s",
                      flush=True)
    print(f"rows in {out}")
    return 0


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
