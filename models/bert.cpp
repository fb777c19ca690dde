// bert.cpp — BERT encoder for sequence classification (HF BertForSequenceClassification):
// bert-tiny (2 layers, hidden 128, 2 heads), bert-mini (4/256/4), bert-small (4/512/8),
// bert-base (12/768/12); vocab 30522, 512 positions, 2 token types, intermediate
// 4*hidden, LayerNorm eps 1e-12, erf GELU, dropout cfg.dropout on the embeddings, the
// attention probabilities, each sublayer output and before the classifier. The attention
// core (QK^T, masked softmax, probability dropout, PV) is the parameterless leaf
// bert.encoder.layer.N.attention.self.core (nn::DotProductAttention), so `oomlab summary`
// shows its saved bytes per layer; it adds no state_dict keys.
// Module names = HF state_dict keys: bert.embeddings.*, bert.encoder.layer.N.*,
// bert.pooler.dense, classifier — so the `bert.` part counts exactly HF BertModel's
// parameters (bert-base: 109,482,240; bert_parameter_count() gives the formula).
// Forward: ids int64 [B, T] (T <= max_positions); key padding mask = (id == 0), token
// types 0, positions 0..T-1 (built on the host, copied to the device; meta: allocations
// only); logits [B, num_classes] = classifier(dropout(tanh(pooler.dense(h[:, 0])))).
// Init: HF's, N(0, 0.02) for Linear/Embedding weights (padding row 0), biases 0,
// LayerNorm 1/0, from Generator{cfg.seed} in module pre-order; nothing on meta.
#include <cmath>

#include "engine/autograd/grad_mode.h"
#include "engine/core/error.h"
#include "engine/core/rng.h"
#include "engine/nn/transformer_layers.h"
#include "engine/ops/dropout.h"
#include "engine/ops/embedding.h"
#include "engine/ops/elementwise.h"
#include "models/graph_model.h"
#include "models/model_zoo.h"

