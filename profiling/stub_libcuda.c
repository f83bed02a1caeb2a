/* A libcuda.so.1 whose every call succeeds at once and does nothing (profiling/host_emulation.py): Triton's launch
   code then runs on a machine without a GPU. Device attributes are an H200's where Triton asks for them
   (capability 9.0, 132 SMs, 232448 bytes of shared memory per block). */
#include <string.h>
#include <stddef.h>
typedef int CUresult;
CUresult cuInit(unsigned f) { return 0; }
CUresult cuDriverGetVersion(int *v) { *v = 13000; return 0; }
CUresult cuDeviceGetCount(int *c) { *c = 1; return 0; }
CUresult cuDeviceGet(int *d, int o) { *d = 0; return 0; }
CUresult cuDeviceGetAttribute(int *v, int a, int dev) {
  switch (a) {
    case 97: case 81: *v = 232448; break;   /* shared memory per block (opt-in), per SM */
    case 8: *v = 49152; break;
    case 16: *v = 132; break;               /* SMs */
    case 75: *v = 9; break; case 76: *v = 0; break;
    case 10: *v = 32; break; case 1: *v = 1024; break;
    case 12: case 82: *v = 65536; break;
    case 13: *v = 1980000; break; case 36: *v = 2619000; break; case 37: *v = 6144; break;
    default: *v = 1;
  }
  return 0;
}
CUresult cuCtxGetCurrent(void **c) { *c = (void *)0x1; return 0; }
CUresult cuCtxSetCurrent(void *c) { return 0; }
CUresult cuCtxGetDevice(int *d) { *d = 0; return 0; }
CUresult cuDevicePrimaryCtxRetain(void **c, int d) { *c = (void *)0x1; return 0; }
CUresult cuCtxGetLimit(size_t *v, int l) { *v = 0; return 0; }
CUresult cuCtxSetLimit(int l, size_t v) { return 0; }
CUresult cuModuleLoadData(void **m, const void *img) { *m = (void *)0x10; return 0; }
CUresult cuModuleGetFunction(void **f, void *m, const char *n) { *f = (void *)0x20; return 0; }
CUresult cuModuleUnload(void *m) { return 0; }
CUresult cuFuncGetAttribute(int *v, int a, void *f) { *v = a == 0 ? 1024 : a == 4 ? 128 : 0; return 0; }
CUresult cuFuncSetAttribute(void *f, int a, int v) { return 0; }
CUresult cuFuncSetCacheConfig(void *f, int c) { return 0; }
CUresult cuPointerGetAttribute(void *data, int attr, unsigned long long ptr) {
  *(unsigned long long *)data = ptr; return 0; }
CUresult cuPointerGetAttributes(unsigned n, int *attrs, void **data, unsigned long long ptr) {
  for (unsigned i = 0; i < n; i++) *(unsigned long long *)data[i] = ptr; return 0; }
CUresult cuTensorMapEncodeTiled(void *map) { memset(map, 0, 128); return 0; }
CUresult cuTensorMapEncodeIm2col(void *map) { memset(map, 0, 128); return 0; }
CUresult cuLaunchKernelEx(const void *cfg, void *f, void **p, void **e) { return 0; }
CUresult cuOccupancyMaxActiveClusters(int *n, void *f, const void *cfg) { *n = 1; return 0; }
CUresult cuGetErrorString(int e, const char **s) { *s = "stub"; return 0; }
CUresult cuStreamIsCapturing(void *s, int *st) { *st = 0; return 0; }
