// copy.cu — the cuda entry of the copy table (kernels/copy.h): strided copies with
// dtype conversion, any dtype to any dtype, where either side may be host memory (the
// table is indexed by the non-cpu side of a copy).
// Contract: the result equals kernels/cpu/copy_cpu.cpp's bit for bit. Values go through
// double as there (f64 -> f16 rounds twice, i64 -> f32 rounds through double); NaN bits
// follow the CPU's conversions (x86 cvtss2sd / cvtsd2ss, dtype.h's half / bfloat16
// converters; same-dtype 16-bit strided copies quiet NaNs as the CPU's round trip does);
// float -> int64 / uint8 truncate with x86's out-of-range results (INT64_MIN; uint8
// through a 32-bit conversion, so 300.7 -> 44, -1.5 -> 255, NaN -> 0).
// Paths: contiguous same-dtype -> one cudaMemcpyAsync (UVA, any memories); both sides on
// the device -> a kernel over the coalesced shape; one side on the host -> the device
// side's span is staged through a pageable host buffer and the CPU kernel converts (no
// device memory is allocated behind the caching allocator's back). Work runs on the
// device's compute stream (cuda_stream.h); host<->device copies return when complete.
#include <vector>

#include "kernels/copy.h"
#include "kernels/cuda/launch_utils.cuh"