namespace oomlab {

BertShape bert_shape(const std::string& name, const ModelConfig& cfg) {
  if (is_graph_model(name)) return graph_token_shape(name);   // the export's sizes; overrides do not apply
  BertShape s;
  if (name == "bert-tiny") { s.layers = 2; s.hidden = 128; s.heads = 2; }
  else if (name == "bert-mini") { s.layers = 4; s.hidden = 256; s.heads = 4; }
  else if (name == "bert-small") { s.layers = 4; s.hidden = 512; s.heads = 8; }
  else if (name == "bert-base") { s.layers = 12; s.hidden = 768; s.heads = 12;
  } else
    throw ValueError(str_cat("bert: '", name, "' is not a BERT model (bert-tiny, bert-mini, bert-small, bert-base)"));
  if (cfg.hidden > 0) s.hidden = cfg.hidden;
  if (cfg.layers > 0) s.layers = cfg.layers;
  if (cfg.heads > 0) s.heads = cfg.heads;
  if (cfg.vocab_size > 0) s.vocab_size = cfg.vocab_size;
  if (cfg.max_positions > 0) s.max_positions = cfg.max_positions;
  if (cfg.seq_len > 0) s.seq_len = cfg.seq_len;
  s.intermediate = 4 * s.hidden;
  OOMLAB_CHECK_T(ValueError, cfg.hidden >= 0 && cfg.layers >= 0 && cfg.heads >= 0 && cfg.vocab_size >= 0 &&
                                 cfg.max_positions >= 0 && cfg.seq_len >= 0,
                 name, ": hidden/layers/heads/vocab_size/max_positions/seq_len must be >= 0 (0 = preset)");
  OOMLAB_CHECK_T(ValueError, s.hidden % s.heads == 0, name, ": hidden size ", s.hidden,
                 " is not divisible by the number of attention heads ", s.heads);
  OOMLAB_CHECK_T(ValueError, s.seq_len <= s.max_positions, name, ": seq_len ", s.seq_len,
                 " exceeds max_positions ", s.max_positions, " (the position-embedding table)");
  OOMLAB_CHECK_T(ValueError, cfg.dropout >= 0.0 && cfg.dropout < 1.0, name, ": dropout must be in [0, 1), got ",
                 cfg.dropout);
  return s;
}

int64_t bert_parameter_count(const BertShape& s) {
  const int64_t H = s.hidden, I = s.intermediate;
  const int64_t emb = (s.vocab_size + s.max_positions + s.type_vocab_size) * H + 2 * H;
  const int64_t layer = 4 * (H * H + H) + (H * I + I) + (I * H + H) + 2 * 2 * H;
  return emb + s.layers * layer + (H * H + H);
}

namespace {

using nn::LayerOptions;
std::shared_ptr<nn::Linear> lin(int64_t in, int64_t out, const LayerOptions& o) {
  return std::make_shared<nn::Linear>(in, out, true, o);
}
std::shared_ptr<nn::LayerNorm> ln(int64_t h, const LayerOptions& o) {
  return std::make_shared<nn::LayerNorm>(h, 1e-12, o);
}
std::shared_ptr<nn::Dropout> drop(double p) { return std::make_shared<nn::Dropout>(p); }

class BertEmbeddings : public nn::Module {
 public:
  BertEmbeddings(const BertShape& s, double p, const LayerOptions& o) {
    word_embeddings = register_module("word_embeddings",
                                      std::make_shared<nn::Embedding>(s.vocab_size, s.hidden, 0, o));
    position_embeddings = register_module("position_embeddings",
                                          std::make_shared<nn::Embedding>(s.max_positions, s.hidden, -1, o));
    token_type_embeddings = register_module("token_type_embeddings",
                                            std::make_shared<nn::Embedding>(s.type_vocab_size, s.hidden, -1, o));
    LayerNorm = register_module("LayerNorm", ln(s.hidden, o));
    dropout = register_module("dropout", drop(p));
  }
  // Set by BertModel before each call: position and token-type ids, [B, T] on x's device.
  Tensor position_ids, token_type_ids;
  Tensor forward(const Tensor& ids) override {
    Tensor e = add((*word_embeddings)(ids), (*token_type_embeddings)(token_type_ids));
    Tensor pos = (*position_embeddings)(position_ids);
    add_(e, pos);
    pos = Tensor();
    return (*dropout)((*LayerNorm)(e));
  }
  const char* type_name() const override { return "BertEmbeddings"; }
  std::vector<Tensor*> side_inputs() override { return {&position_ids, &token_type_ids}; }
  std::shared_ptr<nn::Embedding> word_embeddings, position_embeddings, token_type_embeddings;
  std::shared_ptr<nn::LayerNorm> LayerNorm;
  std::shared_ptr<nn::Dropout> dropout;
};

class BertSelfAttention : public nn::Module {
 public:
  BertSelfAttention(const BertShape& s, double p, const LayerOptions& o) : heads(s.heads) {
    query = register_module("query", lin(s.hidden, s.hidden, o));
    key = register_module("key", lin(s.hidden, s.hidden, o));
    value = register_module("value", lin(s.hidden, s.hidden, o));
    core = register_module("core", std::make_shared<nn::DotProductAttention>(p, o.fused_attention));   // no parameters
  }
  Tensor mask;   // uint8 [B, T], 1 = padding (set by the layer)
  Tensor forward(const Tensor& x) override {   // [B, T, H] -> context [B, T, H]
    const int64_t B = x.size(0), T = x.size(1), H = x.size(2), D = H / heads;
    auto split_heads = [&](const Tensor& t) { return t.reshape({B, T, heads, D}).permute({0, 2, 1, 3}); };
    Tensor q = split_heads((*query)(x)), k = split_heads((*key)(x)), v = split_heads((*value)(x));
    core->key = k;
    core->value = v;
    core->mask = mask;
    Tensor ctx = (*core)(q);
    core->key = core->value = core->mask = Tensor();   // q, k, v below still hold the storages
    q = k = v = Tensor();                               // freed here, in the same order as before
    return ctx.permute({0, 2, 1, 3}).reshape({B, T, H});
  }
  const char* type_name() const override { return "BertSelfAttention"; }
  std::vector<Tensor*> side_inputs() override { return {&mask}; }
  std::shared_ptr<nn::Linear> query, key, value;
  std::shared_ptr<nn::DotProductAttention> core;   // "attention.self.core": QK^T, softmax, dropout, PV
  int64_t heads;
};

// dense -> dropout -> LayerNorm(. + residual): BertSelfOutput and BertOutput.
class BertResidualOutput : public nn::Module {
 public:
  BertResidualOutput(int64_t in, int64_t h, double p, const char* type, const LayerOptions& o) : type(type) {
    dense = register_module("dense", lin(in, h, o));
    LayerNorm = register_module("LayerNorm", ln(h, o));
    dropout = register_module("dropout", drop(p));
  }
  Tensor residual;   // set by the caller
  Tensor forward(const Tensor& x) override {
    Tensor h = (*dropout)((*dense)(x));
    add_(h, residual);
    residual = Tensor();
    return (*LayerNorm)(h);
  }
  const char* type_name() const override { return type; }
  std::vector<Tensor*> side_inputs() override { return {&residual}; }
  std::shared_ptr<nn::Linear> dense;
  std::shared_ptr<nn::LayerNorm> LayerNorm;
  std::shared_ptr<nn::Dropout> dropout;
  const char* type;
};

class BertAttention : public nn::Module {
 public:
  BertAttention(const BertShape& s, double p, const LayerOptions& o) {
    self = register_module("self", std::make_shared<BertSelfAttention>(s, p, o));
    output =
        register_module("output", std::make_shared<BertResidualOutput>(s.hidden, s.hidden, p, "BertSelfOutput", o));
  }
  Tensor forward(const Tensor& x) override {
    Tensor ctx = (*self)(x);
    output->residual = x;
    return (*output)(ctx);
  }
  const char* type_name() const override { return "BertAttention"; }
  std::shared_ptr<BertSelfAttention> self;
  std::shared_ptr<BertResidualOutput> output;
};

class BertIntermediate : public nn::Module {
 public:
  BertIntermediate(const BertShape& s, const LayerOptions& o) {
    dense = register_module("dense", lin(s.hidden, s.intermediate, o));
    intermediate_act_fn = register_module("intermediate_act_fn", std::make_shared<nn::GELU>("none"));
  }
  Tensor forward(const Tensor& x) override { return (*intermediate_act_fn)((*dense)(x)); }
  const char* type_name() const override { return "BertIntermediate"; }
  std::shared_ptr<nn::Linear> dense;
  std::shared_ptr<nn::GELU> intermediate_act_fn;
};

class BertLayer : public nn::Module {
 public:
  BertLayer(const BertShape& s, double p, const LayerOptions& o) {
    attention = register_module("attention", std::make_shared<BertAttention>(s, p, o));
    intermediate = register_module("intermediate", std::make_shared<BertIntermediate>(s, o));
    output = register_module("output",
                             std::make_shared<BertResidualOutput>(s.intermediate, s.hidden, p, "BertOutput", o));
  }
  Tensor forward(const Tensor& x) override {
    Tensor a = (*attention)(x);
    output->residual = a;
    Tensor i = (*intermediate)(a);
    a = Tensor();
    return (*output)(i);
  }
  const char* type_name() const override { return "BertLayer"; }
  std::shared_ptr<BertAttention> attention;
  std::shared_ptr<BertIntermediate> intermediate;
  std::shared_ptr<BertResidualOutput> output;
};

// Holds the layers under "layer.N" (a Sequential used as a ModuleList).
class BertEncoder : public nn::Module {
 public:
  BertEncoder(const BertShape& s, double p, const LayerOptions& o) {
    layer = register_module("layer", std::make_shared<nn::Sequential>());
    for (int64_t i = 0; i < s.layers; ++i) {
      auto l = std::make_shared<BertLayer>(s, p, o);
      layers.push_back(l);
      layer->push_back(l);
    }
  }
  Tensor mask;
  Tensor forward(const Tensor& x) override {
    Tensor h = x;
    for (auto& l : layers) {
      l->attention->self->mask = mask;
      h = (*l)(h);
      l->attention->self->mask = Tensor();
    }
    return h;
  }
  const char* type_name() const override { return "BertEncoder"; }
  std::vector<Tensor*> side_inputs() override { return {&mask}; }
  std::shared_ptr<nn::Sequential> layer;
  std::vector<std::shared_ptr<BertLayer>> layers;
};

class BertPooler : public nn::Module {
 public:
  BertPooler(const BertShape& s, const LayerOptions& o) {
    dense = register_module("dense", lin(s.hidden, s.hidden, o));
    activation = register_module("activation", std::make_shared<nn::Tanh>());
  }
  Tensor forward(const Tensor& h) override {   // [B, T, H] -> tanh(dense(h[:, 0])) [B, H]
    Tensor first = h.narrow(1, 0, 1).reshape({h.size(0), h.size(2)});
    return (*activation)((*dense)(first));
  }
  const char* type_name() const override { return "BertPooler"; }
  std::shared_ptr<nn::Linear> dense;
  std::shared_ptr<nn::Tanh> activation;
};

class BertModel : public nn::Module {
 public:
  BertModel(const std::string& model, const BertShape& s, double p, const LayerOptions& o) : model(model), s(s) {
    embeddings = register_module("embeddings", std::make_shared<BertEmbeddings>(s, p, o));
    encoder = register_module("encoder", std::make_shared<BertEncoder>(s, p, o));
    pooler = register_module("pooler", std::make_shared<BertPooler>(s, o));
  }
  Tensor forward(const Tensor& ids) override {   // ids [B, T] -> pooled [B, H]
    OOMLAB_CHECK_T(DTypeError, ids.dtype() == DType::i64, model, ": expects int64 token ids [batch, seq_len], got ",
                   ids.str());
    OOMLAB_CHECK_T(ShapeError, ids.dim() == 2 && ids.size(1) > 0, model,
                   ": expects token ids [batch, seq_len], got ", shape_str(ids.shape()));
    const int64_t T = ids.size(1);
    OOMLAB_CHECK_T(ValueError, T <= s.max_positions, model, ": sequence length ", T, " exceeds max_positions ",
                   s.max_positions);
    // Per-batch index tensors (positions, token types, padding mask), made in this order on
    // the ids' device by one kernel: the device allocator sees the same sequence on every
    // device, and nothing waits for the host (a CUDA graph can capture the step).
    TokenInputs ti = token_inputs(ids, /*positions_and_types=*/true, /*padding=*/true);
    embeddings->position_ids = ti.positions;
    embeddings->token_type_ids = ti.types;
    Tensor mask = ti.padding;
    ti = TokenInputs{};
    Tensor h = (*embeddings)(ids);
    embeddings->position_ids = embeddings->token_type_ids = Tensor();
    encoder->mask = mask;
    h = (*encoder)(h);
    encoder->mask = Tensor();
    return (*pooler)(h);
  }
  const char* type_name() const override { return "BertModel"; }
  std::string model;
  BertShape s;
  std::shared_ptr<BertEmbeddings> embeddings;
  std::shared_ptr<BertEncoder> encoder;
  std::shared_ptr<BertPooler> pooler;
};

class BertForSequenceClassification : public nn::Module {
 public:
  BertForSequenceClassification(const std::string& name, const ModelConfig& cfg) {
    BertShape s = bert_shape(name, cfg);
    LayerOptions o = zoo_layer_options(cfg);
    bert = register_module("bert", std::make_shared<BertModel>(name, s, cfg.dropout, o));
    dropout = register_module("dropout", drop(cfg.dropout));
    classifier = register_module("classifier", lin(s.hidden, cfg.num_classes, o));
    init_weights(cfg);
  }
  Tensor forward(const Tensor& ids) override { return (*classifier)((*dropout)((*bert)(ids))); }
  const char* type_name() const override { return "BertForSequenceClassification"; }

  void init_weights(const ModelConfig& cfg) {
    if (cfg.device.is_meta()) return;
    Generator gen{cfg.seed, 0};
    for (auto& [n, m] : named_modules()) {
      if (auto* fc = dynamic_cast<nn::Linear*>(m)) {
        nn::init::normal_(fc->weight, 0.0, 0.02, gen);
        if (fc->bias.defined()) nn::init::constant_(fc->bias, 0.0);
      } else if (auto* e = dynamic_cast<nn::Embedding*>(m)) {
        e->reset_parameters(gen, 0.02);
      } else if (auto* l = dynamic_cast<nn::LayerNorm*>(m)) {
        l->reset_parameters();
      }
    }
  }
  std::shared_ptr<BertModel> bert;
  std::shared_ptr<nn::Dropout> dropout;
  std::shared_ptr<nn::Linear> classifier;
};

}  // namespace

nn::ModulePtr build_bert(const std::string& name, const ModelConfig& cfg) {
  return std::make_shared<BertForSequenceClassification>(name, cfg);
}

}  // namespace oomlab
