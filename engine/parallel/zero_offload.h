// zero_offload.h — ZeRO-Offload's choice (--offload; distributed_data_parallel.h says what
// each does) and where a rank offloads to. Defined in ddp_zero.cpp.
#pragma once
#include <string>

#include "engine/core/device.h"

namespace oomlab {

enum class ZeroOffload { none, optimizer, params };
ZeroOffload parse_zero_offload(const std::string& text);   // "none" | "optimizer" | "params"; ValueError else
const char* zero_offload_name(ZeroOffload o);
// Where a rank on `rank_device` offloads to: the host, as a logical device of its own so that
// its allocator counts the offloaded bytes (cpu:63; on meta, meta:63: nothing is stored).
Device offload_host(Device rank_device);

}  // namespace oomlab
