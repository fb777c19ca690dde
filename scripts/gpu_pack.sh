#!/usr/bin/env bash
# gpu_pack.sh — build, on a machine with nvcc and no GPU, everything a lent GPU machine runs
# (scripts/gpu_run.sh), and pack it into one archive, so that the GPU's short lease is spent
# running, not building.
#   * from a clean commit (the manifest names it; OOMLAB_PACK_ALLOW_DIRTY=1 packs a dirty tree
#     and says so: its results are not committable, docs/VERDICTS.md);
#   * CUDA code for sm_90 (H100 / H200), Release, without MPI and gloo (the GPU machine has
#     neither); targets: the oomlab CLI, every test binary with CUDA tests and bench_attention
#     (the host CPU's attention beside PyTorch SDPA, scripts/attention_vs_torch.py);
#   * stripped binaries, the run-time libraries the GPU machine lacks (OpenBLAS and its
#     Fortran runtime, OpenMP: whatever ldd resolves outside the system's base libraries and
#     the CUDA / cuBLAS / cuDNN / NCCL libraries, which come from PyTorch's wheels there),
#     the scripts gpu_run.sh runs, and MANIFEST.json (commit, build flags, nvcc, the CUDA
#     library versions built against, files with sizes and SHA-256);
#   * one archive, oomlab-gpu-kit-<commit>.tar.xz, of at most 40 MiB (checked).
# Usage: bash scripts/gpu_pack.sh [OUT_DIR]        (default: gpu_pack/, ignored by git)
# Environment: OOMLAB_PACK_BUILD_DIR (default build-gpupack; an existing build dir, e.g. the
#   CI build whose CUDA code includes sm_90, is reused as it is: its arch list is checked),
#   OOMLAB_JOBS (default nproc), OOMLAB_PACK_ALLOW_DIRTY=1, OOMLAB_KIT_RESUME (a record
#   folder whose experiments' results a kit of the same commit goes on from). Every binary must hold sm_90
#   machine code (scripts/fatbin_archs.py reads their fat binaries; the manifest records them).
# Then: carry the archive to the GPU machine (copy it into a folder that .git/info/exclude
# ignores and name it in the device tool's carry), unpack, bash scripts/gpu_run.sh OUT.
# Exit status: 0 with the archive's path as the last line; non-zero with one line
# `gpu_pack: error: ...` otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
die() { echo "gpu_pack: error: $*" >&2; exit 1; }

out_dir=$(realpath -m "${1:-gpu_pack}")
bld=${OOMLAB_PACK_BUILD_DIR:-build-gpupack}
command -v nvcc >/dev/null || die "nvcc not found: the kit is built on a machine with the CUDA toolkit"
commit=$(git rev-parse HEAD 2>/dev/null) || die "not a git checkout"
dirty=false
if [[ -n "$(git status --porcelain --untracked-files=no)" ]]; then
  [[ ${OOMLAB_PACK_ALLOW_DIRTY:-0} == 1 ]] || die "the tree has uncommitted changes; commit first (or OOMLAB_PACK_ALLOW_DIRTY=1 for a kit whose results cannot be committed)"
  dirty=true
fi

# ---- build ------------------------------------------------------------------------------
flags=(-DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_DISABLE_FIND_PACKAGE_MPI=ON
       -DCMAKE_DISABLE_FIND_PACKAGE_Gloo=ON)
configured="reused build folder $bld (configured before)"
if [[ ! -f $bld/CMakeCache.txt ]]; then
  cmake -S . -B "$bld" "${flags[@]}" > /dev/null || die "configure failed in $bld"
  configured="${flags[*]}"
else
  cmake -S . -B "$bld" > /dev/null || die "configure failed in $bld"   # the test list of this tree
