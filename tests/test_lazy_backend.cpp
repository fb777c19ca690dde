// test_lazy_backend.cpp — lazy backends (engine/core/lazy_backend.h): a backend library
// declared with set_lazy_backend is loaded by the first allocator, hook request or meta probe
// for its device type, registers as it loads (after registration has run), gets the backend
// options set before it loaded, and a library that cannot be loaded, or of another build,
// is one DeviceError naming it. The library is tests/lazy_backend_fixture.cpp, built as the CLI's CUDA backend
// library is; this binary links no accelerator backend, so the accelerator type is free.
// ctest tier: unit
#include <gtest/gtest.h>

#include <dlfcn.h>

#include "engine/core/backend.h"
#include "engine/core/dispatch.h"
#include "engine/core/error.h"
#include "engine/core/lazy_backend.h"
#include "engine/memory/caching_allocator.h"
#include "engine/parallel/comm_registry.h"
#include "tests/lazy_backend_probe.h"

namespace oomlab::testing {
namespace {
const DeviceType kAccelerator = parse_device("cuda").type;
const Device kAcceleratorDevice{kAccelerator, 0};

int probe_on_accelerator(bool* tf32_seen) {
  int out = 0;
  lazy_probe_kernels().launch(kAcceleratorDevice, DType::f32, LazyProbeArgs{&out, tf32_seen});
  return out;
}

TEST(LazyBackend, TheFirstAllocatorLoadsItWithTheOptionsSetBefore) {
  ensure_kernels_registered();   // registration has run: the library's announcement registers late
  ASSERT_FALSE(backend_linked(device_type_name(kAccelerator)));
  set_lazy_backend(kAccelerator, OOMLAB_LAZY_FIXTURE);
  EXPECT_TRUE(backend_linked(device_type_name(kAccelerator)));   // declared counts as linked
  BackendOptions tf32_on;
  tf32_on.matmul_allow_tf32 = true;
  set_backend_options(tf32_on);   // before the library loads: kept for it
  library_info();                 // results' provenance loads nothing
  EXPECT_FALSE(lazy_backend_loaded(kAccelerator));
  CachingAllocator& al = allocator_for(kAcceleratorDevice);   // the library's host memory
  EXPECT_TRUE(lazy_backend_loaded(kAccelerator));
  void* block = al.allocate(256, "probe");
  EXPECT_NE(block, nullptr);
  al.free(block);
  bool tf32_seen = false;
  EXPECT_EQ(probe_on_accelerator(&tf32_seen), kLazyProbeRan);
  EXPECT_TRUE(tf32_seen);
  EXPECT_TRUE(backend_linked("lazy-fixture"));
  EXPECT_TRUE(ensure_backend_loaded(kAccelerator));   // once: a second call loads nothing
}

TEST(LazyBackend, AMetaProbeOfItsTablesLoadsIt) {
  set_lazy_backend(kAccelerator, OOMLAB_LAZY_FIXTURE);
  int out = 0;
  bool tf32_seen = false;
  MetaEmulationGuard as_accelerator(kAccelerator);
  EXPECT_TRUE(lazy_backend_loaded(kAccelerator));
  lazy_probe_kernels().launch(meta_device(), DType::f32, LazyProbeArgs{&out, &tf32_seen});   // served: no throw
  EXPECT_EQ(out, 0);   // meta runs nothing
  try {
    lazy_probe_kernels().launch(meta_device(), DType::f64, LazyProbeArgs{&out, &tf32_seen});
    FAIL() << "a float64 probe the library does not serve was accepted";
  } catch (const NotImplementedError& e) {
    EXPECT_NE(std::string(e.what()).find("has no cuda/float64 kernel"), std::string::npos) << e.what();
  }
}

TEST(LazyBackend, AHookRequestLoadsIt) {
  set_lazy_backend(kAccelerator, OOMLAB_LAZY_FIXTURE);
  device_synchronize(kAcceleratorDevice);   // the library's hook, once
  EXPECT_TRUE(lazy_backend_loaded(kAccelerator));
  auto synchronized = reinterpret_cast<int (*)()>(dlsym(RTLD_DEFAULT, "lazy_fixture_synchronized"));
  ASSERT_NE(synchronized, nullptr);
  EXPECT_EQ(synchronized(), 1);
}

TEST(LazyBackend, ALibraryThatCannotBeLoadedIsOneDeviceErrorNamingIt) {
  const std::string missing = "/nonexistent/liboomlab_probe.so";
  set_lazy_backend(kAccelerator, missing);
  for (int attempt = 0; attempt < 2; ++attempt) {   // the same answer each time, never a crash
    try {
      allocator_for(kAcceleratorDevice);
      FAIL() << "loaded " << missing;
    } catch (const DeviceError& e) {
      EXPECT_NE(std::string(e.what()).find("backend library " + missing + " could not be loaded: "),
                std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(device_synchronize(kAcceleratorDevice), DeviceError);
  EXPECT_THROW(MetaEmulationGuard{kAccelerator}, DeviceError);
  EXPECT_THROW(make_communicator("no-such-comm", RankInfo{}, cpu_device()), DeviceError);
  EXPECT_FALSE(lazy_backend_loaded(kAccelerator));
}

// A library of another build (a new oomlab beside an old liboomlab_cuda.so) registers nothing
// and is one DeviceError naming both builds, at this request and every later one.
TEST(LazyBackend, ALibraryOfAnotherBuildIsRefusedAndRegistersNothing) {
  set_lazy_backend(kAccelerator, OOMLAB_LAZY_FOREIGN);
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      allocator_for(kAcceleratorDevice);
      FAIL() << "accepted a library of another build";
    } catch (const DeviceError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(std::string(OOMLAB_LAZY_FOREIGN) + " was refused: the lazy fixture is of build 0123456789ab, "
                       "this oomlab of build " + lazy_backend_build_id()), std::string::npos) << m;
    }
  }
  EXPECT_FALSE(lazy_backend_loaded(kAccelerator));
  EXPECT_THROW(device_synchronize(kAcceleratorDevice), DeviceError);   // every request: the same refusal
  bool tf32_seen = false;
  EXPECT_THROW(probe_on_accelerator(&tf32_seen), NotImplementedError);   // its kernel was never registered
}

TEST(LazyBackend, WithoutADeclaredLibraryAMissingKernelIsNotImplemented) {
  bool tf32_seen = false;
  EXPECT_FALSE(ensure_backend_loaded(kAccelerator));
  EXPECT_THROW(probe_on_accelerator(&tf32_seen), NotImplementedError);
  EXPECT_FALSE(comm_backend_available("no-such-comm"));
}
}  // namespace
}  // namespace oomlab::testing
