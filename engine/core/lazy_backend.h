// lazy_backend.h — backends in a shared library loaded at their first use (the CLI's CUDA
// backend, liboomlab_cuda.so: a cpu or meta command never maps cuBLAS, cuDNN or NCCL).
// Contracts:
//  * set_lazy_backend(type, path) declares the library of a device type; backend_linked()
//    (dispatch.h) is then true for that type's name.
//  * ensure_backend_loaded(type) dlopens it once (thread-safe); its OOMLAB_REGISTER_BACKEND
//    announcement, made while it loads, registers at once, so its kernels, hooks and memory
//    are in place when the call returns. The library is never closed.
//  * What loads it: the first allocator for a device of its type (every tensor there: so
//    every kernel launch there), a hook request for its type (device_synchronize, properties,
//    pinned memory, graphs), a MetaEmulationGuard for its type (a meta probe of its kernel
//    tables), and a communicator backend no linked library registered (nccl). Backend options
//    set before it loads are applied as it registers (backend.cpp); library_info() and
//    set_backend_options() never load it.
//  * A library that cannot be loaded is a DeviceError naming it and the loader's reason,
//    raised again at each request (never a crash). So is one from another build: a library's
//    registrar first calls accept_lazy_backend_build with its own build id (OOMLAB_BUILD_ID,
//    the commit it was built from) and, on a mismatch, registers nothing (a library from
//    another commit would run with another engine ABI).
#pragma once
#include <string>

#include "engine/core/device.h"

namespace oomlab {

void set_lazy_backend(DeviceType type, const std::string& path);
// False when no library is declared for `type`; true when it is loaded (now, before, or
// further up this thread's stack: a registrar asking for its own backend).
bool ensure_backend_loaded(DeviceType type);
std::string lazy_backend_path(DeviceType type);   // "" when none is declared
bool lazy_backend_loaded(DeviceType type);
// The engine's build: "<commit>" or "<commit>-dirty" (the generated oomlab_git.h).
const char* lazy_backend_build_id();
// A registrar's first call: true when `library_build` (the library's own build id, from the
// oomlab_git.h it was compiled with: OOMLAB_BUILD_ID below) is the engine's; otherwise the
// load is a DeviceError naming both builds (now and at every later request) and it returns
// false: register nothing then.
bool accept_lazy_backend_build(const char* library, const char* library_build);
// The build id of the code that expands it (include "oomlab_git.h" first).
#define OOMLAB_BUILD_ID (OOMLAB_GIT_DIRTY != 0 ? OOMLAB_GIT_SHA "-dirty" : OOMLAB_GIT_SHA)

}  // namespace oomlab
