"""Every difference between Triton 3.6 and 3.9 that this project meets, one named function (or name) each.

Nothing else in the tree reads triton.__version__: it calls these. Where a feature can be detected (an attribute, a
closure's variables, a signature) that is what is checked; the version itself only bounds what is supported.

- require_supported(): one clear error at import for a Triton outside SUPPORTED.
- install_stages_hook(): knobs.runtime.add_stages_inspection_hook, called by 3.6 with (backend, stages, options,
  language, capability) and by 3.9 also with no argument, for a (key, hash) that goes into the compile cache key.
- tma_load, tma_reduce_add (inside @gluon.jit code): Gluon's TMA copy into shared memory (3.6
  async_copy_global_to_shared, 3.9 async_load) and TMA reduce-add (3.9 async_atomic_add; 3.6 only the builder's op).
- get_ptxas(arch): the ptxas Triton itself runs for sm_<arch> (3.9: ptxas-blackwell, CUDA 13, from sm_90 on).
- PARTITION_SYNC: a partition's bar.sync in PTX (3.9 names the barrier by a register).
- direct_launch(run), encode_descriptor(desc, meta): a CompiledKernel's C launch function and its descriptor encoding
  (3.6: a launcher per kernel; 3.9: one generic launch with the arguments as one sequence).
"""

from __future__ import annotations

import hashlib
import inspect
import re

import triton

SUPPORTED = ">=3.6,<3.10"
_LOWEST, _BEYOND = (3, 6), (3, 10)


class UnsupportedTriton(ImportError):
    """The installed Triton is outside SUPPORTED."""


def triton_version() -> tuple[int, int]:
    """(major, minor) of the installed Triton (triton.__version__, read on each call)."""
    m = re.match(r"(\d+)\.(\d+)", triton.__version__)
    if not m:
        raise UnsupportedTriton(f"cannot read Triton's version {triton.__version__!r}; this project supports "
                                f"triton{SUPPORTED}")
    return int(m.group(1)), int(m.group(2))


def require_supported() -> None:
    """Raise UnsupportedTriton, one line naming the installed Triton and SUPPORTED, outside [3.6, 3.10)."""
    if not _LOWEST <= triton_version() < _BEYOND:
        raise UnsupportedTriton(f"Triton {triton.__version__} is installed; this project supports triton{SUPPORTED} "
                                f"(pip install 'triton{SUPPORTED}')")


# ------------------------------------------------------------------------------------------------ the stages hook

def install_stages_hook(rewrite, key: str):
    """Install `rewrite(backend, stages, options, language, capability)` as a stages-inspection hook, after any
    hook already installed, and return the hook. Called with no argument (Triton 3.9's compile and JIT paths do, on
    every launch) it returns (key, hash) for the compile cache: the previous hook's key followed by `key`, and a
    sha256 over the previous hash and `key`; so a change of `key` recompiles on 3.9 (3.6's cache never sees hooks).
    Installing the same `key` again is a no-op (the installed hook is returned)."""
    from triton import knobs

    previous = knobs.runtime.add_stages_inspection_hook
    if getattr(previous, "fa2_key", None) == key:
        return previous
    own = (key, hashlib.sha256(key.encode()).hexdigest())

    def hook(*args):
        if not args:
            if previous is None:
                return own
            prev_key, prev_hash = previous()
            return prev_key + key, hashlib.sha256(f"{prev_hash}{key}".encode()).hexdigest()
        if previous is not None:
            previous(*args)
        rewrite(*args)

    hook.fa2_key = key
    knobs.runtime.add_stages_inspection_hook = hook
    return hook


# ------------------------------------------------------------------------------------------------ Gluon TMA

def _tma_ops() -> dict:
    """tma_load and tma_reduce_add for this Triton's Gluon (builtins, callable inside @gluon.jit code)."""
    from triton.experimental.gluon.language.nvidia.hopper import tma

    ops = {"tma_load": getattr(tma, "async_load", None) or tma.async_copy_global_to_shared}
    if hasattr(tma, "async_atomic_add"):
        ops["tma_reduce_add"] = tma.async_atomic_add
    else:   # Triton 3.6 has the operation (cp.reduce.async.bulk) but Gluon does not name it
        from triton._C.libtriton import ir
        from triton.experimental.gluon.language._core import builtin

        @builtin
        def tma_reduce_add(tensor_desc, coord, src, _semantic=None):
            """TMA reduce-add of shared memory `src` into the tile of `tensor_desc` at `coord`."""
            coord = _semantic._convert_to_ir_values(coord, require_i64=False)
            _semantic.builder.create_async_tma_reduce(ir.DESCRIPTOR_REDUCE_KIND.ADD, tensor_desc.handle, coord,
                                                      src.handle)

        ops["tma_reduce_add"] = tma_reduce_add
    return ops


