// What moe_permute's layer-3 expert uses beyond ../../stencil3d/bench/cuda_cpu_shim.hpp: the
// programmatic dependent launch (cudaLaunchKernelEx with its attribute; blocks run one after
// another here, so the dependency holds trivially), __ldcg, __threadfence, atomicInc, atomicOr.
#pragma once
#include "cuda_cpu_shim.hpp"
enum cudaLaunchAttributeID { cudaLaunchAttributeProgrammaticStreamSerialization = 6 };
struct cudaLaunchAttributeValue { int programmaticStreamSerializationAllowed; };
struct cudaLaunchAttribute { cudaLaunchAttributeID id; cudaLaunchAttributeValue val; };
struct cudaLaunchConfig_t {
  dim3 gridDim, blockDim;
  size_t dynamicSmemBytes;
  cudaStream_t stream;
  cudaLaunchAttribute* attrs;
  unsigned numAttrs;
};
template <typename... Params, typename... Args>
cudaError_t cudaLaunchKernelEx(const cudaLaunchConfig_t* c, void (*kernel)(Params...), Args... args) {
  d2k_launch(c->gridDim, c->blockDim, c->dynamicSmemBytes, [&] { kernel(args...); });
  return cudaSuccess;
}
template <typename T> T __ldcg(const T* p) { return *p; }
inline void __threadfence() {}
inline unsigned atomicInc(unsigned* p, unsigned v) {
  unsigned old = __atomic_load_n(p, __ATOMIC_SEQ_CST);
  while (!__atomic_compare_exchange_n(p, &old, old >= v ? 0u : old + 1u, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)) {}
  return old;
}
inline int atomicOr(int* p, int v) { return __atomic_fetch_or(p, v, __ATOMIC_SEQ_CST); }
// bench/variants/L3_lrank.cu: its count kernel's table may exceed 48 KB (nothing to configure here).
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
template <typename F> cudaError_t cudaFuncSetAttribute(F, cudaFuncAttribute, int) { return cudaSuccess; }
