// kernel_choices.h — which implementation a kernel chose for a call, per layer: the CPU
// convolution names its path ("direct", "im2col + OpenBLAS", ...), the CUDA convolution its
// cuDNN algorithm, math type and workspace. note_kernel_choice() counts each distinct
// (frame, op, choice) process-wide, in first-seen order, where frame is the MemoryContext
// ("layer/phase") of the call: kernel_choices_json() is the results' "kernel_choices"
// (docs/REFERENCE.md "Results schema"). While an op span records on this thread (OpSpanScope,
// memory_export.h), its choices also go to that span: the Chrome trace's span args.
// reset_allocators() clears the counts with the allocators (a run's results list its own
// calls). Thread-safe; one mutex and a map lookup per noted call (convolutions only).
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>   // nvcc compiles the CUDA convolution, which includes this header

namespace oomlab {

void note_kernel_choice(const char* op, const std::string& choice);

// [{"frame": "layer1.0.conv1/fwd", "op": "conv2d_forward", "choice": "...", "calls": N}, ...]
nlohmann::json kernel_choices_json();
void reset_kernel_choices();

// The sink of this thread's notes besides the counts (null: none); returns the previous one.
// OpSpanScope installs its span's list for its lifetime, so the innermost span gets them.
std::vector<std::string>* exchange_kernel_note_sink(std::vector<std::string>* sink);

}  // namespace oomlab
