"""fa2triton.triton_compat under the installed Triton (run under 3.6 and 3.9): each compatibility point against what this
Triton's own sources do, and the PTX passes' counts on offline sm_90 compiles of v7's Gluon kernels (no GPU)."""

import importlib
import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import triton

from fa2triton import triton_compat as tc

REPO = Path(__file__).resolve().parent.parent
NEW = tc.triton_version() >= (3, 9)


# ------------------------------------------------------------------------------------------------ the version guard

@pytest.mark.parametrize("version, ok", [("3.6.0", True), ("3.9.0", True), ("3.9.1+git1234abcd", True),
                                         ("3.5.1", False), ("3.10.0", False), ("4.0.0", False), ("2.3.1", False)])
def test_require_supported_names_the_installed_triton_and_the_range(monkeypatch, version, ok):
    monkeypatch.setattr(triton, "__version__", version)
    if ok:
        tc.require_supported()
        return
    with pytest.raises(tc.UnsupportedTriton) as err:
        tc.require_supported()
    msg = str(err.value)
    assert isinstance(err.value, ImportError) and "\n" not in msg
    assert f"Triton {version} is installed" in msg and tc.SUPPORTED == ">=3.6,<3.10" and tc.SUPPORTED in msg


def test_the_kernels_runtime_refuses_an_unsupported_triton_at_import(monkeypatch):
    """fa2triton.lean_path (imported by every kernel, directly or through fa2triton.launch) fails at import with that error."""
    monkeypatch.delitem(sys.modules, "fa2triton.lean_path", raising=False)
    monkeypatch.setattr(triton, "__version__", "3.5.0")
    with pytest.raises(tc.UnsupportedTriton, match=r"Triton 3\.5\.0 is installed"):
        importlib.import_module("fa2triton.lean_path")


# ------------------------------------------------------------------------------------------------ the stages hook

def test_the_stages_hook_serves_both_call_forms_and_chains(monkeypatch):
    from triton import knobs

    calls = []

    def previous(*args):
        calls.append(("previous", len(args)))
        return None if args else ("prev-key", "prev-hash")

    monkeypatch.setattr(knobs.runtime, "add_stages_inspection_hook", previous)

    def rewrite(backend, stages, options, language, capability):
        calls.append(("rewrite", capability))
        make = stages["ptx"]
        stages["ptx"] = lambda src, md: make(src, md) + " rewritten"

    hook = tc.install_stages_hook(rewrite, "fa2-test-v1")
    assert knobs.runtime.add_stages_inspection_hook is hook
    assert tc.install_stages_hook(rewrite, "fa2-test-v1") is hook          # the same key: installed once
    stages = {"ptx": lambda src, md: "ptx"}
    assert hook("backend", stages, {}, "gluon", 90) is None                 # the form 3.6 and 3.9 call from make_ptx
    assert stages["ptx"](None, None) == "ptx rewritten" and calls == [("previous", 5), ("rewrite", 90)]
    key, digest = hook()                                                    # 3.9's compile / JIT cache-key form
    assert key == "prev-keyfa2-test-v1" and calls[-1] == ("previous", 0) and len(digest) == 64
    monkeypatch.setattr(knobs.runtime, "add_stages_inspection_hook", previous)
    other = tc.install_stages_hook(rewrite, "fa2-test-v2")                  # a changed rewrite: another key
    assert other()[0] != key and other()[1] != digest


def test_the_stages_hook_alone_returns_its_own_key(monkeypatch):
    from triton import knobs

    monkeypatch.setattr(knobs.runtime, "add_stages_inspection_hook", None)
    key, digest = tc.install_stages_hook(lambda *a: None, "fa2-alone")()
    assert key == "fa2-alone" and digest == tc.hashlib.sha256(b"fa2-alone").hexdigest()


def test_the_ptx_passes_hook_is_installed_with_the_marks_in_its_key():
    from triton import knobs

    from fa2triton.gluon import gluon_ptx as P

    key, _ = knobs.runtime.add_stages_inspection_hook()
    assert P.STAGES_KEY in key
    assert all(m in P.STAGES_KEY for m in (P.UNSYNCED_MARK, P.TIE_MARK, P.INLINE_MARK, P.CONSUMER_CALL))


# ------------------------------------------------------------------------------------------------ Gluon TMA

