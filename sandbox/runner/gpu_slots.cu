#include "sandbox/runner/gpu_slots.hpp"

#include <unistd.h>

#include <cmath>
#include <cstring>

#include <cuda.h>
#include <math_constants.h>

namespace d2k::runner {
namespace {

// Driver entry points through the runtime (the runner links no libcuda: it must start, and say
// "no GPU", on machines without a driver).
template <class F>
F entry(const char* name) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess)
    return nullptr;
  return reinterpret_cast<F>(fn);
}

struct Vmm {
  CUresult (*get_device)(CUdevice*, int) = nullptr;
  CUresult (*granularity)(size_t*, const CUmemAllocationProp*, CUmemAllocationGranularity_flags) = nullptr;
  CUresult (*create)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*, unsigned long long) = nullptr;
  CUresult (*reserve)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long) = nullptr;
  CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long) = nullptr;
  CUresult (*access)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t) = nullptr;
  CUresult (*export_fd)(void*, CUmemGenericAllocationHandle, CUmemAllocationHandleType, unsigned long long) = nullptr;
  CUresult (*import_fd)(CUmemGenericAllocationHandle*, void*, CUmemAllocationHandleType) = nullptr;
  CUresult (*unmap)(CUdeviceptr, size_t) = nullptr;
  CUresult (*release)(CUmemGenericAllocationHandle) = nullptr;
  CUresult (*address_free)(CUdeviceptr, size_t) = nullptr;
  bool ok = false;
};

const Vmm& vmm() {
  static const Vmm v = [] {
    Vmm x;
    x.get_device = entry<decltype(x.get_device)>("cuDeviceGet");
    x.granularity = entry<decltype(x.granularity)>("cuMemGetAllocationGranularity");
    x.create = entry<decltype(x.create)>("cuMemCreate");
    x.reserve = entry<decltype(x.reserve)>("cuMemAddressReserve");
    x.map = entry<decltype(x.map)>("cuMemMap");
    x.access = entry<decltype(x.access)>("cuMemSetAccess");
    x.export_fd = entry<decltype(x.export_fd)>("cuMemExportToShareableHandle");
    x.import_fd = entry<decltype(x.import_fd)>("cuMemImportFromShareableHandle");
    x.unmap = entry<decltype(x.unmap)>("cuMemUnmap");
    x.release = entry<decltype(x.release)>("cuMemRelease");
    x.address_free = entry<decltype(x.address_free)>("cuMemAddressFree");
    x.ok = x.get_device && x.granularity && x.create && x.reserve && x.map && x.access && x.export_fd &&
           x.import_fd && x.unmap && x.release && x.address_free;
    return x;
  }();
  return v;
}

std::string cu_error(const char* what, CUresult rc) { return std::string(what) + " failed (CUresult " + std::to_string(rc) + ")"; }

CUmemAllocationProp props(CUdevice dev) {
  CUmemAllocationProp p{};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = dev;
  p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return p;
}

// Reserve, map and grant access (read-write, or read-only) to `size` bytes of `handle`.
std::string map_rw(const Vmm& v, CUdevice dev, CUmemGenericAllocationHandle handle, std::uint64_t size,
                   unsigned long long& ptr, CUmemAccess_flags flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
  CUdeviceptr p = 0;
  if (CUresult rc = v.reserve(&p, size, 0, 0, 0); rc != CUDA_SUCCESS) return cu_error("cuMemAddressReserve", rc);
  if (CUresult rc = v.map(p, size, 0, handle, 0); rc != CUDA_SUCCESS) {
    v.address_free(p, size);
    return cu_error("cuMemMap", rc);
  }
  CUmemAccessDesc acc{};
  acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  acc.location.id = dev;
  acc.flags = flags;
  if (CUresult rc = v.access(p, size, &acc, 1); rc != CUDA_SUCCESS) {
    v.unmap(p, size);
    v.address_free(p, size);
    return cu_error("cuMemSetAccess", rc);
  }
  ptr = p;
  return "";
}

}  // namespace

SharedSlots::~SharedSlots() { release(); }

void SharedSlots::release() {
  const Vmm& v = vmm();
  if (ptr_ != 0) {
    v.unmap(ptr_, size_);
    v.address_free(ptr_, size_);
  }
  if (handle_ != 0) v.release(handle_);
  ptr_ = 0;
  handle_ = 0;
  size_ = 0;
  read_only_ = false;
}