def __getattr__(name):   # tma_load, tma_reduce_add: Gluon is imported on first use only
    if name in ("tma_load", "tma_reduce_add"):
        ops = _tma_ops()
        globals().update(ops)
        return ops[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ------------------------------------------------------------------------------------------------ ptxas

def get_ptxas(arch: int):
    """The ptxas Triton's own compile runs for sm_<arch> (a knobs NvidiaTool: .path, .version): 3.6 ptxas
    (CUDA 12.8) below sm_100, 3.9 ptxas-blackwell (CUDA 13) from sm_90 on."""
    from triton.backends.nvidia import compiler

    return compiler.get_ptxas(int(arch))


# ------------------------------------------------------------------------------------------------ PTX patterns

# one partition's bar.sync: `bar.sync <id>, 128` (3.6, a constant id; 3.9, a register holding it) in an inlined
# partition, whole-CTA `bar.sync 0` in the non-inlined consumer function (3.6)
PARTITION_SYNC = re.compile(r"\s*(?:bar\.sync\s+(?:\d+|%r\d+),\s*128|(?:bar|barrier)\.sync\s+0);\s*$")


# ------------------------------------------------------------------------------------------------ the launcher

def encode_descriptor(desc, meta) -> list:
    """[CUtensorMap, *shape, *strides] for a host TensorDescriptor, as Triton's launcher expands it (3.9's
    make_tensordesc_arg takes a third argument, the launch's base arguments, which it ignores)."""
    from triton.backends.nvidia import driver as nv

    make = nv.make_tensordesc_arg
    return make(desc, meta, None) if len(inspect.signature(make).parameters) == 3 else make(desc, meta)


def direct_launch(run):
    """(call, expand) for a CompiledKernel's launcher `run` (kernel.run): call(grid, stream, function, packed, args)
    calls the C launch function with hooks, metadata and scratch None; expand is ((position, TMA metadata), ...),
    from the back, of the host descriptors in `args` that the caller replaces by encode_descriptor's list first.
    3.6's C function takes the arguments spread; 3.9's generic one takes them as one sequence with the annotations
    and packed signature it was built with. ValueError for any other layout, scratch, clusters or GSan."""
    if run.global_scratch_size or run.profile_scratch_size or getattr(run, "num_ctas", 1) != 1:
        raise ValueError("the kernel needs scratch or clusters: Triton's launcher allocates them")
    if getattr(run, "gsan_enabled", False):
        raise ValueError("GSan adds arguments: Triton's launcher passes them")
    wrapped, coop, pdl = run.launch, run.launch_cooperative_grid, run.launch_pdl
    if getattr(wrapped, "__closure__", None) is None:   # no descriptor argument: the C function itself
        c_launch, expand = wrapped, ()
    else:
        names = inspect.getclosurevars(wrapped).nonlocals
        metas = list(names["tensordesc_meta"] or ())
        if "tensordesc_indices" in names:   # 3.6: wrap_handle_tensordesc's indices
            positions = sorted(names["tensordesc_indices"])
        else:                               # 3.9: wrap_handle_tensordesc_impl's paths, top-level only
            if any(names["relevant_paths"].values()):
                raise ValueError("a descriptor inside a tuple argument")
            positions = sorted(names["relevant_paths"])
        if not metas or len(metas) != len(positions) or any(m is None for m in metas):
            raise ValueError("a descriptor without TMA metadata")
        c_launch, expand = names["launcher"], tuple(reversed(tuple(zip(positions, metas))))
    if "arg_annotations" in type(run).__call__.__code__.co_names:   # 3.9: Triton's own call passes them
        annotations, signature = run.arg_annotations, run.kernel_signature

        def call(grid, stream, function, packed, args):
            c_launch(*grid, stream, function, coop, pdl, packed, None, None, None, None, None, annotations,
                     signature, args)
    else:
        def call(grid, stream, function, packed, args):
            c_launch(*grid, stream, function, coop, pdl, None, None, packed, None, None, None, *args)
    return call, expand
