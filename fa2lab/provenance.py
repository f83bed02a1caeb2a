"""Where a number came from: GPU, driver, versions, commit, date, and the clocks during the run."""

from __future__ import annotations

import datetime as _dt
import functools
import os
import platform
import re
import statistics
import subprocess
import threading
import time
from pathlib import Path

from .paths import REPO
from .switches import kernel_switches


# A commit as `git rev-parse` writes it: 12 to 40 lowercase hex digits, -dirty for uncommitted changes
_COMMIT = re.compile(r"[0-9a-f]{12,40}(?:-dirty)?")


def commit_from_env(name: str) -> str | None:
    """The commit that environment variable `name` gives for a tree without its .git (the lent GPU machine's copies),
    or None where it is unset or empty. ValueError, naming the variable, for anything but git rev-parse's form: a
    short or mistyped sha would stamp every row it touches with a commit that does not exist (docs/reproduce.md)."""
    value = os.environ.get(name, "").strip()
    if not value:
        return None
    if not _COMMIT.fullmatch(value):
        raise ValueError(f"{name}={value!r} is not a commit: give `git rev-parse HEAD` (40 hex digits, or its first "
                         "12 or more)")
    return value


@functools.lru_cache(maxsize=None)
def git_commit() -> str:
    """The checkout's commit (with -dirty for uncommitted changes). A copy of the tree without
    .git (the lent GPU machine gets one) passes it in FA2_GIT_COMMIT (checked: commit_from_env)."""
    return commit_from_env("FA2_GIT_COMMIT") or checkout_commit(REPO) or "unknown"


def checkout_commit(path: Path) -> str | None:
    """The commit of the git checkout at `path` (12 hex digits, with -dirty for uncommitted changes), or None where
    `path` has no .git of its own (a copy inside another checkout would otherwise read that one's) or git fails."""
    if not (Path(path) / ".git").exists():
        return None
    try:
        sha = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=path, capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=path,
                               capture_output=True, text=True, check=True).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def _nvml():
    try:
        import pynvml

        pynvml.nvmlInit()
        return pynvml
    except Exception:  # noqa: BLE001 - NVML missing or no driver: provenance says 'unknown'
        return None


@functools.lru_cache(maxsize=None)
def driver_version() -> str:
    nv = _nvml()
    if nv is not None:
        try:
            v = nv.nvmlSystemGetDriverVersion()
            return v.decode() if isinstance(v, bytes) else v
        except Exception:  # noqa: BLE001
            pass
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else "unknown"
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


@functools.lru_cache(maxsize=None)
def environment() -> dict:
    """The provenance columns every results row carries."""
    import torch
    import triton

    env = {
        "gpu": "none",
        "arch": "none",
        "driver": "none",
        "cuda": torch.version.cuda or "none",
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "git_commit": git_commit(),
    }
    switches = kernel_switches()
    if switches:   # only when set, so rows from runs without any keep their columns
        env["switches"] = switches
    if torch.cuda.is_available():
        from fa2triton.gpu import facts

        f = facts()
        env.update(gpu=f.name, arch=f.arch, driver=driver_version(), sm_count=f.sm_count,
                   max_sm_clock_mhz=f.sm_clock_mhz)
    return env


def now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def file_stamp(run_id: str) -> str:
    """A run id (now(): '2026-12-04T07:19:26+00:00') as it goes into a file name: no ':' or '+'
    ('2026-12-04T071926-0000'), names the device tool brings back. Older files' '+0000' maps to the same stamp."""
    return str(run_id).replace(":", "").replace("+", "-")


def sm_clock_mhz(device: int = 0) -> float:
    """The SM clock now (one NVML read), NaN without NVML or when the read fails."""
    nv = _nvml()
    if nv is None:
        return float("nan")
    try:
        return float(nv.nvmlDeviceGetClockInfo(nv.nvmlDeviceGetHandleByIndex(device), nv.NVML_CLOCK_SM))
    except Exception:  # noqa: BLE001 - a failed read is NaN, not fatal
        return float("nan")


class ClockSampler:
    """Samples the SM clock, power and temperature (NVML) in a thread while a block runs.

    with ClockSampler() as s: ...; s.summary() -> {'sm_clock_mhz_median': ..., ...}
    Without NVML the summary is empty, and results say nothing about clocks.
    """

    def __init__(self, interval_s: float = 0.02, device: int = 0):
        self.interval_s = interval_s
        self.device = device
        self.samples: list[tuple[float, float, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._nv = _nvml()

    def _run(self):
        nv = self._nv
        handle = nv.nvmlDeviceGetHandleByIndex(self.device)
        while not self._stop.is_set():
            try:
                clk = nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_SM)
                pwr = nv.nvmlDeviceGetPowerUsage(handle) / 1000.0
                tmp = nv.nvmlDeviceGetTemperature(handle, nv.NVML_TEMPERATURE_GPU)
                self.samples.append((float(clk), pwr, float(tmp)))
            except Exception:  # noqa: BLE001 - a failed sample is skipped, not fatal
                pass
            time.sleep(self.interval_s)

    def __enter__(self):
        self.samples.clear()
        self._stop.clear()
        if self._nv is not None:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return False

    def summary(self) -> dict:
        if not self.samples:
            return {}
        clk, pwr, tmp = zip(*self.samples)
        return {
            "sm_clock_mhz_median": statistics.median(clk),
            "sm_clock_mhz_min": min(clk),
            "sm_clock_mhz_max": max(clk),
            "power_w_median": round(statistics.median(pwr), 1),
            "temp_c_max": max(tmp),
        }
