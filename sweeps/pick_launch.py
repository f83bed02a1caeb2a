"""Race v7's launches over a grid of input signatures and write each winner to its launch table (issue 49).

    python sweeps/pick_launch.py --kernel v7_hopper            # the default grid, resumable, within --max-seconds
    python sweeps/pick_launch.py --dry-run                     # the grid and what each GPU's section holds; no GPU
    python sweeps/pick_launch.py --N 1024 2048 --bh 8 32 128   # another grid (N and B·H: powers of two)

Per grid point (D, mask, N, B·H: bf16 inputs of shape (B·H, N, D)), in grid order, one call of v7 with LAUNCH_FROM
"race" and its tl autotuner's cache cleared (its key has no B·H): the race v7 runs for a new signature (the Gluon
candidates timed once, those within SHORTLIST_MARGIN raced with the tl autotuner's shortlist in alternating rounds).
Every race timing is recorded (experiments/tl_pick.py's RaceRecorder, with the SM clock); the entry, the winner v7
reports (last_path, last_config) with every raced launch's median, is written at once to v7's launch_table.json
(fa2triton.launch_table), in the section of this GPU and Triton ("nvidia-h200/triton-3.9") with the run's provenance.
A rerun at the same commit on the same GPU, torch and Triton resumes; otherwise that section starts afresh (other
GPUs' and Tritons' stay). No grid point starts
after --max-seconds (rerun to go on); Ctrl-C loses nothing written.

The default grid, 20 points: D 64 and 128, both masks, N 512 to 8192 (the buckets of the variable-length plan's
lengths, 257..8192, and the harness's 512..4096), B·H 32 (the harness's and that plan's 4 x 8): each (D, mask)
compiles its candidates once, and lookup takes the nearest bucket for any other N or B·H. The backward chooses by
rules, not by a race (flash_backward_triton.auto_dq_mode, backward_configs.json), so it needs no table.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fa2lab import shapes  # noqa: E402
from fa2lab.paths import REPO  # noqa: E402
from fa2lab.provenance import now  # noqa: E402
from fa2triton import launch_table  # noqa: E402
from fa2triton.buckets import bucket  # noqa: E402
from fa2triton.versions import KERNELS  # noqa: E402

KERNEL = "v7_hopper"   # the only version that races its launches
DTYPE = "bfloat16"
GRID = {"D": (64, 128), "causal": (0, 1), "N": (512, 1024, 2048, 4096, 8192), "BH": (32,)}
MAX_SECONDS = 240.0
TABLE = KERNELS / KERNEL / "launch_table.json"
SAME_RUN = ("git_commit", "gpu", "arch", "sm_count", "torch", "triton")   # what a resumed section must share


@dataclass(frozen=True)
class Point:
    D: int
    causal: int
    N: int
    BH: int

    @property
    def key(self) -> tuple:
        return (self.D, self.causal, self.N, self.BH)

    def __str__(self) -> str:
        return f"D={self.D} {'causal' if self.causal else 'non-causal'} N={self.N} B·H={self.BH}"


def grid(Ds=GRID["D"], masks=GRID["causal"], Ns=GRID["N"], BHs=GRID["BH"]) -> list[Point]:
    """Every point, D then mask outermost (each pair compiles its candidates once), N then B·H ascending; ValueError
    naming a value the table cannot key."""
    for flag, values in (("--N", Ns), ("--bh", BHs)):
        bad = [n for n in values if n < 1 or bucket(n) != n]
        if bad:
            raise ValueError(f"{flag} takes powers of two (the tops of the lookup's buckets), not {bad}")
    bad = [d for d in Ds if d not in shapes.HEAD_DIMS]
    if bad:
        raise ValueError(f"--D takes head dimensions {', '.join(map(str, shapes.HEAD_DIMS))}, not {bad}")
    return [Point(D, int(c), N, bh) for D in dict.fromkeys(Ds) for c in dict.fromkeys(masks)
            for N in sorted(set(Ns)) for bh in sorted(set(BHs))]


def grid_of(points: list[Point]) -> dict:
    return {"D": sorted({p.D for p in points}), "causal": sorted({p.causal for p in points}),
            "N": sorted({p.N for p in points}), "BH": sorted({p.BH for p in points}), "dtype": DTYPE}


def provenance(env: dict, gpu: launch_table.Gpu, date: str) -> dict:
    """The section's provenance: fa2lab.provenance.environment()'s columns, the GPU key, the date it started."""
    return {"gpu": env.get("gpu"), "gpu_key": gpu.key, "arch": gpu.arch, "sm_count": gpu.sm_count,
            "max_sm_clock_mhz": env.get("max_sm_clock_mhz"), "driver": env.get("driver"), "cuda": env.get("cuda"),
            "torch": env.get("torch"), "triton": env.get("triton"), "python": env.get("python"),
            "git_commit": env.get("git_commit"), "date": date}


def _run_of(prov: dict) -> tuple:
    """SAME_RUN's fields, the commit without "-dirty" (writing the table itself dirties a checkout)."""
    return tuple(str(prov.get(k)).removesuffix("-dirty") if k == "git_commit" else prov.get(k) for k in SAME_RUN)


