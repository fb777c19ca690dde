#!/bin/bash
# Short A/B of the tiled fused-attention kernels (issue 31), from the kit at 8e76a23.
set -u
tar -xJf .kit/oomlab-gpu-kit-8e76a2334622.tar.xz -C /tmp
kit=/tmp/oomlab-gpu-kit-8e76a2334622
wheels=$(python3 -c 'import os, nvidia; print(":".join(sorted({os.path.join(r, "lib") for p in nvidia.__path__ for r in [os.path.join(p, d) for d in os.listdir(p)] if os.path.isdir(os.path.join(r, "lib"))})))')
export LD_LIBRARY_PATH="$kit/lib:$wheels:${LD_LIBRARY_PATH:-}"
out=$OUT/ab; mkdir -p $out
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $out/gpu.txt
cp $kit/MANIFEST.json $out/
t=$SECONDS
OOMLAB_CUDA_TILED_ATTENTION=1 timeout 60 $kit/bin/test_cuda_parity --gtest_filter='*attention*' > $out/parity_tiled.log 2>&1; echo "parity tiled rc=$? $((SECONDS-t))s"
timeout 60 $kit/bin/test_cuda_parity --gtest_filter='*attention*' > $out/parity_default.log 2>&1; echo "parity default rc=$? $((SECONDS-t))s"
args="--model bert-base --batch 24 --seq-len 384 --allow-tf32 all --dataset synthetic-seq --seq-min-len 384 --optimizer adamw --lr 1e-4 --synthetic-size 96 --eval-batches 0 --quiet --device cuda --steps 6"
for round in 1 2; do
  timeout 40 $kit/bin/oomlab train $args --json $out/eager_$round.json > $out/eager_$round.log 2>&1; echo "eager $round rc=$? $((SECONDS-t))s"
  OOMLAB_CUDA_TILED_ATTENTION=1 timeout 40 $kit/bin/oomlab train $args --attention fused --json $out/tiled_$round.json > $out/tiled_$round.log 2>&1; echo "tiled $round rc=$? $((SECONDS-t))s"
done
timeout 40 $kit/bin/oomlab train $args --attention fused --json $out/reference_1.json > $out/reference_1.log 2>&1; echo "reference rc=$? $((SECONDS-t))s"
for f in $out/*.json; do python3 -c "
import json,sys; d=json.load(open(sys.argv[1]))
if 'metrics' in d: print(sys.argv[1].split('/')[-1], 'median_ms', round(1e3*d['metrics']['step_time_s']['median'],2), 'peak', d['memory']['totals']['allocated_bytes.all.peak'], 'loss', d['metrics']['history']['train_loss'][-1], d['context'].get('device_properties',{}).get('tiled_attention'))" $f 2>/dev/null; done
grep -E "OK \]|FAILED|PASSED" $out/parity_tiled.log | tail -8
