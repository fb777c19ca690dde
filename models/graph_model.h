// graph_model.h — a trainable oomlab module built from a model graph (engine/io/model_graph.h,
// written by scripts/export_model.py; issue 32). The op set (graph_nodes.cpp):
//  * torchvision CNNs exported in eval mode: aten.convolution.default (not transposed),
//    aten._native_batch_norm_legit_no_training.default (runs as batch_norm with the module's
//    mode: batch statistics and running-stat updates when training, as torch.nn.BatchNorm2d;
//    num_batches_tracked counts the training forwards), aten.relu.default, aten.add.Tensor
//    (alpha 1, equal shapes), aten.max_pool2d_with_indices.default (dilation 1, floor mode;
//    its indices are not produced), aten.mean.dim over H and W and
//    aten._adaptive_avg_pool2d.default, aten.view / _unsafe_view / reshape, aten.permute /
//    aten.t (a 2-D weight's transpose feeding aten.addmm.default runs as linear; any other
//    permute is a view), getitem;
//  * transformer encoders (Hugging Face's BertForSequenceClassification): aten.embedding,
//    aten.native_layer_norm (last dim), aten.gelu (erf or tanh), aten.tanh, aten.select.int,
//    aten.unsqueeze, aten.clone, aten.scaled_dot_product_attention (the exporter keeps it
//    whole; it runs as oomlab's attention, fused with --attention fused; no dropout, scale
//    1/sqrt(head dim), a mask only if constant and all-true or causal, or built from the
//    attention-mask input as a key padding mask: graph_has_mask_input);
//  * integer constants folded on the host when built (graph_constants.cpp): aten.arange,
//    slice, expand, gather, unsqueeze, view, ge.Scalar and add over integer buffers whose
//    values the file holds (position and token-type ids) and over each other.
// The eval export has no dropout: an imported model trains without it.
// Contracts:
//  * Parameters and buffers keep their state_dict names (a module per dotted path, typed by
//    the nodes' module_type), so --init and state_dict round trips use PyTorch's keys.
//  * Each node's allocations are labelled with its module path ("layer1.0.conv1/fwd").
//  * Memory as torchvision's modules with ReLU(inplace=True): a relu or add whose first
//    input is last used there and comes from a convolution, a batch norm or an add runs in
//    place (relu_, add_); every other value is freed after its last use, as eager PyTorch
//    frees it, except that a value a module call takes from outside lives until the call's
//    last node (the caller's frame holds it: `x = self.layer1(x)`, a block's identity).
//    torchvision's resnet50 export gives the zoo model's training peak and per-layer saved
//    bytes to the byte (tests/test_graph_import_zoo.cpp).
//  * A view of a value derived from the input follows the batch the model runs with: its
//    literal dim 0, a multiple of the example's batch ([B*T, H]), is rescaled (the export
//    fixes the batch; oomlab varies it). Constant ids with batch 1 (positions) are repeated
//    per sample before their embedding, as the zoo's BERT builds them.
//  * Weights: conv / linear weights U(-1/sqrt(fan_in), 1/sqrt(fan_in)), other weights 1,
//    biases 0, running_var 1, integer buffers with values in the file those values, other
//    buffers 0 (a fresh model; --init loads exported ones).
//  * graph_missing_ops lists every node whose op is outside this set ("op (node 'n',
//    module 'm' (Type))"); build_graph_model refuses such a graph with a NotImplementedError
//    naming the modules they come from (an nn.LSTM) and them all, and an op used in an
//    unsupported way (a transposed convolution, an add with alpha, a permute not feeding
//    addmm) or given values out of range fails naming the node and its module.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "engine/io/model_graph.h"
#include "engine/nn/module.h"
#include "models/model_zoo.h"

namespace oomlab {

std::vector<std::string> graph_missing_ops(const ModelGraph& g);
// A second input beside int64 token ids [B, T] of their shape and dtype: Hugging Face's
// attention_mask (export_model.py --attention-mask). The importer derives it from the ids (id 0
// = padding, as the zoo's BERT) and runs the mask the graph builds from it as a key padding
// mask of its attention nodes (with the causal one where the graph also has it); any other
// use of that input is a NotImplementedError naming the node.
bool graph_has_mask_input(const ModelGraph& g);
// `--model graph:FILE`: is `name` such a model, and its graph (read once per path, then kept).
bool is_graph_model(const std::string& name);
const ModelGraph& graph_of_model(const std::string& name);
// Drops the graphs read so far (a process that rewrites a graph file between runs: the fuzz
// targets); a reference graph_of_model returned dangles afterwards.
void forget_graph_models();
// The tied parameters the export wrote once ("exporter": {"tied": {other name: graph name}}),
// for loading a PyTorch state_dict that has both names (load_into's aliases); {} for a zoo model.
std::map<std::string, std::string> graph_tied_names(const std::string& name);
// The model config a graph implies: its example input's channels and size (NCHW float) or
// sequence length (int64 [B, T]), and the classes of its [B, K] output.
ModelConfig graph_model_config(const std::string& name);
// A token graph's shape in the zoo BERT's terms, for the CLI's checks and the memory formula:
// vocab_size and hidden from the embedding of the input ids, max_positions from the position
// embedding (else seq_len), heads and layers from the scaled_dot_product_attention nodes.
BertShape graph_token_shape(const std::string& name);
// cfg: device and dtype of the parameters, seed of their initialisation.
nn::ModulePtr build_graph_model(const ModelGraph& g, const ModelConfig& cfg);

}  // namespace oomlab
