"""Variable-length benchmark (issue 40): what a new sequence length costs, and how fast it runs afterwards.

    python harness/bench_varlen.py --kernel v5_final            # a cold run, then a warm one
    python harness/bench_varlen.py --kernel v7_hopper --cache-dir warm --compare-tuned

Each run is a fresh process (a child of this one) that takes `--count` seeded random lengths N in
[--min-n, --max-n] (distinct; default 32 in 257..8192), runs every one at each head dimension (--D, default
64 and 128) and mask (--causal, default both) on (B * H, N, D) bf16 inputs, in that order: for each D, for
each mask, the lengths in their random order. For each call it records the first call's seconds (the
version's tuning and compiling for that length included; SDPA's first call beside it), then the later calls'
do_bench medians against SDPA's default backend (cuDNN on the H200) in the same process. Then totals per
(D, mask) and over all calls: the sum, median and largest first-call seconds.

--cache-dir picks Triton's cache directory (TRITON_CACHE_DIR of the child): "cold" an empty temporary directory,
"warm" the one the preceding cold run of this command filled (run alone: the caller's own Triton cache), or a
path; "cold,warm" (the default) runs both, one after the other. --pick-cache picks the tuning picks' directory
(fa2triton.buckets) the same way: "same" (the default) follows --cache-dir (an empty one for cold, the cold run's
for warm, fa2lab's default directory for warm alone or a path), or "default", "off", a path.

--compare-tuned: afterwards, for --compare-count of the calls (seeded), also tune that length alone (the
version's BUCKETS off; v7: its LAUNCH_FROM "race" against its launch table's launch, the "bucketed" one) and time
the two launches in alternating rounds: pct_of_tuned = 100 * tuned_ms / bucketed_ms (the goal: at least 98).

Rows, written as they are measured (an interrupted run keeps what it measured), go to
results/<gpu>/varlen/<version>.csv with provenance: `row` says "call", "total" or "compare".
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # the fa2lab package, uninstalled

from fa2triton.buckets import bucket  # noqa: E402

CACHE_MODES = ("cold", "warm")


# ------------------------------------------------------------------------------------------------ the plan

def lengths(seed: int, count: int = 32, lo: int = 257, hi: int = 8192) -> list[int]:
    """`count` distinct lengths drawn from [lo, hi] by a generator seeded with `seed`, in the drawn order."""
    if lo < 1 or hi < lo:
        raise ValueError(f"need 1 <= --min-n <= --max-n, got {lo} and {hi}")
    if not 1 <= count <= hi - lo + 1:
        raise ValueError(f"--count must be between 1 and {hi - lo + 1} (the lengths in {lo}..{hi}), not {count}")
    return random.Random(seed).sample(range(lo, hi + 1), count)


@dataclass(frozen=True)
class Call:
    index: int
    N: int
    D: int
    causal: bool


def plan(ns: Iterable[int], Ds: Iterable[int], masks: Iterable[bool]) -> list[Call]:
    """For each D, for each mask, every length in its order."""
    ns, out = list(ns), []
    for D in Ds:
        for causal in masks:
            out += [Call(len(out) + i, N, D, causal) for i, N in enumerate(ns)]
    return out


# ------------------------------------------------------------------------------------------------ bookkeeping

def run_calls(calls: list[Call], measure: Callable[[Call], dict], write: Callable[[dict], None],
              bar: bool = True) -> list[dict]:
    """measure(call) for each call, each row handed to write() as soon as it is measured."""
    rows = []
    progress = _bar(calls, bar)
    for call in progress:
        row = {"row": "call", "index": call.index, "N": call.N, "D": call.D, "causal": int(call.causal),
               "q_bucket": bucket(call.N), **measure(call)}
        write(row)
        rows.append(row)
        if bar and hasattr(progress, "set_postfix_str"):
            progress.set_postfix_str(f"N={call.N} D={call.D} causal={int(call.causal)} "
                                     f"first {row['first_call_s']:.2f} s")
    return rows


def _bar(items, on: bool):
    if not on:
        return items
    try:
        from tqdm import tqdm
    except ImportError:   # the bar is a convenience: without tqdm, no bar
        return items
    return tqdm(items, desc="lengths", unit="call", file=sys.stderr)


def totals(rows: list[dict]) -> list[dict]:
    """One "total" row per (D, mask) present, in first-seen order, then one over all calls: calls, the sum,
    median and largest first-call seconds (and the N of the largest), the median and least % of SDPA, and how
    many calls tuned."""
    groups: dict[tuple, list[dict]] = {}
    calls = [r for r in rows if r.get("row") == "call"]
    for r in calls:
        groups.setdefault((r["D"], r["causal"]), []).append(r)
    out = [_total(f"D={D} causal={c}", g, D=D, causal=c) for (D, c), g in groups.items()]
    if calls:
        out.append(_total("all", calls, D="", causal=""))
    return out


def _total(group: str, rows: list[dict], **where) -> dict:
    first = [float(r["first_call_s"]) for r in rows]
    worst = max(range(len(rows)), key=lambda i: first[i])
    pct = [float(r["pct_of_sdpa"]) for r in rows if r.get("pct_of_sdpa") not in (None, "")]
    return {"row": "total", "group": group, **where, "calls": len(rows),
            "total_first_call_s": sum(first), "median_first_call_s": statistics.median(first),
            "max_first_call_s": first[worst], "max_first_call_N": rows[worst]["N"],
            "median_pct_of_sdpa": statistics.median(pct) if pct else float("nan"),
            "min_pct_of_sdpa": min(pct) if pct else float("nan"),
            "tuned_calls": sum(1 for r in rows if r.get("pick") == "tuned")}


def compare_rows(calls: list[Call], measure_pair: Callable[[Call], dict], write: Callable[[dict], None]) -> list:
    """For each call, measure_pair(call) -> {bucketed_ms, tuned_ms, ...}; a "compare" row with pct_of_tuned."""
    rows = []
    for call in calls:
        m = measure_pair(call)
        row = {"row": "compare", "index": call.index, "N": call.N, "D": call.D, "causal": int(call.causal),
               "q_bucket": bucket(call.N), **m, "pct_of_tuned": 100.0 * m["tuned_ms"] / m["bucketed_ms"]}
        write(row)
        rows.append(row)
    return rows


def sample(calls: list[Call], k: int, seed: int) -> list[Call]:
    """k of the calls (all when k >= their number), drawn with the seed, in plan order."""
    if k >= len(calls):
        return list(calls)
    return sorted(random.Random(seed + 1).sample(calls, k), key=lambda c: c.index)


# ------------------------------------------------------------------------------------------------ on the GPU

def _seconds(fn) -> float:
    import torch

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def config_of(module) -> str:
    """The configuration the version's latest normal-path call launched: its last_config() where it has one,
    else its autotuner's best_config as q_tile,k_tile,warps,stages."""
    last = getattr(module, "last_config", None)
    if last is not None:
        return last() or ""
    cfg = getattr(getattr(module, "flash_fwd_kernel", None), "best_config", None)
    if cfg is None:
        return ""
    return f"{cfg.kwargs.get('Q_TILE_SIZE')},{cfg.kwargs.get('K_TILE_SIZE')},{cfg.num_warps},{cfg.num_stages}"


