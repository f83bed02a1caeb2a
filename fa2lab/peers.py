"""Peer attention backends, timed beside the versions in the same process (issue 38): one registry,
in the manner of tritonbench's attention operator (each backend registered once, behind a capability flag).

A peer is registered once with
  - a name, which prefixes its result columns ("fa4": fa4_ms, pct_of_fa4, fa4_status, ...);
  - a label for tables and logs ("flash-attn-4 sm90");
  - `enabled` and `status()`: whether it can run here ("ok", "not installed", "no CUDA GPU",
    "needs sm_90 (this GPU is sm_89)", "import failed: ..."). They are worked out on first use, never at
    import, so that a missing package is a status and never an error; HAS_FA4 reads the same flag;
  - `versions()`: its distributions' versions (importlib.metadata), for the rows' provenance;
  - how to run it on the harnesses' inputs, which are in our layout (B*H, N, D): `prepare` converts them to
    the peer's layout once, `call` is what the harnesses time, `to_ours` converts its output back.

ForwardRun and BackwardRun hold one peer's columns at one shape for the harnesses: every step goes through
`attempt`, and the first step that raises sets the status to a one-line reason and leaves the columns that
follow NaN; the harness goes on with the next peer and the next shape.

    python -m fa2lab.peers            # every peer's status and versions, on any machine
    python -m fa2lab.peers --check    # on the GPU: one forward and backward per (D, causal) against SDPA
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import math
import sys
import time
from dataclasses import dataclass, field
from typing import Callable

OK = "ok"
NOT_INSTALLED = "not installed"
NAN = float("nan")


# ----------------------------------------------------------------------------------------- layouts

def to_bnhd(x, B: int, H: int):
    """Our layout (B*H, N, D) as (B, N, H, D), contiguous. (B*H, N, D) -> (B, H, N, D) is a free view;
    swapping the head and sequence axes is a view too, but a strided one, so this copies, to give the peer
    the layout it is written for (its own callers' layout) with no copy left inside the timed call."""
    BH, N, D = x.shape
    if BH != B * H:
        raise ValueError(f"the first dimension is {BH}, not B * H = {B} * {H}")
    return x.reshape(B, H, N, D).transpose(1, 2).contiguous()


def from_bnhd(x):
    """(B, N, H, D) back to our layout (B*H, N, D), contiguous (a copy, outside any timed call)."""
    B, N, H, D = x.shape
    return x.transpose(1, 2).reshape(B * H, N, D)


LAYOUTS = {"bnhd": (to_bnhd, from_bnhd)}


# ----------------------------------------------------------------------------------------- the registry

@dataclass(eq=False)
class Peer:
    """One peer backend. `loader` imports and returns its attention function f(q, k, v, causal=...) on tensors
    of `layout`, returning the output or a tuple whose first element is the output."""

    name: str
    label: str
    loader: Callable[[], Callable]
    packages: tuple[str, ...] = ()        # modules whose absence means "not installed" (checked before any import)
    distributions: tuple[str, ...] = ()   # the distributions whose versions go into peer_versions
    arch: str | None = "sm_90"            # the architecture it is registered for; None: any device (the CPU too)
    layout: str = "bnhd"
    _status: str | None = field(default=None, init=False, repr=False)
    _fn: Callable | None = field(default=None, init=False, repr=False)

    def status(self) -> str:
        """'ok', or why it cannot run here; worked out once, on first use."""
        if self._status is None:
            self._status = self._probe()
        return self._status

    @property
    def enabled(self) -> bool:
        return self.status() == OK

    def reset(self) -> None:
        """Forget the status and the loaded function (the next status() probes again)."""
        self._status = self._fn = None

    def _probe(self) -> str:
        for module in self.packages:
            try:
                found = importlib.util.find_spec(module) is not None
            except (ImportError, ValueError):   # a missing parent package
                found = False
            if not found:
                return NOT_INSTALLED
        if self.arch is not None:
            import torch

            if not torch.cuda.is_available():
                return "no CUDA GPU"
            major, minor = torch.cuda.get_device_capability()
            if f"sm_{major}{minor}" != self.arch:
                return f"needs {self.arch} (this GPU is sm_{major}{minor})"
        try:
            self._fn = self.loader()
        except ModuleNotFoundError as e:
            if e.name in self.packages:
                return NOT_INSTALLED
            return failure("import", e)
        except Exception as e:  # noqa: BLE001 - whatever the import raises becomes the status
            return failure("import", e)
        return OK

    def function(self) -> Callable:
        """The loaded attention function; a RuntimeError naming the status when it cannot run here."""
        if not self.enabled:
            raise RuntimeError(f"peer {self.name} ({self.label}): {self.status()}")
        return self._fn

    def versions(self) -> str:
        """'dist==version ...' for each of its distributions that is installed; '' for none."""
        from importlib import metadata

        found = []
        for dist in self.distributions:
            try:
                found.append(f"{dist}=={metadata.version(dist)}")
            except metadata.PackageNotFoundError:
                pass
        return " ".join(found)

    # our layout (B*H, N, D) <-> the peer's
    def prepare(self, q, k, v, B: int, H: int, requires_grad: bool = False) -> tuple:
        """q, k, v in the peer's layout (copies made here, once: keep this out of timed calls); with
        requires_grad, as leaves that autograd differentiates."""
        out = tuple(self.to_peer(t.detach(), B, H) for t in (q, k, v))
        return tuple(t.requires_grad_() for t in out) if requires_grad else out

    def to_peer(self, x, B: int, H: int):
        return LAYOUTS[self.layout][0](x, B, H)

    def to_ours(self, x, B: int, H: int):
        out = LAYOUTS[self.layout][1](x)
        if out.shape[0] != B * H:
            raise ValueError(f"peer {self.name}: output has {out.shape[0]} heads in all, not B * H = {B * H}")
        return out

    def call(self, prepared: tuple, causal: bool):
        """The timed call: the peer's function on inputs from prepare; its output, in the peer's layout."""
        out = self.function()(*prepared, causal=bool(causal))
        return out[0] if isinstance(out, (tuple, list)) else out

    def forward(self, q, k, v, causal: bool, B: int, H: int):
        """O in our layout (B*H, N, D) for q, k, v in ours (layout copies included: not for timing)."""
        return self.to_ours(self.call(self.prepare(q, k, v, B, H), causal), B, H)

    def forward_backward(self, q, k, v, dO, causal: bool, B: int, H: int) -> tuple:
        """(O, dQ, dK, dV) in our layout, through autograd on the peer's function (not for timing)."""
        import torch

        pq = self.prepare(q, k, v, B, H, requires_grad=True)
        O = self.call(pq, causal)
        grads = torch.autograd.grad(O, pq, self.to_peer(dO, B, H))
        return tuple(self.to_ours(t.detach(), B, H) for t in (O, *grads))


def _flash_attn_4():
    from flash_attn.cute import flash_attn_func

    return flash_attn_func


REGISTRY: dict[str, Peer] = {}


def register(peer: Peer) -> Peer:
    if peer.name in REGISTRY:
        raise ValueError(f"peer {peer.name!r} is registered already")
    if not peer.name.isidentifier():
        raise ValueError(f"peer name {peer.name!r} must be an identifier (it prefixes column names)")
    REGISTRY[peer.name] = peer
    return peer


# flash-attn-4: FlashAttention's CuTe-DSL package; on sm_90 it runs FA3's Hopper design (flash_fwd_sm90.py,
# flash_bwd_sm90.py), compiled on the first call of each (head_dim, causal, ...). flash_attn_func(q, k, v,
# causal=...) takes (batch, seqlen, heads, head_dim) and returns out, or (out, lse) in recent releases.
register(Peer("fa4", "flash-attn-4 sm90", _flash_attn_4, packages=("flash_attn", "flash_attn.cute"),
              distributions=("flash-attn-4", "nvidia-cutlass-dsl")))


def __getattr__(name: str):
    """HAS_FA4 (HAS_<NAME> for each registered peer): its `enabled`, worked out when first read."""
    if name.startswith("HAS_") and name[4:].lower() in REGISTRY:
        return REGISTRY[name[4:].lower()].enabled
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def chosen(text: str = "all") -> list[Peer]:
    """The --peers option: 'all' (every registered peer: those that cannot run here give a status column),
    'none', or comma-separated names. An unknown name is a ValueError naming the known ones."""
    text = (text or "all").strip()
    if text == "none":
        return []
    if text == "all":
        return list(REGISTRY.values())
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in REGISTRY]
    if unknown:
        raise ValueError(f"unknown peer(s) {', '.join(unknown)}; registered: {', '.join(REGISTRY)} (or all, none)")
    return [REGISTRY[n] for n in dict.fromkeys(names)]


