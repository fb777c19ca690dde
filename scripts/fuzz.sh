#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/fuzz_*.cpp) into build-asan/ (the ASan build of
# scripts/sanitize.sh: same configuration, so CI compiles the code once for both) with clang
# (-DOOMLAB_FUZZ=ON: -fsanitize=fuzzer-no-link,address,undefined on everything, the targets
# linked with -fsanitize=fuzzer) and runs each for OOMLAB_FUZZ_SECONDS on a temp copy of its
# committed corpus tests/fuzz/corpus/<target>/ (the committed corpus never grows), with its
# dictionary tests/fuzz/<target>.dict when there is one. Fails on any crash, sanitizer report,
# timeout, out-of-memory or leak; the input is kept as build-asan/artifacts/<target>-crash-*
# (reproduce: build-asan/<target> build-asan/artifacts/<target>-crash-...). Prints each
# target's time and executions. CI runs this from scripts/test.sh unless OOMLAB_SKIP_FUZZ=1.
# Environment:
#   OOMLAB_FUZZ_SECONDS   per target (default 60)
#   OOMLAB_FUZZ_TARGETS   targets to run (default: all tests/fuzz/fuzz_*.cpp), space-separated
#   OOMLAB_FUZZ_ARGS      extra libFuzzer flags, word-split
#   OOMLAB_JOBS           build jobs (default nproc)
# Longer runs, e.g. before a release or after changing a parser:
#   OOMLAB_FUZZ_SECONDS=3600 bash scripts/fuzz.sh                      # an hour per target
#   OOMLAB_FUZZ_SECONDS=3600 OOMLAB_FUZZ_ARGS="-fork=8" bash scripts/fuzz.sh   # 8 processes each
#   (-jobs=N -workers=N also works; each job then runs the whole -max_total_time.)
# To keep what a long run found, run a target by hand on a corpus directory of your own and
# merge the interesting new inputs into the committed corpus while keeping it small:
#   build-asan/fuzz_safetensors -merge=1 tests/fuzz/corpus/fuzz_safetensors MY_CORPUS_DIR
# Run it niced on a shared machine: nice -n 10 bash scripts/fuzz.sh
# Needs: clang and libFuzzer (Debian: clang, libclang-rt-dev), libomp-dev; ninja-build is used
# when present (scripts/setup.sh installs them all).
set -euo pipefail
cd "$(dirname "$0")/.."

dir=${OOMLAB_FUZZ_BUILD_DIR:-build-asan}
seconds="${OOMLAB_FUZZ_SECONDS:-60}"
jobs="${OOMLAB_JOBS:-$(nproc)}"
# shellcheck disable=SC2206  # lists
extra=(${OOMLAB_FUZZ_ARGS:-})
if [[ -n "${OOMLAB_FUZZ_TARGETS:-}" ]]; then
  # shellcheck disable=SC2206
  targets=(${OOMLAB_FUZZ_TARGETS})
else
  targets=()
  for src in tests/fuzz/fuzz_*.cpp; do targets+=("$(basename "$src" .cpp)"); done
fi

# Largest input per target: a little above its largest seed.
max_len() {
  case "$1" in
    fuzz_idx_reader) echo 4096 ;;
    fuzz_safetensors) echo 4096 ;;
    fuzz_trainer_state) echo 16384 ;;
    fuzz_experiment_spec) echo 8192 ;;
    fuzz_cli) echo 1024 ;;
    fuzz_rank_env) echo 1024 ;;
    fuzz_tcp_store) echo 4096 ;;   # a few requests or answers
    fuzz_output_paths) echo 64 ;;
    fuzz_graph_values) echo 194 ;;   # 2 bytes + 16 mutation records of 12
    *) echo 4096 ;;
  esac
}

echo "=== fuzz: configure and build ($dir, clang) ==="
t0=$(date +%s)
gen=()   # a new build dir uses Ninja when installed: it builds the targets in parallel
if [[ ! -f "$dir/CMakeCache.txt" ]] && command -v ninja >/dev/null 2>&1; then gen=(-GNinja); fi
CC=${OOMLAB_FUZZ_CC:-clang} CXX=${OOMLAB_FUZZ_CXX:-clang++} \
  cmake -S . -B "$dir" "${gen[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1" \
        -DOOMLAB_CUDA=OFF -DOOMLAB_FUZZ=ON >/dev/null
cmake --build "$dir" -j"$jobs" --target "${targets[@]}"
build_s=$(( $(date +%s) - t0 ))

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$dir/artifacts" "$tmp/tmpfiles"

# LeakSanitizer needs ptrace-like access to the process's threads; probe it (see sanitize.sh).
leaks=1
printf '#include <stdlib.h>\nvoid* volatile p;\nint main(void) { p = malloc(7); p = 0; return 0; }\n' >"$tmp/leak.c"
out="$( { ${OOMLAB_FUZZ_CC:-clang} -fsanitize=address -g "$tmp/leak.c" -o "$tmp/leak" &&
          ASAN_OPTIONS=detect_leaks=1 "$tmp/leak"; } 2>&1 || true)"
if [[ "$out" != *"LeakSanitizer: detected memory leaks"* ]]; then
  leaks=0
  echo "fuzz: WARNING: LeakSanitizer does not work here (no ptrace?): -detect_leaks=0"
fi
export ASAN_OPTIONS="detect_leaks=$leaks:print_stacktrace=1"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export TMPDIR="$tmp/tmpfiles"   # the targets' per-process temp files

failures=()
report=("build: ${build_s} s")
for t in "${targets[@]}"; do
  echo
  echo "=== fuzz: $t for ${seconds} s ==="
  corpus="$tmp/corpus/$t"
  mkdir -p "$corpus"
  if [[ -d "tests/fuzz/corpus/$t" ]]; then cp -R "tests/fuzz/corpus/$t/." "$corpus/"; fi
  dict=()
  if [[ -f "tests/fuzz/$t.dict" ]]; then dict=("-dict=tests/fuzz/$t.dict"); fi
  log="$tmp/$t.log"
  t1=$(date +%s)
  rc=0
  "$dir/$t" -max_total_time="$seconds" -max_len="$(max_len "$t")" -timeout=60 -rss_limit_mb=2048 \
    -detect_leaks="$leaks" -print_final_stats=1 -artifact_prefix="$dir/artifacts/$t-" \
    "${dict[@]}" "${extra[@]}" "$corpus" >"$log" 2>&1 || rc=$?
  secs=$(( $(date +%s) - t1 ))
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)"
  cov="$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 || true)"
  if ((rc != 0)); then
    tail -n 80 "$log"
    echo "fuzz: $t FAILED (exit $rc); input saved under $dir/artifacts/$t-*"
    failures+=("$t")
    report+=("$t: ${secs} s, FAILED (exit $rc)")
  else
    tail -n 3 "$log"
    left=$(find "$TMPDIR" -mindepth 1 | wc -l)
    if ((left != 0)); then
      echo "fuzz: $t left $left temp file(s) behind in \$TMPDIR:"; find "$TMPDIR" -mindepth 1
      failures+=("$t (temp files left)")
    fi
    report+=("$t: ${secs} s, ${execs:-?} runs, ${cov:-cov: ?}")
  fi
  rm -rf "${TMPDIR:?}"/*
done

echo
echo "fuzz: timings"
for r in "${report[@]}"; do echo "  $r"; done
if ((${#failures[@]})); then
  echo "fuzz: FAILED: ${failures[*]}"
  exit 1
fi
echo "fuzz: no findings (${#targets[@]} targets x ${seconds} s)"