def first_call_switch(cls):
    """(attribute, the cheap value, the tuning value) of how a version chooses at a first call: v7's LAUNCH_FROM
    (its launch table against its race), else BUCKETS (a bucket's pick against tuning each N); None for neither."""
    if hasattr(cls, "LAUNCH_FROM"):
        return "LAUNCH_FROM", "table", "race"
    return ("BUCKETS", True, False) if hasattr(cls, "BUCKETS") else None


class GpuMeasure:
    """Times one version's FlashAttentionTriton.apply and SDPA on fresh (B * H, N, D) bf16 inputs."""

    def __init__(self, module, B: int, H: int):
        self.module, self.cls, self.B, self.H = module, module.FlashAttentionTriton, B, H
        self.picks = getattr(self.cls, "picks", None)

    def choice(self) -> str:
        """How the latest first call chose: the pick cache's last ("tuned", "reused", ...), or v7's LAST_CHOICE
        ("table", "tuned", "pinned")."""
        if self.picks is not None:
            return self.picks.last
        return getattr(self.module, "LAST_CHOICE", None) or ""

    def forget_choice(self) -> None:
        if self.picks is not None:
            self.picks.last = ""
        elif hasattr(self.module, "LAST_CHOICE"):
            self.module.LAST_CHOICE = None

    def inputs(self, call: Call):
        import torch

        q, k, v = (torch.randn(self.B * self.H, call.N, call.D, device="cuda", dtype=torch.bfloat16)
                   for _ in range(3))
        return q, k, v, tuple(t.view(self.B, self.H, call.N, call.D) for t in (q, k, v))

    def __call__(self, call: Call) -> dict:
        import torch.nn.functional as F
        from fa2lab.timers import bench_ms

        q, k, v, (q4, k4, v4) = self.inputs(call)
        ours = lambda: self.cls.apply(q, k, v, call.causal)  # noqa: E731
        sdpa = lambda: F.scaled_dot_product_attention(q4, k4, v4, is_causal=call.causal)  # noqa: E731
        self.forget_choice()
        first = _seconds(ours)
        row = {"pick": self.choice(), "config": config_of(self.module),
               "path": (getattr(self.module, "last_path", lambda: "")() or "")}
        sdpa_first = _seconds(sdpa)
        err = (ours().float() - sdpa().reshape(q.shape).float()).abs().max().item()
        ms, sdpa_ms = bench_ms(ours), bench_ms(sdpa)
        return {"first_call_s": first, "sdpa_first_call_s": sdpa_first, "ms": ms, "sdpa_ms": sdpa_ms,
                "pct_of_sdpa": 100.0 * sdpa_ms / ms, "max_abs_err_vs_sdpa": err, **row}

    def pair(self, call: Call, rounds: int = 3) -> dict:
        """The bucketed launch and the launch of tuning this N alone (first_call_switch: BUCKETS off, v7's race),
        each recorded by one call on an empty launch cache, then timed in `rounds` alternating rounds of do_bench
        (medians)."""
        from fa2lab.timers import bench_ms

        cls, launches = self.cls, self.cls.launches
        switch, cheap, tuning = first_call_switch(cls)
        q, k, v, _ = self.inputs(call)
        ours = lambda: cls.apply(q, k, v, call.causal)  # noqa: E731
        kept, before = launches.entries, getattr(cls, switch)
        recorded, configs = {}, {}
        try:
            values = {"bucketed": cheap, "tuned": tuning}
            for name, value in values.items():
                launches.entries = {}
                setattr(cls, switch, value)
                ours()
                recorded[name], configs[name] = launches.entries, config_of(self.module)
            ms = {"bucketed": [], "tuned": []}
            for r in range(rounds):
                for name in (("bucketed", "tuned") if r % 2 == 0 else ("tuned", "bucketed")):
                    launches.entries = recorded[name]
                    setattr(cls, switch, values[name])   # (a call the cache cannot repeat chooses again)
                    ms[name].append(bench_ms(ours))
        finally:
            launches.entries = kept
            setattr(cls, switch, before)
        return {"bucketed_ms": statistics.median(ms["bucketed"]), "tuned_ms": statistics.median(ms["tuned"]),
                "bucketed_config": configs["bucketed"], "tuned_config": configs["tuned"],
                "same_config": int(configs["bucketed"] == configs["tuned"])}


