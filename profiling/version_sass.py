"""The same v7 kernels compiled offline for sm_90 under two Tritons, and each Triton's PTX assembled by each ptxas.

    python profiling/version_sass.py compile --work DIR [--kernels ran|all|NAME,...] [--before]   # once per Triton
    python profiling/version_sass.py assemble --work DIR --ptxas PATH --ptxas PATH [--out results/...]
    python profiling/version_sass.py report --summary results/offline-sm_90/triton39-why/summary.json

`compile` runs under the installed Triton and writes DIR/triton-<version>/<kernel>.ptx (what ptxas is given) and
.cubin (what Triton made of it), and meta.json: Triton's ptxas and its options, the PTX passes' counts, PTX
barrier and fence counts. `--before` compiles as the tree did before the kernels took fa2triton.triton_compat's
ptx_options and planted gluon_ptx.DESCRIPTOR_MARK (`same` checks that against a compile of that commit).
`assemble` takes every PTX under DIR through every ptxas given, with and without Triton 3.9's `--regAllocOptLevel=2`
and with and without wgmma_descriptor_adds, and writes summary.json: per cubin registers, stack, spills and the SASS
opcode counts of the whole kernel and of each innermost wgmma loop (one iteration). `report` prints the tables of
docs/port-triton39.md's "Why v7 is slower on 3.9". Nothing runs on a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from profiling import ir  # noqa: E402

OUT = Path("results/offline-sm_90/triton39-why")
# whole-kernel and per-iteration opcode classes: a key counts the opcodes equal to it or starting with it and "."
SASS_KEYS = ("HGMMA", "MUFU.EX2", "BAR.SYNC", "BAR.ARV", "FENCE.VIEW.ASYNC", "MEMBAR", "WARPGROUP.ARRIVE",
             "WARPGROUP.DEPBAR", "SYNCS", "STL", "LDL", "FSEL")
PTX_KEYS = ("bar.sync", "barrier.sync", "bar.arrive", "fence.proxy.async", "membar", "wgmma.fence",
            "wgmma.commit_group", "wgmma.wait_group", "mbarrier.arrive", "mbarrier.try_wait", "setmaxnreg")
PASS_NAMES = ("drop_marked_syncs", "partition_syncs", "tie_marked_arrives", "inline_consumer_call")
REGALLOC_2 = "--regAllocOptLevel=2"   # what Triton 3.9's make_cubin adds to every ptxas run


# ---------------------------------------------------------------------------------------------- the kernels

def kernels() -> dict:
    """name -> (what it is, the wgmma loops that run at N = 4096 (indices among the innermost ones, in address
    order), a function compiling it offline). "ran": what the H200 ran (docs/port-triton39.md); the rest: every
    other Gluon forward candidate and the backward's separate dK/dV kernel."""
    import torch

    from fa2lab.compile_offline import compile_for_target, compile_plan
    from fa2triton import flash_backward_triton as F
    from fa2triton.gluon import gluon_backward_hopper as B1, gluon_backward_ws as BW
    from fa2triton.gluon import gluon_configs as C, gluon_forward_hopper as G

    def preprocess(D):
        o = torch.empty(32, 4096, D, dtype=torch.bfloat16, device="meta")
        delta = torch.empty(32, 4096, dtype=torch.float32, device="meta")
        acc = torch.empty(32, 4096, D, dtype=torch.float32, device="meta")   # the atomic path's: zeroed too
        args = (o, o, delta, acc, *o.stride(), *o.stride(), *delta.stride(), *acc.stride(), 4096)
        return compile_for_target(F._bwd_preprocess_kernel, args, arch=90, num_warps=4, num_stages=3, D=D,
                                  BLOCK_Q=64, ZERO_DQ=True)

    out = {}
    for D in (64, 128):
        # the backward's NO_MASK loop of each consumer (the TAIL loops after them run only where 64 does not divide N)
        out[f"bwd_ws_d{D}"] = (f"backward gluon_backward_ws D={D}", (0, 2),
                               lambda D=D: compile_plan(BW.offline_plan(D, False, 4096)))
        out[f"bwd_pre_d{D}"] = (f"backward _bwd_preprocess_kernel D={D}", (), lambda D=D: preprocess(D))
    ran = "ws3x64x128/4s/preg/pp/split/persist/ua"
    out["fwd_d64"] = (f"forward {ran} D=64", (0, 1, 2),
                      lambda: compile_plan(G.offline_plan(C.configs_named([ran])[0], D=64)))
    for D in (64, 128):
        for cfg in G.candidates_for(D):
            if not (D == 64 and cfg.label == ran):
                name = f"fwd_d{D}_" + re.sub(r"\W+", "_", cfg.label)
                out[name] = (f"forward {cfg.label} D={D}", None,
                             lambda cfg=cfg, D=D: compile_plan(G.offline_plan(cfg, D=D)))
    for D, causal in ((64, False), (128, False), (64, True)):
        name = f"bwd_dkdv_d{D}{'_causal' * causal}"
        out[name] = (f"backward gluon_backward_hopper D={D}{' causal' * causal}", None,
                     lambda D=D, c=causal: compile_plan(B1.offline_plan(D, c, 4096)))
    out["bwd_ws_d128_causal"] = ("backward gluon_backward_ws D=128 causal", None,
                                 lambda: compile_plan(BW.offline_plan(128, True, 4096)))
    out.update(_still_slower(F, G, C, B1, BW, compile_for_target, compile_plan))
    return out


