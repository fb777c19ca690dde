// checkpoint_plan.h — activation-checkpointing policies over an nn::Module tree: which
// modules form segments (engine/autograd/checkpoint.h does the saving and re-running).
// Policies (--checkpoint):
//  * none
//  * all        every block its own segment
//  * every:K    K consecutive blocks of a chain per segment (checkpoint_sequential)
//  * sqrt       ceil(sqrt(n)) blocks per segment for a chain of n blocks (Chen et al. 2016)
//    (all/every/sqrt leave the model's last segment un-checkpointed, as
//    checkpoint_sequential does: backward needs it at once, a re-run would be pure cost)
//  * selective[:K1,K2,...]  each module of the named kinds is a segment; kinds: attention
//    (BertSelfAttention: Q/K/V projections and the attention core), core (the attention
//    core, DotProductAttention: Korthikanti et al.'s selective recompute), gelu (the MLP's
//    dense + GELU, BertIntermediate: GELU alone would keep its own input, saving nothing),
//    or any module type name (e.g. BasicBlock). Default: attention,gelu (the source's
//    placement). Modules inside a chosen one are not chosen again.
//  * budget:SIZE  the chain policy with the least recompute whose training peak fits SIZE;
//    resolved by the command that knows the batch and optimizer (experiments/cli:
//    choose_checkpoint_budget, from exact meta-device peaks) into one of the above.
// Blocks: the children of Sequential containers (a Sequential child is entered, not taken),
// outside other blocks: ResNet layerN.M, BERT encoder.layer.N, UNet's conv/BN/ReLU, VGG's
// features.N. A chain is a run of blocks in which each takes the previous one's output, as
// a forward of a one-sample input shows (run in eval mode without grad: no dropout draw,
// no BN update). A segment never starts at a block that modifies its input in place.
#pragma once
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "engine/nn/module.h"

namespace oomlab {

struct CheckpointPolicy {
  enum class Kind { none, all, every, sqrt, selective, budget };
  Kind kind = Kind::none;
  int64_t every = 0;                     // every:K
  std::vector<std::string> selective;    // selective kinds, as given
  std::string budget;                    // budget:SIZE's SIZE, as given
  uint64_t budget_bytes = 0;             // SIZE in bytes: set where the flag is read (its size syntax is the CLI's)
  std::string spec = "none";             // canonical text
};

// A selective kind's module type name (attention -> BertSelfAttention, core ->
// DotProductAttention, gelu -> BertIntermediate; anything else is a type name itself).
std::string checkpoint_kind_type(const std::string& kind);

// The one parser of a policy's text (--checkpoint, a budget's candidates): throws ValueError
// naming the spec and the accepted forms. Everything downstream takes the parsed policy.
CheckpointPolicy parse_checkpoint_policy(std::string_view spec);

struct CheckpointPlan {
  std::string policy;
  std::vector<std::vector<std::string>> segments;   // module names per segment, in run order
  int64_t blocks = 0;                               // blocks the policy chose among
  nlohmann::json to_json() const;                   // {"policy", "segments": [[names]], "blocks"}
};

// The chains of `model` (names per chain, in run order) for a forward of `sample`
// (one-sample input on the model's device). Restores the model's training flag.
std::vector<std::vector<std::string>> checkpoint_chains(nn::Module& model, const Tensor& sample);

// A model that plans and runs its own segments (an imported graph, whose nodes are not module
// calls): plan_checkpoints and apply_checkpoint_plan hand it the policy and the plan.
class CheckpointPlanner {
 public:
  virtual ~CheckpointPlanner() = default;
  virtual CheckpointPlan plan_checkpoints(const CheckpointPolicy& policy) = 0;
  virtual std::vector<std::vector<std::string>> checkpoint_chains() = 0;   // block names per chain
  virtual void apply_checkpoint_plan(const CheckpointPlan& plan) = 0;
  virtual int64_t applied_segments() const = 0;   // segments of the plan applied last (0: none)
};

// The number of checkpointed segments `model` runs with (results' config.checkpoint_segments):
// its modules' roles, or what a CheckpointPlanner applied.
int64_t applied_checkpoint_segments(nn::Module& model);

// Plans segments for `policy`; ValueError when the policy has nothing to checkpoint in
// this model (e.g. selective:attention on a ResNet), naming what the model has, or is a
// budget (resolve it first).
CheckpointPlan plan_checkpoints(nn::Module& model, const Tensor& sample, const CheckpointPolicy& policy);

// Sets the modules' roles (clearing any earlier plan); an empty plan turns it off.
void apply_checkpoint_plan(nn::Module& model, const CheckpointPlan& plan);

namespace nn {
// Module::operator() for a planned module: opens/continues/closes its segment.
Tensor checkpointed_forward(Module& module, const Tensor& x);
}  // namespace nn

}  // namespace oomlab
