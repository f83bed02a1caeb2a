"""The article's benchmark protocol: fresh processes, versions interleaved, a pause before each
run, several runs, and per-version medians of each run's own ratio to SDPA."""

from __future__ import annotations

import math
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

from fa2triton.buckets import ENV_VAR, OFF
from .paths import REPO
from fa2triton.versions import Version

HARNESS = REPO / "harness" / "bench_flashattention.py"
HARNESS_BWD = REPO / "harness" / "bench_flashattention_backward.py"
TEST_FILE = REPO / "harness" / "test_flashattention_triton.py"


def version_env(version: Version, **extra) -> dict:
    """The environment that selects one version: its folder first on PYTHONPATH. The tuning picks' disk cache
    (fa2triton.buckets) is off, whatever the caller's FA2_PICK_CACHE: each fresh process tunes for itself, as the
    protocol says, and no pick of one run reaches the next (`extra` may still set it)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(version.folder), str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["PYTHONUNBUFFERED"] = "1"
    env[ENV_VAR] = OFF
    env.update({k: str(v) for k, v in extra.items()})
    return env


def run_protocol(versions: list[Version], runs: int, pause_s: float, harness_args: list[str],
                 harness: Path = HARNESS) -> str:
    """Run the harness `runs` times per version, each in a fresh process. Versions are rotated
    between runs so none is always first after the pause. Returns the protocol's id prefix."""
    protocol_id = time.strftime("%Y%m%dT%H%M%S") + "-" + uuid.uuid4().hex[:6]
    for r in range(runs):
        order = versions[r % len(versions):] + versions[: r % len(versions)]
        for v in order:
            if pause_s:
                print(f"[run {r + 1}/{runs}] pausing {pause_s:g} s before {v.name}", flush=True)
                time.sleep(pause_s)
            cmd = [sys.executable, str(harness), *harness_args]
            env = version_env(v, FA2_RUN_ID=f"{protocol_id}/{r + 1}")
            res = subprocess.run(cmd, env=env, cwd=REPO)
            if res.returncode != 0:
                print(f"harness failed for {v.name} (exit {res.returncode}); continuing", file=sys.stderr)
    return protocol_id


def summarise(rows, protocol_id: str | None = None) -> list[dict]:
    """Per version and shape: median ms, median of per-run % of SDPA and its spread (min..max)."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        if protocol_id and not str(r.get("run_id", "")).startswith(protocol_id):
            continue
        groups.setdefault((r["version"], int(r["N"]), int(r["causal"])), []).append(r)
    out = []
    for (version, N, causal), rs in sorted(groups.items(), key=lambda kv: (kv[0][2], kv[0][1], kv[0][0])):
        pct = [float(r["pct_of_sdpa"]) for r in rs]
        pct_fa = [float(r["pct_of_sdpa_flash"]) for r in rs if r.get("pct_of_sdpa_flash") not in (None, "", "nan")]
        out.append({
            "version": version, "N": N, "causal": causal, "runs": len(rs),
            "ms": statistics.median(float(r["ms"]) for r in rs),
            "tflops": statistics.median(float(r["tflops"]) for r in rs),
            "sdpa_ms": statistics.median(float(r["sdpa_ms"]) for r in rs),
            "pct_of_sdpa": statistics.median(pct), "pct_min": min(pct), "pct_max": max(pct),
            "pct_of_sdpa_flash": statistics.median(pct_fa) if pct_fa else float("nan"),
            **peer_summary(rs),
        })
    return out


def _finite(values) -> list[float]:
    out = []
    for v in values:
        try:
            x = float(v)
        except (TypeError, ValueError):
            continue
        if math.isfinite(x):
            out.append(x)
    return out


def peer_summary(rows) -> dict:
    """Per registered peer with a measured pct_of_<peer> (fa2lab.peers: 100 * the peer's ms / ours, each run's
    own ratio): its median over the runs and the spread (pct_of_<peer>, <peer>_pct_min, <peer>_pct_max)."""
    from .peers import REGISTRY

    out = {}
    for name in REGISTRY:
        pct = _finite(r.get(f"pct_of_{name}") for r in rows)
        if pct:
            out.update({f"pct_of_{name}": statistics.median(pct), f"{name}_pct_min": min(pct),
                        f"{name}_pct_max": max(pct)})
    return out


def format_summary(summary: list[dict]) -> str:
    from .peers import REGISTRY

    peers = [n for n in REGISTRY if any(f"pct_of_{n}" in s for s in summary)]
    lines = [f"{'version':<16}{'N':>6}{'causal':>7}{'runs':>5}{'ms':>9}{'TFLOP/s':>9}{'% SDPA':>8}"
             f"{'spread':>14}{'% FA2':>7}" + "".join(f"{'% ' + n:>8}{'spread':>14}" for n in peers)]
    for s in summary:
        line = (f"{s['version']:<16}{s['N']:>6}{'yes' if s['causal'] else 'no':>7}{s['runs']:>5}"
                f"{s['ms']:9.3f}{s['tflops']:9.1f}{s['pct_of_sdpa']:7.0f}%"
                f"{s['pct_min']:7.0f}-{s['pct_max']:.0f}%{s['pct_of_sdpa_flash']:6.0f}%")
        for n in peers:
            line += (f"{s[f'pct_of_{n}']:7.1f}%{s[f'{n}_pct_min']:7.1f}-{s[f'{n}_pct_max']:.1f}%" if f"pct_of_{n}" in s
                     else f"{'-':>8}{'':>14}")
        lines.append(line)
    return "\n".join(lines)


def read_bench_rows(folder: Path) -> list[dict]:
    import csv

    rows = []
    for path in sorted(folder.glob("*.csv")):
        with path.open(newline="") as f:
            rows.extend(csv.DictReader(f))
    return rows