def test_tma_names_are_this_gluons_builtins():
    from triton.experimental.gluon.language.nvidia.hopper import tma

    assert tc.tma_load.__triton_builtin__ and tc.tma_reduce_add.__triton_builtin__
    params = list(inspect.signature(inspect.unwrap(tc.tma_load)).parameters)
    assert params[:5] == ["tensor_desc", "coord", "barrier", "result", "pred"]   # the kernels pass pred= by name
    if NEW:   # 3.9 removed the old name (it raises) and names the reduce
        assert tc.tma_load is tma.async_load and tc.tma_reduce_add is tma.async_atomic_add
    else:     # 3.6: the old name; the reduce through the builder
        assert not hasattr(tma, "async_load") and tc.tma_load is tma.async_copy_global_to_shared
        assert list(inspect.signature(inspect.unwrap(tc.tma_reduce_add)).parameters)[:3] == [
            "tensor_desc", "coord", "src"]


# ------------------------------------------------------------------------------------------------ ptxas

def test_get_ptxas_is_the_one_tritons_compile_runs_for_the_arch():
    from triton import knobs

    from fa2lab.compile_offline import tool_path

    assert tc.get_ptxas(100) is knobs.nvidia.ptxas_blackwell
    try:
        assert tc.get_ptxas(80) is knobs.nvidia.ptxas
    except RuntimeError:   # a Triton packed for sm_90 and newer (the H200's 3.9) ships no legacy ptxas
        assert NEW, "Triton 3.6 runs its legacy ptxas for sm_90 too"
    # sm_90: CUDA 12.8's ptxas under 3.6, CUDA 13's ptxas-blackwell under 3.9
    assert tc.get_ptxas(90) is (knobs.nvidia.ptxas_blackwell if NEW else knobs.nvidia.ptxas)
    tool = tc.get_ptxas("90")
    out = subprocess.run([tool.path, "--version"], capture_output=True, text=True).stdout
    assert f"release {tool.version}" in out and int(tool.version.split(".")[0]) == (13 if NEW else 12)
    assert tool_path("ptxas", 90) == tool.path


def test_triton_ptxas_flags_are_what_make_cubin_adds():
    """3.9's make_cubin adds --regAllocOptLevel=2 to every ptxas run and ptx_options() puts the default back; 3.6
    adds nothing and needs nothing."""
    assert tc.triton_ptxas_flags() == (("--regAllocOptLevel=2",) if NEW else ())
    assert tc.ptx_options() == (tc.PTXAS_DEFAULT_REGALLOC if NEW else None)


@pytest.mark.skipif(not NEW, reason="Triton 3.6 passes ptxas no register-allocation level")
def test_the_default_regalloc_option_undoes_level_2(offline, tmp_path):
    """ptxas 13 on a Gluon forward's PTX (D = 128 lookahead: at D = 64 level 2 now leaves the cubin as it is): Triton's
    level 2 followed by PTXAS_DEFAULT_REGALLOC (ptx_options, the later option wins) makes the cubin of no option at
    all, and level 2 alone another one."""
    ptxas = tc.get_ptxas(90).path

    def cubin(*flags):
        out = tmp_path / f"k{len(list(tmp_path.iterdir()))}.cubin"
        subprocess.run([ptxas, "-lineinfo", *flags, "--gpu-name=sm_90a", str(offline.ptx), "-o", str(out)],
                       check=True, capture_output=True)
        return out.read_bytes()

    default = cubin()
    assert cubin("--regAllocOptLevel=2", *tc.ptx_options().split()) == default != cubin("--regAllocOptLevel=2")