fi
# the tests that link the CUDA backend (CMakeLists.txt writes the list; the others are CPU-only)
tests=$(sort "$bld/cuda_tests.txt" 2>/dev/null | sed '/^$/d')
[[ -n $tests ]] || die "$bld/cuda_tests.txt lists no CUDA tests (a build without the CUDA backend?)"
# shellcheck disable=SC2086  # the test names are single words
cmake --build "$bld" -j"${OOMLAB_JOBS:-$(nproc)}" --target oomlab bench_attention $tests > "$bld/pack_build.log" 2>&1 ||
  die "build failed (see $bld/pack_build.log)"
# The binaries are of `commit` only if the tree did not change while they were built.
if [[ $dirty == false && ( "$(git rev-parse HEAD)" != "$commit" || -n "$(git status --porcelain --untracked-files=no)" ) ]]; then
  die "the tree changed during the build (HEAD or tracked files): pack again from a clean commit"
fi
# oomlab loads the CUDA backend from liboomlab_cuda.so beside it (CMakeLists.txt: CLI). Not
# `ldd | grep -q`: grep -q stops reading at the match, ldd may then die of SIGPIPE, and
# pipefail turns that into "no CUDA backend" (it did, under load).
[[ -f $bld/liboomlab_cuda.so && $(ldd "$bld/liboomlab_cuda.so") == *libcudart* ]] ||
  die "$bld has no CUDA backend library (nvcc or cuDNN not found at configure time)"
# shellcheck disable=SC2046
archs=$(python3 scripts/fatbin_archs.py --need-sass 90 $(for b in liboomlab_cuda.so bench_attention $tests; do
  echo "$bld/$b"; done)) ||
  die "the binaries of $bld hold no sm_90 machine code"
archs=$(head -1 <<<"$archs" | cut -d' ' -f2-)

# ---- stage ------------------------------------------------------------------------------
name="oomlab-gpu-kit-${commit:0:12}"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
kit="$stage/$name"
mkdir -p "$kit/bin" "$kit/lib" "$kit/scripts"
for b in oomlab liboomlab_cuda.so bench_attention $tests; do
  install -m 755 "$bld/$b" "$kit/bin/$b"
  strip --strip-unneeded "$kit/bin/$b"
done
# Libraries ldd resolves that the GPU machine does not have: not the C/C++ runtime, zlib or
# the CUDA libraries (PyTorch's wheels carry cudart, cuBLAS, cuDNN and NCCL there).
provided='^(linux-vdso|ld-linux|libc\.|libm\.|libstdc\+\+|libgcc_s|libpthread|libdl\.|librt\.|libz\.|libcuda\.|libcudart|libcublas|libcudnn|libnccl)'
for b in "$kit"/bin/*; do
  ldd "$b" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}'
done | sort -u | while read -r soname path; do
  [[ $soname =~ $provided ]] || cp -L "$path" "$kit/lib/$soname"
done
for s in gpu_run.sh gpu_report.py gpu_rounds.py torch_bench.py trace_breakdown.py fatbin_archs.py attention_vs_torch.py export_model.py; do
  cp "scripts/$s" "$kit/scripts/"
done
mkdir -p "$kit/python/oomlab"   # export_model.py's exporter (the Python package's, without its C++ module)
cp python/oomlab/*.py "$kit/python/oomlab/"
mkdir -p "$kit/models/graphs"   # the imported models of experiment 16 (its gpu profile; the graph_* pairs)
cp models/graphs/*.json "$kit/models/graphs/"
for spec in experiments/*/experiment.json; do   # the experiments' gpu profiles (gpu_run.sh runs them)
  grep -q '"gpu_claims"' "$spec" || continue
  mkdir -p "$kit/$(dirname "$spec")" && cp "$spec" "$kit/$spec"
done
# OOMLAB_KIT_RESUME=reports/results/gpu/<record>: what an earlier lease of a kit of the same
# commit left: its finished NN_name.json are not run again, its NN_name.partial.json resumed.
if [[ -n ${OOMLAB_KIT_RESUME:-} ]]; then
  [[ -d $OOMLAB_KIT_RESUME ]] || die "OOMLAB_KIT_RESUME=$OOMLAB_KIT_RESUME is not a folder"
  mkdir -p "$kit/resume"
  find "$OOMLAB_KIT_RESUME" -maxdepth 1 -name '[0-9][0-9]_*.json' -exec cp {} "$kit/resume/" \;
