"""The forward's lean repeat without a GPU: Triton's own launch code over a stub libcuda, on CPU tensors.

    python profiling/host_emulation.py                         # v7's tl path, N = 512, D = 64, causal
    python profiling/host_emulation.py --N 1024 --label 128,64,4,3/p0 --json

Triton's launcher (its C module, compiled here against profiling/stub_libcuda.c, whose every driver call succeeds
at once) and fa2triton's host path run for real: v7's tl kernel is compiled for sm_90 by the JIT path, and its
recorded launch (TmaLaunch) is repeated with the scratch L. Only the driver's work is missing. It answers what a
GPU-less machine can: whether the recorded launch got its DirectLauncher, how many descriptor encodes a repeat
makes, and the Python's µs per repeat. O comes from a pool that hands out a free buffer first, as the CUDA caching
allocator does (glibc's own reuse varies from run to run; --no-pool uses it). These are not GPU numbers: nothing here
goes to results/ (docs/worklogs/v7_hopper.md, "The tl path's host cost since the port")."""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

STUB_SOURCE = Path(__file__).with_name("stub_libcuda.c")


class EmulationError(RuntimeError):
    """What keeps the emulation from running here, in one line."""


def build_stub(folder: Path) -> Path:
    """Compile the stub into folder/libcuda.so.1 (soname libcuda.so.1, with a libcuda.so link for the launcher's
    -lcuda) and return the folder."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        raise EmulationError("host emulation needs a C compiler (gcc or cc) for the stub libcuda and Triton's launcher")
    folder.mkdir(parents=True, exist_ok=True)
    lib = folder / "libcuda.so.1"
    out = subprocess.run([cc, "-shared", "-fPIC", "-O2", "-Wl,-soname,libcuda.so.1", "-o", str(lib),
                          str(STUB_SOURCE)], capture_output=True, text=True)
    if out.returncode != 0:
        raise EmulationError(f"the stub libcuda did not compile: {out.stderr.strip()[:300]}")
    link = folder / "libcuda.so"
    if not link.exists():
        link.symlink_to(lib.name)
    return folder


def activate(folder: Path) -> None:
    """Make Triton's CUDA driver the active one over the stub in `folder`: the stub loaded first (a later
    dlopen("libcuda.so.1") finds it by its soname), Triton's launchers linked against it (TRITON_LIBCUDA_PATH), the
    device queries torch would answer given as device 0, capability 9.0, stream 0."""
    import torch

    if torch.cuda.is_available():
        raise EmulationError("a GPU is present: time the real host path there (invoke host-steps)")
    os.environ["TRITON_LIBCUDA_PATH"] = str(folder)
    ctypes.CDLL(str(folder / "libcuda.so.1"), mode=ctypes.RTLD_GLOBAL)
    import triton
    from triton.backends.nvidia.driver import CudaDriver

    try:
        driver = CudaDriver()   # compiles Triton's driver utilities against the stub
    except Exception as e:  # noqa: BLE001 - a compiler or header missing: one line, not Triton's traceback
        raise EmulationError(f"Triton's CUDA utilities did not build against the stub: {str(e).strip()[:300]}") from e
    driver.get_current_device = lambda: 0
    driver.set_current_device = lambda index: None
    driver.get_device_capability = lambda device=0: (9, 0)
    driver.get_current_stream = lambda index=None: 0
    triton.runtime.driver.set_active(driver)


class Pool:
    """O's allocation as the CUDA caching allocator makes it: a free buffer of the pool first, else a new one."""

    def __init__(self):
        self.buffers = []

    def __call__(self, Q):
        for t in self.buffers:
            if sys.getrefcount(t) == 3:   # the list, the loop variable, getrefcount's argument: nobody else
                return t
        self.buffers.append(Q.new_empty(Q.shape))
        return self.buffers[-1]