def versions_column(peers: list[Peer]) -> str:
    """The rows' peer_versions: 'fa4: flash-attn-4==... nvidia-cutlass-dsl==...' per peer with an installed one."""
    return "; ".join(f"{p.name}: {v}" for p in peers if (v := p.versions()))


# ----------------------------------------------------------------------------------------- one shape's columns

def failure(what: str, e: BaseException) -> str:
    """A one-line reason: '<what> failed: <Type>: <the message's first line>' (at most 200 characters)."""
    message = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return (f"{what} failed: {type(e).__name__}" + (f": {message}" if message else ""))[:200]


def _synced(fn):
    """fn(), with the GPU's queue drained, so that an asynchronous CUDA error surfaces here."""
    import torch

    out = fn()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
    return out


class Run:
    """One peer's columns at one shape: values by column (NaN until measured) and its status."""

    COLUMNS: tuple[str, ...] = ()

    def __init__(self, peer: Peer):
        self.peer = peer
        self.values = dict.fromkeys(self.COLUMNS, NAN)
        self.status = peer.status()

    @property
    def ok(self) -> bool:
        return self.status == OK

    def attempt(self, what: str, fn):
        """fn(), unless an earlier step failed (then None); an exception becomes the status and gives None."""
        if not self.ok:
            return None
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - a peer failing at one shape never stops the run
            self.status = failure(what, e)
            return None

    def time(self, column: str, timer, fn) -> None:
        """values[column] = timer(fn) (a fa2lab.timers function), unless an earlier step failed."""
        value = self.attempt(column, lambda: float(timer(fn)))
        if value is not None:
            self.values[column] = value

    def row(self) -> dict:
        """The columns, prefixed with the peer's name, and <name>_status."""
        return {**{f"{self.peer.name}_{c}": v for c, v in self.values.items()}, f"{self.peer.name}_status": self.status}


