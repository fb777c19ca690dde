// graph_consts.h — per-launch constants a replayed CUDA graph reads from device memory, so
// that host-side values which change every step (the learning rate of a schedule, Adam's
// bias corrections) are not frozen at capture (PyTorch's answer: capturable optimizers with
// their lr and step on the device). Used by the optimizer launches (optim.cu,
// optim_foreach.cu); everything else passes its constants by value.
// Modes, per thread (set by the graph hooks in cuda_graph.cpp, engine/memory/device_graph.h):
//   * by_value (default, eager work): launchers pass their constant structs by value;
//   * record (during a capture): each launcher copies its constants into the next slot of
//     the graph's arena and the captured kernel reads them through the slot's address;
//   * refresh (before a replay): the optimizer's host code runs again (its bookkeeping:
//     step counts, the schedule's lr) and each launcher writes its constants into the next
//     slot and launches nothing. The slots must come in the order and sizes recorded (the
//     same launches); the arena is then copied to the device and the graph replayed.
#pragma once
#include <cstddef>
#include <cstdint>

namespace oomlab::cuda {

enum class ConstMode { by_value, record, refresh };
ConstMode const_mode();
// The next slot (16-byte aligned) filled with `bytes` of `value`: its device address in
// record mode, nullptr in refresh mode (the caller launches nothing). by_value: nullptr.
const void* next_const_slot(const void* value, size_t bytes);
template <class K> const K* const_slot(const K& k) { return static_cast<const K*>(next_const_slot(&k, sizeof(K))); }
// Graph-safe random kernels (dropout): in record mode, the device address of the replay's
// Philox offset delta (slot 0), to add to the captured base; nullptr otherwise.
const uint64_t* graph_rng_delta();

}  // namespace oomlab::cuda