def section_for(data: dict, key: str, prov: dict, points: list[Point], fresh: bool = False) -> tuple[dict, str]:
    """The section `key` (this GPU and Triton's) of `data` to write into, and a line saying which: the one there when
    it is the same run (SAME_RUN) and not `fresh`, else a new one in its place."""
    old = data["gpus"].get(key)
    if old is not None and not fresh and _run_of(old["provenance"]) == _run_of(prov):
        old["grid"] = grid_of(points)
        return old, f"resuming {key}'s section: {len(old['entries'])} entries at {prov['git_commit']}"
    if old is None:
        why = f"a new section for {key}"
    elif fresh:
        why = f"--fresh: {key}'s section starts again"
    else:
        theirs = dict(zip(SAME_RUN, _run_of(old["provenance"])))
        why = (f"{key}'s section starts again: it was measured with " + ", ".join(
            f"{k} {theirs[k]}" for k, v in zip(SAME_RUN, _run_of(prov)) if theirs[k] != v))
    data["gpus"][key] = section = {"provenance": prov, "grid": grid_of(points), "complete": False, "entries": []}
    return section, why


def todo(section: dict, points: list[Point]) -> list[Point]:
    done = {launch_table.entry_key(e) for e in section["entries"]}
    return [p for p in points if p.key not in done]


def run_grid(path: Path, data: dict, section: dict, points: list[Point], race, max_seconds: float = MAX_SECONDS,
             log=None, clock=time.monotonic) -> dict:
    """race(point) -> entry for every point the section lacks, each entry written to `path` as soon as it is made;
    no point starts once max_seconds have passed. Returns counts."""
    log = log or (lambda line: print(line, flush=True))
    left = todo(section, points)
    counts = {"points": len(points), "done_before": len(points) - len(left), "measured": 0, "stopped": False}
    if not left:
        log(f"nothing to do: {path} holds every point of the grid for this GPU")
    start = clock()
    for i, p in enumerate(left):
        if clock() - start >= max_seconds:
            counts["stopped"] = True
            log(f"stopped after {clock() - start:.0f} s (--max-seconds {max_seconds:g}): {len(left) - i} points "
                "left; rerun the same command to resume")
            break
        t0 = clock()
        entry = race(p)
        section["entries"].append(entry)
        section["complete"] = not todo(section, points)
        section["provenance"]["updated"] = now()
        launch_table.write(path, data, KERNEL)
        counts["measured"] += 1
        won = entry["launch"]
        log(f"[{counts['done_before'] + i + 1}/{len(points)}] {p}: {won['path']}:{won['label']} of "
            f"{len(entry['raced'])} raced, {clock() - t0:.1f} s (elapsed {clock() - start:.0f} s)")
    return counts


def race_entry(p: Point, rows: list[dict], winner: tuple, seconds: float) -> dict:
    """The table entry of one point from the race's timings (RaceRecorder rows: candidate "path:label", race_ms,
    the SM clock) and the winner v7 reports ((last_path, last_config)). RuntimeError where v7 ran no raced path."""
    path, label = winner
    if path not in launch_table.PATHS or not label:
        raise RuntimeError(f"{p}: v7 ran its {path!r} path ({label!r}), none the table holds: it races its Gluon and "
                           "tl paths for bf16 inputs on a Hopper GPU")
    times: dict[str, list] = {}
    for r in rows:
        times.setdefault(r["candidate"], []).append(float(r["race_ms"]))
    raced = sorted(({"path": c.split(":", 1)[0], "label": c.split(":", 1)[1], "ms": round(statistics.median(ms), 6)}
                    for c, ms in times.items()), key=lambda r: r["ms"])
    if not any((r["path"], r["label"]) == (path, label) for r in raced):
        raced.append({"path": path, "label": label, "ms": None})   # one launch only: nothing was raced
    clocks = [c for r in rows for c in (r.get("clock_before_mhz"), r.get("clock_after_mhz"))
              if isinstance(c, (int, float)) and math.isfinite(c)]
    return {"D": p.D, "causal": p.causal, "N": p.N, "BH": p.BH, "dtype": DTYPE,
            "launch": {"path": path, "label": label}, "raced": raced, "seconds": round(seconds, 2),
            "sm_clock_mhz": statistics.median(clocks) if clocks else None, "date": now()}