def tl_launch(N: int, D: int, causal: bool, label: str, heads: int):
    """v7's tl path compiled and launched once on CPU tensors of (heads, N, D), its candidate `label` pinned;
    returns (the module, its TmaLaunch, Q, K, V)."""
    import importlib

    import torch

    from fa2triton.interpret import only_config

    v7 = importlib.import_module("fa2triton.kernels.v7_hopper.flashattention_autograd_function_triton")
    Q, K, V = (torch.randn(heads, N, D, dtype=torch.bfloat16) for _ in range(3))
    candidates = v7._candidates("tma", Q)
    if label not in candidates:
        raise EmulationError(f"--label {label!r} is not a tl candidate at D = {D}: {', '.join(candidates)}")
    with only_config(v7.flash_fwd_kernel, candidates[label]):
        _, _, launches = v7._tma_launch(Q, K, V, causal, 0)
    return v7, launches[0], Q, K, V


def measure(N: int = 512, D: int = 64, causal: bool = True, label: str = "64,64,4,3/p0", heads: int = 32,
            calls: int = 5000, rounds: int = 3, pool: bool = True) -> dict:
    """µs per repeat (median, min, max of `rounds` loops of `calls`), encodes per repeat, and whether the launch has
    its DirectLauncher. Call after activate()."""
    import fa2triton.lean_path as lean_path

    v7, launch, Q, K, V = tl_launch(N, D, causal, label, heads)
    if pool:
        v7.empty_output = Pool()
    encodes = [0]
    encode = lean_path.encode_descriptor

    def counted(desc, meta):
        encodes[0] += 1
        return encode(desc, meta)

    lean_path.encode_descriptor = counted
    try:
        for _ in range(50):
            launch(Q, K, V, need_l=False)
        encodes[0], times = 0, []
        for _ in range(rounds):
            t0 = time.perf_counter()
            for _ in range(calls):
                launch(Q, K, V, need_l=False)
            times.append((time.perf_counter() - t0) / calls * 1e6)
    finally:
        lean_path.encode_descriptor = encode
    return {"N": N, "D": D, "causal": causal, "label": label, "pool": pool,
            "direct": lean_path.DirectLauncher.of(launch.kernel) is not None,
            "encodes_per_repeat": encodes[0] / (calls * rounds), "us_median": statistics.median(times),
            "us_min": min(times), "us_max": max(times)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--N", type=int, default=512, help="sequence length (default 512)")
    ap.add_argument("--D", type=int, default=64, choices=(64, 128), help="head dimension (default 64)")
    ap.add_argument("--causal", type=int, default=1, choices=(0, 1), help="causal mask (default 1)")
    ap.add_argument("--label", default="64,64,4,3/p0", help="the tl candidate (default the table's at N = 512, D = 64)")
    ap.add_argument("--heads", type=int, default=32, help="B * H (default 32)")
    ap.add_argument("--calls", type=int, default=5000, help="repeats per round (default 5000)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    ap.add_argument("--no-pool", action="store_true", help="O from torch's CPU allocator, not the caching pool")
    ap.add_argument("--stub-dir", type=Path, default=None, help="where to build the stub (default a temporary folder)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            activate(build_stub(args.stub_dir or Path(tmp)))
            row = measure(args.N, args.D, bool(args.causal), args.label, args.heads, args.calls, args.rounds,
                          not args.no_pool)
    except EmulationError as e:
        print(f"host emulation: {e}", file=sys.stderr)
        return 2
    import triton

    row["triton"] = triton.__version__
    if args.json:
        print(json.dumps(row))
    else:
        print(f"v7 tl {row['label']}, N {row['N']}, D {row['D']}, causal {int(row['causal'])}, Triton {row['triton']}: "
              f"DirectLauncher {'yes' if row['direct'] else 'no'}, {row['encodes_per_repeat']:.2f} encodes and "
              f"{row['us_median']:.2f} µs ({row['us_min']:.2f}-{row['us_max']:.2f}) per repeat, CPU, stub driver")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