# ------------------------------------------------------------------------------------------------ processes

def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernel", default="v5_final", help="a version, or a comma-separated list (one run each)")
    ap.add_argument("--count", type=int, default=32, help="how many random lengths")
    ap.add_argument("--seed", type=int, default=0, help="seed of the lengths (and of the --compare-tuned sample)")
    ap.add_argument("--min-n", type=int, default=257, help="least length")
    ap.add_argument("--max-n", type=int, default=8192, help="largest length")
    ap.add_argument("--D", default="64,128", help="comma-separated head dimensions")
    ap.add_argument("--causal", choices=["both", "0", "1"], default="both", help="which masks")
    ap.add_argument("--batch", type=int, default=4, help="B (the kernels see B * H sequences)")
    ap.add_argument("--heads", type=int, default=8, help="H")
    ap.add_argument("--cache-dir", default="cold,warm",
                    help="Triton's cache: cold (empty), warm, a path, or a comma-separated list run in order")
    ap.add_argument("--pick-cache", default="same", help="the picks' directory: same, default, off or a path")
    ap.add_argument("--compare-tuned", action="store_true", help="also time a sample against tuning each N alone")
    ap.add_argument("--compare-count", type=int, default=8, help="how many calls --compare-tuned samples")
    ap.add_argument("--run-id", default=os.environ.get("FA2_RUN_ID", ""), help="groups the rows of one command")
    ap.add_argument("--no-bar", action="store_true", help="no progress bar")
    ap.add_argument("--no-save", action="store_true", help="print only; write no CSV")
    ap.add_argument("--out", type=Path, default=None, help="CSV path (default results/<gpu>/varlen/<version>.csv)")
    ap.add_argument("--keep-cache", action="store_true", help="keep the temporary cache directories")
    # what the parent tells its child
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--pick-dir", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--triton-label", default="", help=argparse.SUPPRESS)
    ap.add_argument("--pick-label", default="", help=argparse.SUPPRESS)
    return ap


