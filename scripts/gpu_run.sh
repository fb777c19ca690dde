#!/usr/bin/env bash
# gpu_run.sh — the GPU kit's run, on a lent GPU machine, from the archive scripts/gpu_pack.sh
# made (no build, no internet): bin/ (oomlab and the CUDA test binaries, sm_90), lib/ (what
# the machine lacks), scripts/, MANIFEST.json. CUDA, cuBLAS, cuDNN and NCCL come from
# PyTorch's wheels there (python3's nvidia.* packages).
# Usage: bash <kit>/scripts/gpu_run.sh OUT_DIR      (with the device tool: OUT_DIR=$OUT/kit)
# Writes OUT_DIR (committable under reports/results/gpu/):
#   NN_name.json     each experiment's gpu profile (`oomlab run --profile gpu --device cuda`),
#                    in the experiments' results schema, judged by its gpu_claims; an
#                    experiment the budget cut short leaves NN_name.partial.json, which a later
#                    lease of a kit of the same commit resumes (gpu_pack.sh OOMLAB_KIT_RESUME)
#   README.md        the run in words and tables (scripts/gpu_report.py)
#   provenance.json  commit, date, machine (GPU, driver, CUDA runtime, cuBLAS, cuDNN, NCCL,
#                    PyTorch): what check_results checks a record under reports/results/gpu/ by
#   tests.json       every CUDA test binary: passed / failed / skipped, failing names;
#                    compute-sanitizer memcheck and racecheck of test_cuda_parity
#   points.json      with OOMLAB_KIT_TAGS only: oomlab beside PyTorch eager (and sdpa) per
#                    configuration: step-time median, peaks, the meta predicted peak
#   breakdown.txt    per-op device time of ResNet-50 / BERT-base steps (CUDA events per span)
#   run.log          each step with its seconds and exit status
#   logs.tar.gz      every log, results JSON, trace and profiler table (with attention_cpu.json:
#                    the host CPU's attention, oomlab beside PyTorch SDPA, in README.md too)
# Steps, in order, each bounded by `timeout` and by the run's budget (OOMLAB_KIT_BUDGET_S,
# default 480 s: a step that would not fit is skipped and named): preflight; tests +
# sanitizers (concurrently; test_cuda_parity's attention rows also on the
# tiled kernels (TILED) and the reference kernels, its convolutions under GRAPH); the
# experiments' gpu profiles in priority order (OOMLAB_KIT_EXPERIMENTS, default
# "05 06 09 15 17 18 16 11 12 08 10 20"; each `oomlab run` stopped by the budget keeps its
# points, and the next lease resumes them). Then, only when OOMLAB_KIT_TAGS names pair tags
# (the A/B rows of a GPU path beside its default, issue 54's speed work), meta predictions and oomlab /
# PyTorch pairs (alternating, one PyTorch process), each *_fused row (fused attention, beside
# PyTorch's SDPA), *_graph row (cuDNN's graph API on NCHW), *_legacy row (the legacy API where the graph API is
# the default: Find under benchmark, heuristics on channels_last), *_cudagraphs row (--cuda-graphs: the
# step captured after 3 warm-up steps and replayed) and *_cl row (--channels-last, beside
# PyTorch's channels_last twin) right after its default; per-op breakdowns; DP / BDP / DDP / SyncBN on
# two logical devices; the host CPU's attention forward + backward, oomlab eager / fused
# beside PyTorch SDPA; torch.export graphs of ResNet-50 and BERT-base (scripts/export_model.py).
# The graph_* pairs (issue 32, experiment 16's GPU points): models/graphs/ exports trained by
# oomlab beside the same PyTorch models (no dropout, as the eval export): step time and peak
# against torch.cuda.max_memory_allocated.
# A machine that lacks something (no GPU, a GPU other than sm_90, no PyTorch wheels, a
# library that does not resolve) stops the run with one line `gpu_run: error: ...` on
# stderr and exit status 1, after writing what it has.
# OOMLAB_KIT_DRY_RUN=1 (CI, on a machine without a GPU: tests/test_gpu_kit.py) runs every
# step with oomlab on the meta device and no GPU checks (6 steps a pair unless OOMLAB_KIT_STEPS
# says otherwise; a GPU run takes 21; the experiments' gpu profiles with --device meta), so the
# script itself is exercised before a lease spends minutes on it; its figures are not GPU
# measurements (README says so).
set -uo pipefail
kit=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-}
[[ -n $out ]] || { echo "gpu_run: error: usage: gpu_run.sh OUT_DIR" >&2; exit 2; }
mkdir -p "$out" || { echo "gpu_run: error: cannot create $out" >&2; exit 2; }
out=$(cd "$out" && pwd)
work=$(mktemp -d)
mkdir -p "$work/logs" "$work/res" "$work/tests"
touch "$work/tests/rc.txt"
date -u +%Y-%m-%dT%H:%M:%SZ > "$work/res/started_at"   # the run's date in provenance.json (gpu_report.py)
t0=$SECONDS
dry=${OOMLAB_KIT_DRY_RUN:-0}
device=cuda
[[ $dry == 1 ]] && device=meta
budget=${OOMLAB_KIT_BUDGET_S:-480}   # a 540-s call leaves a 15-min lease time for a partial second one
steps=${OOMLAB_KIT_STEPS:-21}   # oomlab drops its first step: 20 timed, as PyTorch's 15 + 5 warm-up
# A --cuda-graphs run warms up 3 steps, captures the 4th and replays: 6 steps hold its graph. A
# dry run (meta: nothing to time) and the meta predictions take that many.
graphed_steps=6
[[ $dry == 1 ]] && steps=${OOMLAB_KIT_STEPS:-$graphed_steps}
rounds=${OOMLAB_KIT_REPEAT:-1}   # rounds of the pairs (docs/VERDICTS.md judges timings from >= 5)
log() { echo "[$((SECONDS - t0))s] $*" | tee -a "$work/run.log"; }
# A follow-up lease may run a part of the kit: OOMLAB_KIT_TESTS (test runs by name, or none),
# OOMLAB_KIT_EXPERIMENTS (experiment numbers; "" none) and OOMLAB_KIT_TAGS (pair tags, par_*,
# cpu_attention, graph_export_<model>, or all; unset: none) list what runs. OOMLAB_KIT_BREAKDOWN: the tags traced per op (unset: r50_tf32 bert_tf32 bert_tf32_next).
# OOMLAB_KIT_REPEAT=R: R rounds of the selected pairs (issue 31's bars judged by the verdict rule
# need 5: e.g. OOMLAB_KIT_TAGS="r50_tf32 bert_fp32 bert_fp32_sdpa" OOMLAB_KIT_TESTS=none
# OOMLAB_KIT_BREAKDOWN= OOMLAB_KIT_REPEAT=5).
wanted() { [[ ${OOMLAB_KIT_TAGS:-} == all || " ${OOMLAB_KIT_TAGS:-} " == *" $1 "* ]]; }
wanted_test() { [[ -z ${OOMLAB_KIT_TESTS:-} || " $OOMLAB_KIT_TESTS " == *" ${1%_shard*} "* ]]; }   # a shard: its binary
left() { echo $((budget - (SECONDS - t0))); }
[[ $rounds =~ ^[1-9][0-9]?$ ]] || { echo "gpu_run: error: OOMLAB_KIT_REPEAT must be 1..99, got '$rounds'" >&2; rm -rf "$work"; exit 2; }