@pytest.mark.skipif(not NEW, reason="Triton 3.6 sums in chains: its forward plants no REDUCE_MARK")
def test_chained_reductions_keep_the_exponentials_apart_in_the_sass(offline, tmp_path, monkeypatch):
    """ptxas 13 (with Triton's flags and ptx_options) on the D = 128 lookahead forward: with its row maxima and sums
    chained, far fewer MUFU issue right after a MUFU than from the same PTX before chain_reduction_trees (offline: 39
    against 146; 3.6's own PTX gives 38-40, docs/port-triton39.md), with the same instruction count and no spills.
    The PTX without the chains: Triton's own through every other pass."""
    from profiling.version_sass import assemble, sass_stats

    ptxas = tc.get_ptxas(90).path
    tools = Path(ptxas).parent
    if not (tools / "nvdisasm").is_file() or not (tools / "cuobjdump").is_file():
        pytest.skip("this Triton wheel carries no nvdisasm or cuobjdump")
    from fa2triton.gluon import gluon_ptx as P

    raw = Path(f"{offline.ptx}.raw").read_text()
    assert P.passes(raw) == offline.ptx.read_text()
    monkeypatch.setattr(P, "chain_reduction_trees", lambda text: (text, 0))
    flags = [*tc.triton_ptxas_flags(), *tc.ptx_options().split()]
    stats = {}
    for name, ptx in (("chained", offline.ptx.read_text()), ("trees", P.passes(raw))):
        log = assemble(ptx, ptxas, flags, tmp_path / f"{name}.cubin")
        assert " 0 bytes spill stores" in log, log
        stats[name] = sass_stats(tmp_path / f"{name}.cubin", str(tools / "nvdisasm"), str(tools / "cuobjdump"),
                                 None)["kernel"]
    assert stats["chained"]["instructions"] == stats["trees"]["instructions"]
    assert 3 * stats["chained"]["MUFU pairs"] < stats["trees"]["MUFU pairs"]


# ------------------------------------------------------------------------------------------------ PTX patterns

@pytest.mark.parametrize("line, partition", [
    ("\tbar.sync \t0;", True), ("\tbarrier.sync 0;", True),             # 3.6's whole-CTA sync in the function
    ("\tbar.sync \t2, 128;", True), ("\tbar.sync \t%r109, 128;", True),  # 3.6's constant id, 3.9's register
    ("\tbar.sync \t1;", False), ("\tbar.sync \t%r1, 256;", False), ("\tbar.arrive \t0, 128;", False),
    ("\tbarrier.sync \t1;", False)])
def test_partition_sync_pattern_serves_both_forms(line, partition):
    assert bool(tc.PARTITION_SYNC.match(line)) == partition


def test_drop_marked_syncs_drops_3_9s_register_barrier():
    from fa2triton.gluon import gluon_ptx as P

    ptx = "\n".join(["\tbar.sync \t%r109, 128;", "\t.loc\t1 323 9 // tab-separated, as 3.9 writes it",
                     "\t@%p1 mbarrier.arrive.shared::cta.b64 _, [%r3];", f"\tmov.b32 %r4, %r5; // {P.UNSYNCED_MARK}"])
    out, n = P.drop_marked_syncs(ptx)
    assert n == 1 and "bar.sync" not in out


# ------------------------------------------------------------------------------------------------ wgmma descriptors

C = 4611686293305294848   # 0x4000004000000000: a descriptor's high word, low word 0
SPLIT = ["\tbfe.u32 \t%r10, %r9, 4, 14;", "\tadd.s32 \t%r11, %r10, 2;", "\t// begin inline asm",
         "\tcvt.u64.u32 \t%rd5, %r11;", "\t.loc\t1 2 3", "$L__tmp4:", f"\tor.b64 \t%rd6, %rd5, {C};"]


def test_wgmma_descriptor_adds_writes_3_9s_form_as_3_6s():
    out, n = tc.wgmma_descriptor_adds("\n".join(SPLIT))
    assert n == 1 and out.split("\n")[:-1] == SPLIT[:-1]   # the add and the extension stay (ptxas drops them)
    assert out.split("\n")[-1] == (f"\t{{ .reg .b64 %fa2desc; cvt.u64.u32 %fa2desc, %r10; "
                                   f"add.s64 %rd6, %fa2desc, {C + 2}; }}")
    for base in (0, 1, 2**14 - 1):   # the identity it relies on, for any 14-bit base
        assert (base + 2) | C == base + (C + 2)


@pytest.mark.parametrize("change", [
    lambda s: [s[0].replace("4, 14", "4, 20")] + s[1:],                       # base wider than 16 bits
    lambda s: [s[0].replace("bfe.u32", "shr.u32").replace(", 14", "")] + s[1:],   # base not a bit field
    lambda s: s[:2] + ["$L__BB0_3:"] + s[2:],                                  # another basic block
    lambda s: s[:2] + ["\tmov.u32 \t%r10, %r1;"] + s[2:],                      # base redefined before the or
    lambda s: s[:-1] + [s[-1].replace(str(C), str(C + 1))],                    # a low word: | is not +
    lambda s: [s[0], "\tcvt.u64.u32 \t%rd5, %r10;", s[-1]],                     # 3.6's own form: nothing to do
])
def test_wgmma_descriptor_adds_leaves_what_it_cannot_prove(change):
    ptx = "\n".join(change(SPLIT))
    assert tc.wgmma_descriptor_adds(ptx) == (ptx, 0)


