"""What the compiler did with one configuration, without launching it ("What the compiler did").

    python profiling/inspect_kernel.py --kernel v1_tiles --config 64,32,4,3 [--causal 0|1]
        [--D 64] [--dtype bf16|fp16|fp32] [--arch sm_90] [--offline] [--N 4096] [--out DIR]

Compiles flash_fwd_kernel of one version for one configuration and writes, under
results/<gpu>/inspect/<version>_<config>/ (or results/offline-<arch>/inspect/... when
compiled without a GPU for an explicit target):

  kernel.ttgir   Triton GPU IR: layouts and shared-memory buffers
  kernel.ptx     PTX
  kernel.sass    SASS disassembled from the cubin (nvdisasm -c, else cuobjdump -sass)
  summary.json   everything below, with provenance
  summary.txt    the one-screen summary this prints

The summary: registers and spills, shared memory (metadata.shared) against
fa2triton.budget.formula_shared_bytes, the MMA layout (versionMajor 2 = mma.sync/HMMA,
3 = wgmma/HGMMA on Hopper) and its warpsPerCTA, whether a ttg.local_alloc or a
ttg.convert_layout sits inside the key loop, the pipeline buffers' memdesc shapes,
and counts of the SASS instructions the article reads, for the whole kernel and per
loop iteration.

With a GPU (and no --arch other than the GPU's, no --offline) it compiles with
kernel.warmup(...) and loads the binary, as fa2lab/forward_sweep.py does, so registers and
spills are the driver's. Without one it compiles for the --arch target (default sm_90)
with triton.compile(ASTSource(...), target=GPUTarget('cuda', 90, 32)); registers and
spills then come from the cubin (cuobjdump -res-usage: the same attributes the driver
reads) and from ptxas -v run on the same PTX with Triton's flags. Nothing is launched
either way, and an offline compile says so in every file it writes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from fa2lab import shapes  # noqa: E402
from fa2triton import budget  # noqa: E402
from fa2triton.budget import Config  # noqa: E402
from fa2lab.compile_offline import bundled_tool, compile_for_target, compile_on_gpu, parse_arch, tool_path  # noqa: E402
from fa2triton.offline import DTYPES, ELEM_BYTES, forward_args  # noqa: E402
from profiling import ir  # noqa: E402

SUMMARY_SASS_KEYS = ("HGMMA", "HMMA", "MUFU.EX2", "FSETP.GEU", "BAR.SYNC", "LDGSTS", "UTMALDG", "F2FP", "SHFL")
PTX_KEYS = ("ex2.approx.ftz.f32", "ex2.approx.f32", "mma.sync", "wgmma.mma_async", "cp.async.cg",
            "cp.async.bulk", "bar.sync", "cvt.rn.bf16x2.f32", "shfl.sync")


# --------------------------------------------------------------------------- configuration

def default_config(version: str, arch: str) -> tuple[Config, str]:
    """The configuration a version uses on `arch`: its configs.json entry (the first of a short
    list), or the class attributes of a fixed version without a table (v0)."""
    from fa2triton.configs import load_table, select
    from fa2lab.switches import load
    from fa2triton.versions import get

    v = get(version)
    table_path = v.folder / "configs.json"
    if table_path.exists():
        chosen, configs = select(load_table(table_path), arch)
        note = f"{chosen} entry of {table_path.relative_to(v.folder.parent.parent)}"
        return configs[0], note + (f" (first of {len(configs)})" if len(configs) > 1 else "")
    cls = load(version).FlashAttentionTriton
    return Config(cls.Q_TILE_SIZE, cls.K_TILE_SIZE, cls.NUM_WARPS, cls.NUM_STAGES), "class attributes"


def folder_name(version: str, cfg: Config, causal: bool, D: int, dtype: str) -> str:
    name = f"{version}_{cfg.q_tile}x{cfg.k_tile}_w{cfg.num_warps}_s{cfg.num_stages}"
    if causal:
        name += "_causal"
    if dtype != "bf16":
        name += f"_{dtype}"
    if D != shapes.HEAD_DIM:
        name += f"_D{D}"
    return name


# --------------------------------------------------------------------------- tools

def _run_tool(cmd: list[str]) -> tuple[int, str]:
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        return p.returncode, p.stdout + p.stderr
    except (OSError, subprocess.TimeoutExpired) as e:
        return -1, str(e)


def disassemble(cubin: bytes) -> tuple[str | None, str]:
    """SASS from a cubin: nvdisasm -c (labels for branch targets), else cuobjdump -sass."""
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "kernel.cubin"
        path.write_bytes(cubin)
        for tool, args in (("nvdisasm", ["-c"]), ("cuobjdump", ["-sass"])):
            exe = tool_path(tool)
            if exe:
                rc, out = _run_tool([exe, *args, str(path)])
                if rc == 0 and out.strip():
                    return out, f"{tool} {' '.join(args)} ({exe})"
    return None, "SASS unavailable: neither nvdisasm nor cuobjdump found (Triton's wheel bundles both)"


def resource_usage(cubin: bytes) -> dict:
    exe = tool_path("cuobjdump")
    if not exe:
        return {}
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "kernel.cubin"
        path.write_bytes(cubin)
        rc, out = _run_tool([exe, "-res-usage", str(path)])
    return ir.cuobjdump_resource_usage(out) if rc == 0 else {}


def ptxas_verbose(ptx: str, arch: int, fp_fusion: bool, cubin: bytes) -> dict:
    """ptxas -v on the PTX with the flags Triton's make_cubin uses; says whether it rebuilt the same cubin."""
    from triton.backends.nvidia.compiler import sm_arch_from_capability

    from fa2triton.triton_compat import triton_ptxas_flags

    exe = tool_path("ptxas", arch)
    if not exe:
        return {"available": False}
    gpu_name = sm_arch_from_capability(arch)
    with tempfile.TemporaryDirectory() as d:
        src, out = Path(d) / "kernel.ptx", Path(d) / "kernel.cubin"
        src.write_text(ptx)
        cmd = [exe, "-lineinfo", *([] if fp_fusion else ["--fmad=false"]), "-v", *triton_ptxas_flags(),
               f"--gpu-name={gpu_name}", str(src), "-o", str(out)]
        rc, log = _run_tool(cmd)
        same = out.exists() and out.read_bytes() == cubin
    res = {"available": rc == 0, "gpu_name": gpu_name, "ptxas": exe, "same_cubin_as_triton": same,
           **ir.ptxas_usage(log)}
    if rc != 0:
        res["error"] = log[-500:]
    return res


