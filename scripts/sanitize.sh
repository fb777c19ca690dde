#!/usr/bin/env bash
# Sanitizer runs (CI runs this from scripts/test.sh unless OOMLAB_SKIP_SANITIZERS=1):
#  asan: build-asan/ with AddressSanitizer + UndefinedBehaviorSanitizer (clang, -O1 -g1; the
#        same configuration as scripts/fuzz.sh, -DOOMLAB_FUZZ=ON, so one build serves both: the
#        fuzz targets are built here too) and the
#        fast tiers of the ctest suite (not the slow label) but three learning-curve tests (asan_long below: up to 15 minutes
#        each under ASan, the training runs of bert-mini, unet-small and bert-tiny (33 s) whose
#        code is the same as the shorter runs that stay in:
#        SeqSegModels.TinyModelsGradcheck and SeqSegModels.MetaTraceEqualsCpu train and
#        check BERT and UNet through the same ops) and the model-scale repeats named with
#        asan_long (zoo members, the VGGs' --fuse-relu, two bert-base graph trainings; the
#        checkpoint kill tests, whose checkpoint code other tests run under ASan, and whose
#        strace-traced runs LeakSanitizer cannot check).
#        OOMLAB_ASAN_ALL=1 runs them too.
#        LeakSanitizer is on when it works here (it needs ptrace-like access to the
#        process's own threads, which some containers forbid: probed first).
#  tsan: build-tsan/ with ThreadSanitizer (clang + LLVM's libomp, whose OpenMP barriers TSan
#        sees through the Archer tool, libarcher.so; gcc's libgomp synchronises through raw
#        futexes that TSan cannot see, so every parallel region would be a false race) and
#        only the tests that run threads: DataLoader prefetch threads, device threads
#        (run_on_devices), thread budgets and the BLAS thread limit, the allocator from two
#        threads, training (prefetch thread + OpenMP), the matrix runner's child processes, and
#        the kernels' thread-count-independence tests (OpenMP regions), the local communicator's
#        rank threads and the TCP store, SyncBatchNorm over rank threads, DataParallel's device
#        threads and DDP's communication thread (verified clean 2026-11-24). Accesses inside
#        uninstrumented libraries (libomp, OpenBLAS's threads) are not tracked
#        (ignore_noninstrumented_modules=1); tests/sanitizers/tsan.supp names third-party
#        libraries only (libopenblas), never oomlab code.
# Any sanitizer report fails the test that produced it (halt_on_error, -fno-sanitize-recover),
# so "ctest passed" means "no report". Each part prints its wall time.
# Environment: OOMLAB_SANITIZERS ("asan tsan", the default, or one of them),
#   OOMLAB_JOBS (build jobs, default nproc), OOMLAB_CTEST_JOBS (default 2),
#   OOMLAB_CTEST_ARGS (extra ctest arguments, word-split, e.g. "-R Conv" to iterate).
# Run it niced on a shared machine: nice -n 10 bash scripts/sanitize.sh
# Needs: clang (its ASan, UBSan, TSan and libFuzzer runtimes: libclang-rt-dev), libomp-dev;
# ninja-build is used when present
# (scripts/setup.sh installs them all).
set -euo pipefail
cd "$(dirname "$0")/.."

parts="${OOMLAB_SANITIZERS:-asan tsan}"
jobs="${OOMLAB_JOBS:-$(nproc)}"
ctest_jobs="${OOMLAB_CTEST_JOBS:-2}"
# shellcheck disable=SC2206  # a list of ctest flags
ctest_extra=(${OOMLAB_CTEST_ARGS:-})
failures=()
timings=()

step() { echo; echo "=== sanitize: $* ==="; }
now() { date +%s; }
took() { echo "$(( $(now) - $1 ))"; }

# Configure flags shared by both builds: optimised enough to run the suite, line tables for
# symbolised stacks, CUDA off (sanitizers do not see device code).
common=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1" -DOOMLAB_CUDA=OFF)
# A new build dir uses Ninja when it is installed: it builds several --target goals in
# parallel, where make's top-level Makefile builds them one after another.
generator() { if [[ ! -f "$1/CMakeCache.txt" ]] && command -v ninja >/dev/null 2>&1; then echo "-GNinja"; fi; }

