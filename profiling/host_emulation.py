"""v7's recorded launches repeated without a GPU: Triton's own launch code over a stub libcuda, on CPU tensors.

    python profiling/host_emulation.py                         # v7's tl path, N = 512, D = 64, causal
    python profiling/host_emulation.py --path gluon --N 1024 --json
    python profiling/host_emulation.py --path bwd-ws --N 2048 --D 128
    python profiling/host_emulation.py --tree ../old-checkout       # that checkout's fa2triton, this tool

Triton's launcher (its C module, compiled here against profiling/stub_libcuda.c, whose every driver call succeeds
at once) and fa2triton's host path run for real: the kernel is compiled for sm_90 by the JIT path and launched once,
then its recorded launch is repeated. Paths: `tl` (v7's tl forward, its TmaLaunch, with the scratch L), `gluon` (the
Gluon forward's GluonLaunch) and `bwd-ws` (the warp-specialized Gluon backward's WsLaunch, on kept gradients and
scratch). Only the driver's work is missing. It answers what a GPU-less machine can: whether the recorded launch got
its DirectLauncher, how many descriptor encodes a repeat makes, and the Python's µs per repeat. A forward's O comes
from a pool that hands out a free buffer first, as the CUDA caching allocator does (glibc's own reuse varies from run
to run; --no-pool uses it). These are not GPU numbers: nothing here goes to results/ (docs/worklogs/v7_hopper.md,
"The tl path's host cost since the port")."""

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


PATHS = ("tl", "gluon", "bwd-ws")
TL_LABEL = "64,64,4,3/p0"   # the tl path's default: the table's launch at N = 512, D = 64, causal


def _inputs(N: int, D: int, heads: int, n: int = 3):
    import torch

    return [torch.randn(heads, N, D, dtype=torch.bfloat16) for _ in range(n)]


def tl_repeat(N: int, D: int, causal: bool, label: str | None, heads: int, pool: bool):
    """v7's tl path compiled and launched once on CPU tensors of (heads, N, D), its candidate `label` pinned:
    (a call that repeats its TmaLaunch with the scratch L, the launch's compiled kernels, the label)."""
    import importlib

    from fa2triton.interpret import only_config

    v7 = importlib.import_module("fa2triton.kernels.v7_hopper.flashattention_autograd_function_triton")
    Q, K, V = _inputs(N, D, heads)
    candidates = v7._candidates("tma", Q)
    label = label or TL_LABEL
    if label not in candidates:
        raise EmulationError(f"--label {label!r} is not a tl candidate at D = {D}: {', '.join(candidates)}")
    with only_config(v7.flash_fwd_kernel, candidates[label]):
        launch = v7._tma_launch(Q, K, V, causal, 0)[2][0]
    if pool:
        v7.empty_output = Pool()
    return (lambda: launch(Q, K, V, need_l=False)), [launch.kernel], label


def gluon_repeat(N: int, D: int, causal: bool, label: str | None, heads: int, pool: bool):
    """The Gluon forward's candidate `label` (default: the first at D) compiled and launched once: (a call that
    repeats its GluonLaunch with the scratch L, its compiled kernels, the label). The GPU's SM count (the persistent
    grid and the split plan) is the stub's H200's, 132."""
    from types import SimpleNamespace

    import fa2triton.gluon.gluon_configs as configs
    import fa2triton.gluon.gluon_forward_hopper as G

    Q, K, V = _inputs(N, D, heads)
    candidates = {c.label: c for c in G.candidates_for(D)}
    label = label or next(iter(candidates))
    if label not in candidates:
        raise EmulationError(f"--label {label!r} is not a Gluon candidate at D = {D}: {', '.join(candidates)}")
    G.facts = configs.facts = lambda device=0: SimpleNamespace(sm_count=132, smem_per_block=232448)
    launch = G.forward(Q, K, V, causal, candidates[label])[2]
    if pool:
        G.empty_output = Pool()
    kernels = [launch.kernel] + ([launch.combine] if launch.combine is not None else [])
    return (lambda: launch(Q, K, V, need_l=False)), kernels, label


def bwd_ws_repeat(N: int, D: int, causal: bool, label: str | None, heads: int, pool: bool):
    """The warp-specialized Gluon backward compiled and launched once: (a call that repeats its WsLaunch on the same
    gradients and scratch, as the harness's repeat keeps them, its compiled kernel, the kernel's name)."""
    import math

    import torch

    import fa2triton.gluon.gluon_backward_ws as ws

    if label is not None:
        raise EmulationError("--label applies to the forward paths; bwd-ws has one kernel")
    q, k, v, do, dk, dv = _inputs(N, D, heads, 6)
    lse, delta = torch.zeros(heads, N), torch.zeros(heads, N)
    acc = torch.zeros(heads, N, D)
    scale = 1.0 / math.sqrt(D)
    launch = ws.launch(q, k, v, do, lse, delta, dk, dv, acc, causal, scale)
    return (lambda: launch(q, k, v, do, lse, delta, dk, dv, acc, stream=0)), [launch.kernel], ws.label(D)