class ForwardRun(Run):
    """The forward harness's columns for one peer at one shape: inputs converted once, one call (which
    compiles, if warm_up has not), its output checked against SDPA's `ref` (our layout); `call` is what the
    harness times."""

    COLUMNS = ("ms", "graph_ms", "noflush_ms", "host_us", "max_abs_err_vs_sdpa")

    def __init__(self, peer: Peer, q, k, v, B: int, H: int, causal: bool, ref):
        super().__init__(peer)
        self.call = None
        prepared = self.attempt("prepare", lambda: peer.prepare(q, k, v, B, H))
        if not self.ok:
            return
        call = lambda: peer.call(prepared, causal)   # noqa: E731
        out = self.attempt("forward", lambda: _synced(call))
        err = self.attempt("check", lambda: (peer.to_ours(out, B, H).float() - ref.float()).abs().max().item())
        if err is not None:
            self.values["max_abs_err_vs_sdpa"] = float(err)
            self.call = call


class BackwardRun(Run):
    """The backward harness's columns for one peer at one shape: forward + backward (`fwd_bwd`) and the
    backward alone on a graph kept from one forward (`bwd`, retain_graph), its gradients checked against
    SDPA's `ref_grads` (dQ, dK, dV as (B, H, N, D)) by relative Frobenius error."""

    COLUMNS = ("fwd_bwd_ms", "bwd_ms", "bwd_host_us", "rel_err_dq_vs_sdpa", "rel_err_dk_vs_sdpa", "rel_err_dv_vs_sdpa")

    def __init__(self, peer: Peer, q, k, v, dO, B: int, H: int, causal: bool, ref_grads):
        super().__init__(peer)
        self.fwd_bwd = self.bwd = None
        if not self.ok:
            return
        import torch

        from fa2triton.reference import relative_error

        pq = self.attempt("prepare", lambda: peer.prepare(q, k, v, B, H, requires_grad=True))
        pdO = self.attempt("prepare", lambda: peer.to_peer(dO, B, H))
        O = self.attempt("forward", lambda: _synced(lambda: peer.call(pq, causal)))
        bwd = lambda: torch.autograd.grad(O, pq, pdO, retain_graph=True)   # noqa: E731
        grads = self.attempt("backward", lambda: _synced(bwd))
        if grads is None:
            return
        errs = self.attempt("check", lambda: [relative_error(peer.to_ours(g, B, H).view_as(r), r)
                                              for g, r in zip(grads, ref_grads)])
        if errs is None:
            return
        self.values.update({f"rel_err_d{n}_vs_sdpa": e for n, e in zip("qkv", errs)})
        self.bwd = bwd
        self.fwd_bwd = lambda: torch.autograd.grad(peer.call(pq, causal), pq, pdO)