FENCED = ["\tcp.async.wait_group \t2;", "\tbar.sync \t0;", "\tfence.proxy.async.shared::cta;",
          "\twgmma.fence.sync.aligned;", "\twgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%r1}, %rd1, %rd2;",
          "\twgmma.commit_group.sync.aligned;", "\twgmma.wait_group.sync.aligned 0;", "\tmul.f32 \t%r5, %r1, %r2;",
          "\t.loc\t1 90 20", "$L__tmp7:", "\tex2.approx.f32 %r6, %r5;", "\tfence.proxy.async.shared::cta;",
          "\twgmma.fence.sync.aligned;"]


def test_drop_repeated_proxy_fences_drops_a_fence_that_an_earlier_one_covers():
    out, n = tc.drop_repeated_proxy_fences("\n".join(FENCED))
    assert n == 1 and out.split("\n") == FENCED[:-2] + FENCED[-1:]
    assert tc.drop_repeated_proxy_fences("\n".join(FENCED[2:3] * 3)) == ("\n".join(FENCED[2:3]), 2)


@pytest.mark.parametrize("between", ["\tst.shared.v4.b32 \t[%r4], {%r1, %r2, %r3, %r5};", "\tbar.sync \t0;",
                                     "$L__BB0_3:", "\t@%p1 bra \t$L__BB0_2;", "\tcp.async.wait_group \t0;",
                                     "\tld.shared.v4.b32 \t{%r1, %r2, %r3, %r5}, [%r4];",
                                     "\tmbarrier.try_wait.parity.shared::cta.b64 %p1, [%r4], %r2;",
                                     "\tatom.shared.add.u32 \t%r1, [%r4], 1;", "\tst.global.b32 \t[%rd4], %r1;"])
def test_drop_repeated_proxy_fences_keeps_a_fence_after_a_write_a_barrier_or_a_block(between):
    ptx = "\n".join(FENCED[:-2] + [between] + FENCED[-2:])
    assert tc.drop_repeated_proxy_fences(ptx) == (ptx, 0)


# ------------------------------------------------------------------------------------------------ row reductions