def _tool_version(name: str, arch: int | None = None) -> str | None:
    """The version of an NVIDIA tool Triton bundles (fa2lab.compile_offline.bundled_tool), None without one."""
    try:
        return bundled_tool(name, arch).version
    except Exception:  # noqa: BLE001
        return None


# --------------------------------------------------------------------------- compile + summarise

def inspect(version: str, cfg: Config, *, causal: bool = False, D: int = shapes.HEAD_DIM, dtype: str = "bf16",
            arch: str | None = None, offline: bool = False, N: int = 4096) -> tuple[dict, dict]:
    """Compile one configuration and summarise it. Returns (summary dict, {file name: text})."""
    import triton

    from fa2triton.gpu import facts, has_gpu
    from fa2lab.provenance import environment, now
    from fa2lab.switches import load

    gpu = facts() if has_gpu() else None
    want = parse_arch(arch) if arch else (gpu.capability[0] * 10 + gpu.capability[1] if gpu else 90)
    on_gpu = gpu is not None and not offline and want == gpu.capability[0] * 10 + gpu.capability[1]
    module = load(version)
    batch = shapes.BATCH * shapes.HEADS
    meta = dict(D=D, Q_TILE_SIZE=cfg.q_tile, K_TILE_SIZE=cfg.k_tile, is_causal=bool(causal))
    if hasattr(module, "offline_compile_args"):  # a signature other than v5's (v7: TMA descriptors)
        args, extra = module.offline_compile_args(N, D, dtype, batch, cfg, bool(causal))
        meta.update(extra)
    else:
        args = forward_args(N, D, dtype, batch)
    status, error, n_regs, n_spills = "ok", "", None, None
    if on_gpu:
        try:
            compiled = compile_on_gpu(module.flash_fwd_kernel, args, grid=(triton.cdiv(N, cfg.q_tile), batch),
                                      num_warps=cfg.num_warps, num_stages=cfg.num_stages, **meta)
            n_regs, n_spills = int(compiled.n_regs), int(compiled.n_spills)
        except triton.runtime.errors.OutOfResources as e:
            # compiled, but it cannot be loaded on this GPU: inspect the IR anyway, offline for this arch
            status, error = "out_of_resources", str(e)[:300]
            compiled = compile_for_target(module.flash_fwd_kernel, args, arch=want, num_warps=cfg.num_warps,
                                          num_stages=cfg.num_stages, **meta)
    else:
        compiled = compile_for_target(module.flash_fwd_kernel, args, arch=want, num_warps=cfg.num_warps,
                                      num_stages=cfg.num_stages, **meta)

    ttgir, ptx, cubin = compiled.asm["ttgir"], compiled.asm["ptx"], compiled.asm["cubin"]
    sass, sass_tool = disassemble(cubin)
    res = resource_usage(cubin)
    ptxas = ptxas_verbose(ptx, want, bool(compiled.metadata.enable_fp_fusion), cubin)
    if n_regs is None and "REG" in res:
        n_regs, n_spills = res["REG"], res.get("LOCAL", 0) // 4
        regs_label = "offline: from the cubin, cuobjdump -res-usage"
        regs_source = ("cubin via cuobjdump -res-usage (REG; n_spills = LOCAL bytes / 4, the driver's formula);"
                       " offline, not loaded on a GPU")
    elif n_regs is not None:
        regs_label = regs_source = "driver, after loading (compiled.n_regs, compiled.n_spills)"
    else:
        regs_label = regs_source = "unknown: not loaded on a GPU and cuobjdump unavailable"

    tg = ir.summarize_ttgir(ttgir)
    shared = int(compiled.metadata.shared)
    elem = ELEM_BYTES[dtype]
    formula = budget.formula_shared_bytes(cfg, D, elem)
    loops = ir.sass_loops(sass) if sass else []
    env = environment()
    offline_ir = not on_gpu or status != "ok"
    summary = {
        "kind": ("offline compile (no GPU; not loaded, not run)" if not on_gpu else
                 "offline compile after the GPU could not load it (not run)" if offline_ir else
                 "gpu compile (loaded, not launched)"),
        "compiled_offline": offline_ir,
        "status": status,
        "error": error,
        "target": f"sm_{want}",
        "ptxas_gpu_name": ptxas.get("gpu_name"),
        "gpu": gpu.name if on_gpu else None,  # the GPU it was compiled for and loaded on, if any
        "triton": triton.__version__,
        "ptxas_version": _tool_version("ptxas", want),
        "torch": env.get("torch"),
        "git_commit": env.get("git_commit"),
        "date": now(),
        "version": version,
        "config": {"q_tile": cfg.q_tile, "k_tile": cfg.k_tile, "num_warps": cfg.num_warps,
                   "num_stages": cfg.num_stages, "key": cfg.key},
        "causal": bool(causal), "D": D, "dtype": dtype, "N_specialised": N, "batch_heads": batch,
        "constexprs": dict(meta),
        "registers": {"n_regs": n_regs, "n_spills": n_spills, "source": regs_source, "label": regs_label,
                      "cuobjdump_res_usage": res, "ptxas_v": ptxas},
        "shared": {"compiled": shared, "formula": formula, "difference": shared - formula,
                   "predicted": budget.predicted_shared_bytes(cfg, D, elem, f"sm_{want}"),
                   "explain": budget.explain(cfg, shared, D, elem, f"sm_{want}"),
                   "ttgir_accounted": ir.shared_accounted(ttgir),
                   "pipeline_buffers": tg["pipeline_buffers"],
                   "buffers_per_tensor": sorted({b["shape"][0] for b in tg["pipeline_buffers"]}),
                   "formula_buffers_per_tensor": max(cfg.num_stages, 1) - 1},
        "ttgir": tg,
        "ptx": ir.ptx_counts(ptx, PTX_KEYS),
        "sass": {"available": sass is not None, "tool": sass_tool,
                 "counts": ir.sass_opcode_counts(sass) if sass else None,
                 "loops": loops},
    }
    files = {"kernel.ttgir": ttgir, "kernel.ptx": ptx}
    if sass:
        files["kernel.sass"] = sass
    return summary, files


