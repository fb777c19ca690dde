#!/usr/bin/env bash
# Start a private one-node Slurm on this machine (munged, slurmctld, slurmd; everything in a
# temporary directory, nothing under /etc touched), run
#   srun -n N BUILD_DIR/oomlab allreduce-bench --backend gloo BENCH_ARGS...
# in it (each task finds its rank from SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID and the master
# from the first host of SLURM_NODELIST), then stop the daemons (trap on EXIT).
# Needs Debian's slurm-wlm (22.05: slurmctld, slurmd, srun, sinfo) and munge; run as root.
# When a daemon does not start, the tail of its log is printed and the script exits 1.
#
# Usage: scripts/slurm_allreduce.sh [-n N] [-b BUILD_DIR] [-- BENCH_ARGS...]
#        scripts/slurm_allreduce.sh [-n N] [-b BUILD_DIR] -- train TRAIN_ARGS...   (runs
#        `srun -n N oomlab train TRAIN_ARGS` instead: give --parallel ddp --backend gloo)
#   -n N          number of Slurm tasks = ranks (default $N or 2)
#   -b BUILD_DIR  folder holding the oomlab binary (default $OOMLAB_BUILD_DIR or build),
#                 relative to the repository root unless absolute
# Environment: N, OOMLAB_BUILD_DIR; MASTER_PORT (default: a free port); MASTER_ADDR (default:
#   unset, so the ranks use SLURM_NODELIST's first host, or 127.0.0.1 if that does not resolve);
#   OOMLAB_SLURM_KEEP=1 keeps the temporary directory (configs, logs) for inspection.
# Exit status: srun's (0 when every rank succeeded); 1 when the cluster could not be set up;
#   2 on a usage error.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }
ntasks="${N:-2}"; build_dir="${OOMLAB_BUILD_DIR:-build}"
while getopts "n:b:h" opt; do
  case "$opt" in n) ntasks="$OPTARG" ;; b) build_dir="$OPTARG" ;; *) usage ;; esac
done
shift $((OPTIND - 1))
[[ "$ntasks" =~ ^[1-9][0-9]*$ ]] || { echo "error: -n wants a positive integer" >&2; exit 2; }
bin="$(cd "$build_dir" 2>/dev/null && pwd)/oomlab"
[[ -x "$bin" ]] || { echo "error: $build_dir/oomlab not found or not executable (use -b)" >&2; exit 2; }
for tool in munged slurmctld slurmd srun sinfo; do
  command -v "$tool" >/dev/null || [[ -x /usr/sbin/$tool ]] || { echo "error: $tool not installed" >&2; exit 1; }
done
export PATH="$PATH:/usr/sbin"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])'; }
fail() {  # fail MESSAGE [LOG...]: print the message and the tail of each log, exit 1
  echo "error: $1" >&2; shift
  for log in "$@"; do [[ -f "$log" ]] && { echo "--- tail of $log:" >&2; tail -n 15 "$log" >&2; }; done
  exit 1
}

tmp=$(mktemp -d /tmp/oomlab-slurm.XXXXXX)
chmod 0711 "$tmp"   # munged wants its socket's directory searchable by all
# shellcheck disable=SC2317  # cleanup is run by the EXIT trap
cleanup() {
  local pidfile pid
  for pidfile in "$tmp/slurmd.pid" "$tmp/slurmctld.pid" "$tmp/munged.pid"; do
    pid=$(cat "$pidfile" 2>/dev/null) || continue
    kill -TERM "$pid" 2>/dev/null || continue
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  done
  if [[ "${OOMLAB_SLURM_KEEP:-0}" == 1 ]]; then echo "# kept $tmp" >&2; else rm -rf "$tmp"; fi
}
trap cleanup EXIT
trap 'exit 130' INT; trap 'exit 143' TERM

# munge: a fresh key (0400, ours) and a private socket
sock="$tmp/munge.socket"
mungekey --create --keyfile="$tmp/munge.key" 2>/dev/null \
  || dd if=/dev/urandom of="$tmp/munge.key" bs=1024 count=1 status=none
chmod 0400 "$tmp/munge.key"
munged --socket="$sock" --key-file="$tmp/munge.key" --pid-file="$tmp/munged.pid" \
  --log-file="$tmp/munged.log" --seed-file="$tmp/munged.seed" 2>>"$tmp/munged.log" \
  || fail "munged did not start" "$tmp/munged.log"
munge --socket="$sock" -n | unmunge --socket="$sock" >/dev/null 2>&1 \
  || fail "munge credential round trip failed" "$tmp/munged.log"

# slurm.conf: this host as controller and only compute node (its real CPUs/memory: slurmd -C)
host=$(hostname -s)
mkdir -p "$tmp/state" "$tmp/spool"; : >"$tmp/plugstack.conf"
export SLURM_CONF="$tmp/slurm.conf"
cat >"$SLURM_CONF" <<EOF
ClusterName=oomlab
SlurmctldHost=$host
SlurmctldPort=$(free_port)
SlurmdPort=$(free_port)
SlurmUser=$(id -un)
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sock
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/slurmctld.log
SlurmdLogFile=$tmp/slurmd.log
PlugStackConfig=$tmp/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
$(slurmd -C | head -n 1) State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF

slurmctld -c -f "$SLURM_CONF" 2>>"$tmp/slurmctld.log" || fail "slurmctld did not start" "$tmp/slurmctld.log"
slurmd -f "$SLURM_CONF" 2>>"$tmp/slurmd.log" || fail "slurmd did not start" "$tmp/slurmd.log"
state=""
for _ in $(seq 60); do state=$(sinfo -h -N -n "$host" -o %t 2>/dev/null) && [[ "$state" == idle ]] && break; sleep 0.5; done
[[ "$state" == idle ]] || fail "node $host is not idle after 30 s (state '${state:-unknown}')" \
  "$tmp/slurmctld.log" "$tmp/slurmd.log"
sinfo >&2

export MASTER_PORT="${MASTER_PORT:-$(free_port)}"
getent hosts "$host" >/dev/null || export MASTER_ADDR="${MASTER_ADDR:-127.0.0.1}"
if [[ "${1:-}" == train ]]; then   # a DDP training job: srun -n N oomlab train ... --parallel ddp --backend gloo
  echo "# srun -n $ntasks $bin $* (MASTER_PORT=$MASTER_PORT)" >&2
  srun -n "$ntasks" --overcommit --kill-on-bad-exit=1 "$bin" "$@"
  exit 0
fi
echo "# srun -n $ntasks $bin allreduce-bench --backend gloo $* (MASTER_PORT=$MASTER_PORT)" >&2
srun -n "$ntasks" --overcommit --kill-on-bad-exit=1 "$bin" allreduce-bench --backend gloo "$@"  # set -e: its status
