// plan_text.cpp — a plan's candidate as `oomlab train` flags and as the PyTorch settings that
// do the same, and the cards that hold a peak (planner.h).
#include "engine/core/error.h"
#include "experiments/plan/planner.h"
#include "models/model_table.h"

namespace oomlab {

std::string train_flags(const PlanRequest& r, const PlanCandidate& c) {
  const ModelEntry m = model_entry(r.model.model);
  std::string s = str_cat("--model ", r.model.model, " --dataset ",
                          m.input == InputKind::tokens ? "synthetic-seq"
                          : m.task == TaskKind::segmentation ? "synthetic-seg" : "synthetic",
                          " --batch ", c.micro_batch * (c.parallel == "dp" || c.parallel == "bdp" ? r.gpus : 1));
  if (m.input == InputKind::tokens)   // the length the meta steps used (0: the model's own)
    s += str_cat(" --seq-len ", r.model.seq_len > 0 ? r.model.seq_len : m.defaults.seq_len);
  if (c.accumulate > 1) s += str_cat(" --accumulate ", c.accumulate);
  s += " --optimizer " + r.optimizer + " --device cuda";
  if (c.precision == "bf16" || c.precision == "fp16") s += " --amp " + c.precision;
  if (c.precision == "half") s += " --half --master-weights";
  if (c.precision == "tf32") s += " --allow-tf32 all";
  if (c.precision == "fp32") s += " --allow-tf32 none";
  if (c.checkpoint != "none") s += " --checkpoint " + c.checkpoint;
  if (c.attention == "fused") s += " --attention fused";
  if (c.channels_last) s += " --channels-last";
  if (c.fuse_relu) s += " --fuse-relu on";
  if (!c.parallel.empty()) s += str_cat(" --parallel ", c.parallel, " --devices ", r.gpus);
  if (c.parallel == "bdp") s += str_cat(" --gpu0-bsz ", c.gpu0_bsz * c.accumulate);
  if (c.zero > 0) s += str_cat(" --zero ", c.zero);
  if (!c.offload.empty()) s += " --offload " + c.offload;
  return s;
}

std::vector<std::string> cards_that_hold(int64_t peak_bytes, uint64_t reserve_bytes) {
  std::vector<std::string> out;
  for (const GpuSpec& g : gpu_table())
    if (g.memory_bytes >= reserve_bytes && g.memory_bytes - reserve_bytes >= uint64_t(peak_bytes))
      out.push_back(g.name);
  return out;
}

std::string pytorch_settings(const PlanRequest& r, const PlanCandidate& c) {
  std::string s = str_cat(c.parallel == "dp" || c.parallel == "bdp" ? "micro-batch per device " : "micro-batch ",
                          c.micro_batch);
  if (c.accumulate > 1)
    s += str_cat(", loss / ", c.accumulate, " and ", c.accumulate, " backward passes per optimizer step");
  if (c.precision == "bf16") s += ", torch.autocast(\"cuda\", dtype=torch.bfloat16)";
  if (c.precision == "fp16") s += ", torch.autocast(\"cuda\", dtype=torch.float16) with torch.amp.GradScaler()";
  if (c.precision == "tf32") s += ", torch.backends.cuda.matmul.allow_tf32 = True";
  if (c.precision == "fp32") s += ", torch.backends.cudnn.allow_tf32 = False";
  if (c.precision == "half")
    s += ", model.half() (BatchNorm float32) with float32 master weights for the optimizer and a GradScaler";
  if (c.checkpoint == "all") s += ", torch.utils.checkpoint around every block";
  if (c.checkpoint == "sqrt") s += ", torch.utils.checkpoint.checkpoint_sequential with sqrt(n) segments";
  if (c.checkpoint == "selective") s += ", torch.utils.checkpoint around each attention block";
  if (c.attention == "fused") s += ", F.scaled_dot_product_attention";
  if (c.channels_last) s += ", model and inputs .to(memory_format=torch.channels_last)";
  if (c.fuse_relu) s += ", ReLU fused into the op before it (eager PyTorch has no switch; torch.compile fuses it)";
  if (c.parallel == "dp")
    s += str_cat(", torch.nn.DataParallel over ", r.gpus, " GPUs (one process; each micro-batch of ",
                 c.micro_batch * r.gpus, " split)");
  if (c.parallel == "bdp")
    s += str_cat(", the source's BalancedDataParallel(gpu0_bsz=", c.gpu0_bsz, ") over ", r.gpus, " GPUs");
  if (c.parallel == "ddp" && c.zero == 0)
    s += str_cat(", DistributedDataParallel over ", r.gpus, " GPUs (bucket_cap_mb=25, NCCL)");
  if (c.zero == 1) s += str_cat(", DDP over ", r.gpus, " GPUs with torch.distributed.optim.ZeroRedundancyOptimizer");
  if (c.zero == 2) s += str_cat(", DeepSpeed ZeRO stage 2 over ", r.gpus, " GPUs (or FSDP SHARD_GRAD_OP)");
  if (c.zero == 3) s += str_cat(", FSDP(ShardingStrategy.FULL_SHARD) over ", r.gpus, " GPUs, one unit per module");
  if (c.offload == "optimizer") s += ", DeepSpeed's offload_optimizer (device: cpu)";
  if (c.offload == "params") s += ", DeepSpeed's offload_optimizer and offload_param (device: cpu)";
  return s;
}

}  // namespace oomlab
