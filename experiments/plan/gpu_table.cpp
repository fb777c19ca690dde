// gpu_table.cpp — the rows of gpu_table.h. Sources: NVIDIA's datasheets and architecture
// whitepapers (dense tensor-core figures; GeForce cards: FP16/BF16 with FP32 accumulate,
// PyTorch's mode); measured totals: reports/results/gpu/ (context.total_memory_bytes).
#include "experiments/plan/gpu_table.h"

#include "engine/core/error.h"

namespace oomlab {
namespace {
constexpr uint64_t kGiB = uint64_t(1) << 30;

GpuSpec gpu(std::string name, std::string model, uint64_t memory, bool measured, double fp32, double tf32,
            double bf16, double fp16, double bandwidth, std::string source) {
  return GpuSpec{std::move(name), std::move(model), memory, measured, fp32, tf32, bf16, fp16, bandwidth,
                 std::move(source), 0, "", 0};
}

// The peer link, from the same datasheets (PCIe x16: 2 GB/s per lane per direction at 4.0,
// 4 at 5.0, 1 at 3.0).
struct Link { const char* gpu; double gbps; const char* text; };
constexpr Link kLinks[] = {
    {"h100-sxm", 450, "NVLink 4 (900 GB/s total)"},  {"h100-pcie", 64, "PCIe 5.0 x16"},
    {"h200", 450, "NVLink 4 (900 GB/s total)"},      {"a100-40gb", 300, "NVLink 3 (600 GB/s total)"},
    {"a100-80gb", 300, "NVLink 3 (600 GB/s total)"}, {"l4", 32, "PCIe 4.0 x16"},
    {"t4", 16, "PCIe 3.0 x16"},                      {"rtx4090", 32, "PCIe 4.0 x16 (no NVLink)"},
    {"rtx3090", 32, "PCIe 4.0 x16"},                 {"v100-16gb", 150, "NVLink 2 (300 GB/s total)"},
    {"v100-32gb", 150, "NVLink 2 (300 GB/s total)"},
};

// The host link: each card's PCIe x16 generation (H100 / H200: 5.0; A100, L4, RTX 4090 /
// 3090: 4.0; T4, V100: 3.0), per direction.
struct HostLink { const char* gpu; double gbps; };
constexpr HostLink kHostLinks[] = {{"h100-sxm", 64}, {"h100-pcie", 64}, {"h200", 64},     {"a100-40gb", 32},
                                   {"a100-80gb", 32}, {"l4", 32},       {"t4", 16},       {"rtx4090", 32},
                                   {"rtx3090", 32},   {"v100-16gb", 16}, {"v100-32gb", 16}};

std::vector<GpuSpec> with_links(std::vector<GpuSpec> table) {
  for (GpuSpec& g : table) {
    for (const Link& l : kLinks)
      if (g.name == l.gpu) g.link_gbps = l.gbps, g.link = l.text;
    for (const HostLink& l : kHostLinks)
      if (g.name == l.gpu) g.host_link_gbps = l.gbps;
  }
  return table;
}

std::vector<GpuSpec> make_table() {
  const std::string h100 = "NVIDIA H100 Tensor Core GPU datasheet";
  const std::string a100 = "NVIDIA A100 Tensor Core GPU datasheet";
  return {
      gpu("h100-sxm", "H100 SXM5 80GB", 85017493504, true, 67, 494.5, 989.5, 989.5, 3350, h100 + " (SXM)"),
      gpu("h100-pcie", "H100 PCIe 80GB", 80 * kGiB, false, 51, 378, 756, 756, 2000, h100 + " (PCIe)"),
      gpu("h200", "H200 SXM 141GB", 150109880320, true, 67, 494.5, 989.5, 989.5, 4800,
          "NVIDIA H200 Tensor Core GPU datasheet (SXM)"),
      gpu("a100-40gb", "A100 SXM4 40GB", 40 * kGiB, false, 19.5, 156, 312, 312, 1555, a100 + " (40GB SXM)"),
      gpu("a100-80gb", "A100 SXM4 80GB", 80 * kGiB, false, 19.5, 156, 312, 312, 2039, a100 + " (80GB SXM)"),
      gpu("l4", "L4 24GB", 24 * kGiB, false, 30.3, 60, 121, 121, 300, "NVIDIA L4 Tensor Core GPU datasheet"),
      gpu("t4", "T4 16GB", 16 * kGiB, false, 8.1, 0, 0, 65, 320, "NVIDIA T4 Tensor Core GPU datasheet"),
      gpu("rtx4090", "GeForce RTX 4090 24GB", 24 * kGiB, false, 82.6, 82.6, 165.2, 165.2, 1008,
          "NVIDIA Ada Lovelace GPU architecture whitepaper (RTX 4090)"),
      gpu("rtx3090", "GeForce RTX 3090 24GB", 24 * kGiB, false, 35.6, 35.6, 71, 71, 936,
          "NVIDIA Ampere GA102 GPU architecture whitepaper (RTX 3090)"),
      gpu("v100-16gb", "V100 SXM2 16GB", 16 * kGiB, false, 15.7, 0, 0, 125, 900,
          "NVIDIA Tesla V100 GPU architecture whitepaper (SXM2)"),
      gpu("v100-32gb", "V100 SXM2 32GB", 32 * kGiB, false, 15.7, 0, 0, 125, 900,
          "NVIDIA Tesla V100 GPU architecture whitepaper (SXM2)"),
  };
}
}  // namespace

double GpuSpec::peak_tflops(DType t, bool tf32) const {
  if (t == DType::bf16) return bf16_tflops;
  if (t == DType::f16) return fp16_tflops;
  if (t == DType::f32 && tf32) return tf32_tflops;
  return t == DType::f32 ? fp32_tflops : 0;   // other dtypes: not in this table
}

const std::vector<GpuSpec>& gpu_table() {
  static const std::vector<GpuSpec> table = with_links(make_table());
  return table;
}

const GpuSpec& find_gpu(const std::string& name) {
  std::string names;
  for (const GpuSpec& g : gpu_table()) {
    if (g.name == name) return g;
    names += (names.empty() ? "" : ", ") + g.name;
  }
  throw ValueError(str_cat("unknown GPU '", name, "' (", names, "); or give --device-memory SIZE"));
}

}  // namespace oomlab
