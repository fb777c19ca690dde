// gpu_table.h — the GPUs `oomlab plan` plans for: memory, dense peak FLOP/s per precision
// and memory bandwidth, each row with its source. Peaks are the vendors' dense figures
// (half of the "with sparsity" ones); 0 means the card has no tensor-core path for that
// precision (T4 and V100: no bf16, no TF32).
// Contracts:
//  * memory_bytes: the total the CUDA driver reports where an oomlab GPU record measured it
//    (H100 80GB HBM3, H200), else the datasheet's nominal capacity in GiB; `measured` says
//    which. What a run may use is that minus the reserve (planner.h).
//  * link_gbps: GB/s per direction between two cards of a box, the datasheet's figure for
//    the link named in `link` (NVLink total / 2; PCIe x16 per direction for the cards without
//    NVLink, or whose bridge joins only two cards). What the DDP all-reduce time uses
//    (comm_time.h); no oomlab record measured a multi-GPU link.
//  * host_link_gbps: GB/s per direction between the card and the host (its PCIe x16
//    generation, from the same datasheets): what ZeRO-Offload's copies use (planner.h).
//  * find_gpu(name) of an unknown name is a ValueError listing the names.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/dtype.h"

namespace oomlab {

struct GpuSpec {
  std::string name;                 // what --gpu takes
  std::string model;                // the product
  uint64_t memory_bytes = 0;
  bool measured = false;            // memory_bytes from an oomlab GPU record
  double fp32_tflops = 0, tf32_tflops = 0, bf16_tflops = 0, fp16_tflops = 0;
  double bandwidth_gbps = 0;        // GB/s (1e9 bytes)
  std::string source;
  double link_gbps = 0;             // GB/s per direction to a peer card (0: unknown)
  std::string link;                 // "NVLink 4 (900 GB/s total)", "PCIe 4.0 x16", ...
  double host_link_gbps = 0;        // GB/s per direction to the host (0: unknown)
  // The dense peak of a matrix product whose inputs are `t`, with fp32 products on TF32
  // tensor cores when `tf32` (0: no such path on this card, or a dtype the table lacks).
  double peak_tflops(DType t, bool tf32) const;
};

const std::vector<GpuSpec>& gpu_table();
const GpuSpec& find_gpu(const std::string& name);

}  // namespace oomlab
