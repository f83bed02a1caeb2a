"""Compile one kernel configuration for an explicit target, with or without a GPU.

`kernel.warmup(...)` (what fa2lab.forward_sweep does) asks the CUDA driver for the target,
so it needs a GPU. Triton's compiler itself does not: `triton.compile` takes an
`ASTSource` and a `GPUTarget`, and runs TTIR -> TTGIR -> LLVM IR -> PTX -> cubin with
the ptxas bundled in Triton's wheel. This module builds the `ASTSource` exactly as
`JITFunction.run` does on a GPU (the same binder, so the same specialisation of
pointers, strides equal to 1 and 16-divisible integers), but for the target given.

What an offline compile cannot give: registers and spills as the driver reports
them after loading (`compiled.n_regs`, `compiled.n_spills`), and whether the
kernel fits a particular GPU's shared memory. Callers read registers and spills
from ptxas or the cubin instead, and say so.
"""

from __future__ import annotations

import re

from fa2triton.offline import OfflinePlan


def parse_arch(arch: str | int) -> int:
    """'sm_90', 'sm_90a', '90' or 90 -> 90."""
    if isinstance(arch, int):
        return arch
    m = re.fullmatch(r"(?:sm_?)?(\d+)a?", str(arch).strip().lower())
    if not m:
        raise ValueError(f"an architecture is like 'sm_90', got {arch!r}")
    return int(m.group(1))


def jit_function(kernel):
    """The JITFunction under a kernel: itself, or the `.fn` of an Autotuner/Heuristics wrapper."""
    from triton.runtime.jit import JITFunction

    seen = 0
    while not isinstance(kernel, JITFunction):
        if type(kernel).__name__ == "InterpretedFunction":
            raise RuntimeError("this kernel was imported under Triton's interpreter (TRITON_INTERPRET=1), which "
                               "compiles nothing: unset TRITON_INTERPRET before the kernel module is imported")
        if not hasattr(kernel, "fn") or seen > 5:
            raise TypeError(f"{kernel!r} is not a @triton.jit function or a wrapper of one")
        kernel, seen = kernel.fn, seen + 1
    return kernel


def compile_for_target(kernel, args, *, arch: int, num_warps: int, num_stages: int, **constexprs):
    """Compile `kernel` (JITFunction or autotuner) for sm_<arch> without a GPU; returns a
    triton CompiledKernel (metadata, asm['ttgir'|'ptx'|'cubin'|...]) that is never loaded.

    This mirrors JITFunction.run(..., warmup=True): the same binder and _pack_args, so the
    signature, constexprs and divisibility attributes are those a GPU launch would use.
    """
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend
    from triton.runtime.jit import MockTensor, create_function_from_signature

    fn = jit_function(kernel)
    target = GPUTarget("cuda", int(arch), 32)
    backend = make_backend(target)
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    kwargs = dict(constexprs, num_warps=num_warps, num_stages=num_stages, debug=bool(fn.debug))
    bound, specialization, options = binder(*map(MockTensor.wrap_dtype, args), **kwargs)
    options, signature, constants, attrs = fn._pack_args(backend, kwargs, bound, specialization, options)
    src = _source_class(fn)(fn, signature, constants, attrs)
    return triton.compile(src, target=target, options=options.__dict__)


def compile_plan(plan: OfflinePlan, *, arch: int = 90):
    """Compile a kernel's OfflinePlan (a Gluon module's `offline_plan`) for sm_<arch> without a GPU."""
    return compile_for_target(plan.kernel, plan.args, arch=arch, **plan.options)


def _source_class(fn):
    """ASTSource for a @triton.jit function, GluonASTSource for a @gluon.jit one."""
    from triton.compiler.compiler import ASTSource

    try:
        from triton.experimental.gluon._runtime import GluonASTSource, GluonJITFunction
    except ImportError:  # pragma: no cover - a Triton without Gluon
        return ASTSource
    return GluonASTSource if isinstance(fn, GluonJITFunction) else ASTSource


def compile_on_gpu(kernel, args, *, grid, num_warps: int, num_stages: int, **constexprs):
    """The GPU path, as fa2lab.forward_sweep.compile_one: warmup for the current device, then load the
    binary so the driver fills n_regs and n_spills (raises OutOfResources if it cannot fit)."""
    fn = jit_function(kernel)
    compiled = fn.warmup(*args, grid=grid, num_warps=num_warps, num_stages=num_stages, **constexprs)
    compiled._init_handles()
    return compiled


def bundled_tool(name: str, arch: int | None = None):
    """Triton's own NVIDIA tool (ptxas, cuobjdump, nvdisasm; a knobs NvidiaTool with .path and .version, honouring
    TRITON_<NAME>_PATH); for ptxas with `arch`, the one Triton's compile runs for sm_<arch>
    (fa2triton.triton_compat.get_ptxas). None where Triton has none."""
    try:
        if name == "ptxas" and arch is not None:
            from fa2triton.triton_compat import get_ptxas

            return get_ptxas(arch)
        from triton import knobs

        return getattr(knobs.nvidia, name)
    except Exception:  # noqa: BLE001 - not bundled
        return None


def tool_path(name: str, arch: int | None = None) -> str | None:
    """Path of an NVIDIA tool: Triton's bundled one (bundled_tool), else the one on PATH, else None."""
    import shutil

    tool = bundled_tool(name, arch)
    try:
        return tool.path
    except Exception:  # noqa: BLE001 - not bundled (or its path does not resolve): fall back to PATH
        return shutil.which(name)