def _fmt_counts(counts: dict | None, keys=SUMMARY_SASS_KEYS) -> str:
    if not counts:
        return "-"
    return ", ".join(f"{k} {counts.get(k, 0)}" for k in keys)


def format_summary(s: dict) -> str:
    """The one-screen text summary."""
    c = s["config"]
    head = (f"{s['version']}  {c['q_tile']}x{c['k_tile']}, {c['num_warps']} warps, {c['num_stages']} stages  "
            f"causal={int(s['causal'])} D={s['D']} {s['dtype']}")
    if s["compiled_offline"]:
        where = (f"OFFLINE compile for {s['target']} ({s['ptxas_gpu_name']}) with triton {s['triton']}, "
                 f"ptxas {s['ptxas_version']}: " + ("not loaded on a GPU, nothing run" if s["status"] == "ok"
                                                     else f"{s['gpu']} could not load it, nothing run"))
    else:
        where = f"compiled and loaded on {s['gpu']} ({s['target']}), triton {s['triton']}; not launched"
    lines = [head, where]
    if s["status"] != "ok":
        lines.append(f"STATUS {s['status']}: {s['error']}")
    for m in s["ttgir"]["mma_layouts"]:
        wp = m.get("warpsPerCTA", [])
        along = ("warps side by side along the key axis: no warp owns whole rows"
                 if len(wp) == 2 and wp[1] > 1 else "each warp owns whole rows")
        lines.append(f"MMA layout     {m['alias']}: versionMajor {m.get('versionMajor')} = {m['instruction']}, "
                     f"warpsPerCTA {wp}, instrShape {m.get('instrShape')} ({along})")
    r = s["registers"]
    p = r["ptxas_v"]
    regs = "unknown" if r["n_regs"] is None else f"{r['n_regs']} per thread, n_spills {r['n_spills']}"
    pt = (f"; ptxas -v: {p.get('registers')} registers, {p.get('spill_stores')} B spill stores, "
          f"{p.get('spill_loads')} B spill loads" if p.get("available") else "")
    lines.append(f"registers      {regs} [{r['label']}]{pt}")
    sh = s["shared"]
    lines.append(f"shared memory  {sh['compiled']} B compiled (metadata.shared) vs {sh['formula']} B Round 1 formula, "
                 f"{sh['predicted']} B fa2triton.budget prediction ({sh['explain']})")
    acc = sh["ttgir_accounted"]
    match = ("all of metadata.shared" if acc["bytes"] == sh["compiled"]
             else f"{sh['compiled'] - acc['bytes']:+d} B left for reduction/conversion scratch")
    lines.append(f"  TTGIR allocs {acc['bytes']} B ({match}) = {acc['detail']}")
    bufs = ", ".join(f"{b['value']} {'x'.join(map(str, b['shape']))} {b['dtype']} ({b['bytes']} B)"
                     for b in sh["pipeline_buffers"])
    lines.append(f"pipeline bufs  {bufs or 'none'}; {sh['buffers_per_tensor']} buffers per K/V tile "
                 f"(the formula counts num_stages - 1 = {sh['formula_buffers_per_tensor']})")
    tg = s["ttgir"]
    dots = ", ".join(f"{k} x{v}" for k, v in tg["dots"].items() if v)
    lines.append(f"key loops      {tg['n_loops']} scf.for; dots: {dots}; "
                 f"loads: {'TMA' if tg['uses_tma'] else 'cp.async' if tg['uses_cp_async'] else 'plain'}")
    for i, lp in enumerate(tg["loops"], 1):
        la = "; ".join(lp["local_alloc"]) or "none"
        cl = "; ".join(f"{x.get('from')} -> {x.get('to')}" for x in lp["convert_layout"]) or "none"
        lines.append(f"  loop {i}: local_alloc in loop: {la}")
        lines.append(f"          convert_layout in loop: {cl}")
    px = s["ptx"]
    lines.append("PTX            " + ", ".join(f"{k} {v}" for k, v in px.items()))
    sa = s["sass"]
    if sa["available"]:
        lines.append(f"SASS (kernel)  {sa['counts']['total']} instructions: {_fmt_counts(sa['counts'])}")
        for i, lp in enumerate(sa["loops"], 1):
            tag = "innermost loop" if lp["innermost"] else "loop"
            lines.append(f"  {tag} {i} ({lp['start']}-{lp['end']}, {lp['instructions']} instr per iteration): "
                         f"{_fmt_counts(lp['counts'])}")
    else:
        lines.append(f"SASS           {sa['tool']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernel", default="v1_tiles", help="a version, e.g. v1_tiles (fa2triton/versions.py)")
    ap.add_argument("--config", default="", help="Q_TILE,K_TILE,WARPS,STAGES (default: the version's own for --arch)")
    ap.add_argument("--causal", type=int, choices=(0, 1), default=0)
    ap.add_argument("--D", type=int, default=shapes.HEAD_DIM)
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    ap.add_argument("--arch", default="", help="target, e.g. sm_90 (default: this GPU's, or sm_90 without a GPU); "
                    "a target other than the GPU's is compiled offline")
    ap.add_argument("--offline", action="store_true",
                    help="compile for --arch without using the GPU even if one is present")
    ap.add_argument("--N", type=int, default=4096, help="sequence length the integer arguments are specialised on")
    ap.add_argument("--out", default="",
                    help="output folder (default: results/<gpu or offline-arch>/inspect/<version>_<config>)")
    ap.add_argument("--quiet", action="store_true", help="write the files, print only where")
    args = ap.parse_args(argv)
    # Inspecting means compiling: the kernel modules must not be imported under the interpreter.
    os.environ.pop("TRITON_INTERPRET", None)

    from fa2triton.gpu import facts, has_gpu
    from fa2lab.results import RESULTS
    from fa2triton.versions import get

    get(args.kernel)
    gpu = facts() if has_gpu() and not args.offline else None
    arch = args.arch or (gpu.arch if gpu else "sm_90")
    cfg, source = (Config.parse(args.config), "--config") if args.config else default_config(args.kernel, arch)
    summary, files = inspect(args.kernel, cfg, causal=bool(args.causal), D=args.D, dtype=args.dtype, arch=arch,
                             offline=args.offline, N=args.N)
    summary["config"]["source"] = source
    if args.out:
        out = Path(args.out)
    else:
        top = f"offline-{summary['target']}" if summary["compiled_offline"] else gpu.slug
        out = RESULTS / top / "inspect" / folder_name(args.kernel, cfg, bool(args.causal), args.D, args.dtype)
    out.mkdir(parents=True, exist_ok=True)
    text = format_summary(summary)
    summary["files"] = {}
    for name, content in files.items():
        (out / name).write_text(content)
        summary["files"][name] = len(content.encode())
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
    (out / "summary.txt").write_text(text + "\n")
    if not args.quiet:
        print(text)
    print(f"wrote {out}/ ({', '.join(['summary.json', 'summary.txt', *files])})")
    return 0 if summary["status"] == "ok" else 1


if __name__ == "__main__":
    from fa2lab import cli

    cli.run(main)