std::string SharedSlots::create(std::uint64_t bytes, int& fd) {
  fd = -1;
  const Vmm& v = vmm();
  if (!v.ok) return "the driver lacks the virtual-memory API";
  CUdevice dev = 0;
  if (CUresult rc = v.get_device(&dev, 0); rc != CUDA_SUCCESS) return cu_error("cuDeviceGet", rc);
  const CUmemAllocationProp p = props(dev);
  size_t gran = 0;
  if (CUresult rc = v.granularity(&gran, &p, CU_MEM_ALLOC_GRANULARITY_MINIMUM); rc != CUDA_SUCCESS || gran == 0)
    return cu_error("cuMemGetAllocationGranularity", rc);
  const std::uint64_t size = (std::max<std::uint64_t>(bytes, 1) + gran - 1) / gran * gran;
  CUmemGenericAllocationHandle h = 0;
  if (CUresult rc = v.create(&h, size, &p, 0); rc != CUDA_SUCCESS) return cu_error("cuMemCreate", rc);
  handle_ = h;
  size_ = size;
  if (std::string e = map_rw(v, dev, h, size, ptr_); !e.empty()) return e;
  // Poison: a slot the candidate never wrote holds NaN / all ones, never an earlier process's data.
  if (cudaMemset(data(), 0xFF, size) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess)
    return "poisoning the output slots failed";
  int out = -1;
  if (CUresult rc = v.export_fd(&out, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0); rc != CUDA_SUCCESS)
    return cu_error("cuMemExportToShareableHandle", rc);
  fd = out;
  return "";
}

std::string SharedSlots::import(int fd, std::uint64_t bytes, bool read_only) {
  const Vmm& v = vmm();
  struct Close {
    int fd;
    ~Close() { if (fd >= 0) ::close(fd); }
  } closer{fd};
  if (!v.ok) return "the driver lacks the virtual-memory API";
  if (bytes == 0) return "no output slots to map";
  CUdevice dev = 0;
  if (CUresult rc = v.get_device(&dev, 0); rc != CUDA_SUCCESS) return cu_error("cuDeviceGet", rc);
  CUmemGenericAllocationHandle h = 0;
  if (CUresult rc = v.import_fd(&h, reinterpret_cast<void*>(static_cast<std::uintptr_t>(fd)),
                                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
      rc != CUDA_SUCCESS)
    return cu_error("cuMemImportFromShareableHandle", rc);
  std::string e = "not tried";
  if (read_only) {
    e = map_rw(v, dev, h, bytes, ptr_, CU_MEM_ACCESS_FLAGS_PROT_READ);
    read_only_ = e.empty();
  }
  if (!e.empty()) e = map_rw(v, dev, h, bytes, ptr_);  // read-only refused: read-write
  v.release(h);  // the mapping holds the allocation from here on
  if (!e.empty()) return e;
  size_ = bytes;
  return "";
}

// ---- the comparison kernel -----------------------------------------------------------------------
namespace {

struct DevCheck {
  unsigned long long mismatches;
  unsigned long long nonfinite;
  unsigned long long max_abs_bits;  // non-negative doubles order as their bit patterns
  unsigned long long max_rel_bits;
  unsigned long long first_bad;     // ~0: none
  double first_got, first_want;
};

__device__ double load_elem(const void* p, int dtype, unsigned long long i) {
  switch (dtype) {
    case static_cast<int>(Dtype::f32): return static_cast<const float*>(p)[i];
    case static_cast<int>(Dtype::f64): return static_cast<const double*>(p)[i];
    case static_cast<int>(Dtype::bf16): {
      const unsigned bits = static_cast<unsigned>(static_cast<const unsigned short*>(p)[i]) << 16;
      return __uint_as_float(bits);
    }
    case static_cast<int>(Dtype::f16): {
      const unsigned short h = static_cast<const unsigned short*>(p)[i];
      const int sign = (h >> 15) & 1, exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
      double v;
      if (exp == 0) v = ldexp(static_cast<double>(mant), -24);
      else if (exp == 31) v = mant == 0 ? CUDART_INF : CUDART_NAN;
      else v = ldexp(static_cast<double>(mant + 1024), exp - 25);
      return sign ? -v : v;
    }
    case static_cast<int>(Dtype::i32): return static_cast<const int*>(p)[i];
    case static_cast<int>(Dtype::i64): return static_cast<double>(static_cast<const long long*>(p)[i]);
    case static_cast<int>(Dtype::u8): return static_cast<const unsigned char*>(p)[i];
    case static_cast<int>(Dtype::u32): return static_cast<const unsigned*>(p)[i];
  }
  return 0;
}

__device__ bool same_bits(const void* a, const void* b, int esize, unsigned long long i) {
  switch (esize) {
    case 1: return static_cast<const unsigned char*>(a)[i] == static_cast<const unsigned char*>(b)[i];
    case 2: return static_cast<const unsigned short*>(a)[i] == static_cast<const unsigned short*>(b)[i];
    case 4: return static_cast<const unsigned*>(a)[i] == static_cast<const unsigned*>(b)[i];
    default: return static_cast<const unsigned long long*>(a)[i] == static_cast<const unsigned long long*>(b)[i];
  }
}

__device__ double warp_max(double v) {
  for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_down_sync(0xffffffffu, v, o));
  return v;
}
__device__ unsigned long long warp_sum(unsigned long long v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;
}
__device__ unsigned long long warp_min(unsigned long long v) {
  for (int o = 16; o > 0; o >>= 1) {
    const unsigned long long u = __shfl_down_sync(0xffffffffu, v, o);
    v = u < v ? u : v;
  }
  return v;
}

__global__ void compare_kernel(const void* got, const void* want, int dtype, int esize, bool is_float_type,
                               unsigned long long count, double atol, double rtol, DevCheck* out) {
  const bool exact_int = !is_float_type && atol == 0 && rtol == 0;
  unsigned long long bad_count = 0, nonfinite = 0, first = ~0ull;
  double max_abs = 0, max_rel = 0;
  const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  for (unsigned long long i = blockIdx.x * static_cast<unsigned long long>(blockDim.x) + threadIdx.x; i < count;
       i += stride) {
    bool bad = false;
    if (exact_int) {
      bad = !same_bits(got, want, esize, i);
      if (bad) max_abs = fmax(max_abs, fabs(load_elem(got, dtype, i) - load_elem(want, dtype, i)));
    } else {
      const double g = load_elem(got, dtype, i), w = load_elem(want, dtype, i);
      if (!isfinite(w)) {
        bad = !(isnan(w) ? isnan(g) : g == w);
      } else if (!isfinite(g)) {
        bad = true;
        ++nonfinite;
      } else {
        const double abs_err = fabs(g - w);
        const double rel_err = abs_err / fmax(fabs(w), 1e-30);
        max_abs = fmax(max_abs, abs_err);
        if (fabs(w) > atol) max_rel = fmax(max_rel, rel_err);
        bad = abs_err > __dadd_rn(atol, __dmul_rn(rtol, fabs(w)));  // no FMA contraction: the CPU rounding
      }
    }
    if (bad) {
      ++bad_count;
      if (i < first) first = i;
    }
  }
  bad_count = warp_sum(bad_count);
  nonfinite = warp_sum(nonfinite);
  first = warp_min(first);
  max_abs = warp_max(max_abs);
  max_rel = warp_max(max_rel);
  if ((threadIdx.x & 31) == 0) {
    if (bad_count) atomicAdd(&out->mismatches, bad_count);
    if (nonfinite) atomicAdd(&out->nonfinite, nonfinite);
    if (first != ~0ull) atomicMin(&out->first_bad, first);
    if (max_abs > 0) atomicMax(&out->max_abs_bits, static_cast<unsigned long long>(__double_as_longlong(max_abs)));
    if (max_rel > 0) atomicMax(&out->max_rel_bits, static_cast<unsigned long long>(__double_as_longlong(max_rel)));
  }
}

__global__ void first_values_kernel(const void* got, const void* want, int dtype, DevCheck* out) {
  if (out->first_bad != ~0ull) {
    out->first_got = load_elem(got, dtype, out->first_bad);
    out->first_want = load_elem(want, dtype, out->first_bad);
  }
}

}  // namespace

