"""The L2 fetch size ("L2 promotion") of host TMA descriptors, which Triton 3.6 fixes at 128 bytes.

A CUtensorMap says at what granularity L2 fills a TMA request's misses from DRAM (cuTensorMapEncodeTiled's
l2Promotion: none, 64, 128 or 256 bytes). Triton 3.6's launcher encodes every host descriptor with 128
(backends/nvidia/driver.c, fillTMADescriptor: CU_TENSOR_MAP_L2_PROMOTION_L2_128B, not a parameter);
CUTLASS-based and hand-written Hopper kernels commonly ask for 256. v7's Gluon forward reads each K and V tile
as 16 KB of contiguous rows, so the size decides how many DRAM requests fill a cold tile (issue 6: the part of
do_bench's time that v7 loses to cuDNN at N = 1024 is the start, on inputs the flush left in DRAM).

How: a descriptor object (triton's TensorDescriptor, a dataclass) marked with `mark(desc, size)` is encoded by
Triton's own make_tensordesc_arg as always, then its CUtensorMap is encoded again in place with the size asked
for, by libcuda's cuTensorMapEncodeTiled through ctypes, from the same arguments. `install()` wraps
triton.backends.nvidia.driver.make_tensordesc_arg once; Triton's launcher (wrap_handle_tensordesc) and
fa2lab.hostpath.DirectLauncher both look it up there at call time, and unmarked descriptors pass through
unchanged. Before the first rewrite in a process, the 128-byte encoding is repeated here and compared byte for
byte with Triton's, which checks both the object layout (the tensormap at offset 128 of Triton's
PyCUtensorMap) and the arguments; a mismatch is an error naming the Triton version, never a silent
mis-encoded descriptor.
"""

from __future__ import annotations

import ctypes

PROMOTIONS = {0: 0, 64: 1, 128: 2, 256: 3}   # bytes -> CUtensorMapL2promotion (0: none)
TRITON_DEFAULT = 128
_MAP_BYTES = 128
_MAP_OFFSET = 128   # PyCUtensorMapObject: PyObject_HEAD, then a CUtensorMap aligned to 128 bytes
_ATTR = "_fa2_l2_promotion"
_state = {"encode": None, "checked": False}


def mark(desc, size: int):
    """Ask for `size` bytes of L2 promotion in desc's CUtensorMap (128, Triton's own, leaves it unmarked)."""
    if size not in PROMOTIONS:
        raise ValueError(f"L2 promotion is one of {sorted(PROMOTIONS)} bytes, not {size}")
    if size != TRITON_DEFAULT:
        install()
        setattr(desc, _ATTR, size)
    return desc


def _encoder():
    if _state["encode"] is None:
        f = ctypes.CDLL("libcuda.so.1").cuTensorMapEncodeTiled
        u64p, u32p = ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_uint32)
        f.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_void_p, u64p, u64p, u32p, u32p,
                      ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int]
        f.restype = ctypes.c_int
        _state["encode"] = f
    return _state["encode"]


def encode(address: int, desc, metadata: dict, size: int) -> None:
    """Encode desc's tensormap at `address` (64-byte aligned, 128 bytes) as Triton 3.6's make_tensordesc_arg and
    fillTMADescriptor do, but with `size` bytes of L2 promotion."""
    from triton.backends.nvidia.driver import TMA_DTYPE_DEVICE_TO_HOST

    shape, strides = list(desc.shape), list(desc.strides)
    if metadata["fp4_padded"]:
        shape[-1] *= 2
    elem = metadata["elem_size"]
    rank = len(shape)
    dims = (ctypes.c_uint64 * rank)(*reversed(shape))
    byte_strides = (ctypes.c_uint64 * rank)(*([elem * s for s in reversed(strides[:-1])] + [0]))
    byte_strides[rank - 1] = dims[rank - 1] * (elem if rank == 1 else byte_strides[rank - 2])
    box = (ctypes.c_uint32 * rank)(*reversed(list(metadata["block_size"])))
    ones = (ctypes.c_uint32 * rank)(*([1] * rank))
    fill = 1 if desc.padding == "nan" else 0   # CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA, as Triton's
    res = _encoder()(address, TMA_DTYPE_DEVICE_TO_HOST[metadata["elem_type"]], rank, desc.base.data_ptr(), dims,
                     byte_strides, box, ones, 0, metadata["swizzle"], PROMOTIONS[size], fill)
    if res != 0:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed ({res}) for an L2 promotion of {size} bytes")


def _map_address(cu_map) -> int:
    import triton

    if type(cu_map).__basicsize__ != _MAP_OFFSET + _MAP_BYTES or id(cu_map) % 128:
        raise RuntimeError(f"Triton {triton.__version__}'s CUtensorMap object is not laid out as 3.6's "
                           f"(PyObject_HEAD, then the map at offset 128): L2 promotion cannot be set")
    return id(cu_map) + _MAP_OFFSET


def _check(address: int, desc, metadata: dict) -> None:
    """Once per process: this module's 128-byte encoding must equal Triton's, byte for byte."""
    import triton

    raw = ctypes.create_string_buffer(_MAP_BYTES + 64)
    aligned = ctypes.addressof(raw) + (-ctypes.addressof(raw)) % 64
    encode(aligned, desc, metadata, TRITON_DEFAULT)
    if ctypes.string_at(aligned, _MAP_BYTES) != ctypes.string_at(address, _MAP_BYTES):
        raise RuntimeError(f"re-encoding Triton {triton.__version__}'s tensor descriptor did not reproduce it: "
                           f"L2 promotion cannot be set safely with this Triton")
    _state["checked"] = True


def _promoting(original):
    def make_tensordesc_arg(arg, metadata):
        out = original(arg, metadata)
        size = getattr(arg, _ATTR, None)
        if size is not None and metadata is not None:
            address = _map_address(out[0])
            if not _state["checked"]:
                _check(address, arg, metadata)
            encode(address, arg, metadata, size)
        return out
    make_tensordesc_arg.fa2_promoting = True
    return make_tensordesc_arg


def install() -> None:
    """Wrap Triton's make_tensordesc_arg (once) so that marked descriptors get their L2 promotion."""
    from triton.backends.nvidia import driver

    if not getattr(driver.make_tensordesc_arg, "fa2_promoting", False):
        driver.make_tensordesc_arg = _promoting(driver.make_tensordesc_arg)