def row_sum(n=16):
    """A function's PTX: n exponentials of %r0.. into %r100.., then their sum as 3.9 writes it (a tree of pairs)
    stored from its root; and the root's name."""
    lines = [".visible .entry k(", ")", "{"] + [f"\tex2.approx.ftz.f32 \t%r{100 + i}, %r{i};" for i in range(n)]
    level, fresh = [f"%r{100 + i}" for i in range(n)], 200
    lines += ["$L__tmp3:", "\t.loc\t4 287 12"]
    while len(level) > 1:
        nxt = []
        for a, b in zip(level[::2], level[1::2]):
            lines.append(f"\tadd.f32 \t%r{fresh}, {a}, {b};")
            nxt, fresh = nxt + [f"%r{fresh}"], fresh + 1
        level = nxt + level[len(level) // 2 * 2:]
    return lines + [f"\tst.global.f32 \t[%rd1], {level[0]};", "\tret;", "}"], level[0]


def run_ptx(ptx: str) -> list:
    """The values the straight-line PTX of row_sum stores, with %r<i> = i on entry (ex2 exact on integers); a
    register read before any write raises KeyError."""
    env, stored = {f"%r{i}": i for i in range(64)}, []
    for line in ptx.split("\n"):
        ops = re.findall(r"%\w+", line)
        if "ex2." in line:
            env[ops[0]] = 2 ** env[ops[1]]
        elif "add.f32" in line:
            env[ops[0]] = env[ops[1]] + env[ops[2]]
        elif "max.f32" in line:
            env[ops[0]] = max(env[ops[1]], env[ops[2]])
        elif "st.global" in line:
            stored.append(env[ops[1]])
    return stored


def adds(ptx: str) -> list[list[str]]:
    return [re.findall(r"%\w+", line) for line in ptx.split("\n") if "add.f32" in line]


@pytest.mark.parametrize("n", [8, 16, 32])
def test_chain_reduction_trees_writes_a_tree_as_one_chain_in_the_leaves_order(n):
    lines, root = row_sum(n)
    ptx = "\n".join(lines)
    out, count = tc.chain_reduction_trees(ptx)
    chain = adds(out)
    assert count == 1 and run_ptx(out) == run_ptx(ptx) == [2 ** n - 1]
    assert chain[0][1] == "%r100" and [a[2] for a in chain] == [f"%r{100 + i}" for i in range(1, n)]
    assert all(a[1] == b[0] for a, b in zip(chain[1:], chain)) and chain[-1][0] == root   # each takes the last sum
    out_lines = out.split("\n")
    for i in range(1, n):   # each add right after the exponential it takes
        assert out_lines[out_lines.index(f"\tex2.approx.ftz.f32 \t%r{100 + i}, %r{i};") + 1].endswith(f"%r{100 + i};")
    assert tc.chain_reduction_trees(out) == (out, 0)   # a chain (3.6's form) is left as it is


def test_chain_reduction_trees_serves_each_function_and_keeps_what_else_reads_a_sum():
    lines, _ = row_sum(16)
    inner = next(line for line in lines if "add.f32" in line).split()[1].rstrip(",")   # the first pair's sum
    stored = lines[:-2] + [f"\tst.global.f32 \t[%rd2], {inner};"] + lines[-2:]   # a pair kept: a leaf of the chain
    later = lines[:-2] + ["\tex2.approx.ftz.f32 \t%r100, %r5;"] + lines[-2:]   # a leaf written again after the sum
    ptx = "\n".join(stored + lines + later)
    out, count = tc.chain_reduction_trees(ptx)
    assert count == 3 and run_ptx(out) == run_ptx(ptx)


def test_chain_reduction_trees_chains_a_maximum_and_takes_leaves_from_an_earlier_block_where_the_tree_began():
    """3.9's row maximum: a max.f32 tree over the scores, which come from an earlier block (the wgmma's wait): chained
    in the leaves' order, each taken where the tree began, and the result the same."""
    lines, root = row_sum(16)
    at = lines.index("$L__tmp3:")
    lines = lines[:at] + ["$L__BB0_1:"] + [line.replace("add.f32", "max.f32") for line in lines[at:]]
    ptx = "\n".join(lines)
    out, count = tc.chain_reduction_trees(ptx)
    chain = [line for line in out.split("\n") if "max.f32" in line]
    assert count == 1 and run_ptx(out) == run_ptx(ptx) == [2 ** 15] and len(chain) == 15
    out_lines = out.split("\n")
    first = out_lines.index("$L__tmp3:") + 2   # where the tree's first max was, after its line info
    assert out_lines[first:first + 15] == chain
    assert tc.chain_reduction_trees(out) == (out, 0)


def _ordered_inside_the_sum(lines, root):   # a barrier among the tree's adds: a leaf from before it may not move
    first = next(i for i, line in enumerate(lines) if "add.f32" in line)
    return lines[:first] + ["$L__BB0_1:", "\tbar.sync \t1, 128;"] + lines[first:first + 3] + ["\tbar.sync \t1, 128;"] \
        + lines[first + 3:]


def _root_read_early(lines, root):   # the root read between the last exponential and the sum (a loop's last value)
    at = lines.index("$L__tmp3:")
    return lines[:at] + [f"\tst.global.f32 \t[%rd2], {root};"] + lines[at:]


@pytest.mark.parametrize("change", [_ordered_inside_the_sum, _root_read_early, lambda lines, root: row_sum(7)[0]])
def test_chain_reduction_trees_leaves_what_it_cannot_prove(change):
    ptx = "\n".join(change(*row_sum(16)))
    assert tc.chain_reduction_trees(ptx) == (ptx, 0)


def test_only_3_9_reduces_in_trees():
    assert tc.reduces_in_trees() == NEW


def test_only_3_9_adds_loop_proxy_fences():
    assert tc.adds_loop_proxy_fences() == NEW


def test_only_3_9_splits_wgmma_descriptors():
    assert tc.splits_wgmma_descriptors() == NEW


# ------------------------------------------------------------------------------------------------ the launcher

def test_the_driver_pieces_direct_launch_relies_on_are_there():
    """What direct_launch and encode_descriptor read from this Triton's driver module: the launcher's attributes
    (set in CudaLauncher.__init__), the descriptor wrapper's closure, make_tensordesc_arg's form; the hostpath
    tests check the C function receives what Triton's own CudaLauncher passes it."""
    from triton.backends.nvidia import driver as nv
    from triton.compiler.compiler import CompiledKernel

    init = set(nv.CudaLauncher.__init__.__code__.co_names)
    assert {"launch", "global_scratch_size", "profile_scratch_size", "launch_cooperative_grid",
            "launch_pdl"} <= init
    generic = "arg_annotations" in nv.CudaLauncher.__call__.__code__.co_names
    assert generic == NEW and (not generic or {"arg_annotations", "kernel_signature", "gsan_enabled"} <= init)
    inner = nv.wrap_handle_tensordesc(lambda *a: None, {"d": "tensordesc<bf16[64, 64]>", "n": "i32"}, [{}])
    names = inspect.getclosurevars(inner).nonlocals
    assert {"launcher", "tensordesc_meta"} <= set(names)
    assert ("relevant_paths" in names) == NEW and ("tensordesc_indices" in names) != NEW
    assert isinstance(CompiledKernel.run, property) and callable(CompiledKernel.launch_metadata)
    # with no TMA metadata make_tensordesc_arg decomposes without a driver: this Triton's call form, its layout
    desc = SimpleNamespace(base="base", shape=[4, 64], strides=[64, 1], padding="zero", round_f32_to_tf32=False)
    tail = [False, False] if NEW else [False]   # 3.9 adds round_f32_to_tf32
    assert tc.encode_descriptor(desc, None) == ["base", 4, 64, 64, 1, *tail, 4, 64, 64, 1]


def test_encode_descriptor_reads_its_call_form_without_inspect_signature(monkeypatch):
    """encode_descriptor runs on every launch whose descriptor's base moved: it reads make_tensordesc_arg's form
    from its code object, not by inspect.signature (the host-time cost of a moved base, fa2triton.triton_compat)."""
    def refuse(*_):
        raise AssertionError("inspect.signature on the encode path")

    monkeypatch.setattr(tc.inspect, "signature", refuse)
    desc = SimpleNamespace(base="base", shape=[4, 64], strides=[64, 1], padding="zero", round_f32_to_tf32=False)
    tail = [False, False] if NEW else [False]
    assert tc.encode_descriptor(desc, None) == ["base", 4, 64, 64, 1, *tail, 4, 64, 64, 1]


def test_direct_launch_refuses_what_it_does_not_know():
    from triton.backends.nvidia import driver as nv

    run = object.__new__(nv.CudaLauncher)
    run.__dict__.update(launch=lambda *a: None, global_scratch_size=0, profile_scratch_size=0, num_ctas=1,
                        launch_cooperative_grid=False, launch_pdl=False, gsan_enabled=False,
                        arg_annotations=(), kernel_signature=b"")
    call, expand = tc.direct_launch(run)
    assert callable(call) and expand == ()
    for bad in (dict(num_ctas=2), dict(profile_scratch_size=8), dict(gsan_enabled=True)):
        broken = object.__new__(nv.CudaLauncher)
        broken.__dict__.update(run.__dict__, **bad)
        with pytest.raises(ValueError):
            tc.direct_launch(broken)


@pytest.mark.skipif(not NEW, reason="Triton 3.6's descriptor wrapper does not look into tuple arguments")
def test_direct_launch_refuses_a_descriptor_inside_a_tuple():
    from triton.backends.nvidia import driver as nv

    nested = object.__new__(nv.CudaLauncher)
    nested.__dict__.update(global_scratch_size=0, profile_scratch_size=0, num_ctas=1, launch_cooperative_grid=False,
                           launch_pdl=False, gsan_enabled=False, arg_annotations=(), kernel_signature=b"",
                           launch=nv.wrap_handle_tensordesc(lambda *a: None,
                                                            {"t": ("i32", "tensordesc<bf16[64, 64]>")}, [{}]))
    with pytest.raises(ValueError, match="inside a tuple"):
        tc.direct_launch(nested)


# ------------------------------------------------------------------------------------------------ the PTX passes

COUNT = """
import json, sys
sys.path.insert(0, {repo!r})
from fa2lab.compile_offline import compile_plan
from fa2triton.gluon import gluon_ptx as P
from fa2triton.gluon import gluon_backward_hopper as B1, gluon_backward_ws as BW, gluon_forward_hopper as G
counts, raw = {{}}, {{}}
def counting(name):
    f = getattr(P, name)
    def run(text):
        out, n = f(text)
        counts[name] = counts.get(name, 0) + n
        return out, n
    return run
for name in ("drop_marked_syncs", "partition_syncs", "tie_marked_arrives", "inline_consumer_call",
             "wgmma_descriptor_adds", "drop_repeated_proxy_fences", "chain_reduction_trees"):
    setattr(P, name, counting(name))
passes = P.passes
def recording(text):
    raw["ptx"] = text
    return passes(text)
P.passes = recording
out = {{}}
def record(label, compile_):
    counts.clear()
    k = compile_()
    ptx = k.asm["ptx"]
    out[label] = dict(counts, tma_loads=ptx.count("cp.async.bulk.tensor.2d.shared"),
                      reduce_adds=ptx.count("cp.reduce.async.bulk.tensor"), ptx_options=k.metadata.ptx_options)
    if label.startswith("forward ws2x64x64/4s/preg/pp/persist/ua/la"):   # for the ptxas tests (level 2 changes it)
        open({ptx_path!r}, "w").write(ptx)
        open({ptx_path!r} + ".raw", "w").write(raw["ptx"])   # Triton's own, before the passes
for D, N in ((64, 1024), (128, 2048)):
    for cfg in G.candidates_for(D):
        record(f"forward {{cfg.label}} D={{D}}", lambda: compile_plan(G.offline_plan(cfg, N=N, D=D)))
record("backward gluon_backward_hopper D=64", lambda: compile_plan(B1.offline_plan(64, False, 1024)))
record("backward gluon_backward_ws D=64 unsynced",
       lambda: compile_plan(BW.offline_plan(64, False, 1024, unsynced=True)))
from profiling.version_sass import kernels
tl_kernels = kernels()
for name in ("bwd_fused_d64_causal", "bwd_dq_d64_causal", "fwd_tl_d128_causal"):
    record(tl_kernels[name][0], tl_kernels[name][2])
print(json.dumps(out))
"""

# PASS_NAMES' counts per kernel, offline sm_90; also in docs/port-triton39.md. Triton 3.9 differs in these ways,
# explained there: partition_syncs finds nothing to rewrite (3.9 passes the shared consumer function its partition's
# barrier id, so its barriers are already `bar.sync %r, 128`), the slot wait's bar.sync moved (the inlined partitions'
# waits have none before them: one drop fewer per consumer and wait site; the shared function's has one before and
# one after, both dropped: two more), only 3.9's kernels plant DESCRIPTOR_MARK (splits_wgmma_descriptors; the ws
# backward at D = 64 only),
# only 3.9's Triton backward kernels plant FENCE_MARK (adds_loop_proxy_fences: the fences an earlier one covers), and
# only 3.9's forwards plant REDUCE_MARK (reduces_in_trees: each row's maximum and sum, per consumer code path; v7's tl
# forward through fa2triton.ptx_marks, with the descriptor mark).
PASSES = {
    "forward ws2x64x128/3s/preg/persist/ua/et1/sc2 D=64": {"3.6": (4, 3, 2, 2, 0, 0, 0), "3.9": (6, 0, 2, 2, 23, 0, 8)},
    "forward ws2x64x128/3s/preg/pp/ua/sc2 D=64": {"3.6": (5, 3, 0, 2, 0, 0, 0), "3.9": (7, 0, 0, 2, 23, 0, 8)},
    "forward ws3x64x128/4s/preg/pp/split/persist/ua D=64": {"3.6": (18, 0, 0, 0, 0, 0, 0),
        "3.9": (15, 0, 0, 0, 69, 0, 24)},
    "forward ws2x64x64/4s/preg/pp/persist/ua/la D=128": {"3.6": (44, 0, 0, 0, 0, 0, 0),
        "3.9": (36, 0, 0, 0, 84, 0, 56)},
    "forward ws3x64x64/3s/preg/pp/split/ua D=128": {"3.6": (18, 0, 0, 0, 0, 0, 0), "3.9": (15, 0, 0, 0, 63, 0, 24)},
    "forward ws2x64x128/3s/preg/pp/persist/ds/ua/q1 D=128": {"3.6": (12, 0, 0, 0, 0, 0, 0),
        "3.9": (10, 0, 0, 0, 42, 0, 16)},
    "backward gluon_backward_hopper D=64": {"3.6": (0, 0, 0, 0, 0, 0, 0), "3.9": (0, 0, 0, 0, 36, 0, 0)},
    "backward gluon_backward_ws D=64 unsynced": {"3.6": (8, 0, 0, 0, 0, 0, 0), "3.9": (8, 0, 0, 0, 160, 0, 0)},
    "backward _bwd_fused_kernel D=64 causal N=1024": {"3.6": (0, 0, 0, 0, 0, 0, 0), "3.9": (0, 0, 0, 0, 84, 10, 0)},
    "backward _bwd_dq_kernel D=64 causal N=2048": {"3.6": (0, 0, 0, 0, 0, 0, 0), "3.9": (0, 0, 0, 0, 30, 4, 0)},
    "forward tl 64x64/4w/3s D=128 causal N=1024": {"3.6": (0, 0, 0, 0, 0, 0, 0), "3.9": (0, 0, 0, 0, 28, 0, 8)},
}
TL_BACKWARD = "backward _bwd_"          # the Triton backward's kernels
TL = (TL_BACKWARD, "forward tl ")       # every tl kernel (not Gluon): those and v7's tl forward
PASS_NAMES = ("drop_marked_syncs", "partition_syncs", "tie_marked_arrives", "inline_consumer_call",
              "wgmma_descriptor_adds", "drop_repeated_proxy_fences", "chain_reduction_trees")


@pytest.fixture(scope="module")
def offline(tmp_path_factory):
    """The passes' counts from offline sm_90 compiles in a subprocess without TRITON_INTERPRET, with a fresh cache
    (so every PTX stage runs; under 3.9 the stages hook's no-argument form is called by each compile), and the path
    of one forward's PTX."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(TRITON_CACHE_DIR=str(tmp_path_factory.mktemp("triton-cache")), TRITON_DEFAULT_FP_FUSION="1")
    ptx_path = tmp_path_factory.mktemp("ptx") / "forward.ptx"
    p = subprocess.run([sys.executable, "-c", COUNT.format(repo=str(REPO), ptx_path=str(ptx_path))],
                       capture_output=True, text=True, env=env,
                       timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    return SimpleNamespace(counts=json.loads(p.stdout.strip().splitlines()[-1]), ptx=ptx_path)


@pytest.fixture(scope="module")
def pass_counts(offline):
    return offline.counts


def test_ptx_pass_counts_match_the_recorded_table(pass_counts):
    version = "3.9" if NEW else "3.6"
    got = {label: tuple(r.get(n, 0) for n in PASS_NAMES) for label, r in pass_counts.items()}
    assert got == {label: v[version] for label, v in PASSES.items()}


def test_both_triton_versions_differ_only_where_explained():
    """3.9's counts are 3.6's but for partition_syncs (0 where 3.6 rewrote the shared function's 3), the dropped
    syncs (two more in the shared function, one fewer per consumer and wait site in the inlined partitions) and the
    descriptors rewritten (none on 3.6, every kernel on 3.9), the fences dropped (3.9's Triton backward) and the row
    maxima and sums chained (3.9's forwards)."""
    for label, v in PASSES.items():
        (d6, p6, t6, i6, w6, f6, c6), (d9, p9, t9, i9, w9, f9, c9) = v["3.6"], v["3.9"]
        assert (t6, i6) == (t9, i9) and p9 == 0 and w6 == 0 < w9 and f6 == 0 == c6
        assert (c9 > 0) == label.startswith("forward")
        assert d9 == d6 + 2 if "/sc2" in label else d9 <= d6
        assert (f9 > 0) == label.startswith(TL_BACKWARD)


def test_gluon_launches_take_this_tritons_ptx_options(pass_counts):
    """Every offline compile of the Gluon kernels carries ptx_options(): none on 3.6, ptxas's default register
    allocation on 3.9."""
    assert {r["ptx_options"] for label, r in pass_counts.items() if not label.startswith(TL)} == {tc.ptx_options()}


def test_gluon_tma_names_compile_inside_gluon_jit(pass_counts):
    """tma_load (with and without pred=) and tma_reduce_add, called inside the @gluon.jit kernels, become TMA copies
    and the reduce-add in the PTX."""
    for label, r in pass_counts.items():
        assert r["tma_loads"] > 0 or label.startswith(TL), label
    assert pass_counts["backward gluon_backward_ws D=64 unsynced"]["reduce_adds"] > 0
    assert pass_counts["backward gluon_backward_hopper D=64"]["reduce_adds"] == 0