cudaError_t compare_on_gpu(const void* got, const void* want, Dtype dtype, std::uint64_t count, double atol,
                           double rtol, cudaStream_t stream, TensorCheck& out) {
  static DevCheck* dev = nullptr;  // one small result block per process, reused
  if (dev == nullptr) {
    if (cudaError_t rc = cudaMalloc(&dev, sizeof(DevCheck)); rc != cudaSuccess) return rc;
  }
  DevCheck init{};
  init.first_bad = ~0ull;
  if (cudaError_t rc = cudaMemcpyAsync(dev, &init, sizeof init, cudaMemcpyHostToDevice, stream); rc != cudaSuccess)
    return rc;
  out = TensorCheck{};
  out.count = count;
  if (count > 0) {
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    const unsigned long long blocks_needed = (count + 255) / 256;
    const unsigned blocks = static_cast<unsigned>(std::min<unsigned long long>(blocks_needed, std::max(1, sms) * 8ull));
    compare_kernel<<<blocks, 256, 0, stream>>>(got, want, static_cast<int>(dtype), static_cast<int>(dtype_size(dtype)),
                                               is_float(dtype), count, atol, rtol, dev);
    first_values_kernel<<<1, 1, 0, stream>>>(got, want, static_cast<int>(dtype), dev);
  }
  DevCheck host{};
  if (cudaError_t rc = cudaMemcpyAsync(&host, dev, sizeof host, cudaMemcpyDeviceToHost, stream); rc != cudaSuccess)
    return rc;
  if (cudaError_t rc = cudaStreamSynchronize(stream); rc != cudaSuccess) return rc;
  if (cudaError_t rc = cudaGetLastError(); rc != cudaSuccess) return rc;
  out.mismatches = host.mismatches;
  out.nonfinite = host.nonfinite;
  std::memcpy(&out.max_abs, &host.max_abs_bits, sizeof(double));
  std::memcpy(&out.max_rel, &host.max_rel_bits, sizeof(double));
  if (host.first_bad != ~0ull) {
    out.first_bad = static_cast<std::int64_t>(host.first_bad);
    out.first_bad_got = host.first_got;
    out.first_bad_want = host.first_want;
  }
  return cudaSuccess;
}

}  // namespace d2k::runner
