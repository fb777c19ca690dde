// copy.cu — the cuda entry of the copy table (kernels/copy.h): strided copies with
// dtype conversion, any dtype to any dtype, where either side may be host memory (the
// table is indexed by the non-cpu side of a copy).
// Contract: the result equals kernels/cpu/copy_cpu.cpp's bit for bit. The conversions and
// their semantics (IEEE nearest even, subnormals kept, x86 NaN and integer rules) live in
// cast_math.cuh, checked on the host against the CPU kernel by cuda_formula_check;
// same-dtype 16-bit strided copies quiet NaNs as the CPU's round trip does.
// Paths: contiguous same-dtype -> one cudaMemcpyAsync (UVA, any memories); both sides on
// the device -> a kernel over the coalesced shape; one side on the host -> the device
// side's span is staged through a pageable host buffer and the CPU kernel converts (no
// device memory is allocated behind the caching allocator's back). Work runs on the
// device's compute stream (cuda_stream.h); host<->device copies return when complete.
// Offsets: copy_index.cuh (int64 per dimension; under cuda_copy_fastdiv(), OOMLAB_CUDA_COPY_FASTDIV=1,
// default off and not yet run on a GPU, same-dtype copies that fit 31 bits in 32-bit arithmetic
// with multiply-high divisions: the same offsets, so the same bytes).
#include <vector>

#include "kernels/copy.h"
#include "kernels/cuda/cast_math.cuh"
#include "kernels/cuda/copy_index.cuh"
#include "kernels/cuda/cuda_settings.h"
#include "kernels/cuda/launch_utils.cuh"

namespace oomlab {
namespace {
using namespace cuda;


__global__ void convert_kernel(void* out, DType ot, const void* in, DType it, Geom g, int64_t n) {
  for (int64_t i = gtid(); i < n; i += gstride()) {
    int64_t io, oo;
    offsets(g, i, io, oo);
    cast::store(out, ot, oo, cast::load(in, it, io));
  }
}
// Same-dtype copy of U-sized elements; Nan16 = 1 (half) / 2 (bfloat16) quiets 16-bit NaNs
// as the CPU's round trip through float does.
// G / I: Geom and int64_t, or (cuda_copy_fastdiv(), a copy that fits32) Geom32 and uint32_t,
// whose offsets are the same numbers (copy_index.cuh).
template <class U, int Nan16, class G, class I> __global__ void strided_kernel(U* out, const U* in, G g, I n) {
  I first = I(gtid()), step = I(gstride());
  if constexpr (sizeof(I) == 4) {   // 32-bit grid arithmetic too
    first = blockIdx.x * blockDim.x + threadIdx.x;
    step = gridDim.x * blockDim.x;
  }
  for (I i = first; i < n; i += step) {
    I io, oo;
    offsets(g, i, io, oo);
    U v = in[io];
    if constexpr (Nan16 == 1) v = cast::quiet_f16_nan(v);
    if constexpr (Nan16 == 2) v = cast::quiet_bf16_nan(v);
    out[oo] = v;
  }
}

// A same-dtype copy of U-sized elements, by the 32-bit kernel where it applies.
template <class U, int Nan16>
void launch_strided(void* out, const void* in, const Geom& g, int64_t n, const Launch& L) {
  if (cuda_copy_fastdiv() && fits32(g, n))
    strided_kernel<U, Nan16><<<grid_for(n), kThreads, 0, L.stream>>>(static_cast<U*>(out), static_cast<const U*>(in),
                                                                      to_geom32(g), uint32_t(n));
  else
    strided_kernel<U, Nan16>
        <<<grid_for(n), kThreads, 0, L.stream>>>(static_cast<U*>(out), static_cast<const U*>(in), g, n);
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
  if (a.in_dtype == a.out_dtype) {
    switch (dtype_size(a.in_dtype)) {
      case 8: launch_strided<uint64_t, 0>(a.out, a.in, g, n, L); break;
      case 4: launch_strided<uint32_t, 0>(a.out, a.in, g, n, L); break;
      case 1: launch_strided<uint8_t, 0>(a.out, a.in, g, n, L); break;
      default:
        if (a.in_dtype == DType::f16) launch_strided<uint16_t, 1>(a.out, a.in, g, n, L);
        else launch_strided<uint16_t, 2>(a.out, a.in, g, n, L);
    }
  } else {
    convert_kernel<<<grid_for(n), kThreads, 0, L.stream>>>(a.out, a.out_dtype, a.in, a.in_dtype, g, n);
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
  copy_kernels().launch(cpu_device(), a.in_dtype, h);
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
    copy_kernels().launch(cpu_device(), a.in_dtype, a);
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
  for (int t = 0; t < kNumDTypes; ++t) set_kernel<&copy_cuda>(copy_kernels(), DeviceType::cuda, DType(t));
}

}  // namespace oomlab