def forward_ratios(row: dict, peers: list[Peer], flops: float) -> dict:
    """The derived forward columns per peer: <name>_tflops, pct_of_<name> = 100 * <name>_ms / ms (ours as a
    percentage of the peer's speed, like pct_of_sdpa) and graph_pct_of_<name> from the graph-replay times."""
    out = {}
    for p in peers:
        n = p.name
        out[f"{n}_tflops"] = tflops(flops, row.get(f"{n}_ms", NAN))
        out[f"pct_of_{n}"] = ratio_pct(row.get(f"{n}_ms", NAN), row.get("ms", NAN))
        out[f"graph_pct_of_{n}"] = ratio_pct(row.get(f"{n}_graph_ms", NAN), row.get("graph_ms", NAN))
    return out


def backward_ratios(row: dict, peers: list[Peer], bwd_flops: float, fwd_bwd_flops: float) -> dict:
    """The derived backward columns per peer: <name>_bwd_tflops, <name>_fwd_bwd_tflops, bwd_pct_of_<name> and
    fwd_bwd_pct_of_<name> (100 * the peer's ms / ours)."""
    out = {}
    for p in peers:
        n = p.name
        out[f"{n}_bwd_tflops"] = tflops(bwd_flops, row.get(f"{n}_bwd_ms", NAN))
        out[f"{n}_fwd_bwd_tflops"] = tflops(fwd_bwd_flops, row.get(f"{n}_fwd_bwd_ms", NAN))
        out[f"bwd_pct_of_{n}"] = ratio_pct(row.get(f"{n}_bwd_ms", NAN), row.get("bwd_ms", NAN))
        out[f"fwd_bwd_pct_of_{n}"] = ratio_pct(row.get(f"{n}_fwd_bwd_ms", NAN), row.get("fwd_bwd_ms", NAN))
    return out


def ratio_pct(theirs_ms: float, ours_ms: float) -> float:
    """100 * theirs / ours (NaN if either is missing or ours is not positive)."""
    try:
        theirs, ours = float(theirs_ms), float(ours_ms)
    except (TypeError, ValueError):
        return NAN
    return 100.0 * theirs / ours if ours > 0 and math.isfinite(ours) else NAN


def tflops(flop: float, ms: float) -> float:
    try:
        ms = float(ms)
    except (TypeError, ValueError):
        return NAN
    return flop / (ms * 1e-3) / 1e12 if ms > 0 else NAN


def warm_up(peers: list[Peer], shapes, backward: bool = False, device: str = "cuda") -> None:
    """Compile each enabled peer at each shape (B, H, N, D, causal) before anything is timed: flash-attn-4
    compiles on the first call of each (head_dim, causal) and may choose its tiles by shape. A failure is
    left for the shape's run to report; the compile times go to stdout."""
    import torch

    for p in (p for p in peers if p.enabled):
        for s in shapes:
            q, k, v = (torch.randn(s.B * s.H, s.N, s.D, device=device, dtype=torch.bfloat16) for _ in range(3))
            t0 = time.perf_counter()
            try:
                if backward:
                    _synced(lambda: p.forward_backward(q, k, v, torch.randn_like(q), s.causal, s.B, s.H))
                else:
                    _synced(lambda: p.forward(q, k, v, s.causal, s.B, s.H))
            except Exception as e:  # noqa: BLE001 - reported by the shape's run
                print(f"  {p.name} warm-up N={s.N} D={s.D} causal={int(s.causal)}: {failure('warm-up', e)}")
                continue
            took = time.perf_counter() - t0
            if took > 1.0:
                print(f"  {p.name} warm-up N={s.N} D={s.D} causal={int(s.causal)}: {took:.1f} s (compiling)",
                      flush=True)