def make_race(v7, device: str = "cuda", clock=None):
    """race(point) for run_grid: v7's race at that point (module docstring), timed as it runs at a first call."""
    import torch

    from experiments.tl_pick import RaceRecorder
    from fa2triton.interpret import autotuner_of

    FA, tuner = v7.FlashAttentionTriton, autotuner_of(v7)
    FA.LAUNCH_FROM = "race"
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    if clock is None:
        from fa2lab.provenance import sm_clock_mhz

        def clock():
            return sm_clock_mhz(torch.cuda.current_device()) if device == "cuda" else math.nan

    def race(p: Point) -> dict:
        q, k, v = (torch.randn(p.BH, p.N, p.D, device=device, dtype=getattr(torch, DTYPE)) for _ in range(3))
        tuner.cache.clear()
        t0 = time.perf_counter()
        with RaceRecorder(clock) as rec:
            rec.shape = {"N": p.N}
            FA.apply(q, k, v, bool(p.causal))
            sync()
        return race_entry(p, rec.rows, (v7.last_path(), v7.last_config()), time.perf_counter() - t0)

    return race


def dry_run(points: list[Point], data: dict, path: Path, log=print) -> int:
    """The grid, and per GPU section of the file the points it holds."""
    shown = path.resolve().relative_to(REPO) if path.resolve().is_relative_to(REPO) else path
    log(f"{len(points)} points ({', '.join(f'{k} {v}' for k, v in grid_of(points).items())}) -> {shown}")
    sections = data["gpus"]
    for p in points:
        held = [key for key, s in sections.items() if p.key in {launch_table.entry_key(e) for e in s["entries"]}]
        log(f"  {p}" + (f"   [held for {', '.join(held)}]" if held else ""))
    for key, s in sections.items():
        prov = s["provenance"]
        n = len(points) - len(todo(s, points))
        log(f"{key}: {n} of these {len(points)} points, measured at {prov['git_commit']} with torch {prov['torch']}, "
            f"Triton {prov['triton']}; a run with another commit or torch starts that section again")
    if not sections:
        log(f"{shown} holds no GPU yet")
    return 0


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernel", default=KERNEL, choices=[KERNEL], help="the version whose launches are raced")
    ap.add_argument("--D", type=int, nargs="+", default=list(GRID["D"]), help="head dimensions")
    ap.add_argument("--causal", choices=["both", "0", "1"], default="both", help="which masks")
    ap.add_argument("--N", type=int, nargs="+", default=list(GRID["N"]), help="sequence lengths (powers of two)")
    ap.add_argument("--bh", type=int, nargs="+", default=list(GRID["BH"]), help="batch x heads (powers of two)")
    ap.add_argument("--max-seconds", type=float, default=MAX_SECONDS,
                    help="start no grid point after this many seconds (rerun to resume)")
    ap.add_argument("--dry-run", action="store_true", help="list the grid and what the table holds; no GPU")
    ap.add_argument("--fresh", action="store_true",
                    help="start this GPU and Triton's section again instead of resuming")
    ap.add_argument("--out", type=Path, default=TABLE, help="the table file (default: beside v7's kernel)")
    return ap


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    try:
        points = grid(args.D, shapes.masks_from(args.causal), args.N, args.bh)
        if args.max_seconds <= 0:
            raise ValueError(f"--max-seconds must be positive, not {args.max_seconds:g}")
        data = launch_table.read(args.out, KERNEL)
    except launch_table.LaunchTableError as e:
        print(f"pick_launch.py: {e} (fix it, or move it aside and race again)", file=sys.stderr)
        return 2
    except ValueError as e:
        print(f"pick_launch.py: {e}", file=sys.stderr)
        return 2
    if args.dry_run:
        return dry_run(points, data, args.out)
    import torch

    if not torch.cuda.is_available():
        print("pick_launch.py races on a GPU (a Hopper one: v7's race is between its sm_90 paths); --dry-run lists "
              "the grid without one", file=sys.stderr)
        return 2
    from fa2lab.provenance import environment
    from fa2triton.versions import load

    gpu = launch_table.gpu_identity(0)
    if gpu.arch != "sm_90":
        print(f"pick_launch.py: {gpu.key} is {gpu.arch}; v7 races its Gluon and tl paths on sm_90 only (elsewhere it "
              "runs v6's path, which needs no table)", file=sys.stderr)
        return 2
    key = launch_table.section_key(gpu.key, gpu.triton)
    section, note = section_for(data, key, provenance(environment(), gpu, now()), points, args.fresh)
    print(note, flush=True)
    try:
        counts = run_grid(args.out, data, section, points, make_race(load(KERNEL)), args.max_seconds)
    except KeyboardInterrupt:
        print(f"\ninterrupted: every measured entry is already in {args.out}; rerun the same command to resume")
        return 130
    print("summary:", counts)
    return 0


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