asan_long='^SeqSegTrainer\.(BertMiniReaches95PercentOnSyntheticSeq|UnetSmallLearnsSyntheticSeg|BertTinyLearnsSyntheticSeq)$'
# The zoo suites run one member per family under ASan (vgg11_bn, resnet18 and resnet20,
# bert-tiny and bert-mini, the UNets, mlp, tiny-ff): the members left out build from the
# same layers and ops (vgg11, vgg16 and vgg16_bn; resnet34; resnet56; bert-small) and cost
# about two minutes of ASan time; the normal build runs them all.
asan_long+='|^Zoo/[A-Za-z0-9]+\.[A-Za-z0-9]+/(vgg11|vgg16|vgg16_bn|resnet34|resnet56|bert_small)( |$)'
# Two more model-scale repeats of code the suite runs anyway (95 s of ASan time, measured
# 2026-11-27): --fuse-relu's bit-identity on the VGGs (30-35 s each, nearly all of it the
# 123M-parameter classifier, which is not fused; conv2d_relu and batch_norm_relu run under
# ASan in test_ops_conv and test_ops_batchnorm_relu, the fused ResNets stay in), and two of
# the three trainings of the imported bert-base graph (the padded export's stays in: the same
# graph code plus the mask).
asan_long+='|^ResNetsAndVggs/FuseReluSteps\.AreBitIdenticalOnTheCpu/vgg11(_bn)?( |$)'
asan_long+='|^CheckpointKill\.|^GraphImportZoo\.(BertUnpaddedGraphRefusesSeqMinLenAndTrainsAtItsLength|BertGraphTrainsAtItsExportedLength)$'
# The mpirun-launched tests (Ranks.*, RanksFailure.*, DdpProcesses) run under ASan with
# tests/sanitizers/lsan_mpi.supp for OpenMPI's and gloo's process-lifetime allocations; the
# mpi ranks without leak detection (CMakeLists.txt: OpenMPI's unloaded plugins leave
# unnameable frames). Verified clean 2026-11-24.

# clang compiles this build about twice as fast as gcc did (measured 2026-11-26, cold: gcc
# ASan 690 s, clang's fuzz build 3.6 s per file against gcc ASan's 4.2 s), and it is the
# fuzz build: scripts/fuzz.sh reuses it (OOMLAB_FUZZ=ON adds coverage instrumentation,
# -fsanitize=fuzzer-no-link, to the address and undefined checks).
asan_cc=${OOMLAB_ASAN_CC:-clang} asan_cxx=${OOMLAB_ASAN_CXX:-clang++}

run_asan() {
  local dir=build-asan t0 t1
  step "ASan + UBSan: configure and build ($dir)"
  t0=$(now)
  # LeakSanitizer stops the process's threads with ptrace; probe whether this machine allows it.
  local probe out leaks=1
  probe="$(mktemp -d)"
  printf '#include <stdlib.h>\nvoid* volatile p;\nint main(void) { p = malloc(7); p = 0; return 0; }\n' \
    >"$probe/leak.c"
  out="$( { "$asan_cc" -fsanitize=address -g "$probe/leak.c" -o "$probe/leak" &&
            ASAN_OPTIONS=detect_leaks=1 "$probe/leak"; } 2>&1 || true)"   # a found leak exits 1
  if [[ "$out" == *"LeakSanitizer: detected memory leaks"* ]]; then
    echo "sanitize: LeakSanitizer works here: detect_leaks=1"
  else
    leaks=0
    echo "sanitize: WARNING: LeakSanitizer does not work here (no ptrace?): detect_leaks=0"
  fi
  rm -rf "$probe"
  # Exported before the build: gtest discovery runs the test binaries at build time.
  # allocator_may_return_null: a failed malloc returns NULL as in a normal build (oomlab
  # turns it into OutOfMemoryError) instead of ASan aborting on a huge request.
  export ASAN_OPTIONS="detect_leaks=$leaks:halt_on_error=1:abort_on_error=0:print_stacktrace=1:allocator_may_return_null=1:\
detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1:\
strict_string_checks=1"
  export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
  # shellcheck disable=SC2046  # generator: no word or one
  if ! CC="$asan_cc" CXX="$asan_cxx" cmake -S . -B "$dir" $(generator "$dir") "${common[@]}" -DOOMLAB_FUZZ=ON >/dev/null ||
     ! cmake --build "$dir" -j"$jobs"; then
    failures+=("asan build"); timings+=("asan build: $(took "$t0") s (failed)"); return
  fi
  timings+=("asan configure+build: $(took "$t0") s")
  step "ASan + UBSan: whole ctest suite ($dir)"
  t1=$(now)
  # The slow tier stays out (it runs in the normal build, scripts/test_slow.sh): under ASan
  # its learning-curve and whole-zoo tests take most of the time and exercise the same code.
  local skip=(-LE slow -E "$asan_long")
  if [[ "${OOMLAB_ASAN_ALL:-0}" == 1 ]]; then skip=(); fi
  if ! ctest --test-dir "$dir" --output-on-failure -j"$ctest_jobs" --no-tests=error "${skip[@]}" \
       "${ctest_extra[@]}"; then
    failures+=("asan ctest")
  fi
  timings+=("asan ctest: $(took "$t1") s")
  unset ASAN_OPTIONS UBSAN_OPTIONS
}

