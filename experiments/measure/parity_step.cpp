// parity_step.cpp — `oomlab step`: one plain training step on a batch the user supplies,
// with every number written out, so oomlab's arithmetic can be checked against another
// framework's on the same weights and inputs (scripts/torch_parity.py does it for PyTorch).
// The step: the whole train split of `--dataset npy --data-dir DIR` is one batch (rows in
// file order) -> the zoo model (--dtype float32|float64, weights from --init, train mode)
// -> forward -> the task loss of train_step.h (cross-entropy, mean over samples or pixels;
// a causal LM's [B, T, V] logits: over next tokens, as Hugging Face's labels=input_ids)
// -> backward -> SGD with --lr, no momentum, no weight decay: PyTorch's
// `opt.zero_grad(); loss = F.cross_entropy(model(x), y); loss.backward(); opt.step()`.
// Output (--out FILE.safetensors, written atomically): "loss" (scalar), "logits",
// "grad/<name>" per parameter, "after/<key>" per state_dict entry after the update (BN's
// running statistics included).
#include "experiments/measure/parity_step.h"

#include <cmath>

#include "engine/autograd/grad_mode.h"
#include "engine/core/dispatch.h"
#include "engine/core/error.h"
#include "engine/data/dataloader.h"
#include "engine/data/npy_dataset.h"
#include "engine/io/atomic_file.h"
#include "engine/io/safetensors.h"
#include "engine/optim/optimizer.h"
#include "engine/train/train_step.h"
#include "models/graph_model.h"
#include "models/model_zoo.h"

namespace oomlab {

ParityStepDone run_parity_step(const RunSpec& r, const std::string& out, DType dtype) {
  const std::string& model_name = r.model;
  const std::string& init = r.init;
  const std::string dtype_flag = dtype == DType::f64 ? "float64" : "float32";
  const double lr = r.lr.value_or(0.1);
  const Device device = r.device;
  const ArchOverrides& arch = r.arch;
  OOMLAB_CHECK_T(DeviceError, !device.is_meta(), "--device meta has no numbers to compare; use cpu or cuda");
  check_output_file(out, "--out");
  // the labels' classes: --classes, an imported classifier's output classes, else the largest label + 1
  const int64_t classes = r.num_classes > 0 ? r.num_classes
                          : is_graph_model(model_name) ? graph_model_config(model_name).num_classes : 0;

  std::shared_ptr<Dataset> data = load_npy_dataset(r.data_dir, "train", classes);
  const bool tokens = model_input_kind(model_name) == InputKind::tokens;
  OOMLAB_CHECK(tokens == data->is_tokens(), "--model ", model_name, " takes ", tokens ? "token ids" : "images", ", ",
               data->name(), " holds ", data->is_tokens() ? "token ids" : "images");
  ensure_kernels_registered();

  ModelConfig mc;
  mc.num_classes = data->num_classes();
  arch.apply(mc);
  const Shape in = data->sample_shape();
  if (tokens) {
    mc.seq_len = in[0];
    check_seq_fits(model_name, arch, in[0], "the token files' length");
    data->check_token_ids(bert_shape(model_name, mc).vocab_size);
  } else {
    mc.in_channels = in[0]; mc.height = in[1]; mc.width = in[2];
  }
  mc.device = device;
  mc.dtype = dtype;
  nn::ModulePtr model = build_model(model_name, mc);
  load_into(init, model->state_dict(), /*strict=*/true, graph_tied_names(model_name));
  model->train();

  DataLoader loader(*data, data->size(), /*shuffle=*/false, /*drop_last=*/false, /*seed=*/0, /*workers=*/0);
  HostBatch batch;
  OOMLAB_CHECK_T(InternalError, loader.next(batch), "the npy loader returned no batch");
  Tensor x = batch_input_to_device(batch, device);
  if (!tokens && dtype != DType::f32) x = x.to(dtype);
  const Tensor y = batch_target_to_device(batch, device);

  ParamGroup group;
  group.params = model->named_parameters();
  group.lr = lr;
  std::unique_ptr<Optimizer> opt = make_optimizer("sgd", {group});
  opt->zero_grad(true);
  const Tensor logits = (*model)(x);
  // a causal language model (a graph whose token input gives [B, T, V] logits): next-token targets
  const Tensor loss = task_loss(logits, logits.dim() == 3 && tokens && y.dim() == 1 ? next_token_targets(x) : y);
  const double loss_value = loss.item();
  OOMLAB_CHECK(std::isfinite(loss_value), "step: the loss is ",
               std::isnan(loss_value) ? "NaN"
               : loss_value > 0       ? "+Inf"
                                      : "-Inf",
               ": nothing is written to ", out, "; are the weights in ", init, " finite?");
  loss.backward();

  NamedTensors outputs = {{"loss", loss}, {"logits", logits.detach()}};
  for (const auto& [name, p] : model->named_parameters()) {
    OOMLAB_CHECK_T(InternalError, p.grad().defined(), "parameter ", name, " got no gradient");
    outputs.emplace_back("grad/" + name, p.grad().clone());
  }
  opt->step();
  for (const auto& [name, t] : model->state_dict()) outputs.emplace_back("after/" + name, t);
  write_safetensors(out, outputs, {{"model", model_name}, {"dtype", dtype_flag}, {"lr", str_cat(lr)}});
  return {int64_t(batch.n), loss_value};
}

}  // namespace oomlab
