// graph_checkpoint.cpp — activation checkpointing for imported graphs (GraphModel's
// CheckpointPlanner, graph_internal.h). The graph's nodes are not module calls, so segments
// are runs of nodes: a module's run is the consecutive nodes under its path (folded ones
// aside); a segment is one or more runs with exactly one tensor flowing in (its input: kept
// by CheckpointSegment, engine/autograd/checkpoint.h) and one flowing out, no node
// overwriting that input in place. Blocks are the modules a Sequential or ModuleList holds
// (entering nested ones); chains are blocks whose runs follow each other, each taking the
// previous one's output. all / every:K / sqrt group a chain's blocks as the zoo's planner does
// (checkpoint_plan.h), the model's last segment left un-checkpointed; selective:<types>
// makes each outermost module of those types (kinds: attention, gelu) its own segment. A
// run that is not a segment (two inputs, say) is left to run normally.
#include <algorithm>
#include <cmath>
#include <set>

#include "engine/core/error.h"
#include "models/graph_internal.h"

namespace oomlab::graph {

namespace {
bool is_container(const std::string& type) { return type == "Sequential" || type == "ModuleList"; }
std::string parent_of(const std::string& path) {
  const size_t dot = path.rfind('.');
  return dot == std::string::npos ? std::string() : path.substr(0, dot);
}
// A Sequential or ModuleList holds `path`: its parent's type says so, or the parent is absent
// from the module stacks (a ModuleList is never called, so torch.export records no frame for
// it) and the path ends in an index (Hugging Face's encoder.layer.N, transformer.h.N).
bool held_by_container(const std::map<std::string, std::string>& types, const std::string& path) {
  const std::string parent = path.substr(0, std::max<size_t>(path.rfind('.'), 0));
  if (path.find('.') == std::string::npos) return false;
  if (types.count(parent)) return is_container(types.at(parent));
  const std::string last = path.substr(path.rfind('.') + 1);
  return !last.empty() && last.find_first_not_of("0123456789") == std::string::npos;
}

bool inside(const std::string& module, const std::string& path) {
  return module == path || module.rfind(path + ".", 0) == 0;
}
}  // namespace

std::pair<size_t, size_t> GraphModel::node_range(const std::string& path) const {
  size_t begin = 0, end = 0;
  bool open = false, closed = false;
  for (size_t i = 0; i < g_.nodes.size(); ++i) {
    if (folded(g_.nodes[i].name)) continue;
    if (inside(g_.nodes[i].module, path)) {
      if (closed) return {0, 0};   // the module's nodes are not one run (called twice, interleaved)
      if (!open) begin = i, open = true;
      end = i + 1;
    } else if (open) {
      closed = true;
    }
  }
  return {begin, end};
}

// The segment over nodes [begin, end), or nullopt unless one tensor flows in and one out.
std::optional<GraphSegment> GraphModel::segment_of(size_t begin, size_t end, const std::string& name) const {
  std::set<std::string> made, ins, outs;
  for (size_t i = begin; i < end; ++i)   // folded nodes (sizes, masks) are in every env already
    if (!folded(g_.nodes[i].name)) made.insert(g_.nodes[i].name);
  for (size_t i = begin; i < end; ++i)
    for (const std::string& r : g_.nodes[i].refs)
      if (!made.count(r) && !tensors_.count(r) && !folded(r)) ins.insert(r);
  for (size_t i = end; i < g_.nodes.size(); ++i)
    for (const std::string& r : g_.nodes[i].refs)
      if (made.count(r)) outs.insert(r);
  for (const std::string& o : g_.outputs)
    if (made.count(o)) outs.insert(o);
  if (ins.size() != 1 || outs.size() != 1) return std::nullopt;
  GraphSegment seg{begin, end, *ins.begin(), *outs.begin(), name};
  if (overwrites_input(seg)) return std::nullopt;
  return seg;
}

// A node in the segment that may write its first argument in place (may_overwrite_first's
// rule) with the segment's input there: the kept input would change before the re-run.
bool GraphModel::overwrites_input(const GraphSegment& seg) const {
  if (uses(seg.input) != 1 || !producer.count(seg.input) || !overwritable_producer(producer.at(seg.input)))
    return false;
  for (size_t i = seg.begin; i < seg.end; ++i) {
    const GraphNode& n = g_.nodes[i];
    if ((n.op == "aten.relu.default" || n.op == "aten.add.Tensor") && !n.refs.empty() && n.refs[0] == seg.input)
      return true;
  }
  return false;
}

// Blocks in node order, grouped into chains: blocks whose runs follow each other with only
// folded nodes between.
std::vector<std::vector<std::string>> GraphModel::checkpoint_chains() {
  const std::map<std::string, std::string> types = module_types();
  std::vector<std::pair<size_t, std::string>> blocks;
  for (const auto& [path, type] : types) {
    if (is_container(type) || !held_by_container(types, path)) continue;
    bool nested = false;   // inside another block (a block's own Sequential)
    for (std::string up = parent_of(parent_of(path)); !up.empty() && !nested; up = parent_of(up))
      nested = types.count(up) && !is_container(types.at(up)) && held_by_container(types, up);
    const auto [b, e] = node_range(path);
    if (!nested && e > b) blocks.push_back({b, path});
  }
  std::sort(blocks.begin(), blocks.end());
  std::vector<std::vector<std::string>> chains;
  size_t last_end = 0;
  for (const auto& [b, path] : blocks) {
    const auto range = node_range(path);
    bool adjacent = !chains.empty();
    for (size_t i = last_end; adjacent && i < range.first; ++i) adjacent = folded(g_.nodes[i].name);
    if (!adjacent) chains.emplace_back();
    chains.back().push_back(path);
    last_end = range.second;
  }
  return chains;
}

CheckpointPlan GraphModel::plan_checkpoints(const CheckpointPolicy& policy) {
  using K = CheckpointPolicy::Kind;
  CheckpointPlan plan;
  plan.policy = policy.spec;
  const std::map<std::string, std::string> types = module_types();
  if (policy.kind == K::selective) {
    std::set<std::string> wanted, found;
    for (const std::string& k : policy.selective) wanted.insert(checkpoint_kind_type(k));
    std::string taken;
    for (const auto& [path, type] : types) {   // map order: a parent before its children
      if (!wanted.count(type) || (!taken.empty() && inside(path, taken))) continue;
      found.insert(type);
      ++plan.blocks;
      const auto [b, e] = node_range(path);
      if (e > b && segment_of(b, e, path)) plan.segments.push_back({path}), taken = path;
    }
    for (const std::string& k : policy.selective)
      OOMLAB_CHECK(found.count(checkpoint_kind_type(k)), "checkpoint policy ", policy.spec, ": graph ", g_.file,
                   " has no ", checkpoint_kind_type(k), " module (its module types are in `oomlab summary`)");
    return plan;
  }
  const std::vector<std::vector<std::string>> chain_names = checkpoint_chains();
  for (const auto& chain : chain_names) plan.blocks += int64_t(chain.size());
  std::vector<std::vector<std::pair<size_t, size_t>>> chains;   // node ranges
  for (const auto& chain : chain_names) {
    chains.emplace_back();
    for (const std::string& path : chain) chains.back().push_back(node_range(path));
  }
  for (size_t c = 0; c < chains.size(); ++c) {
    const auto& ranges = chains[c];
    const size_t n = ranges.size();
    const size_t k = policy.kind == K::all ? 1 : policy.kind == K::every ? size_t(policy.every)
                                                                          : size_t(std::ceil(std::sqrt(double(n))));
    auto valid = [&](size_t i, size_t j) { return segment_of(ranges[i].first, ranges[j - 1].second, "").has_value(); };
    // a block can open a segment when it alone or with the blocks after it is one (not
    // when its first node overwrites its input: VGG's ReLU(inplace=True) blocks)
    auto can_start = [&](size_t j) {
      for (size_t e = j + 1; e <= n; ++e)
        if (valid(j, e)) return true;
      return false;
    };
    size_t i = 0;
    while (i < n) {
      if (!can_start(i)) { ++i; continue; }
      size_t j = std::min(n, i + k);
      while (j < n && (!valid(i, j) || !can_start(j))) ++j;   // join the next block rather than split badly
      if (!valid(i, j)) { ++i; continue; }
      plan.segments.emplace_back(chain_names[c].begin() + int64_t(i), chain_names[c].begin() + int64_t(j));
      i = j;
    }
  }
  if (!plan.segments.empty()) plan.segments.pop_back();   // the last one would be re-run at once
  OOMLAB_CHECK(!plan.segments.empty(), "checkpoint policy ", policy.spec, ": graph ", g_.file, " has ", plan.blocks,
               " block(s) (modules a Sequential or ModuleList holds) and no run of them to checkpoint",
               g_.module_types.empty()
                   ? " (the file has no \"modules\" table: export it again with scripts/export_model.py)"
                   : "");
  return plan;
}

void GraphModel::apply_checkpoint_plan(const CheckpointPlan& plan) {
  segments_.clear();
  for (const auto& names : plan.segments) {
    const auto first = node_range(names.front()), last = node_range(names.back());
    std::optional<GraphSegment> seg = segment_of(first.first, last.second, names.front());
    OOMLAB_CHECK_T(InternalError, seg.has_value(), "graph ", g_.file, ": checkpoint segment ", names.front(), "..",
                   names.back(), " is not one tensor in and one out");
    segments_.push_back(*seg);
  }
  std::sort(segments_.begin(), segments_.end(),
            [](const GraphSegment& a, const GraphSegment& b) { return a.begin < b.begin; });
}

}  // namespace oomlab::graph
