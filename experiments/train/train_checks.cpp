// train_checks.cpp — check_train_config (train_command.h): every rule of `oomlab train`
// that needs more than the flag table (the model, the recipe, the files), checked before any
// work, each once and worded with the flags.
#include "experiments/train/train_command.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "engine/core/checked_math.h"
#include "engine/data/idx_reader.h"
#include "engine/io/atomic_file.h"
#include "engine/optim/lr_schedule.h"
#include "engine/train/trainer.h"
#include "experiments/plan/memory_report.h"
#include "experiments/train/parallel_train.h"
#include "experiments/train/recipes.h"
#include "models/graph_model.h"
#include "models/model_table.h"
#include "models/model_zoo.h"

namespace oomlab {

namespace {

// What each dataset feeds: fashion-mnist/synthetic image classification, synthetic-seq
// token classification, synthetic-seg image segmentation. A model of another kind is a
// usage error named up front (not a shape error deep in the first forward).
void check_model_fits_dataset(const std::string& model, const std::string& dataset) {
  const InputKind in = model_input_kind(model);   // also rejects unknown models
  const TaskKind task = model_task_kind(model);
  if (dataset == "npy") return;   // its kind is known once loaded: check_model_fits_npy
  const char* want = nullptr;
  if (in == InputKind::tokens) want = "synthetic-seq";
  else if (task == TaskKind::segmentation) want = "synthetic-seg";
  // Unknown dataset names pass here and are reported by make_datasets.
  const bool ok = want ? dataset == want : dataset != "synthetic-seq" && dataset != "synthetic-seg";
  OOMLAB_CHECK(ok, "--model ", model, " cannot train on --dataset ", dataset, ": ", model, " takes ",
               in == InputKind::tokens ? "token ids" : "images", " for ",
               task == TaskKind::segmentation ? "segmentation" : "classification", "; use --dataset ",
               want ? want : "fashion-mnist or synthetic");
}

// --cuda-graphs: a replay repeats the captured step's host-side values but the optimizer's
// constants and dropout's offset (engine/train/graphed_step.h), so nothing else may change
// between steps. The table rules out --parallel, --devices and --on-oom; here
// the rest (the device and the data: train only).
void check_cuda_graphs(const RunSpec& c) {
  OOMLAB_CHECK(c.device.type == DeviceType::cuda || c.device.is_meta(), "--cuda-graphs needs --device cuda[:N] ",
               "(or meta, to count the graph's memory); this run has --device ", c.device.str());
  if (model_input_kind(c.model) != InputKind::tokens) return;
  const int64_t shortest = c.seq_min_len != 0 ? c.seq_min_len : c.seq_len / 2;
  OOMLAB_CHECK(c.dataset != "synthetic-seq" || (shortest == c.seq_len && c.long_seq_prob == 0), "--cuda-graphs ",
               "replays one batch shape, and synthetic-seq batches are padded to their longest sample: give ",
               "--seq-min-len ", c.seq_len, " (every sequence --seq-len long) and no --long-seq-prob");
}
}  // namespace

void check_train_config(const RunSpec& c) {
  check_model_fits_dataset(c.model, c.dataset);
  c.arch.check_fits(c.model);
  if (model_input_kind(c.model) == InputKind::tokens && c.dataset != "npy") {   // npy: the files' length (train)
    const int64_t exported = is_graph_model(c.model) ? graph_token_shape(c.model).seq_len : 0;
    OOMLAB_CHECK(!exported || (c.seq_len == exported && c.long_seq_prob == 0), c.model, " was exported for ",
                 exported, "-token sequences: train it with --seq-len ", exported,
                 " and without --long-seq-prob, or export it again with --input-shape N,T");
    check_seq_fits(c.model, c.arch, c.seq_len, "--seq-len");
    if (c.long_seq_prob > 0) check_seq_fits(c.model, c.arch, c.long_seq_len, "--long-seq-len");
  }
  // The flags' ranges and choices are the table's; here the rules that need the recipe.
  const Recipe r = resolve_recipe(c.model, {c.optimizer, c.schedule, c.lr, c.momentum, c.weight_decay});
  OOMLAB_CHECK(!c.momentum || r.optimizer == "sgd", "--momentum has no effect with --optimizer ", r.optimizer,
               " (Adam's betas are fixed at 0.9, 0.999)");
  OOMLAB_CHECK(!c.nesterov || r.optimizer == "sgd", "--nesterov applies to --optimizer sgd only (this run uses ",
               r.optimizer, ")");
  OOMLAB_CHECK(!c.nesterov || r.momentum > 0, "--nesterov needs a momentum > 0 (as torch.optim.SGD)");
  with_flag_name("schedule", [&] { return parse_lr_schedule(resolve_schedule(r.schedule, 100)); });   // named now
  if (c.cuda_graphs) check_cuda_graphs(c);
  check_run_model_techniques(c);
  if (c.tta_flip && !model_entry(c.model).has_technique("tta-flip"))
    throw ValueError(
        model_input_kind(c.model) != InputKind::image
            ? str_cat("--tta flip applies to image classification models (", c.model, " does not take images)")
            : str_cat("--tta flip applies to classification models (", c.model,
                      " segments: its mirrored "
                      "output would need flipping back)"));
  if (c.dataset != "npy") {   // npy: checked once the files are loaded (train())
    int64_t train_size = c.synthetic_size;
    if (c.dataset == "fashion-mnist") {
      with_flag_name("data-dir", [&] { return find_fashion_mnist_dir(c.data_dir); });
      train_size = 60000;
    }
    check_batch_fits(c.batch, c.accumulate, c.dataset, train_size);
  } else {
    std::error_code ec;   // a path the OS refuses (too long, ...) is "not a directory", never an exception
    OOMLAB_CHECK_T(IoError, std::filesystem::is_directory(c.data_dir, ec), "--data-dir ", c.data_dir,
                   " is not a directory");
  }
  std::error_code ec;   // error_code overloads: an unusable path is reported, never thrown as filesystem_error
  OOMLAB_CHECK_T(IoError, c.init.empty() || std::filesystem::is_regular_file(c.init, ec), "--init: ", c.init,
                 " is not a file");
  if (!c.input.empty()) {
    OOMLAB_CHECK_T(ShapeError, c.input.size() == 3, "--input must be C,H,W (got ", shape_str(c.input), ")");
    checked_numel(c.input, "--input");
  }
  if (!c.save_dir.empty()) check_output_dir(c.save_dir, "--save");
  check_parallel_config(c);
  OOMLAB_CHECK_T(IoError, c.resume_dir.empty() || std::filesystem::exists(c.resume_dir, ec), "--resume: ", c.resume_dir,
                 " does not exist");
}

}  // namespace oomlab