def int_list(text: str, what: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"--{what} must be comma-separated integers, not {text!r}") from None


def child_settings(mode: str, pick: str, tmp: Path | None) -> tuple[dict, str, str, str]:
    """(environment changes, pick directory for the child, Triton cache label, pick cache label) for one run.
    `tmp` is the command's temporary directory (cold creates it; warm reuses it when a cold run made it)."""
    env: dict = {}
    if mode == "cold" or (mode == "warm" and tmp is not None):
        env["TRITON_CACHE_DIR"] = str(tmp / "triton")
        t_label = mode
    elif mode == "warm":
        t_label = "warm"   # the caller's own TRITON_CACHE_DIR, or Triton's default
    else:
        env["TRITON_CACHE_DIR"] = str(Path(mode).expanduser())
        t_label = "path"
    if pick == "same":
        if tmp is not None and mode in CACHE_MODES:
            return env, str(tmp / "picks"), t_label, mode
        if mode == "warm":
            return env, "", t_label, "default"
        return env, str(Path(mode).expanduser() / "fa2lab-picks"), t_label, "path"
    if pick == "default":
        return env, "", t_label, "default"
    if pick == "off":
        return env, "off", t_label, "off"
    return env, str(Path(pick).expanduser()), t_label, "path"


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if args.worker:
        return worker(args)
    from fa2triton import versions

    try:
        chosen = versions.resolve(args.kernel)
        lengths(args.seed, args.count, args.min_n, args.max_n)
    except ValueError as e:
        print(f"bench_varlen.py: {e}", file=sys.stderr)
        return 2
    modes = [m.strip() for m in args.cache_dir.split(",") if m.strip()]
    run_id = args.run_id or time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6]
    forwarded = _forwarded(argv if argv is not None else sys.argv[1:])
    for version in chosen:
        tmp = None
        try:
            for mode in modes:
                if mode == "cold":
                    if tmp is not None and not args.keep_cache:
                        shutil.rmtree(tmp, ignore_errors=True)
                    tmp = Path(tempfile.mkdtemp(prefix=f"fa2-varlen-{version.name}-"))
                env, pick_dir, t_label, p_label = child_settings(mode, args.pick_cache, tmp)
                cmd = [sys.executable, str(Path(__file__).resolve()), *forwarded, "--worker", "--kernel",
                       version.name, "--run-id", run_id, "--pick-dir", pick_dir, "--triton-label", t_label,
                       "--pick-label", p_label]
                print(f"+ {version.name}, Triton cache {t_label}, picks {p_label}", flush=True)
                rc = subprocess.run(cmd, env=dict(os.environ, PYTHONUNBUFFERED="1", **env), cwd=REPO).returncode
                if rc != 0:
                    return rc
        finally:
            if tmp is not None and not args.keep_cache:
                shutil.rmtree(tmp, ignore_errors=True)
            elif tmp is not None:
                print(f"kept the caches in {tmp}")
    return 0