# Tests that start threads (see the header); executables and a ctest -R regex.
tsan_targets=(oomlab test_data test_data_seq_seg test_devices test_cpu_backend test_caching_allocator
              test_train_resume test_matrix_runner test_ops_conv test_ops_conv_direct test_ops_conv_taps
              test_ops_cross_family test_ops_dropout test_optim test_comm_local test_tcp_store
              test_sync_batchnorm test_data_parallel test_zero)
tsan_regex='^(DataLoader\.|SeqSegLoader\.|SyntheticSeq\.PaddedVariableLengthBatches|Devices\.|CpuBackend\.'
tsan_regex+='|CachingAllocator\.TwoThreadsSmoke|Trainer\.|MatrixRunner\.|Conv2d\.DeterministicAcrossThreadCounts'
tsan_regex+='|ConvDirect\.BitwiseIndependentOfThreadCount|ConvTaps\.BitwiseIndependentOfThreadCount'
tsan_regex+='|BatchNormPool\.ResultsIndependentOfThreadCount'
tsan_regex+='|Transformer\.ColumnReductionsIndependentOfThreadCount|Vision\.ThreadCountIndependent'
tsan_regex+='|Dropout\.KeepFractionAndThreadIndependence|Optimizer\.LargeFloatParamIsThreadCountIndependent'
tsan_regex+='|LocalComm\.|TcpStore\.|SyncBatchNorm\.|DataParallel|Ddp\.|DistributedSampler\.|Zero\.)'

run_tsan() {
  local dir=build-tsan t0 t1 cc=${OOMLAB_TSAN_CC:-clang} cxx=${OOMLAB_TSAN_CXX:-clang++} archer
  step "TSan: configure and build ($dir, $cxx)"
  t0=$(now)
  archer="$("$cxx" -print-file-name=libarcher.so)"
  if [[ "$archer" != /* || ! -f "$archer" ]]; then
    archer=$(ls /usr/lib/llvm-*/lib/libarcher.so 2>/dev/null | sort -V | tail -n 1 || true)
  fi
  if [[ -z "$archer" || ! -f "$archer" ]]; then
    echo "sanitize: libarcher.so (LLVM's OpenMP TSan support, package libomp-dev) not found"
    failures+=("tsan: no libarcher.so"); return
  fi
  # ignore_noninstrumented_modules: accesses made inside uninstrumented libraries (libomp's
  # own bookkeeping, OpenBLAS, libstdc++.so) are not tracked, as Archer asks for; what our
  # instrumented code reads and writes still is, on every thread.
  export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:history_size=4:\
ignore_noninstrumented_modules=1:suppressions=$PWD/tests/sanitizers/tsan.supp"
  export OMP_TOOL_LIBRARIES="$archer" ARCHER_OPTIONS="verbose=0"
  # shellcheck disable=SC2046
  if ! CC="$cc" CXX="$cxx" cmake -S . -B "$dir" $(generator "$dir") "${common[@]}" -DOOMLAB_SANITIZE=thread >/dev/null ||
     ! cmake --build "$dir" -j"$jobs" --target "${tsan_targets[@]}"; then
    failures+=("tsan build"); timings+=("tsan build: $(took "$t0") s (failed)"); return
  fi
  timings+=("tsan configure+build: $(took "$t0") s")
  step "TSan: threaded tests ($dir)"
  t1=$(now)
  if ! ctest --test-dir "$dir" --output-on-failure -j"$ctest_jobs" --no-tests=error -R "$tsan_regex" \
       "${ctest_extra[@]}"; then
    failures+=("tsan ctest")
  fi
  timings+=("tsan ctest: $(took "$t1") s")
  unset TSAN_OPTIONS OMP_TOOL_LIBRARIES ARCHER_OPTIONS
}

start=$(now)
for p in $parts; do
  case "$p" in
    asan) run_asan ;;
    tsan) run_tsan ;;
    *) echo "sanitize: unknown part '$p' in OOMLAB_SANITIZERS (asan, tsan)" >&2; exit 2 ;;
  esac
done

echo
echo "sanitize: timings"
for t in "${timings[@]}"; do echo "  $t"; done
echo "  total: $(took "$start") s"
if ((${#failures[@]})); then
  echo "sanitize: FAILED: ${failures[*]}"
  exit 1
fi
echo "sanitize: clean ($parts)"
