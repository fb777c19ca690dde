#!/usr/bin/env bash
# Run `oomlab allreduce-bench --backend gloo` as N local ranks started the way torchrun
# (`torchrun --standalone --nnodes 1 --nproc-per-node N`) starts its workers: N background
# processes, each with torchrun's worker environment (see "Environment Variables" in
# https://pytorch.org/docs/stable/elastic/run.html):
#   RANK=LOCAL_RANK=ROLE_RANK=r  WORLD_SIZE=LOCAL_WORLD_SIZE=ROLE_WORLD_SIZE=N
#   GROUP_RANK=0  GROUP_WORLD_SIZE=1  ROLE_NAME=default  MASTER_ADDR=127.0.0.1  MASTER_PORT
#   TORCHELASTIC_RESTART_COUNT=0  TORCHELASTIC_MAX_RESTARTS=0  TORCHELASTIC_RUN_ID
#   OMP_NUM_THREADS=1 (only when unset and N > 1, as torchrun does)
# Like torchrun, when one rank fails the others are sent SIGTERM; no restarts.
# Only rank 0 prints the nccl-tests-style table; every rank's stderr is shown.
#
# Usage: scripts/torchrun_allreduce.sh [-n N] [-b BUILD_DIR] [-- BENCH_ARGS...]
#   -n N          number of ranks (default 2)
#   -b BUILD_DIR  folder holding the oomlab binary (default $OOMLAB_BUILD_DIR or build),
#                 relative to the repository root unless absolute
#   BENCH_ARGS    passed to allreduce-bench, e.g. --min-bytes 1K --max-bytes 4M --iters 5
# Environment: MASTER_PORT (default: a free TCP port on 127.0.0.1), OOMLAB_BUILD_DIR.
# Exit status: 0 when every rank succeeded; else the exit status of the first rank that
#   failed (128+signal if it was killed); 2 on a usage error.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
nproc_per_node=2
build_dir="${OOMLAB_BUILD_DIR:-build}"
while getopts "n:b:h" opt; do
  case "$opt" in
    n) nproc_per_node="$OPTARG" ;;
    b) build_dir="$OPTARG" ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
[[ "$nproc_per_node" =~ ^[1-9][0-9]*$ ]] || { echo "error: -n wants a positive integer" >&2; exit 2; }
bin="$build_dir/oomlab"
[[ -x "$bin" ]] || { echo "error: $bin not found or not executable (use -b BUILD_DIR)" >&2; exit 2; }

free_port() {  # ask the kernel for an unused port
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null \
    || echo $((20000 + RANDOM % 20000))
}
port="${MASTER_PORT:-$(free_port)}"
run_id="oomlab-$$-$(date +%s)"
[[ -z "${OMP_NUM_THREADS:-}" && "$nproc_per_node" -gt 1 ]] && export OMP_NUM_THREADS=1
echo "# torchrun-style launch: $nproc_per_node ranks, MASTER_ADDR=127.0.0.1 MASTER_PORT=$port, $bin" >&2

declare -A rank_of=()  # pid -> rank, for the ranks still running
stop_all() { for p in "${!rank_of[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; }
trap 'stop_all; exit 130' INT
trap 'stop_all; exit 143' TERM

for ((r = 0; r < nproc_per_node; r++)); do
  env RANK=$r LOCAL_RANK=$r ROLE_RANK=$r GROUP_RANK=0 GROUP_WORLD_SIZE=1 ROLE_NAME=default \
      WORLD_SIZE="$nproc_per_node" LOCAL_WORLD_SIZE="$nproc_per_node" ROLE_WORLD_SIZE="$nproc_per_node" \
      MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" TORCHELASTIC_RUN_ID="$run_id" \
      TORCHELASTIC_RESTART_COUNT=0 TORCHELASTIC_MAX_RESTARTS=0 \
      "$bin" allreduce-bench --backend gloo "$@" &
  rank_of[$!]=$r
done

status=0
while ((${#rank_of[@]} > 0)); do
  st=0
  wait -n -p done_pid "${!rank_of[@]}" || st=$?
  r=${rank_of[$done_pid]}
  unset "rank_of[$done_pid]"
  if [[ $st -ne 0 && $status -eq 0 ]]; then
    status=$st
    echo "# rank $r (pid $done_pid) exited with status $st; stopping the other ranks" >&2
    stop_all
  fi
done
exit "$status"