finish() {   # the output folder, whatever happened
  local partial
  for partial in "$out"/*.json.partial; do   # committable, and what the next lease resumes
    [[ -f $partial ]] && mv -f "$partial" "${partial%.json.partial}.partial.json"
  done
  python3 "$kit/scripts/gpu_report.py" "$work" "$out" >> "$work/run.log" 2>&1 ||
    echo "gpu_report failed (see run.log)" >> "$work/run.log"
  cp "$work/run.log" "$out/run.log"
  tar -czf "$out/logs.tar.gz.tmp" -C "$work" logs res tests 2>/dev/null && mv -f "$out/logs.tar.gz.tmp" "$out/logs.tar.gz"
  rm -rf "$work"
}
fail() {
  log "error: $*"
  finish
  echo "gpu_run: error: $*" >&2
  exit 1
}

# ---- preflight --------------------------------------------------------------------------
[[ -f $kit/MANIFEST.json && -x $kit/bin/oomlab ]] || fail "$kit is not an unpacked kit (no MANIFEST.json or bin/oomlab)"
cp "$kit/MANIFEST.json" "$work/res/manifest.json"
if [[ $dry == 1 ]]; then
  log "DRY RUN: no GPU checks, oomlab on the meta device; nothing here is a GPU measurement"
  echo "dry run" > "$work/res/dry_run"
else
  command -v nvidia-smi > /dev/null || fail "no GPU: nvidia-smi is not installed"
  gpu=$(nvidia-smi --query-gpu=name,driver_version,compute_cap,memory.total --format=csv,noheader 2>&1 | head -1)
  [[ $gpu == *,*,*,* ]] || fail "no GPU: nvidia-smi says: ${gpu:-nothing}"
  echo "$gpu" > "$work/res/nvidia_smi.csv"
  cap=$(echo "$gpu" | cut -d, -f3 | tr -d ' ')
  sm=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["sm"])' "$kit/MANIFEST.json" 2>/dev/null)
  [[ ${cap/./} == "$sm" ]] || fail "the kit holds sm_$sm code, this GPU ($(echo "$gpu" | cut -d, -f1)) is compute capability $cap"
  wheels=$(python3 -c 'import os, nvidia; print(":".join(sorted({os.path.join(r, "lib") for p in nvidia.__path__ for r in [os.path.join(p, d) for d in os.listdir(p)] if os.path.isdir(os.path.join(r, "lib"))})))' 2>/dev/null)
  [[ -n $wheels ]] || fail "no PyTorch CUDA wheels: python3 cannot import the nvidia packages (cuBLAS, cuDNN, NCCL)"
  export LD_LIBRARY_PATH="$kit/lib:$wheels:${LD_LIBRARY_PATH:-}"
fi
[[ $dry == 1 ]] && export LD_LIBRARY_PATH="$kit/lib:${LD_LIBRARY_PATH:-}"
missing=$(for b in "$kit"/bin/*; do ldd "$b" | awk '/not found/ {print $1}'; done | sort -u | tr '\n' ' ')
[[ -z $missing ]] || fail "libraries not found on this machine: $missing"
export OOMLAB_BINARY_DIR="$kit/bin"   # test_cli runs the kit's oomlab
log "preflight ok: ${gpu:-dry run}; kit $(python3 -c 'import json,sys; m=json.load(open(sys.argv[1])); print(m["commit"][:12] + (" DIRTY" if m["dirty"] else ""))' "$kit/MANIFEST.json")"
{
  nvidia-smi
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(), "nccl", torch.cuda.nccl.version())'
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  ldd "$kit/bin/oomlab"
  ldd "$kit/bin/liboomlab_cuda.so"   # the CUDA backend, which oomlab loads at its first CUDA use
} > "$work/logs/environment.txt" 2>&1
timeout 60 "$kit/bin/oomlab" train --model mlp --dataset synthetic --device "$device" --steps 2 --batch 8 \
  --synthetic-size 16 --eval-batches 0 --quiet --json "$work/res/provenance_run.json" > "$work/logs/provenance_run.log" 2>&1 ||
  fail "oomlab cannot train on $device here: $(tail -1 "$work/logs/provenance_run.log")"

# ---- the configurations: oomlab flags per tag (PyTorch's twin: scripts/torch_bench.py) ---
declare -A FLAGS=(
  [r50_fp32]="--model resnet50 --batch 128 --allow-tf32 none"
  [r50_tf32]="--model resnet50 --batch 128 --allow-tf32 all"
  [r50_tf32_bench]="--model resnet50 --batch 128 --allow-tf32 all --cudnn-benchmark on"
  [r50_bf16]="--model resnet50 --batch 128 --amp bf16"
  [r50_fp16]="--model resnet50 --batch 128 --amp fp16"
  [vgg16_tf32]="--model vgg16 --batch 64 --allow-tf32 all"
  [bert_fp32]="--model bert-base --batch 32 --seq-len 128 --allow-tf32 none"
  [bert_tf32]="--model bert-base --batch 32 --seq-len 128 --allow-tf32 all"
  [bert_bf16]="--model bert-base --batch 32 --seq-len 128 --amp bf16"
  [bert_fp16]="--model bert-base --batch 32 --seq-len 128 --amp fp16"
  [bert384_none]="--model bert-base --batch 24 --seq-len 384 --allow-tf32 all"
  [bert384_all]="--model bert-base --batch 24 --seq-len 384 --allow-tf32 all --checkpoint all"
  [bert384_selective]="--model bert-base --batch 24 --seq-len 384 --allow-tf32 all --checkpoint selective"
  [bert_tf32_next]="--model bert-base --batch 32 --seq-len 128 --allow-tf32 all"
  [bert_fp32_next]="--model bert-base --batch 32 --seq-len 128 --allow-tf32 none"
  [vgg16_tf32_next]="--model vgg16 --batch 64 --allow-tf32 all"
  [bert_fp32_fused]="--model bert-base --batch 32 --seq-len 128 --allow-tf32 none --attention fused"
  [bert_tf32_fused]="--model bert-base --batch 32 --seq-len 128 --allow-tf32 all --attention fused"
  [bert_bf16_fused]="--model bert-base --batch 32 --seq-len 128 --amp bf16 --attention fused"
  [bert384_fused]="--model bert-base --batch 24 --seq-len 384 --allow-tf32 all --attention fused"
  [bert384_fused_bf16]="--model bert-base --batch 24 --seq-len 384 --amp bf16 --attention fused"
  [bert_bf16_fused_mma]="--model bert-base --batch 32 --seq-len 128 --amp bf16 --attention fused"
  [bert384_fused_bf16_mma]="--model bert-base --batch 24 --seq-len 384 --amp bf16 --attention fused"
  [r50_tf32_graph]="--model resnet50 --batch 128 --allow-tf32 all"
  [r50_bf16_graph]="--model resnet50 --batch 128 --amp bf16"
  [r50_fp16_graph]="--model resnet50 --batch 128 --amp fp16"
  [vgg16_tf32_graph]="--model vgg16 --batch 64 --allow-tf32 all"
  [vgg16_tf32_fuse]="--model vgg16 --batch 64 --allow-tf32 all --fuse-relu on"
  [r50_tf32_bench_legacy]="--model resnet50 --batch 128 --allow-tf32 all --cudnn-benchmark on"
  [r50_bf16_cudagraphs]="--model resnet50 --batch 128 --amp bf16 --cuda-graphs"
  [r50_tf32_cl]="--model resnet50 --batch 128 --allow-tf32 all --channels-last"
  [r50_bf16_cl]="--model resnet50 --batch 128 --amp bf16 --channels-last"
  [r50_tf32_pin]="--model resnet50 --batch 128 --allow-tf32 all --pin-memory"
  [r50_tf32_cl_legacy]="--model resnet50 --batch 128 --allow-tf32 all --channels-last"
  [r50_bf16_cl_legacy]="--model resnet50 --batch 128 --amp bf16 --channels-last"
  [r50_bf16_cl_cudagraphs]="--model resnet50 --batch 128 --amp bf16 --channels-last --cuda-graphs"
  [r50_bf16_cl_next]="--model resnet50 --batch 128 --amp bf16 --channels-last"
  [bert_bf16_cudagraphs]="--model bert-base --batch 32 --seq-len 128 --amp bf16 --cuda-graphs"
  [graph_r50_tf32]="--model graph:$kit/models/graphs/resnet50.json --batch 64 --allow-tf32 all"
  [graph_bert_tf32]="--model graph:$kit/models/graphs/bert.json --batch 32 --seq-len 128 --allow-tf32 all"
  [graph_gpt2_tf32]="--model graph:$kit/models/graphs/gpt2.json --batch 8 --seq-len 128 --allow-tf32 all"
)
# Environment per tag: a GPU path's switch (cuda_settings.h), so the default runs beside the
# path it replaced, or a new path beside the default, in the same call (a switch stays off until a GPU run measures it).
# GRAPH: NCHW convolutions planned by cuDNN's graph-API heuristics (conv_graph.cu), off by
# default there (within noise of the legacy heuristics on the H200 and the H100): *_graph tags,
# and test_cuda_parity's conv rows under it.
GRAPH="OOMLAB_CUDNN_GRAPH=1"
# LEGACY: the legacy API where the graph API is the default (conv_graph_rules.h): under
# --cudnn-benchmark on, its Find instead of the graph API's timed plans (since the H200 run of
# cbc8729); on channels_last tensors, its heuristics (since the H100 run of aa21f01, where the
# graph API's NHWC step was 0.87x theirs in bf16, 0.98x in TF32): *_legacy.
# r50_bf16_cl_cudagraphs adds --cuda-graphs to channels_last (issue 31's 0.80x bar).
# vgg16_tf32_fuse: --fuse-relu on VGG16 (each conv's ReLU in its bias pass: conv2d_relu, one
# pass over the activation fewer per layer; default off until measured).
LEGACY="OOMLAB_CUDNN_GRAPH=0"
# TILED: the shared-memory tiled attention kernels alone (the fused-attention default before
# the flash (float32) and tensor-core (16-bit) kernels; still what other head dims run), for
# test_cuda_parity_tiled.
TILED="OOMLAB_CUDA_TC_ATTENTION=0 OOMLAB_CUDA_FLASH_ATTENTION=0"
# NEXT: paths written since the last GPU run, off by default until measured (test_cuda_next
# checks each against its default): the embedding backward's column chunks side by side
# (embedding.cu), channels_last BatchNorm's one-pass statistics (batchnorm_nhwc.cu;
# cuda_bn_nhwc_check runs its bodies in CPU CI), layer_norm's unrolled kernels (layernorm.cu)
# dropout's vectorized ones (dropout.cu; cuda_dropout_check runs their bodies in CPU CI) and
# strided copies with 32-bit offsets (copy.cu; cuda_copy_index_check), linear's bias in
# cuBLASLt epilogues (linear_lt.cpp), the NCHW conv bias add by planes (conv_bias.cu) and fused
# attention on 16-bit tensor cores (attention_mma.cu; cuda_attention_mma_check runs its bodies in
# CPU CI): *_next rows, and test_cuda_parity's rows of those ops under it.
# MMA: the 16-bit attention kernels alone, so that *_mma rows (AMP bf16, --attention fused)
# time them against the TF32 kernels they would replace and nothing else.
MMA="OOMLAB_CUDA_MMA_ATTENTION=1"
NEXT="OOMLAB_CUDA_EMBEDDING_SPLIT=1 OOMLAB_CUDA_BN_CL_ONE_PASS=1 OOMLAB_CUDA_LN_UNROLL=1 OOMLAB_CUDA_DROPOUT_VEC=1"
NEXT+=" OOMLAB_CUDA_COPY_FASTDIV=1 OOMLAB_CUDA_LINEAR_LT=1 OOMLAB_CUDA_BIAS_PLANES=1 $MMA"
declare -A ENVS=([r50_tf32_graph]="$GRAPH" [r50_bf16_graph]="$GRAPH" [r50_tf32_bench_legacy]="$LEGACY"
                 [r50_tf32_cl_legacy]="$LEGACY" [r50_bf16_cl_legacy]="$LEGACY" [r50_fp16_graph]="$GRAPH"
                 [vgg16_tf32_graph]="$GRAPH" [bert_tf32_next]="$NEXT" [bert_fp32_next]="$NEXT" [vgg16_tf32_next]="$NEXT"
                 [r50_bf16_cl_next]="$NEXT" [bert_bf16_fused_mma]="$MMA" [bert384_fused_bf16_mma]="$MMA")
# Pairs in this order until the budget runs out (a second call runs what was skipped): the
# bar rows and the paths no GPU has run first; the A/B pairs measured before (the graph API on
# NCHW, cuDNN benchmark with the legacy Find) after the BERT-base b32 rows.
ORDER=(r50_fp32 r50_tf32 r50_tf32_pin r50_tf32_cl r50_tf32_cl_legacy r50_bf16 r50_bf16_cudagraphs r50_bf16_cl
       r50_bf16_cl_next r50_bf16_cl_legacy r50_bf16_cl_cudagraphs r50_fp16 r50_fp16_graph vgg16_tf32
       vgg16_tf32_graph vgg16_tf32_fuse vgg16_tf32_next bert_fp32 bert_fp32_next bert_tf32 bert_tf32_next
       bert_bf16 bert_bf16_cudagraphs bert_fp16 bert_fp32_fused bert_tf32_fused bert_bf16_fused bert_bf16_fused_mma
       bert384_fused_bf16 bert384_fused_bf16_mma r50_tf32_graph r50_bf16_graph r50_tf32_bench r50_tf32_bench_legacy
       bert384_none bert384_all bert384_selective bert384_fused graph_r50_tf32 graph_bert_tf32 graph_gpt2_tf32)
TORCH_ONLY=(bert_fp32_sdpa bert_tf32_sdpa bert_bf16_sdpa bert384_none_sdpa bert384_bf16_sdpa)
# Issue 54's baselines: per oomlab row, PyTorch's best eager configuration of its twin
# (torch_bench.py's TAG@best; gpu_rounds.py's ISSUE54_BARS name the same twins), asked once a
# round right after the row, and torch.compile of it (TAG@compile, compile time apart), asked
# at the end of the round while 150 s are left (its compiles never push a pair out).
declare -A BEST=([r50_tf32]=r50_tf32@best [r50_tf32_cl]=r50_tf32@best [r50_bf16]=r50_bf16@best
                 [r50_bf16_cl]=r50_bf16@best [r50_fp16]=r50_fp16@best [vgg16_tf32]=vgg16_tf32@best
                 [bert_fp32]=bert_fp32@best [bert_tf32]=bert_tf32@best [bert_bf16]=bert_bf16@best
                 [bert_fp16]=bert_fp16@best [bert_fp32_fused]=bert_fp32@best [bert_tf32_fused]=bert_tf32@best
                 [bert_bf16_fused]=bert_bf16@best [bert384_fused]=bert384_none@best
                 [bert384_fused_bf16]=bert384_bf16_sdpa@best [graph_gpt2_tf32]=graph_gpt2_tf32@best)
# Each side on its own half of the cores (oomlab's OpenMP threads and PyTorch's never share one).
cores=$(nproc)
pin_oomlab=(); pin_torch=()
if command -v taskset > /dev/null && ((cores >= 2)); then
  pin_oomlab=(taskset -c "0-$((cores / 2 - 1))"); pin_torch=(taskset -c "$((cores / 2))-$((cores - 1))")
fi
# tag device -> the whole oomlab train argument list but --steps / --json. On meta the CUDA
# numerics switches (--allow-tf32, --cudnn-*) are left out: oomlab refuses them off a GPU (they
# would change nothing there). Sequences are --seq-len long: the zoo's BERT with --seq-min-len,
# an imported graph by its export.
train_args() {
  local f=${FLAGS[$1]} device=$2 model batch seq
  model=$(sed -n 's/.*--model \([^ ]*\).*/\1/p' <<<"$f"); batch=$(sed -n 's/.*--batch \([0-9]*\).*/\1/p' <<<"$f")
  seq=$(sed -n 's/.*--seq-len \([0-9]*\).*/\1/p' <<<"$f")
  [[ $device == cuda* ]] || f=$(sed -E 's/ --(allow-tf32|cudnn-benchmark|cudnn-deterministic|cudnn-workspace-limit) [^ ]+//g' <<<"$f")
  if [[ $model == bert-* ]]; then
    echo "$f --dataset synthetic-seq --seq-min-len $seq --optimizer adamw --lr 1e-4 --synthetic-size $((batch * 4)) --eval-batches 0 --quiet --device $device"
  elif [[ $model == graph:*bert.json || $model == graph:*gpt2.json ]]; then
    echo "$f --dataset synthetic-seq --optimizer adamw --lr 1e-4 --synthetic-size $((batch * 4)) --eval-batches 0 --quiet --device $device"
  else
    echo "$f --dataset synthetic --optimizer sgd --lr 0.01 --synthetic-size $((batch * 4)) --eval-batches 0 --quiet --device $device"
  fi
}