def _still_slower(F, G, C, B1, BW, compile_for_target, compile_plan) -> dict:
    """The kernels of the shapes still slower on 3.9 (docs/port-triton39.md, "Still slower on 3.9"): the split
    forward's combine (N = 4096, D = 64: 3 splits of 44 tail tiles), v7's tl forward at D = 128 causal, N = 1024, and
    the backward's at 32 heads of D = 64 causal, N = 1024 (fused), N = 2048 (separate: Delta without the zeroing, the
    Gluon dK/dV, the Triton dQ), with backward_config's sm_90 pick (64, 64, 64, 64, 4 warps, 3 stages); D = 128
    non-causal is bwd_ws_d128."""
    import torch

    from fa2triton.backward_config import default_config

    cfg = default_config(64, torch.bfloat16, "sm_90")
    bf = dict(dtype=torch.bfloat16, device="meta")

    def tensors(N, D=64, n=4):
        return [torch.empty(32, N, D, **bf) for _ in range(n)]

    def strides(*ts):
        return [s for t in ts for s in t.stride()]

    def fused(N):
        q, k, v, do, o, dk, dv, dq = tensors(N, n=8)
        lse = torch.empty(32, N, dtype=torch.float32, device="meta")
        args = (q, k, v, do, o, lse, dk, dv, dq, *strides(q, k, v, do, o, lse, dk, dv, dq), N, N, 0.125, 0)
        return compile_for_target(F._bwd_fused_kernel, args, arch=90, num_warps=cfg.num_warps,
                                  num_stages=cfg.num_stages, D=64, KV_BLOCK_Q=cfg.dkdv_q_tile,
                                  KV_BLOCK_K=cfg.dkdv_k_tile, DQ_BLOCK_Q=cfg.dq_q_tile, DQ_BLOCK_K=cfg.dq_k_tile,
                                  is_causal=True, HAS_WINDOW=False)

    def dq(N):
        q, k, v, do, dq_ = tensors(N, n=5)
        lse, delta = (torch.empty(32, N, dtype=torch.float32, device="meta") for _ in range(2))
        args = (q, k, v, do, lse, delta, dq_, *strides(q, k, v, do, lse, delta, dq_), N, N, 0.125, 0)
        return compile_for_target(F._bwd_dq_kernel, args, arch=90, num_warps=cfg.num_warps,
                                  num_stages=cfg.num_stages, D=64, BLOCK_Q=cfg.dq_q_tile, BLOCK_K=cfg.dq_k_tile,
                                  is_causal=True, HAS_WINDOW=False)

    def preprocess(N):
        o, = tensors(N, n=1)
        delta = torch.empty(32, N, dtype=torch.float32, device="meta")
        args = (o, o, delta, o, *o.stride(), *o.stride(), *delta.stride(), 0, 0, 0, N)
        return compile_for_target(F._bwd_preprocess_kernel, args, arch=90, num_warps=4, num_stages=3, D=64,
                                  BLOCK_Q=cfg.preprocess_q_tile, ZERO_DQ=False)

    def combine():
        label = "ws3x64x128/4s/preg/pp/split/persist/ua"
        gcfg = C.configs_named([label])[0]
        q, o = tensors(4096, n=2)
        lse = torch.empty(32, 4096, dtype=torch.float32, device="meta")
        plan = G.launch_plan(gcfg, q, q, q, o, lse, False, sms=132)
        t = plan.tail
        args = (t.Op, t.Lp, o, lse, t.full, 4096, o.stride(1), lse.stride(0), t.splits)
        return compile_for_target(G._combine_tail_kernel(), args, arch=90, num_warps=4, num_stages=3,
                                  MAX=G.MAX_SPLITS, BLOCK_M=gcfg.block_m, CHUNK=32, D=64)

    def tl_forward(N, D):
        from fa2triton.budget import Config
        from fa2triton.kernels.v7_hopper import flashattention_autograd_function_triton as V7

        tcfg = Config.parse("64,64,4,3")   # the launch table's tl pick at D = 128 causal, N = 512 and 1024
        args, extra = V7.offline_compile_args(N, D, "bf16", 32, tcfg, True, pipeline_qk=0)
        return compile_for_target(V7.flash_fwd_kernel, args, arch=90, num_warps=tcfg.num_warps,
                                  num_stages=tcfg.num_stages, D=D, Q_TILE_SIZE=tcfg.q_tile, K_TILE_SIZE=tcfg.k_tile,
                                  is_causal=True, **extra)

    return {"fwd_combine_d64": ("forward _combine_tail_kernel D=64", (), combine),
            "fwd_tl_d128_causal": ("forward tl 64x64/4w/3s D=128 causal N=1024", None, lambda: tl_forward(1024, 128)),
            "bwd_fused_d64_causal": ("backward _bwd_fused_kernel D=64 causal N=1024", None, lambda: fused(1024)),
            "bwd_dq_d64_causal": ("backward _bwd_dq_kernel D=64 causal N=2048", None, lambda: dq(2048)),
            "bwd_pre_d64_nozero": ("backward _bwd_preprocess_kernel D=64 ZERO_DQ=0", (), lambda: preprocess(2048)),
            "bwd_dkdv_d64_causal_n2048": ("backward gluon_backward_hopper D=64 causal N=2048", None,
                                          lambda: compile_plan(B1.offline_plan(64, True, 2048))),
            "bwd_ws_d128_n1024": ("backward gluon_backward_ws D=128 N=1024", (0, 2),
                                  lambda: compile_plan(BW.offline_plan(128, False, 1024)))}