# ----------------------------------------------------------------------------------------- python -m fa2lab.peers

def _one_call_ms(fn, device: str) -> float:
    """One call's time: by CUDA events on the GPU, by the wall clock (synchronised) elsewhere."""
    import torch

    if device == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end)
    t0 = time.perf_counter()
    _synced(fn)
    return 1e3 * (time.perf_counter() - t0)


def check(peers: list[Peer], B: int = 4, H: int = 8, N: int = 2048, head_dims=(64, 128),
          tolerance: float = 2e-2, device: str = "cuda") -> int:
    """Per peer and (D, causal): one forward against SDPA (max abs and relative error) and one forward +
    backward against SDPA's gradients (relative error of dQ, dK, dV), each first call's wall time (it compiles)
    and one more call's time. Prints a line per case; returns 0 if every peer ran and every relative error is
    below `tolerance`, else 1."""
    import torch
    import torch.nn.functional as F

    from fa2triton.reference import relative_error

    bad = 0
    for p in peers:
        print(f"{p.name} ({p.label}): {p.status()}; {p.versions() or 'no distribution found'}", flush=True)
        if not p.enabled:
            bad += 1
            continue
        for D in head_dims:
            for causal in (False, True):
                q, k, v, dO = (torch.randn(B * H, N, D, device=device, dtype=torch.bfloat16) for _ in range(4))
                q4, k4, v4 = (t.detach().view(B, H, N, D).requires_grad_() for t in (q, k, v))
                ref = F.scaled_dot_product_attention(q4, k4, v4, is_causal=causal)
                ref_grads = torch.autograd.grad(ref, (q4, k4, v4), dO.view(B, H, N, D))
                ref = ref.detach().reshape(B * H, N, D)
                where = f"  D={D} causal={int(causal)} N={N}:"
                try:
                    prepared = p.prepare(q, k, v, B, H)
                    t0 = time.perf_counter()
                    out = _synced(lambda: p.call(prepared, causal))
                    fwd_first_s = time.perf_counter() - t0
                    fwd_ms = _one_call_ms(lambda: p.call(prepared, causal), device)
                    O = p.to_ours(out, B, H)
                    err, rel = (O.float() - ref.float()).abs().max().item(), relative_error(O, ref)
                    t0 = time.perf_counter()
                    _, *grads = _synced(lambda: p.forward_backward(q, k, v, dO, causal, B, H))
                    bwd_first_s = time.perf_counter() - t0
                    leaves, pdO = p.prepare(q, k, v, B, H, requires_grad=True), p.to_peer(dO, B, H)
                    fb_ms = _one_call_ms(lambda: torch.autograd.grad(p.call(leaves, causal), leaves, pdO), device)
                    grad_rel = [relative_error(g.view(B, H, N, D), r) for g, r in zip(grads, ref_grads)]
                except Exception as e:  # noqa: BLE001 - reported, and counted
                    print(where, failure("check", e), flush=True)
                    bad += 1
                    continue
                worst = max(rel, *grad_rel)
                bad += not worst < tolerance
                print(where, f"forward: max abs err vs SDPA {err:.2e}, rel err {rel:.2e}, "
                      f"first call {fwd_first_s:.1f} s, one call {fwd_ms:.3f} ms; backward: rel err dq {grad_rel[0]:.2e} dk {grad_rel[1]:.2e} "
                      f"dv {grad_rel[2]:.2e}, first call {bwd_first_s:.1f} s, forward + backward {fb_ms:.3f} ms "
                      f"({'ok' if worst < tolerance else f'WRONG: above {tolerance:g}'})", flush=True)
    return 1 if bad else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="on a GPU: run each peer against SDPA (see check)")
    ap.add_argument("--peers", default="all", help="comma-separated peer names, or all")
    ap.add_argument("--N", type=int, default=2048, help="--check: sequence length")
    args = ap.parse_args(argv)
    try:
        peers = chosen(args.peers)
    except ValueError as e:
        print(f"--peers: {e}", file=sys.stderr)
        return 2
    if not args.check:
        for p in peers:
            print(f"{p.name:<6} {p.label:<22} {p.status():<24} {p.versions()}")
        return 0
    import torch

    if not torch.cuda.is_available():
        print("--check needs a CUDA GPU", file=sys.stderr)
        return 2
    return check(peers, N=args.N)


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