REPEATS = {"tl": tl_repeat, "gluon": gluon_repeat, "bwd-ws": bwd_ws_repeat}


def measure(path: str = "tl", N: int = 512, D: int = 64, causal: bool = True, label: str | None = None,
            heads: int = 32, calls: int = 5000, rounds: int = 3, pool: bool = True) -> dict:
    """µs per repeat (median, min, max of `rounds` loops of `calls`), encodes per repeat, and whether every kernel
    of the launch has its DirectLauncher. Call after activate()."""
    import fa2triton.lean_path as lean_path

    if path not in REPEATS:
        raise EmulationError(f"--path {path!r}: one of {', '.join(PATHS)}")
    repeat, kernels, label = REPEATS[path](N, D, causal, label, heads, pool)
    encodes = [0]
    encode = lean_path.encode_descriptor

    def counted(desc, meta):
        encodes[0] += 1
        return encode(desc, meta)

    lean_path.encode_descriptor = counted
    try:
        for _ in range(50):
            repeat()
        encodes[0], times = 0, []
        for _ in range(rounds):
            t0 = time.perf_counter()
            for _ in range(calls):
                repeat()
            times.append((time.perf_counter() - t0) / calls * 1e6)
    finally:
        lean_path.encode_descriptor = encode
    return {"path": path, "N": N, "D": D, "causal": causal, "label": label,
            "pool": pool, "direct": all(lean_path.DirectLauncher.of(k) is not None for k in kernels),
            "encodes_per_repeat": encodes[0] / (calls * rounds), "us_median": statistics.median(times),
            "us_min": min(times), "us_max": max(times)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--path", default="tl", choices=PATHS, help="the recorded launch repeated (default tl)")
    ap.add_argument("--N", type=int, default=512, help="sequence length (default 512)")
    ap.add_argument("--D", type=int, default=64, choices=(64, 128), help="head dimension (default 64)")
    ap.add_argument("--causal", type=int, default=1, choices=(0, 1), help="causal mask (default 1)")
    ap.add_argument("--label", default=None, help="the forward's candidate (tl default 64,64,4,3/p0, the table's at "
                    "N = 512, D = 64; gluon default its first at D)")
    ap.add_argument("--heads", type=int, default=32, help="B * H (default 32)")
    ap.add_argument("--calls", type=int, default=5000, help="repeats per round (default 5000)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds (default 3)")
    ap.add_argument("--no-pool", action="store_true", help="O from torch's CPU allocator, not the caching pool")
    ap.add_argument("--stub-dir", type=Path, default=None, help="where to build the stub (default a temporary folder)")
    ap.add_argument("--tree", type=Path, default=None,
                    help="import fa2triton from this checkout instead (an earlier commit's, to compare)")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args(argv)
    if args.tree is not None:
        if not (args.tree / "fa2triton" / "lean_path.py").is_file():
            print(f"host emulation: --tree {args.tree} has no fa2triton/lean_path.py", file=sys.stderr)
            return 2
        sys.path.insert(0, str(args.tree.resolve()))
    try:
        with tempfile.TemporaryDirectory() as tmp:
            activate(build_stub(args.stub_dir or Path(tmp)))
            row = measure(args.path, args.N, args.D, bool(args.causal), args.label, args.heads, args.calls,
                          args.rounds, not args.no_pool)
    except EmulationError as e:
        print(f"host emulation: {e}", file=sys.stderr)
        return 2
    import triton

    import fa2triton

    row["triton"], row["tree"] = triton.__version__, str(Path(fa2triton.__file__).resolve().parent.parent)
    if args.json:
        print(json.dumps(row))
    else:
        print(f"v7 {row['path']} {row['label']}, N {row['N']}, D {row['D']}, causal {int(row['causal'])}, "
              f"Triton {row['triton']}: "
              f"DirectLauncher {'yes' if row['direct'] else 'no'}, {row['encodes_per_repeat']:.2f} encodes and "
              f"{row['us_median']:.2f} µs ({row['us_min']:.2f}-{row['us_max']:.2f}) per repeat, CPU, stub driver")
    return 0


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