RAN = ("bwd_ws_d64", "bwd_ws_d128", "bwd_pre_d64", "bwd_pre_d128", "fwd_d64")
# the shapes still slower on 3.9 after the fixes (_still_slower), with the forward they were found in
SLOWER = ("fwd_d64", "fwd_combine_d64", "fwd_tl_d128_causal", "bwd_ws_d128", "bwd_ws_d128_n1024",
          "bwd_fused_d64_causal", "bwd_dq_d64_causal", "bwd_pre_d64_nozero", "bwd_dkdv_d64_causal_n2048")


def ptx_counts(ptx: str) -> dict:
    return ir.ptx_counts(ptx, PTX_KEYS)


def compile_all(work: Path, names: list[str], before: bool) -> Path:
    """Compile `names` under this Triton into work/triton-<version>/ (a fresh Triton cache, so every PTX pass runs)."""
    os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="version-sass-")
    import triton

    from importlib import import_module

    from fa2triton import triton_compat as tc
    from fa2triton.gluon import gluon_ptx as P
    counts: Counter = Counter()
    for name in (*PASS_NAMES, "wgmma_descriptor_adds"):
        if hasattr(P, name):
            def counting(text, f=getattr(P, name), name=name):
                out, n = f(text)
                counts[name] += n
                return out, n
            setattr(P, name, counting)
    specs, folder = kernels(), work / f"triton-{triton.__version__}"
    if before:   # no ptx_options, no DESCRIPTOR_MARK planted: the kernels as they were
        from triton.experimental.gluon import language as gl

        for m in ("gluon_forward_hopper", "gluon_backward_hopper", "gluon_backward_ws"):
            import_module(f"fa2triton.gluon.{m}").ptx_options = lambda: None
        for m in ("gluon_kernel", "gluon_backward_hopper", "gluon_backward_ws"):
            import_module(f"fa2triton.gluon.{m}")._DESCRIPTOR_ADDS = gl.constexpr(False)
    folder.mkdir(parents=True, exist_ok=True)
    meta = {"triton": triton.__version__, "before": before, "kernels": {}}
    ptxas = tc.get_ptxas(90)
    meta["ptxas"] = {"path": ptxas.path, "version": ptxas.version, "triton_flags": list(tc.triton_ptxas_flags())}
    for i, name in enumerate(names, 1):
        what, _, compile_ = specs[name]
        print(f"[{i}/{len(names)}] {what}", flush=True)
        counts.clear()
        k = compile_()
        (folder / f"{name}.ptx").write_text(k.asm["ptx"])
        (folder / f"{name}.cubin").write_bytes(k.asm["cubin"])
        meta["kernels"][name] = {"what": what, "passes": dict(counts), "ptx": ptx_counts(k.asm["ptx"]),
                                 "ptx_options": getattr(k.metadata, "ptx_options", None),
                                 "shared": k.metadata.shared, "num_warps": k.metadata.num_warps}
        (folder / "meta.json").write_text(json.dumps(meta, indent=1))   # after each kernel: an interrupt keeps them
    return folder


