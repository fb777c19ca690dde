// flag_table.cpp — the flag table (flag_table.h): every flag of every command, once. The
// rendering (synopsis, --help, fuzz dictionary) is flag_help.cpp's.
#include "experiments/cli/flag_table.h"

#include <algorithm>
#include <utility>

#include "engine/autograd/autocast.h"
#include "engine/core/byte_sizes.h"
#include "engine/parallel/rank_env.h"
#include "experiments/measure/tricks.h"
#include "experiments/plan/gpu_table.h"

namespace oomlab {
namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
using Commands = std::vector<std::string>;

// --parallel fsdp is PyTorch FSDP's FULL_SHARD: ddp with every state sharded (--zero 3).
void set_parallel_mode(RunSpec& r, const std::string& v) {
  r.parallel = parse_parallel_mode(v == "fsdp" ? "ddp" : v);
  if (v == "fsdp") r.zero_stage = 3;
}

// A row of the table, written fluently: F("batch", kModel, "samples per step").integer("B", 1).
struct F {
  FlagSpec s;
  F(std::string name, Commands commands, std::string help) {
    s.name = std::move(name);
    s.commands = std::move(commands);
    s.help = std::move(help);
  }
  F& sw() { s.kind = FlagKind::switch_; return *this; }
  F& text(std::string metavar) { s.kind = FlagKind::text; s.metavar = std::move(metavar); return *this; }
  F& int_list(std::string metavar) { s.kind = FlagKind::int_list; s.metavar = std::move(metavar); return *this; }
  F& integer(std::string metavar, double lo, double hi = kInf) {
    s.kind = FlagKind::integer;
    s.metavar = std::move(metavar);
    s.lo = lo;
    s.hi = hi;
    return *this;
  }
  F& number(std::string metavar, double lo, double hi, bool lo_open, bool hi_open) {
    s.kind = FlagKind::number;
    s.metavar = std::move(metavar);
    s.lo = lo;
    s.hi = hi;
    s.lo_open = lo_open;
    s.hi_open = hi_open;
    return *this;
  }
  F& size(double hi = kInf) { s.kind = FlagKind::size; s.metavar = "SIZE"; s.lo = 1; s.hi = hi; return *this; }
  F& choice(std::vector<std::string> c) {
    s.kind = FlagKind::choice;
    s.choices = std::move(c);
    for (const auto& x : s.choices) s.metavar += (s.metavar.empty() ? "" : "|") + x;
    return *this;
  }
  F& def(std::string v) { s.default_value = std::move(v); return *this; }
  F& required() { s.required = true; return *this; }
  F& needs(std::string flag) { s.requires_flags.push_back(std::move(flag)); return *this; }
  F& excludes(std::string flag) { s.excludes.push_back(std::move(flag)); return *this; }
  F& applies(std::string flag, std::vector<std::string> values) {
    s.applies_when.push_back({std::move(flag), std::move(values)});
    return *this;
  }
  F& models(std::string use) { s.models = std::move(use); return *this; }
  F& output() { s.output = true; return *this; }
  F& input() { s.input = true; return *this; }
  F& to(RunSpecField f) { s.field = f; return *this; }
};

const Commands kTrain = {"train"}, kSummary = {"summary"}, kEstimate = {"estimate"}, kStep = {"step"};
const Commands kMemory = {"summary", "estimate"}, kModel = {"train", "summary", "estimate", "step"};
const Commands kBench = {"allreduce-bench"}, kRun = {"run"};
const std::vector<std::string> kSynthetic = {"synthetic", "synthetic-seq", "synthetic-seg"};
const std::vector<std::string> kProcessBackends = {"gloo", "mpi", "nccl"};   // one process per rank

void rows_model_flags(std::vector<FlagSpec>& t) {
  t.push_back(F("model", kModel, "the model (`oomlab models` lists the zoo)").text("M").required().input()
                  .to(&RunSpec::model).s);
  t.push_back(F("dataset", kTrain, "the training data: Fashion-MNIST, a synthetic task, or your npy arrays")
                  .choice({"fashion-mnist", "synthetic", "synthetic-seq", "synthetic-seg", "npy"}).required()
                  .to(&RunSpec::dataset).s);
  t.push_back(F("data-dir", kTrain, "the dataset's folder (Fashion-MNIST's IDX files, or the npy files)")
                  .text("DIR").applies("dataset", {"fashion-mnist", "npy"}).input()
                  .to(&RunSpec::data_dir).s);
  t.push_back(F("data-dir", kStep, "the folder of train_inputs.npy and train_labels.npy")
                  .text("DIR")
                  .required()
                  .input()
                  .to(&RunSpec::data_dir)
                  .s);
  t.push_back(
      F("init", kStep, "the starting weights (a PyTorch state_dict saved with safetensors)")
          .text("FILE")
          .required()
          .input()
          .to(&RunSpec::init)
          .s);
  t.push_back(F("out", kStep, "where to write loss, logits, gradients and updated weights (safetensors)")
                  .text("FILE").required().output().s);
  t.push_back(F("input", kTrain, "the sample shape of the synthetic images").int_list("C,H,W")
                  .applies("dataset", {"synthetic", "synthetic-seg"})
                  .to(+[](RunSpec& r, const std::string& v) { r.input = parse_int_list(v, "--input"); }).s);
  t.push_back(F("input", kMemory, "the sample shape (image models)").int_list("C,H,W")
                  .to(+[](RunSpec& r, const std::string& v) { r.input = parse_int_list(v, "--input"); }).s);
  t.push_back(F("seq-len", kMemory, "the sequence length (bert-*)").integer("T", 1)
                  .to(&RunSpec::seq_len).s);
  t.push_back(F("classes", kTrain, "the number of classes (npy: default the largest label + 1)").integer("K", 1)
                  .applies("dataset", {"synthetic", "synthetic-seg", "npy"}).models("classes").s);
  t.push_back(F("classes", {"summary", "estimate", "step"}, "the number of classes").integer("K", 1).models("classes")
                  .to(&RunSpec::num_classes).s);
  t.push_back(F("synthetic-size", kTrain, "samples in a synthetic training set").integer("N", 1).def("2048")
                  .applies("dataset", kSynthetic)
                  .to(&RunSpec::synthetic_size).s);
  t.push_back(F("no-shuffle", kTrain, "visit samples in file order every epoch (DataLoader(shuffle=False))").sw()
                  .to(+[](RunSpec& r, const std::string&) { r.shuffle = false; }).s);
  t.push_back(F("init", kTrain, "the starting weights (a PyTorch state_dict saved with safetensors)")
                  .text("FILE.safetensors").excludes("resume").input()
                  .to(&RunSpec::init).s);
  t.push_back(F("init-non-strict", kTrain, "load what matches --init, keep the model's own values for the rest")
                  .sw().needs("init")
                  .to(+[](RunSpec& r, const std::string&) { r.init_strict = false; }).s);
  t.push_back(F("seq-len", kTrain, "the longest sequence of synthetic-seq").integer("N", 3).def("32")
                  .applies("dataset", {"synthetic-seq"})
                  .to(&RunSpec::seq_len).s);
  t.push_back(F("seq-min-len", kTrain, "the shortest sequence of synthetic-seq (0: half of --seq-len, at least 3)")
                  .integer("N", 0)
                  .applies("dataset", {"synthetic-seq"}).models("padding")
                  .to(&RunSpec::seq_min_len).s);
  t.push_back(F("long-seq-prob", kTrain, "the chance of a rare very long sequence").number("P", 0, 1, false, false)
                  .needs("long-seq-len").applies("dataset", {"synthetic-seq"})
                  .to(&RunSpec::long_seq_prob).s);
  t.push_back(F("long-seq-len", kTrain, "the length of the rare very long sequences").integer("N", 1)
                  .needs("long-seq-prob").applies("dataset", {"synthetic-seq"})
                  .to(&RunSpec::long_seq_len).s);
}

void rows_run_length_flags(std::vector<FlagSpec>& t) {
  t.push_back(F("device", kTrain, "the (first) logical device").text("cpu|meta|cuda[:N]").def("cpu")
                  .to(+[](RunSpec& r, const std::string& v) { r.device = parse_device(v); }).s);
  t.push_back(F("device", kStep, "the device of the step")
                  .text("cpu|cuda[:N]")
                  .def("cpu")
                  .to(+[](RunSpec& r, const std::string& v) { r.device = parse_device(v); })
                  .s);
  t.push_back(F("batch", kTrain, "samples per micro-batch (per rank under ddp)").integer("B", 1).def("128")
                  .to(&RunSpec::batch).s);
  t.push_back(F("batch", kSummary, "samples per batch").integer("B", 1).def("1")
                  .to(&RunSpec::batch).s);
  t.push_back(F("batch", kEstimate, "samples per batch").integer("B", 1).required()
                  .to(&RunSpec::batch).s);
  t.push_back(F("epochs", kTrain, "passes over the training set").integer("E", 1).def("1").excludes("steps")
                  .to(&RunSpec::epochs).s);
  t.push_back(F("steps", kTrain, "optimizer steps, instead of epochs").integer("S", 1)
                  .to(&RunSpec::steps).s);
  t.push_back(F("accumulate", kTrain, "micro-batches per optimizer step (gradient accumulation)")
                  .integer("K", 1)
                  .def("1")
                  .to(&RunSpec::accumulate)
                  .s);
  t.push_back(F("optimizer", kTrain, "the optimizer (default: the model family's recipe)")
                  .choice({"sgd", "adam", "adamw"})
                  .to(&RunSpec::optimizer)
                  .s);
  t.push_back(F("optimizer", kEstimate, "the optimizer whose state is counted")
                  .choice({"sgd", "adam", "adamw"})
                  .def("sgd")
                  .to(&RunSpec::optimizer)
                  .s);
  t.push_back(F("momentum", kEstimate, "SGD momentum (0: plain SGD, no state)")
                  .number("X", 0, 1, false, true)
                  .def("0.9")
                  .applies("optimizer", {"sgd"})
                  .to(&RunSpec::momentum)
                  .s);
  t.push_back(F("lr", kTrain, "the learning rate (default: the recipe's)").number("X", 0, 1e6, true, false)
                  .to(&RunSpec::lr).s);
  t.push_back(F("lr", kStep, "the SGD learning rate").number("X", 0, 1e6, true, false).def("0.1").to(&RunSpec::lr).s);
  t.push_back(F("momentum", kTrain, "SGD momentum (default: the recipe's)").number("X", 0, 1, false, true)
                  .to(&RunSpec::momentum).s);
  t.push_back(F("weight-decay", kTrain, "weight decay (default: the recipe's)").number("X", 0, kInf, false, false)
                  .to(&RunSpec::weight_decay).s);
  t.push_back(F("nesterov", kTrain, "Nesterov momentum (torch.optim.SGD(nesterov=True))").sw()
                  .to(&RunSpec::nesterov).s);
  t.push_back(F("schedule", kTrain,
                "the lr schedule: constant, step:..., cosine:..., warmup-cosine[:...], lambda-warmup-cosine:...")
                  .text("SPEC")
                  .to(&RunSpec::schedule)
                  .s);
  t.push_back(F("lr-groups", kTrain,
                "parameter groups with their own lr: NAME_PREFIX=FACTOR,... (lr x FACTOR; the schedule scales each)")
                  .text("GROUPS")
                  .to(+[](RunSpec& r, const std::string& v) { r.lr_groups = parse_lr_groups(v); })
                  .s);
  t.push_back(F("tta", kTrain,
                "test-time augmentation: evaluate on the inputs and their mirror image, average the probabilities")
                  .choice({"none", "flip"})
                  .def("none")
                  .to(+[](RunSpec& r, const std::string& v) { r.tta_flip = v == "flip"; })
                  .s);
  t.push_back(F("ema", kTrain, "keep an exponential moving average of the weights, evaluated at the end")
                  .number("DECAY", 0, 1, false, true)
                  .to(&RunSpec::ema_decay).s);
  t.push_back(F("seed", kTrain, "the seed of initialisation, data order and dropout").integer("N", 0).def("0")
                  .to(&RunSpec::seed).s);
}

void rows_state_flags(std::vector<FlagSpec>& t) {
  t.push_back(F("device-memory", kTrain, "cap every device's allocator at SIZE (a smaller GPU, on any device)").size()
                  .to(&RunSpec::device_memory).s);
  t.push_back(
      F("device-memory", kEstimate, "the capacity to judge the peak against; also finds the largest batch that fits")
          .size()
          .to(&RunSpec::device_memory)
          .s);
  t.push_back(F("save", kTrain, "write checkpoints to DIR/step-N (rank 0)").text("DIR")
                  .to(&RunSpec::save_dir).s);
  t.push_back(F("save-every", kTrain, "steps between checkpoints (0: at the end only)").integer("S", 0).needs("save")
                  .to(&RunSpec::save_every).s);
  t.push_back(F("resume", kTrain, "continue from a checkpoint (DIR or DIR/step-N)").text("DIR")
                  .to(&RunSpec::resume_dir).s);
  t.push_back(F("on-nan", kTrain, "what a NaN/Inf loss does").choice({"stop", "continue"}).def("stop")
                  .to(+[](RunSpec& r, const std::string& v) { r.stop_on_nan = v == "stop"; }).s);
  t.push_back(F("on-oom", kTrain, "what an out-of-memory step does").choice({"raise", "skip", "split"}).def("raise")
                  .to(+[](RunSpec& r, const std::string& v) { r.on_oom = parse_on_oom(v); }).s);
  t.push_back(F("workers", kTrain, "DataLoader worker threads (0: load in the training thread)")
                  .integer("N", 0, 64)
                  .def("1")
                  .to(&RunSpec::workers)
                  .s);
  t.push_back(F("pin-memory", kTrain, "stage batches in pinned host memory").sw()
                  .to(&RunSpec::pin_memory).s);
  t.push_back(F("cuda-graphs", kTrain, "capture the step after 3 warm-up steps, then replay it (meta: its memory)")
                  .sw().applies("parallel", {"none"}).applies("devices", {"1"}).applies("on-oom", {"raise"})
                  .to(&RunSpec::cuda_graphs).s);
  t.push_back(F("cuda-graphs", kEstimate, "also capture the step as --cuda-graphs training does: its pool counts").sw()
                  .to(&RunSpec::cuda_graphs).s);
  t.push_back(F("checkpoint", {"train", "summary", "estimate"}, "activation checkpointing")
                  .text("none|all|every:K|sqrt|selective[:KINDS]|budget:SIZE").def("none").s);
}

void rows_precision_flags(std::vector<FlagSpec>& t) {
  const Commands amp_cmds = {"train", "summary", "estimate"}, half_cmds = {"train", "estimate"};
  t.push_back(F("amp", amp_cmds, "autocast to float16 or bfloat16").choice({"off", "fp16", "bf16"}).def("off")
                  .to(+[](RunSpec& r, const std::string& v) { r.amp = parse_amp(v); }).s);
  t.push_back(F("half", half_cmds, "model.half(): float16 weights, BatchNorm float32").sw().applies("amp", {"off"})
                  .to(&RunSpec::half).s);
  t.push_back(F("master-weights", half_cmds, "with --half: float32 master weights for the update").sw().needs("half")
                  .to(&RunSpec::master_weights).s);
  t.push_back(F("channels-last", half_cmds, "torch.channels_last: NHWC convolutions, BatchNorm, pooling (image models)")
                  .sw()
                  .to(&RunSpec::channels_last).s);
  t.push_back(F("loss-scale", half_cmds, "loss scaling (auto: dynamic for fp16 and --master-weights)")
                  .text("auto|dynamic|static:S|none").def("auto").s);
}

void rows_output_flags(std::vector<FlagSpec>& t) {
  t.push_back(F("eval-batches", kTrain, "test batches per evaluation (-1: the whole test set)")
                  .integer("N", -1)
                  .def("-1")
                  .to(&RunSpec::eval_batches)
                  .s);
  t.push_back(F("log-every", kTrain, "steps between progress lines (0: none)").integer("N", 0).def("50")
                  .to(&RunSpec::log_every).s);
  t.push_back(F("quiet", kTrain, "no progress lines").sw()
                  .to(&RunSpec::quiet).s);
  t.push_back(F("json", {"train", "summary", "estimate", "plan", "amp-policy", "trick", "allreduce-bench"},
                "write the results as JSON (atomically)").text("FILE").output().s);
  t.push_back(F("memory-snapshot", {"train", "estimate"}, "the allocator's history for pytorch.org/memory_viz")
                  .text("FILE")
                  .output()
                  .s);
  t.push_back(F("chrome-trace", {"train", "estimate"}, "ops and memory for ui.perfetto.dev").text("FILE").output().s);
  t.push_back(F("by-module", kEstimate,
                "who holds the peak: its bytes by module and kind (parameters, activations, ...)").sw().s);
}

void rows_parallel_flags(std::vector<FlagSpec>& t) {
  t.push_back(F("parallel", kTrain, "DataParallel, balanced DataParallel, DistributedDataParallel, or fsdp: ddp with "
                "--zero 3 (FSDP's FULL_SHARD)")
                  .choice({"none", "dp", "bdp", "ddp", "fsdp"}).def("none")
                  .to(&set_parallel_mode).s);
  t.push_back(F("devices", kTrain, "logical devices (ranks) from --device on").integer("N", 1, 1024).def("1")
                  .to(&RunSpec::devices).s);
  t.push_back(F("gpu0-bsz", kTrain, "device 0's samples per step under bdp")
                  .integer("B0", 0)
                  .applies("parallel", {"bdp"})
                  .to(&RunSpec::gpu0_bsz)
                  .s);
  t.push_back(F("bucket-cap", kTrain, "DDP's gradient bucket size (PyTorch: 25MiB)").size()
                  .applies("parallel", {"ddp", "fsdp"})
                  .to(&RunSpec::bucket_cap).s);
  t.push_back(F("timeout", kTrain, "seconds the ddp rendezvous and each collective may wait (one process per rank)")
                  .number("SECONDS", 0, 1e6, true, false).def("300").applies("parallel", {"ddp", "fsdp"})
                  .to(&RunSpec::timeout_s).s);
  t.push_back(F("sync-bn", kTrain, "SyncBatchNorm across the ranks").sw().applies("parallel", {"ddp", "fsdp"})
                  .to(&RunSpec::sync_bn).s);
  t.push_back(F("parallel", kEstimate, "ddp: one rank of DistributedDataParallel, its gradient buckets counted; "
                "dp | bdp: every device of (balanced) DataParallel; fsdp: ddp with --zero 3")
                  .choice({"none", "dp", "bdp", "ddp", "fsdp"}).def("none")
                  .to(&set_parallel_mode).s);
  t.push_back(F("devices", kEstimate, "the ranks under ddp, the devices under dp | bdp (with --gpu: the "
                "communication time on the card's link)")
                  .integer("N", 1, 1024).def("1").applies("parallel", {"dp", "bdp", "ddp", "fsdp"})
                  .to(&RunSpec::devices).s);
  t.push_back(F("gpu0-bsz", kEstimate, "device 0's samples of the batch under bdp").integer("B0", 0)
                  .applies("parallel", {"bdp"}).to(&RunSpec::gpu0_bsz).s);
  t.push_back(F("bucket-cap", kEstimate, "DDP's gradient bucket size (PyTorch: 25MiB)").size()
                  .applies("parallel", {"ddp", "fsdp"}).to(&RunSpec::bucket_cap).s);
  for (const Commands& cmds : {kTrain, kEstimate})
    t.push_back(F("zero", cmds, "ZeRO: shard the optimizer state (1), the gradients too (2), the parameters too (3)")
                    .choice({"1", "2", "3"}).applies("parallel", {"ddp"})
                    .to(+[](RunSpec& r, const std::string& v) { r.zero_stage = std::stoi(v); }).s);
  for (const Commands& cmds : {kTrain, kEstimate})
    t.push_back(F("offload", cmds, "ZeRO-Offload: the optimizer's shards and state (optimizer), and with --zero 3 the "
                  "parameters' shards (params), on the host")
                    .choice({"optimizer", "params"}).applies("parallel", {"ddp", "fsdp"})
                    .to(+[](RunSpec& r, const std::string& v) { r.offload = parse_zero_offload(v); }).s);
  t.push_back(F("backend", kTrain, "the ddp communicator (gloo, mpi, nccl: one process per rank)")
                  .choice({"local", "gloo", "mpi", "nccl"}).applies("parallel", {"ddp", "fsdp"})
                  .to(&RunSpec::backend).s);
}

void rows_arch_flags(std::vector<FlagSpec>& t) {
  t.push_back(F("hidden", kModel, "bert-*: hidden size").integer("N", 1, 65536).models("bert-shape").s);
  t.push_back(
      F("layers", kModel, "bert-*: encoder layers (GPT-3 has 96)").integer("N", 1, 1024).models("bert-shape").s);
  t.push_back(F("heads", kModel, "bert-*: attention heads").integer("N", 1, 1024).models("bert-shape").s);
  t.push_back(F("max-positions", kModel, "bert-*: position-embedding table size").integer("N", 1, 1 << 20)
                  .models("bert-shape").s);
  t.push_back(
      F("dropout", kModel, "bert-*, vgg*: dropout probability").number("P", 0, 1, false, true).models("dropout").s);
  t.push_back(
      F("base-width", kModel, "unet*: channels of the first level").integer("N", 1, 65536).models("unet-shape").s);
  t.push_back(F("depth", kModel, "unet*: levels").integer("N", 1, 16).models("unet-shape").s);
  t.push_back(F("norm", kModel, "resnet*: the normalisation layer").choice({"bn", "gn", "none"}).models("norm").s);
  t.push_back(F("fuse-relu", kModel, "resnet*, vgg*: each ReLU applied by the op before it (same results)")
                  .choice({"on", "off"}).models("fuse-relu").s);
  t.push_back(F("attention", kModel, "bert-*: eager (bmm, softmax, dropout, bmm) or fused (FlashAttention-style)")
                  .choice({"eager", "fused"}).models("attention").s);
  t.push_back(F("dtype", kStep, "the dtype of the step").choice({"float32", "float64"}).def("float32").s);
}

void rows_backend_option_flags(std::vector<FlagSpec>& t) {
  t.push_back(F("allow-tf32", kTrain, "TF32 for matmuls and/or cuDNN convolutions (PyTorch's default: cudnn)")
                  .choice({"none", "cudnn", "all"}).applies("device", {"cuda"}).s);
  t.push_back(F("cudnn-benchmark", kTrain, "cuDNN autotuning (torch.backends.cudnn.benchmark)").choice({"on", "off"})
                  .applies("device", {"cuda"}).s);
  t.push_back(
      F("cudnn-deterministic", kTrain, "deterministic cuDNN algorithms only (torch.backends.cudnn.deterministic)")
          .choice({"on", "off"})
          .applies("device", {"cuda"})
          .s);
  t.push_back(F("cudnn-workspace-limit", kTrain, "the largest cuDNN workspace an algorithm may use").size()
                  .applies("device", {"cuda"}).s);
}

void rows_bench_flags(std::vector<FlagSpec>& t) {
  t.push_back(F("backend", kBench, "the communicator").choice({"local", "gloo", "mpi", "nccl"}).def("local").s);
  t.push_back(F("algo", kBench, "ring or parameter server (the local backend's)").choice({"ring", "ps"}).def("ring")
                  .applies("backend", {"local"}).s);
  t.push_back(F("ranks", kBench, "ranks (threads for local; processes otherwise)").integer("N", 1, 1024).def("2").s);
  t.push_back(F("device", kBench, "where the buffers live").choice({"cpu", "meta", "cuda"}).def("cpu").s);
  t.push_back(F("rank", kBench, "this process's rank (else torchrun / mpirun / Slurm variables)")
                  .integer("R", 0, kMaxWorldSize - 1)   // bounded: never narrowed to another rank
                  .needs("world-size").applies("backend", kProcessBackends).s);
  t.push_back(F("world-size", kBench, "the number of processes")
                  .integer("N", 1, kMaxWorldSize)
                  .needs("rank")
                  .applies("backend", kProcessBackends)
                  .s);
  t.push_back(F("master-addr", kBench, "rank 0's host").text("HOST").applies("backend", kProcessBackends).s);
  t.push_back(F("master-port", kBench, "rank 0's port").integer("P", 1, 65535).applies("backend", kProcessBackends).s);
  t.push_back(F("min-bytes", kBench, "the smallest message").size().def("8").s);
  t.push_back(F("max-bytes", kBench, "the largest message (at most 4GiB)").size(4.0 * (1ull << 30)).def("64M").s);
  t.push_back(F("step-factor", kBench, "the ratio between message sizes").integer("F", 2).def("2").s);
  t.push_back(F("collective", kBench, "nccl-tests' all_reduce_perf, reduce_scatter_perf or all_gather_perf")
                  .choice({"all_reduce", "reduce_scatter", "all_gather"}).def("all_reduce").s);
  t.push_back(F("op", kBench, "the reduction").choice({"sum", "avg", "max"}).def("sum").s);
  t.push_back(F("dtype", kBench, "the element type (nccl-tests' names)")
                  .choice({"float", "double", "half", "bfloat16", "int64"}).def("float").s);
  t.push_back(F("iters", kBench, "timed iterations per size").integer("N", 1).def("20").s);
  t.push_back(F("warmup", kBench, "untimed iterations per size").integer("N", 0).def("5").s);
  t.push_back(F("timeout", kBench, "seconds the rendezvous and each collective may wait")
                  .number("SECONDS", 0, 1e6, true, false)
                  .def("300")
                  .s);
}

void rows_plan_flags(std::vector<FlagSpec>& t) {
  const Commands kPlan = {"plan"};
  std::vector<std::string> gpus;
  for (const GpuSpec& g : gpu_table()) gpus.push_back(g.name);
  t.push_back(F("model", kPlan, "the model (`oomlab models` lists the zoo; graph:FILE an import)").text("M").required()
                  .input().to(&RunSpec::model).s);
  t.push_back(F("gpu", kPlan, "the card (its memory and dense peaks; docs/cli.md lists them)").choice(gpus)
                  .excludes("device-memory").s);
  t.push_back(F("device-memory", kPlan, "a card of this capacity instead (peaks: --gpu's, or none)").size()
                  .excludes("gpu").s);
  t.push_back(F("gpus", kPlan, "cards, one DDP rank each").integer("N", 1, 1024).def("1").s);
  // 2^40 samples: far past any batch trained, and its divisors (the micro-batches) are quick to list
  t.push_back(F("global-batch", kPlan, "samples per optimizer step over all cards (accumulation searched)")
                  .integer("B", 1, 0x1p40).excludes("batch").s);
  t.push_back(F("batch", kPlan, "samples per card per step, no accumulation").integer("B", 1, 0x1p40)
                  .excludes("global-batch").s);
  t.push_back(F("seq-len", kPlan, "the sequence length (token models)").integer("T", 1).to(&RunSpec::seq_len).s);
  t.push_back(F("input", kPlan, "the sample shape (image models)").int_list("C,H,W")
                  .to(+[](RunSpec& r, const std::string& v) { r.input = parse_int_list(v, "--input"); }).s);
  t.push_back(F("optimizer", kPlan, "the optimizer whose state counts").choice({"sgd", "adam", "adamw"}).def("adamw")
                  .to(&RunSpec::optimizer).s);
  t.push_back(F("reserve", kPlan, "memory kept free for the CUDA context and library workspaces").size().def("1GiB").s);
  t.push_back(F("verify", kPlan, "train the recommendation 6 steps on this device: measured vs predicted")
                  .text("cpu|cuda[:N]").s);
  t.push_back(F("gpu", kEstimate, "also predict the step's time on this card (the planner's time model)")
                  .choice(gpus).s);
  t.push_back(F("allow-tf32", kEstimate, "with --gpu: float32 GEMMs and/or convolutions on TF32 (default cudnn)")
                  .choice({"none", "cudnn", "all"}).needs("gpu").s);
}

void rows_other_flags(std::vector<FlagSpec>& t) {
  t.push_back(F("name", {"trick"}, "the trick (experiments/measure/tricks.h)").choice(trick_names()).required().s);
  t.push_back(F("batch", {"trick"}, "samples per batch").integer("B", 1).def("64").s);
  t.push_back(F("profile", kRun, "quick (minutes), full (the committed results) or gpu (the GPU claims' points)")
                  .choice({"quick", "full", "gpu"}).def("quick").s);
  t.push_back(F("device", kRun, "run every point on this device (default: the spec's; cuda for --profile gpu)")
                  .text("cpu|meta|cuda[:N]").s);
  t.push_back(F("out", kRun, "the results file (default: reports/results/NAME.json)").text("FILE").s);
  t.push_back(F("fresh", kRun, "start over instead of resuming OUT.partial").sw().s);
  t.push_back(F("point-timeout", kRun, "seconds a point may run (default: the spec's)")
                  .number("SECONDS", 0, 1e9, true, false).s);
}

std::vector<FlagSpec> build_table() {
  std::vector<FlagSpec> t;
  for (auto add : {rows_model_flags, rows_run_length_flags, rows_state_flags, rows_precision_flags,
                   rows_output_flags, rows_parallel_flags, rows_arch_flags, rows_backend_option_flags,
                   rows_bench_flags, rows_plan_flags, rows_other_flags})
    add(t);
  return t;
}
}  // namespace

const std::vector<FlagSpec>& flag_table() {
  static const std::vector<FlagSpec> table = build_table();
  return table;
}

const FlagSpec* find_flag(const std::string& command, const std::string& name) {
  for (const FlagSpec& f : flag_table())
    if (f.name == name && std::find(f.commands.begin(), f.commands.end(), command) != f.commands.end()) return &f;
  return nullptr;
}

std::vector<const FlagSpec*> flags_of(const std::string& command) {
  std::vector<const FlagSpec*> out;
  for (const FlagSpec& f : flag_table())
    if (std::find(f.commands.begin(), f.commands.end(), command) != f.commands.end()) out.push_back(&f);
  return out;
}

}  // namespace oomlab