def _forwarded(argv: list[str]) -> list[str]:
    """The parent's arguments without those it decides for each child."""
    drop = {"--kernel", "--run-id", "--cache-dir", "--pick-cache"}
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        name = a.split("=", 1)[0]
        if name in drop:
            skip = "=" not in a
            continue
        out.append(a)
    return out


def worker(args) -> int:
    import torch

    if not torch.cuda.is_available():
        print("bench_varlen.py needs a CUDA GPU; without one, its bookkeeping is tested on the CPU "
              "(tests/test_varlen.py).", file=sys.stderr)
        return 2
    from fa2lab import shapes
    from fa2lab.provenance import environment, now
    from fa2lab.results import append_rows, gpu_dir
    from fa2lab.switches import load

    module = load(args.kernel)
    cls = module.FlashAttentionTriton
    if args.compare_tuned and first_call_switch(cls) is None:
        print(f"--compare-tuned needs a version with a BUCKETS or LAUNCH_FROM switch; {args.kernel} has neither",
              file=sys.stderr)
        return 2
    picks = getattr(cls, "picks", None)
    if picks is not None:
        picks.cache_dir = args.pick_dir or None   # "": fa2triton.buckets' own choice (FA2_PICK_CACHE, the default)
    calls = plan(lengths(args.seed, args.count, args.min_n, args.max_n), int_list(args.D, "D"),
                 shapes.masks_from(args.causal))
    env = environment()
    base = {"version": args.kernel, "run_id": args.run_id, "seed": args.seed, "B": args.batch, "H": args.heads,
            "dtype": shapes.DTYPE_NAME, "triton_cache": args.triton_label, "pick_cache": args.pick_label,
            "buckets": int(bool(getattr(cls, "BUCKETS", False))), **(
                {"launch_from": cls.LAUNCH_FROM} if hasattr(cls, "LAUNCH_FROM") else {})}
    out = args.out or gpu_dir() / "varlen" / f"{args.kernel}.csv"

    def write(row: dict) -> None:
        if not args.no_save:
            append_rows(out, [{**base, "date": now(), **row, **env}])

    measure = GpuMeasure(module, args.batch, args.heads)
    print(f"{args.kernel} on {env['gpu']}: {len(calls)} calls, Triton cache {args.triton_label}, "
          f"picks {args.pick_label}", flush=True)
    rows = run_calls(calls, measure, write, bar=not args.no_bar)
    summary = totals(rows)
    for row in summary:
        write(row)
    print(f"{'group':>18} {'calls':>5} {'total s':>8} {'median s':>8} {'max s':>7} {'at N':>5} {'med %SDPA':>9}")
    for t in summary:
        print(f"{t['group']:>18} {t['calls']:>5} {t['total_first_call_s']:8.2f} {t['median_first_call_s']:8.3f} "
              f"{t['max_first_call_s']:7.2f} {t['max_first_call_N']:>5} {t['median_pct_of_sdpa']:8.1f}%")
    if args.compare_tuned:
        for row in compare_rows(sample(calls, args.compare_count, args.seed), measure.pair, write):
            print(f"compare N={row['N']} D={row['D']} causal={row['causal']}: bucketed {row['bucketed_ms']:.4f} ms "
                  f"({row['bucketed_config']}), tuned alone {row['tuned_ms']:.4f} ms ({row['tuned_config']}): "
                  f"{row['pct_of_tuned']:.1f}%", flush=True)
    if not args.no_save:
        print(f"rows in {out}")
    return 0


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