fi
mkdir -p "$kit/scripts/oomlab_report"
# attention_vs_torch's and export_model's writer; the verdict rule's paired ratio (gpu_rounds.py);
# the record README's lines for the experiments' gpu profiles (gpu_report.py)
cp scripts/oomlab_report/__init__.py scripts/oomlab_report/atomic.py scripts/oomlab_report/verdict_rule.py \
  scripts/oomlab_report/profile_lines.py \
  "$kit/scripts/oomlab_report/"

# The CUDA libraries the binaries were built against (their major versions must match the
# wheels': gpu_run.sh checks that every library resolves).
hdr_version() { sed -n "s/^#define $2 \\([0-9]*\\).*/\\1/p" "$1" 2>/dev/null | head -1; }
cuda_inc=$(dirname "$(command -v nvcc)")/../include
cudnn_h=$(ls "$cuda_inc"/cudnn_version.h /usr/include/cudnn_version.h 2>/dev/null | head -1 || true)
python3 - "$kit" "$commit" "$dirty" "$bld" "$archs" "$(nvcc --version | tail -1)" \
    "$(hdr_version "$cudnn_h" CUDNN_MAJOR).$(hdr_version "$cudnn_h" CUDNN_MINOR).$(hdr_version "$cudnn_h" CUDNN_PATCHLEVEL)" \
    "$(hdr_version "$cuda_inc/nccl.h" NCCL_MAJOR).$(hdr_version "$cuda_inc/nccl.h" NCCL_MINOR).$(hdr_version "$cuda_inc/nccl.h" NCCL_PATCH)" \
    "$configured" <<'EOF'
import datetime, hashlib, json, os, sys
kit, commit, dirty, bld, archs, nvcc, cudnn, nccl, flags = sys.argv[1:]
files = []
for base, _, names in os.walk(kit):
    for n in sorted(names):
        p = os.path.join(base, n)
        files.append({"path": os.path.relpath(p, kit), "bytes": os.path.getsize(p),
                      "sha256": hashlib.sha256(open(p, "rb").read()).hexdigest()})
manifest = {"kit": "oomlab GPU kit", "commit": commit, "dirty": dirty == "true",
            "packed_at": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "cuda_architectures": archs, "sm": "90", "build_dir": os.path.basename(bld.rstrip("/")),
            "cmake_flags": flags, "nvcc": nvcc, "built_against": {"cudnn": cudnn, "nccl": nccl},
            "files": sorted(files, key=lambda f: f["path"])}
with open(os.path.join(kit, "MANIFEST.json"), "w") as f:
    json.dump(manifest, f, indent=1)
    f.write("\n")
EOF

# ---- archive (written whole, then renamed) -----------------------------------------------
mkdir -p "$out_dir"
archive="$out_dir/$name.tar.xz"
# xz's fastest match finder with a 64 MiB window, which spans the binaries' shared CUDA code:
# 16.0 MB in 12 s for a 179 MB kit, against 14.4 MB in 81 s for xz -9 (measured 2026-11-26).
tar -C "$stage" -cf - "$name" | xz --lzma2=preset=1,dict=64MiB -T1 > "$archive.tmp" || die "could not write $archive"
mv -f "$archive.tmp" "$archive"
bytes=$(stat -c %s "$archive")
((bytes <= 40 * 1024 * 1024)) || die "$archive is $bytes bytes, over the 40 MiB limit"
echo "gpu_pack: $(ls "$kit/bin" | wc -l) binaries, $(ls "$kit/lib" | wc -l) libraries, $((bytes / 1024)) KiB (commit ${commit:0:12}$([[ $dirty == true ]] && echo ', DIRTY'))"
echo "$archive"
