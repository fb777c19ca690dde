// graph_zero3.cpp — an imported graph under ZeRO stage 3 (FSDP's FULL_SHARD): the graph's
// modules never run their own forward (GraphModel interprets the nodes), so each run of a
// module's nodes calls the module call hooks (engine/nn/module_hooks.h) itself. Contracts:
//  * A run's owners are the modules holding the parameters its nodes read, directly or
//    through values computed from parameters alone (a weight's transpose or view made in
//    another run): a tied weight read far from its module (GPT-2's lm_head reading
//    transformer.wte.weight) is gathered there too.
//  * before(owner) runs before the run's first node; after(owner, v) after its last one, for
//    every value the run makes that a later node or the output reads (each becomes the hook's
//    alias: backward reaching it gathers the owners again); an owner with no such value gets
//    after(owner, undefined), which only frees it.
//  * Without hooks installed (no ZeRO-3) nothing is computed per run.
#include <set>

#include "engine/nn/module_hooks.h"
#include "models/graph_internal.h"

namespace oomlab {
namespace graph {

// Per node, the parameter-owning modules it reads (computed once: the graph is static).
void GraphModel::plan_parameter_reads() {
  std::map<std::string, nn::Module*> owner;
  for (const GraphParameter& p : g_.parameters) {
    if (p.buffer) continue;
    const size_t dot = p.name.rfind('.');
    owner[p.name] = dot == std::string::npos ? static_cast<nn::Module*>(this) : submodule(p.name.substr(0, dot));
  }
  std::set<std::string> from_input;
  for (const GraphTensor& t : g_.inputs) from_input.insert(t.name);
  std::map<std::string, std::set<nn::Module*>> value_reads;   // values computed from parameters alone
  reads_.assign(g_.nodes.size(), {});
  for (size_t i = 0; i < g_.nodes.size(); ++i) {
    const GraphNode& n = g_.nodes[i];
    std::set<nn::Module*> reads;
    bool input_derived = false;
    for (const std::string& r : n.refs) {
      input_derived = input_derived || from_input.count(r);
      if (const auto o = owner.find(r); o != owner.end()) reads.insert(o->second);
      if (const auto v = value_reads.find(r); v != value_reads.end()) reads.insert(v->second.begin(), v->second.end());
    }
    if (input_derived) from_input.insert(n.name);
    else if (!reads.empty()) value_reads[n.name] = reads;
    reads_[i].assign(reads.begin(), reads.end());
  }
}

// The run of module nodes starting at node i (before `end`): its owners, gathered now.
GraphModel::ShardedRun GraphModel::begin_sharded_run(size_t i, size_t end) {
  ShardedRun run;
  run.hooks = nn::module_call_hooks();
  if (!run.hooks) return run;
  std::set<nn::Module*> owners;
  const std::string& module = g_.nodes[i].module;
  for (size_t k = i; k < end && (folded(g_.nodes[k].name) || g_.nodes[k].module == module); ++k) {
    if (folded(g_.nodes[k].name)) continue;
    owners.insert(reads_[k].begin(), reads_[k].end());
    run.made.push_back(k);
    run.last = k;
  }
  run.owners.assign(owners.begin(), owners.end());
  if (run.hooks->before)
    for (nn::Module* m : run.owners) run.hooks->before(*m);
  return run;
}

// After the run's last node: each owner's after hook over the values that leave the run.
void GraphModel::end_sharded_run(const ShardedRun& run, std::map<std::string, Value>& env) {
  if (!run.hooks || !run.hooks->after) return;
  std::vector<Tensor*> leaving;   // the run's outputs a later node or the graph's output reads
  for (size_t k : run.made) {
    const std::string& name = g_.nodes[k].name;
    const auto last = last_use_.find(name);
    const auto v = env.find(name);
    if (v == env.end() || !(held_.count(name) || (last != last_use_.end() && last->second > run.last))) continue;
    for (Tensor& t : v->second.outs)
      if (t.defined()) leaving.push_back(&t);
  }
  for (nn::Module* m : run.owners) {
    for (Tensor* t : leaving) *t = run.hooks->after(*m, *t);
    if (leaving.empty()) run.hooks->after(*m, Tensor());
  }
}

}  // namespace graph
}  // namespace oomlab