# ---------------------------------------------------------------------------------------------- ptxas and SASS

def _tool(path: str, *args: str) -> str:
    p = subprocess.run([path, *args], capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        raise RuntimeError(f"{Path(path).name} {' '.join(args)} failed:\n{p.stderr[-2000:]}")
    return p.stdout + p.stderr


def tool_version(path: str) -> str:
    """'13.4' from an NVIDIA tool's --version."""
    return re.search(r"release (\d+\.\d+)", _tool(path, "--version")).group(1)


def assemble(ptx: str, ptxas: str, flags: list[str], cubin: Path) -> str:
    """ptxas as Triton's make_cubin runs it (line info, -v, sm_90a) with `flags`; PTX from a newer ISA is relabelled to
    the highest this ptxas reads (Triton 3.9's PTX at ISA 9.x uses nothing 8.7 lacks: every kernel here assembles)."""
    from triton.backends.nvidia.compiler import ptx_get_version

    isa = ptx_get_version(tool_version(ptxas))
    if int(re.search(r"^\.version (\d+)\.(\d+)", ptx, re.M).expand(r"\1\2")) > isa:
        ptx = re.sub(r"^\.version \d+\.\d+", f".version {isa // 10}.{isa % 10}", ptx, count=1, flags=re.M)
    src = cubin.with_suffix(".ptx")
    src.write_text(ptx)
    return _tool(ptxas, "-lineinfo", "-v", *flags, "--gpu-name=sm_90a", str(src), "-o", str(cubin))


def _opcode_counts(instructions) -> dict:
    ops = Counter(i["op"] for i in instructions)
    out = {k: sum(n for op, n in ops.items() if op == k or op.startswith(k + ".")) for k in SASS_KEYS}
    # uniform datapath (UIADD3, UMOV, ULEA, ...; not the TMA unit's UTMA*/UBLKCP) and moves into it
    out["uniform"] = sum(n for op, n in ops.items() if (op[0] == "U" and not op.startswith(("UTMA", "UBLK")))
                         or op == "R2UR")
    # MUFU issued right after a MUFU (address order): back to back they fill the MIO queue (ncu's mio_throttle)
    out["MUFU pairs"] = sum(a["op"].startswith("MUFU") and b["op"].startswith("MUFU")
                            for a, b in zip(instructions, instructions[1:]))
    return {"instructions": len(instructions), **out}


def sass_stats(cubin: Path, nvdisasm: str, cuobjdump: str, hot) -> dict:
    """Registers, stack, whole-kernel opcode counts and those of one iteration of each innermost wgmma loop (address
    order); `hot` (indices) marks the loops that run at N = 4096."""
    sass = _tool(nvdisasm, "-c", str(cubin))
    res = ir.cuobjdump_resource_usage(_tool(cuobjdump, "-res-usage", str(cubin)))
    ins = ir.sass_instructions(sass)
    loops = []
    for loop in ir.sass_loops(sass, ("HGMMA",)):
        if loop["innermost"] and loop["counts"].get("HGMMA"):
            a, b = int(loop["start"], 16), int(loop["end"], 16)
            loops.append({"start": loop["start"], **_opcode_counts([i for i in ins if a <= i["addr"] <= b])})
    for i, loop in enumerate(loops):
        loop["hot"] = hot is not None and i in hot
    return {"registers": res.get("REG"), "stack": res.get("STACK"), "kernel": _opcode_counts(ins), "loops": loops}


def assemble_all(work: Path, ptxases: list[str], out: Path, after: Path | None = None) -> dict:
    """Every work/triton-*/ PTX through every ptxas, {as given, + --regAllocOptLevel=2} x {as is, descriptor adds}
    (the latter only where it rewrites something), and Triton's own cubin; with `after` (a compile of the tree with
    the fixes), its Triton-built cubins and whether their SASS equals work's; summary.json under `out`."""
    from fa2lab.compile_offline import tool_path
    from fa2triton.triton_compat import wgmma_descriptor_adds

    specs = kernels()
    if not sorted(work.glob("triton-*/meta.json")):
        raise SystemExit(f"no triton-<version>/meta.json under {work}: run `compile --work {work}` first")
    for p in ptxases:
        if not Path(p).is_file():
            raise SystemExit(f"--ptxas {p}: no such file")
    nvdisasm, cuobjdump = tool_path("nvdisasm"), tool_path("cuobjdump")
    summary = {"tools": {"nvdisasm": tool_version(nvdisasm),
                         "ptxas": {tool_version(p): p for p in ptxases}}, "versions": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for folder in sorted(work.glob("triton-*")):
            meta = json.loads((folder / "meta.json").read_text())
            version = summary["versions"].setdefault(folder.name, {"meta": meta, "kernels": {}})
            for name in meta["kernels"]:
                hot = specs[name][1]
                ptx = (folder / f"{name}.ptx").read_text()
                rewritten, n = wgmma_descriptor_adds(ptx)
                rows = {"triton": sass_stats(folder / f"{name}.cubin", nvdisasm, cuobjdump, hot)}
                for p in ptxases:
                    label = tool_version(p)
                    for flags, tag in (([], ""), ([REGALLOC_2], "+r2")):
                        for text, dtag in ((ptx, ""), (rewritten, "+desc")) if n else ((ptx, ""),):
                            key = f"{label}{tag}{dtag}"
                            print(f"{folder.name} {name} {key}", flush=True)
                            cubin = Path(tmp) / f"{folder.name}-{name}-{key}.cubin"
                            log = assemble(text, p, flags, cubin)
                            rows[key] = {**sass_stats(cubin, nvdisasm, cuobjdump, hot), **ir.ptxas_usage(log)}
                version["kernels"][name] = {"what": specs[name][0], "descriptor_adds": n, "sass": rows}
                fixed = after / folder.name / f"{name}.cubin" if after else None
                if fixed and fixed.exists():
                    meta_after = json.loads((after / folder.name / "meta.json").read_text())["kernels"][name]
                    version["kernels"][name]["after"] = {
                        **sass_stats(fixed, nvdisasm, cuobjdump, hot), "meta": meta_after,
                        "same_sass": sass_text(fixed, nvdisasm) == sass_text(folder / f"{name}.cubin", nvdisasm)}
                out.mkdir(parents=True, exist_ok=True)   # after each kernel: an interrupt keeps the ones done
                (out / "summary.json").write_text(json.dumps(summary, separators=(",", ":")))
    return summary


def sass_text(cubin: Path, nvdisasm: str) -> str:
    """The cubin's instructions as nvdisasm prints them, one per line, without addresses, comments or line info."""
    ins = ir.sass_instructions(_tool(nvdisasm, "-c", str(cubin)))
    return "\n".join(f"{i['pred']} {i['op']} {i['args']}" for i in ins)


def same_sass(a: Path, b: Path) -> list[str]:
    """Per Triton and kernel compiled under both work folders: whether Triton's two cubins have the same SASS."""
    from fa2lab.compile_offline import tool_path

    nvdisasm, out = tool_path("nvdisasm"), []
    for folder in sorted(a.glob("triton-*")):
        for cubin in sorted(folder.glob("*.cubin")):
            other = b / folder.name / cubin.name
            if other.exists():
                same = sass_text(cubin, nvdisasm) == sass_text(other, nvdisasm)
                out.append(f"{folder.name} {cubin.stem}: {'same SASS' if same else 'SASS DIFFERS'}")
    return out


# ---------------------------------------------------------------------------------------------- tables

def _hot(row: dict, key: str) -> str:
    """One value per hot loop (every loop where none is marked), comma-separated."""
    loops = [loop for loop in row["loops"] if loop["hot"]] or row["loops"]
    return ", ".join(str(loop[key]) for loop in loops) or "-"


LOOP_SYNC = ("HGMMA", "MUFU.EX2", "BAR.SYNC", "BAR.ARV", "FENCE.VIEW.ASYNC", "MEMBAR", "WARPGROUP.ARRIVE",
             "WARPGROUP.DEPBAR", "SYNCS")


def _loop_sync(row: dict) -> str:
    """The LOOP_SYNC counts of one iteration of the first hot loop, slash-separated ("-" without loops)."""
    loops = [loop for loop in row["loops"] if loop["hot"]] or row["loops"]
    return "/".join(str(loops[0][k]) for k in LOOP_SYNC) if loops else "-"


def _table(head: list[str], rows: list[list]) -> list[str]:
    """Markdown table lines."""
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + \
        ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]


def _rows(summary: dict):
    """(kernel name, Triton version, its entry) in kernel order, then version order."""
    versions = summary["versions"]
    for name in next(iter(versions.values()))["kernels"]:
        for v, data in versions.items():
            if name in data["kernels"]:
                yield name, v.removeprefix("triton-"), data["kernels"][name], data["meta"]["kernels"][name]


def _own_table(summary: dict) -> list[str]:
    rows = []
    for _, v, k, meta in _rows(summary):
        s, kk = k["sass"]["triton"], k["sass"]["triton"]["kernel"]
        passes = ", ".join(f"{p} {n}" for p, n in meta["passes"].items() if n)
        rows.append([k["what"], v, s["registers"], s["stack"], f"{kk['STL']} / {kk['LDL']}", kk["BAR.SYNC"],
                     f"{kk['FENCE.VIEW.ASYNC']} / {kk['MEMBAR']}", _hot(s, "instructions"), _hot(s, "uniform"),
                     f"{_hot(s, 'STL')} / {_hot(s, 'LDL')}", _loop_sync(s),
                     meta["ptx"]["bar.sync"] + meta["ptx"]["barrier.sync"], passes or "-"])
    return _table(["kernel", "Triton", "registers", "stack", "STL / LDL", "BAR.SYNC", "FENCE.VIEW.ASYNC / MEMBAR",
                   "loop instructions", "loop uniform", "loop STL / LDL", "loop " + " / ".join(LOOP_SYNC),
                   "PTX bar.sync + barrier.sync", "passes"], rows)


def _cross_table(summary: dict) -> list[str]:
    variants = sorted({key for _, _, k, _ in _rows(summary) for key in k["sass"] if key != "triton"})

    def cell(s):
        pairs = s and s["kernel"].get("MUFU pairs")   # (summaries from before it was counted lack it)
        return "" if s is None else \
            f"{s['kernel']['STL']}/{s['kernel']['LDL']}: {_hot(s, 'instructions')} " \
            f"({_hot(s, 'STL')} / {_hot(s, 'LDL')})" + ("" if pairs is None else f", MUFU pairs {pairs}")
    rows = [[k["what"], v, *(cell(k["sass"].get(key)) for key in variants)] for _, v, k, _ in _rows(summary)]
    return _table(["kernel", "PTX of", *variants], rows)


def _after_table(summary: dict) -> list[str]:
    rows = []
    for _, v, k, _ in _rows(summary):
        if "after" not in k:
            continue
        b, a = k["sass"]["triton"], k["after"]

        def arrow(f):
            return f"{f(b)} → {f(a)}" if f(b) != f(a) else f(a)
        rows.append([k["what"], v, "yes" if a["same_sass"] else "no",
                     a["meta"]["passes"].get("wgmma_descriptor_adds", 0), a["meta"]["ptx_options"] or "-",
                     arrow(lambda s: s["stack"]), arrow(lambda s: f"{s['kernel']['STL']} / {s['kernel']['LDL']}"),
                     arrow(lambda s: _hot(s, "instructions")), arrow(lambda s: _hot(s, "uniform")),
                     arrow(lambda s: f"{_hot(s, 'STL')} / {_hot(s, 'LDL')}")])
    return _table(["kernel", "Triton", "same SASS", "descriptors rewritten", "ptx_options", "stack", "STL / LDL",
                   "loop instructions", "loop uniform", "loop STL / LDL"], rows) if rows else []


def report(summary: dict) -> str:
    """Markdown: the ptxas of each Triton, then how each Triton built each kernel, how each ptxas variant builds
    each Triton's PTX and (with an `after` compile) each Triton's build before and after the fixes."""
    out = []
    for v, data in summary["versions"].items():
        m = data["meta"]["ptxas"]
        out.append(f"- `{v}`: ptxas {m['version']} ({Path(m['path']).name}), Triton's own ptxas options: "
                   f"{' '.join(m['triton_flags']) or 'none'}"
                   f"{'; compiled as before the fixes' if data['meta'].get('before') else ''}")
    out += ["", "Triton's own compile of each kernel (SASS of its cubin; the loops: one iteration of each hot wgmma "
            "loop, the opcode counts of the first):", "", *_own_table(summary)]
    out += ["", "Each Triton's PTX through each ptxas (`+r2`: with Triton 3.9's --regAllocOptLevel=2; `+desc`: "
            "after wgmma_descriptor_adds): whole-kernel STL / LDL, then the hot loops' instructions (STL / LDL), and "
            "the whole kernel's MUFU issued right after a MUFU:", "",
            *_cross_table(summary)]
    after = _after_table(summary)
    if after:
        out += ["", "Triton's own compile before and after the fixes (ptx_options, wgmma_descriptor_adds where the "
                "kernel plants its mark):", "", *after]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compile", help="compile the kernels under the installed Triton (no GPU)")
    c.add_argument("--work", type=Path, required=True, help="folder for the PTX and cubins (not committed)")
    c.add_argument("--kernels", default="ran", help="'ran' (what the H200 timed), 'slower' (the shapes still slower "
                   "on 3.9), 'all', or names, comma-separated")
    c.add_argument("--before", action="store_true", help="without ptx_options and wgmma_descriptor_adds")
    a = sub.add_parser("assemble", help="every PTX under --work through every --ptxas; writes summary.json")
    a.add_argument("--work", type=Path, required=True)
    a.add_argument("--ptxas", action="append", required=True, help="a ptxas binary (give each Triton's)")
    a.add_argument("--out", type=Path, default=OUT)
    a.add_argument("--after", type=Path, help="a compile of the tree with the fixes (its Triton-built cubins)")
    s = sub.add_parser("same", help="whether two --work folders' cubins have the same SASS, per Triton and kernel")
    s.add_argument("work", type=Path, nargs=2)
    r = sub.add_parser("report", help="print the tables from a summary.json")
    r.add_argument("--summary", type=Path, default=OUT / "summary.json")
    args = ap.parse_args(argv)
    if args.cmd == "compile":
        names = list(kernels()) if args.kernels == "all" else list(RAN) if args.kernels == "ran" else \
            list(SLOWER) if args.kernels == "slower" else \
            args.kernels.split(",")
        unknown = sorted(set(names) - set(kernels()))
        if unknown:
            ap.error(f"unknown kernels {unknown}; known: {', '.join(kernels())}")
        print(compile_all(args.work, names, args.before))
    elif args.cmd == "assemble":
        summary = assemble_all(args.work, args.ptxas, args.out, args.after)
        (args.out / "summary.md").write_text(report(summary))
        print(args.out / "summary.md")
    elif args.cmd == "same":
        lines = same_sass(*args.work)
        print("\n".join(lines))
        return 0 if lines and all(line.endswith("same SASS") for line in lines) else 1
    else:
        print(report(json.loads(args.summary.read_text())), end="")
    return 0


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