# ---- tests, sanitizers and meta predictions, concurrently ----------------------------------
# These run side by side, each process with an OpenMP team as wide as the machine: passive
# waiting at OpenMP barriers (ctest -j2 on the 2-core VM: training tests up to 30x slower with
# spinning; CMakeLists.txt's OOMLAB_TEST_ENV). The timed pairs below run alone, with
# OpenMP's default policy, as a user's runs do.
test_job() {   # name seconds env-words... -- command... : one test run in the background
  local name=$1 secs=$2; shift 2
  local envs=()
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  wanted_test "$name" || return 0
  ( s=$SECONDS; env OMP_WAIT_POLICY=passive "${envs[@]}" timeout "$secs" "$@" > "$work/logs/$name.log" 2>&1
    echo "$name rc=$? $((SECONDS - s))s" >> "$work/tests/rc.txt" ) &
}
run_tests() {
  local b n parity=$kit/bin/test_cuda_parity
  for b in "$kit"/bin/test_*; do
    n=$(basename "$b")
    if [[ $n == test_cuda_models ]]; then   # every zoo model on the CPU too: 106 s alone, 187 s beside
      for shard in 0 1; do                  # the rest (H100, aa21f01): two gtest shards side by side
        test_job "${n}_shard$shard" 180 GTEST_TOTAL_SHARDS=2 GTEST_SHARD_INDEX=$shard -- "$b" \
          --gtest_output="json:$work/tests/${n}_shard$shard.json"
      done
      continue
    fi
    test_job "$n" 150 -- "$b" --gtest_output="json:$work/tests/$n.json"
  done
  local san tool
  san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer /opt/nvidia/*/compute-sanitizer 2>/dev/null | head -1)
  if [[ -n $san && -x $parity ]]; then
    for tool in memcheck racecheck; do
      test_job "sanitizer_$tool" 170 OOMLAB_NO_CACHING=1 -- "$san" --tool "$tool" --error-exitcode 9 "$parity"
    done
  else
    echo "sanitizer not found" >> "$work/tests/rc.txt"
  fi
  [[ -x $parity ]] || return 0
  # the tiled attention kernels, the graph API's NCHW convolutions, the NEXT paths and the
  # reference attention kernels against the CPU too
  # shellcheck disable=SC2086  # TILED / GRAPH are word lists
  test_job test_cuda_parity_tiled 150 $TILED -- "$parity" --gtest_filter='*attention*' \
    --gtest_output="json:$work/tests/test_cuda_parity_tiled.json"
  # shellcheck disable=SC2086
  test_job test_cuda_parity_graph 150 $GRAPH -- "$parity" --gtest_filter='*conv*' \
    --gtest_output="json:$work/tests/test_cuda_parity_graph.json"
  # shellcheck disable=SC2086
  test_job test_cuda_parity_next 150 $NEXT -- "$parity" --gtest_filter='*batch_norm*:*embedding*:*layer_norm*:*dropout*:*linear*:*conv*bias*:*fused_attention*' \
    --gtest_output="json:$work/tests/test_cuda_parity_next.json"
  # shellcheck disable=SC2086
  test_job test_cuda_parity_reference_attention 150 $TILED OOMLAB_CUDA_TILED_ATTENTION=0 -- "$parity" \
    --gtest_filter='*attention*' --gtest_output="json:$work/tests/test_cuda_parity_reference_attention.json"
}
# graphed_steps meta steps: with fewer a --cuda-graphs meta run would stop before the capture and
# miss the graph's pool (its 1 MiB of optimizer constants, the static loss) the CUDA run holds.
run_meta() {   # the meta device's prediction of each pair's peak; then waits for the tests too
  ( for tag in "${ORDER[@]}"; do
      wanted "$tag" || continue
      # shellcheck disable=SC2046  # train_args is a word list
      OMP_WAIT_POLICY=passive timeout 60 "$kit/bin/oomlab" train $(train_args "$tag" meta) --steps "$graphed_steps" \
        --json "$work/res/meta_$tag.json" > "$work/logs/meta_$tag.log" 2>&1
    done ) &
  wait
}
if (($(left) > 200)); then
  log "tests, compute-sanitizer${OOMLAB_KIT_TAGS:+ and meta predictions}"
  run_tests
  if [[ -n ${OOMLAB_KIT_TAGS:-} ]]; then run_meta; else wait; fi
  log "tests done: $(tr '\n' ';' < "$work/tests/rc.txt")"
else
  log "skipped: tests (budget)"
fi

# ---- the experiments' gpu profiles, in priority order --------------------------------------
# Each is `oomlab run --profile gpu --device cuda` (meta in a dry run) into OUT_DIR; the budget's
# end stops it (SIGTERM: the running point stops, the points before it stay in .partial).
run_experiment_profiles() {
  local nn dir name left_s
  for nn in ${OOMLAB_KIT_EXPERIMENTS-05 06 09 15 17 18 16 11 12 08 10 20}; do
    dir=$(ls -d "$kit"/experiments/"${nn}"_* 2>/dev/null | head -1)
    [[ -n $dir ]] || { log "experiment $nn: not in the kit (no gpu profile)"; continue; }
    name=$(basename "$dir")
    if [[ -f $kit/resume/$name.json ]]; then log "experiment $name: finished in an earlier record"; continue; fi
    [[ -f $kit/resume/$name.partial.json ]] && cp "$kit/resume/$name.partial.json" "$out/$name.json.partial"
    left_s=$(($(left) - 15))
    ((left_s > 30)) || { log "skipped: experiment $name and later (budget)"; return 0; }
    timeout -k 10 "$left_s" "$kit/bin/oomlab" run "$dir" --profile gpu --device "$device" --out "$out/$name.json" \
      > "$work/logs/run_$name.log" 2>&1
    log "experiment $name rc=$?: $(grep -v '^    |' "$work/logs/run_$name.log" | tail -1 | cut -c1-160)"
  done
}
run_experiment_profiles

if [[ -n ${OOMLAB_KIT_TAGS:-} ]]; then   # the pairs, breakdowns and extras: asked for by tag
# ---- oomlab and PyTorch, alternating ------------------------------------------------------
torch_args=(--serve --steps 15 --warmup 5 --out "$work/res/torch.jsonl")
[[ $dry == 1 ]] && torch_args+=(--dry-run)   # the protocol without PyTorch (CI)
coproc TORCH { exec "${pin_torch[@]}" python3 "$kit/scripts/torch_bench.py" "${torch_args[@]}" 2> "$work/logs/torch.log"; }
# Bash closes a coproc's descriptors in subshells, and every $(torch_ask ...) is one (the
# first H200 run lost every answer so): talk through copies, which subshells inherit.
torch_out=""; torch_in=""
[[ -n ${TORCH[0]:-} && -n ${TORCH[1]:-} ]] && exec {torch_out}<&"${TORCH[0]}" {torch_in}>&"${TORCH[1]}"
# seconds [tag] -> PyTorch's next JSON line (with tag: its answer for that tag; a late answer
# to an earlier command that timed out, e.g. a long compile, goes to logs/torch_late.jsonl
# instead of being taken for this one), or an error record after `seconds`.
torch_read() {
  local line="" end=$((SECONDS + $1))
  while [[ -n $torch_out ]] && ((SECONDS < end)) && IFS= read -r -t "$((end - SECONDS))" line <&"$torch_out"; do
    [[ -z ${2:-} || $line == *"\"tag\": \"$2\""* ]] && { echo "$line"; return 0; }
    echo "$line" >> "$work/logs/torch_late.jsonl"
  done
  echo '{"error": "no answer from torch_bench.py (see logs/torch.log)"}'
}
torch_ask() {   # command seconds -> the answer to it (its second word is the tag)
  [[ -n $torch_in ]] && echo "$1" >&"$torch_in" 2>/dev/null
  local words
  read -r -a words <<<"$1"
  torch_read "$2" "${words[1]:-}"
}
torch_read 120 > "$work/res/torch_versions.json"   # printed once PyTorch is imported
# One round of pairs: oomlab then PyTorch per tag, then PyTorch's SDPA twins. Round 1 writes
# res/oomlab_<tag>.json; with OOMLAB_KIT_REPEAT=R, rounds 2..R write res/rounds/<r>/ and ask
# PyTorch `run TAG ROUND`, so gpu_report.py pairs the same round's medians (gpu_rounds.py).
run_pairs() {   # round
  local round=$1 dir=$work/res suffix="" tag rc
  local -A asked=()   # the best twins asked this round (ask_baselines, through a nameref)
  ((round > 1)) && { dir=$work/res/rounds/$round; suffix=".r$round"; mkdir -p "$dir"; }
  for tag in "${ORDER[@]}"; do
    wanted "$tag" || continue
    (($(left) > 40)) || { log "skipped: $tag and later pairs${suffix:+ of round $round} (budget)"; return 0; }
    local load; load=$(cut -d' ' -f1 /proc/loadavg)
    # shellcheck disable=SC2046,SC2086  # train_args and ENVS are word lists
    env ${ENVS[$tag]:-} timeout 90 "${pin_oomlab[@]}" "$kit/bin/oomlab" train $(train_args "$tag" "$device") \
      --steps "$steps" --json "$dir/oomlab_$tag.json" > "$work/logs/oomlab_$tag$suffix.log" 2>&1
    rc=$?
    log "oomlab $tag$suffix rc=$rc (host load $load)"
    ask_baselines "${BEST[$tag]:-}" "$round" "$suffix" asked
    [[ $tag == bert384_selective || $tag == *_fused* || $tag == *_fuse || $tag == *_graph || $tag == *_next ||
       $tag == *_legacy || $tag == *_cl_cudagraphs ||
       $tag == bert*_cudagraphs ]] &&
      continue   # PyTorch: none / SDPA below; a switched row's twin is its default's (r50_bf16_cudagraphs: torch.cuda.graph's)
    log "torch $tag$suffix: $(torch_ask "run $tag $round" 90 | cut -c1-160)"
  done
  for tag in "${TORCH_ONLY[@]}"; do
    wanted "$tag" || continue
    (($(left) > 30)) || { log "skipped: torch $tag$suffix (budget)"; continue; }
    log "torch $tag$suffix: $(torch_ask "run $tag $round" 60 | cut -c1-160)"
  done
  local best compiled
  for best in "${!asked[@]}"; do   # torch.compile of each best twin this round asked
    compiled=${best%@best}@compile
    (($(left) > 150)) || { log "skipped: torch $compiled$suffix (budget)"; continue; }
    log "torch $compiled$suffix: $(torch_ask "run $compiled $round" 300 | cut -c1-160)"
  done
}
# best_twin round suffix asked-array -> PyTorch's best eager twin, once a round (a twin several
# rows share is asked once); run_pairs asks torch.compile of the asked twins at the round's end.
ask_baselines() {
  local best=$1 round=$2 suffix=$3
  local -n seen=$4
  [[ -n $best && -z ${seen[$best]:-} ]] || return 0
  seen["$best"]=1
  log "torch $best$suffix: $(torch_ask "run $best $round" 120 | cut -c1-160)"
}
for ((round = 1; round <= rounds; ++round)); do run_pairs "$round"; done

# ---- per-op time: oomlab's spans timed on the device, PyTorch's profiler beside them -------
# A switched tag (bert_tf32_next: the NEXT paths) runs under its ENVS, beside its default's trace,
# so the per-op table says which op each switch moved; PyTorch's profile is its default's.
for tag in ${OOMLAB_KIT_BREAKDOWN-r50_tf32 bert_tf32 bert_tf32_next}; do   # set but empty: none
  (($(left) > 35)) || { log "skipped: breakdown $tag (budget)"; continue; }
  # shellcheck disable=SC2046,SC2086  # train_args and ENVS are word lists
  env ${ENVS[$tag]:-} timeout 60 "$kit/bin/oomlab" train $(train_args "$tag" "$device") --steps 4 \
    --chrome-trace "$work/res/trace_$tag.json" > "$work/logs/trace_$tag.log" 2>&1
  log "trace $tag rc=$?"
  { echo "== oomlab $tag${ENVS[$tag]:+ (${ENVS[$tag]})}: device time per span (CUDA events, no synchronisation), the last 3 of 4 steps (the first, which selects cuDNN algorithms, left out) =="
    python3 "$kit/scripts/trace_breakdown.py" "$work/res/trace_$tag.json" --skip-steps 1 2>&1; echo; } >> "$work/res/breakdown.txt"
  [[ -n ${ENVS[$tag]:-} ]] && continue
  log "torch profile $tag: $(torch_ask "profile $tag $work/res/torchprof_$tag.txt" 60 | cut -c1-120)"
done
[[ -n $torch_in ]] && { echo quit >&"$torch_in"; exec {torch_in}>&- {torch_out}<&-; } 2>/dev/null
gzip -f "$work"/res/trace_*.json 2>/dev/null

# ---- data parallelism on two logical devices of the one GPU (T6, T8) -----------------------
declare -A PAR=(
  [par_dp]="--parallel dp --devices 2 --batch 128"
  [par_bdp]="--parallel bdp --devices 2 --batch 128 --gpu0-bsz 32"
  [par_ddp]="--parallel ddp --devices 2 --batch 64"
  [par_ddp_syncbn]="--parallel ddp --devices 2 --batch 64 --sync-bn"
)
tf32=()   # a CUDA switch: oomlab refuses it on meta (the dry run)
[[ $device == cuda* ]] && tf32=(--allow-tf32 all)
for tag in par_dp par_bdp par_ddp par_ddp_syncbn; do
  wanted "$tag" || continue
  (($(left) > 25)) || { log "skipped: $tag (budget)"; continue; }
  # shellcheck disable=SC2086
  timeout 60 "$kit/bin/oomlab" train --model resnet50 --dataset synthetic "${tf32[@]}" --optimizer sgd --lr 0.01 \
    --synthetic-size 512 --eval-batches 0 --quiet --device "$device" --steps 11 ${PAR[$tag]} \
    --json "$work/res/oomlab_$tag.json" > "$work/logs/oomlab_$tag.log" 2>&1
  log "oomlab $tag rc=$?"
done

# ---- the host CPU's attention: oomlab eager / fused beside PyTorch SDPA (issue 31) ---------
if ! wanted cpu_attention; then
  :
elif (($(left) > 60)); then
  timeout 90 python3 "$kit/scripts/attention_vs_torch.py" --bench "$kit/bin/bench_attention" --seqs 512,1024 \
    --rounds 2 --iters 3 --json "$work/res/attention_cpu.json" > "$work/logs/attention_cpu.log" 2>&1
  log "cpu attention rc=$?: $(tail -1 "$work/logs/attention_cpu.log" | cut -c1-160)"
else
  log "skipped: cpu attention (budget)"
fi

# ---- model graphs for the importer (issue 32): torch.export with this machine's PyTorch -----
# (the files land in logs.tar.gz: res/graph_*.json, fixtures for the C++ importer's tests)
for spec in "torchvision:resnet50 1,3,224,224 float32 resnet50" "hf:bert 1,128 int64 bert_base"; do
  read -r model shape dtype tag <<<"$spec"
  wanted "graph_export_$tag" || continue
  (($(left) > 30)) || { log "skipped: graph export $tag (budget)"; continue; }
  timeout 90 python3 "$kit/scripts/export_model.py" "$model" --input-shape "$shape" --input-dtype "$dtype" \
    --out "$work/res/graph_$tag.json" > "$work/logs/graph_$tag.log" 2>&1
  log "graph export $tag rc=$?: $(tail -1 "$work/logs/graph_$tag.log" | cut -c1-120)"
done
fi   # OOMLAB_KIT_TAGS

log "done in $((SECONDS - t0)) s"
finish
echo "gpu_run: wrote $out"