namespace oomlab {
namespace {
using namespace cuda;

struct Geom {
  int ndim;
  int64_t shape[8], in_st[8], out_st[8];
};

// float <-> double as x86's cvtss2sd / cvtsd2ss (the CPU kernel's conversions): NaNs keep
// their sign and top payload bits and become quiet (the GPU's cvt writes a canonical NaN).
__device__ __forceinline__ double f32_to_f64(float f) {
  if (f == f) return double(f);
  const uint32_t u = __float_as_uint(f);
  return __longlong_as_double(
      (long long)((uint64_t(u & 0x80000000u) << 32) | 0x7ff8000000000000ull | (uint64_t(u & 0x7fffffu) << 29)));
}
__device__ __forceinline__ float f64_to_f32(double v) {
  if (v == v) return __double2float_rn(v);
  const uint64_t b = uint64_t(__double_as_longlong(v));
  return __uint_as_float((uint32_t(b >> 32) & 0x80000000u) | 0x7fc00000u | uint32_t((b >> 29) & 0x7fffffu));
}
// half -> float as half_to_float (dtype.cpp): a NaN keeps its payload bits as they are.
__device__ __forceinline__ float f16_to_f32(__half h) {
  const unsigned short b = __half_as_ushort(h);
  if ((b & 0x7c00u) == 0x7c00u && (b & 0x3ffu))
    return __uint_as_float((uint32_t(b & 0x8000u) << 16) | 0x7f800000u | (uint32_t(b & 0x3ffu) << 13));
  return __half2float(h);
}

// bfloat16 -> float as bf16_to_float (dtype.h): the bits shifted up, so a NaN keeps its
// payload (on sm_90+ __bfloat162float is cvt.f32.bf16, which need not preserve it).
__device__ __forceinline__ float bf16_to_f32(__nv_bfloat16 h) {
  return __uint_as_float(uint32_t(__bfloat16_as_ushort(h)) << 16);
}

__device__ __forceinline__ double load_as_double(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::f32: return f32_to_f64(static_cast<const float*>(p)[i]);
    case DType::f64: return static_cast<const double*>(p)[i];
    case DType::f16: return f32_to_f64(f16_to_f32(static_cast<const __half*>(p)[i]));
    case DType::bf16: return f32_to_f64(bf16_to_f32(static_cast<const __nv_bfloat16*>(p)[i]));
    case DType::i64: return __ll2double_rn(static_cast<const long long*>(p)[i]);
    case DType::u8: return double(static_cast<const uint8_t*>(p)[i]);
  }
  return 0.0;
}
// x86 cvttsd2si: truncation, INT_MIN for NaN and out-of-range values.
__device__ __forceinline__ long long x86_to_i64(double v) {
  return (v >= -9223372036854775808.0 && v < 9223372036854775808.0) ? (long long)v : (long long)(1ull << 63);
}
__device__ __forceinline__ int x86_to_i32(double v) {
  return (v > -2147483649.0 && v < 2147483648.0) ? int(v) : int(0x80000000u);
}
__device__ __forceinline__ void store_from_double(void* p, DType t, int64_t i, double v) {
  switch (t) {
    case DType::f32: static_cast<float*>(p)[i] = f64_to_f32(v); break;
    case DType::f64: static_cast<double*>(p)[i] = v; break;
    case DType::f16: static_cast<__half*>(p)[i] = f32_to_f16(f64_to_f32(v)); break;
    case DType::bf16: static_cast<__nv_bfloat16*>(p)[i] = f32_to_bf16(f64_to_f32(v)); break;
    case DType::i64: static_cast<long long*>(p)[i] = x86_to_i64(v); break;
    case DType::u8: static_cast<uint8_t*>(p)[i] = uint8_t(unsigned(x86_to_i32(v)) & 0xffu); break;
  }
}

__device__ __forceinline__ void offsets(const Geom& g, int64_t idx, int64_t& io, int64_t& oo) {
  io = 0;
  oo = 0;
  for (int d = g.ndim - 1; d >= 0; --d) {
    const int64_t k = idx % g.shape[d];
    idx /= g.shape[d];
    io += k * g.in_st[d];
    oo += k * g.out_st[d];
  }
}

__global__ void convert_kernel(void* out, DType ot, const void* in, DType it, Geom g, int64_t n) {
  for (int64_t i = gtid(); i < n; i += gstride()) {
    int64_t io, oo;
    offsets(g, i, io, oo);
    store_from_double(out, ot, oo, load_as_double(in, it, io));
  }
}
// Same-dtype copy of U-sized elements; Nan16 = 1 (half) / 2 (bfloat16) quiets 16-bit NaNs
// as the CPU's round trip through float does.
template <class U, int Nan16> __global__ void strided_kernel(U* out, const U* in, Geom g, int64_t n) {
  for (int64_t i = gtid(); i < n; i += gstride()) {
    int64_t io, oo;
    offsets(g, i, io, oo);
    U v = in[io];
    if constexpr (Nan16 == 1) {
      if ((v & 0x7c00u) == 0x7c00u && (v & 0x3ffu)) v = U((v & 0x8000u) | 0x7e00u);
    }
    if constexpr (Nan16 == 2) {
      if ((v & 0x7f80u) == 0x7f80u && (v & 0x7fu)) v = U(v | 0x40u);
    }
    out[oo] = v;
  }
}

bool on_device(const void* p) {
  cudaPointerAttributes at{};
  CUDA_CHECK(cudaPointerGetAttributes(&at, p));
  return at.type == cudaMemoryTypeDevice || at.type == cudaMemoryTypeManaged;
}

// Drops size-1 dims and merges dims that are contiguous in both layouts.
Geom coalesce(const CopyArgs& a) {
  Geom g{};
  for (int d = 0; d < a.ndim; ++d) {
    if (a.shape[d] == 1) continue;
    if (g.ndim > 0 && g.in_st[g.ndim - 1] == a.in_strides[d] * a.shape[d] &&
        g.out_st[g.ndim - 1] == a.out_strides[d] * a.shape[d]) {
      g.shape[g.ndim - 1] *= a.shape[d];
      g.in_st[g.ndim - 1] = a.in_strides[d];
      g.out_st[g.ndim - 1] = a.out_strides[d];
      continue;
    }
    g.shape[g.ndim] = a.shape[d];
    g.in_st[g.ndim] = a.in_strides[d];
    g.out_st[g.ndim] = a.out_strides[d];
    ++g.ndim;
  }
  if (g.ndim == 0) {
    g.ndim = 1;
    g.shape[0] = 1;
    g.in_st[0] = 1;
    g.out_st[0] = 1;
  }
  return g;
}

void copy_on_device(const CopyArgs& a, int64_t n, const Launch& L) {
  const Geom g = coalesce(a);
  const int blocks = grid_for(n);
  if (a.in_dtype == a.out_dtype) {
    switch (dtype_size(a.in_dtype)) {
      case 8:
        strided_kernel<uint64_t, 0><<<blocks, kThreads, 0, L.stream>>>(static_cast<uint64_t*>(a.out),
                                                                       static_cast<const uint64_t*>(a.in), g, n);
        break;
      case 4:
        strided_kernel<uint32_t, 0><<<blocks, kThreads, 0, L.stream>>>(static_cast<uint32_t*>(a.out),
                                                                       static_cast<const uint32_t*>(a.in), g, n);
        break;
      case 1:
        strided_kernel<uint8_t, 0>
            <<<blocks, kThreads, 0, L.stream>>>(static_cast<uint8_t*>(a.out), static_cast<const uint8_t*>(a.in), g, n);
        break;
      default:
        if (a.in_dtype == DType::f16)
          strided_kernel<uint16_t, 1><<<blocks, kThreads, 0, L.stream>>>(static_cast<uint16_t*>(a.out),
                                                                         static_cast<const uint16_t*>(a.in), g, n);
        else
          strided_kernel<uint16_t, 2><<<blocks, kThreads, 0, L.stream>>>(static_cast<uint16_t*>(a.out),
                                                                         static_cast<const uint16_t*>(a.in), g, n);
    }
  } else {
    convert_kernel<<<blocks, kThreads, 0, L.stream>>>(a.out, a.out_dtype, a.in, a.in_dtype, g, n);
  }
  CUDA_LAUNCH_CHECK();
}

// Element range [lo, hi] that (shape, strides) touch, relative to the base pointer.
void span_of(const CopyArgs& a, const int64_t* st, int64_t& lo, int64_t& hi) {
  lo = 0;
  hi = 0;
  for (int d = 0; d < a.ndim; ++d) {
    const int64_t e = (a.shape[d] - 1) * st[d];
    (e < 0 ? lo : hi) += e;
  }
}

// One side on the host: bring the device side's span to a host buffer, convert with the
// CPU kernel, and send the output span back when the output lives on the device.
void copy_via_host(const CopyArgs& a, int64_t n, bool in_dev, bool out_dev, cudaStream_t stream) {
  const auto cpu_copy = copy_kernels().get(cpu_device(), a.in_dtype);
  CopyArgs h = a;
  std::vector<char> in_buf, out_buf;
  if (in_dev) {
    int64_t lo, hi;
    span_of(a, a.in_strides, lo, hi);
    const size_t es = dtype_size(a.in_dtype), bytes = size_t(hi - lo + 1) * es;
    in_buf.resize(bytes);
    CUDA_CHECK(cudaMemcpyAsync(in_buf.data(), static_cast<const char*>(a.in) + lo * int64_t(es), bytes,
                               cudaMemcpyDefault, stream));
    h.in = in_buf.data() - lo * int64_t(es);
  }
  int64_t olo = 0, ohi = 0;
  size_t obytes = 0, oes = dtype_size(a.out_dtype);
  if (out_dev) {
    span_of(a, a.out_strides, olo, ohi);
    obytes = size_t(ohi - olo + 1) * oes;
    out_buf.resize(obytes);
    if (ohi - olo + 1 != n)  // the output has gaps: keep their contents
      CUDA_CHECK(cudaMemcpyAsync(out_buf.data(), static_cast<const char*>(a.out) + olo * int64_t(oes), obytes,
                                 cudaMemcpyDefault, stream));
    h.out = out_buf.data() - olo * int64_t(oes);
  }
  CUDA_CHECK(cudaStreamSynchronize(stream));  // the staged input / output span is on the host now
  cpu_copy(h);
  if (out_dev) {
    CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(a.out) + olo * int64_t(oes), out_buf.data(), obytes,
                               cudaMemcpyDefault, stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));  // out_buf dies on return
  }
}

void copy_cuda(const CopyArgs& a) {
  const auto [n, in_contig, out_contig] = copy_layout(a);
  if (n == 0) return;
  const bool in_dev = on_device(a.in), out_dev = on_device(a.out);
  if (!in_dev && !out_dev) {
    copy_kernels().get(cpu_device(), a.in_dtype)(a);
    return;
  }
  const Launch L("copy");
  if (in_contig && out_contig && a.in_dtype == a.out_dtype) {
    CUDA_CHECK(cudaMemcpyAsync(a.out, a.in, size_t(n) * dtype_size(a.in_dtype), cudaMemcpyDefault, L.stream));
    if (!(in_dev && out_dev)) CUDA_CHECK(cudaStreamSynchronize(L.stream));  // host side readable on return
    return;
  }
  if (in_dev && out_dev)
    copy_on_device(a, n, L);
  else
    copy_via_host(a, n, in_dev, out_dev, L.stream);
}
}  // namespace

void register_copy_cuda_kernels() {
  for (int t = 0; t < kNumDTypes; ++t) copy_kernels().set(DeviceType::cuda, DType(t), &copy_cuda);
}

}  // namespace oomlab
