// test_graph_import_zoo.cpp — the importer is faithful (issue 32): graphs that
// scripts/export_model.py wrote from the real torchvision models (tests/fixtures/graphs/,
// committed so that CI needs no PyTorch; regenerate with the command in that folder's
// README) give the zoo model's parameter count, state_dict names and shapes, per-layer table
// (output and saved bytes of every module) and exact training meta peak, to the byte.
// Inference (summary's forward-only peak) frees values as eager PyTorch does, and that is one
// tensor less than the zoo's C++ forward holds (see ForwardOnlyPeakFollowsPython).
// ctest tier: models
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <string>

#include "engine/io/atomic_file.h"
#include "models/graph_model.h"
#include "models/model_zoo.h"
#include "tests/cli_test_util.h"

using namespace oomlab;
using json = nlohmann::json;

namespace {
const std::string kGraphs = std::string(OOMLAB_SOURCE_DIR) + "/tests/fixtures/graphs/";

json run_json(const std::string& args) {
  const std::string out = std::filesystem::temp_directory_path() /
                          ("graph_zoo_" + std::to_string(getpid()) + ".json");
  CliRun r = run_oomlab(args + " --json " + out);
  EXPECT_EQ(r.code, 0) << args << "\n" << r.output;
  json j = r.code == 0 ? json::parse(read_file(out)) : json();
  std::filesystem::remove(out);
  return j;
}

TEST(GraphImportZoo, Resnet50NamesShapesAndCountAreTorchvisions) {
  const ModelGraph g = read_model_graph(kGraphs + "resnet50.json");
  ModelConfig meta;
  meta.device = meta_device();
  nn::ModulePtr imported = build_graph_model(g, meta);
  meta.num_classes = 1000;   // torchvision's (the CLI's default for resnet50 too)
  nn::ModulePtr zoo = build_model("resnet50", meta);
  EXPECT_EQ(imported->num_parameters(), 25557032);
  EXPECT_EQ(imported->num_parameters(), zoo->num_parameters());
  auto a = imported->state_dict(), b = zoo->state_dict();
  ASSERT_EQ(a.size(), b.size());
  for (auto ia = a.begin(), ib = b.begin(); ia != a.end(); ++ia, ++ib) {
    EXPECT_EQ(ia->first, ib->first);
    EXPECT_EQ(ia->second.shape(), ib->second.shape()) << ia->first;
    EXPECT_EQ(ia->second.dtype(), ib->second.dtype()) << ia->first;
  }
}

TEST(GraphImportZoo, Resnet50TrainingPeakAndLayersEqualTheZoos) {
  const std::string graph = "graph:" + kGraphs + "resnet50.json";
  for (const char* extra : {"--batch 8", "--batch 3 --amp bf16", "--batch 4 --optimizer adam"}) {
    json zoo = run_json(std::string("estimate --model resnet50 ") + extra);
    json imp = run_json("estimate --model " + graph + " " + extra);
    ASSERT_TRUE(zoo.contains("metrics") && imp.contains("metrics"));
    EXPECT_EQ(zoo["metrics"]["exact"], imp["metrics"]["exact"]) << extra;
    EXPECT_EQ(zoo["metrics"]["params"], imp["metrics"]["params"]) << extra;
  }
  json zoo = run_json("summary --model resnet50 --batch 2");
  json imp = run_json("summary --model " + graph + " --batch 2");
  ASSERT_TRUE(zoo.contains("metrics") && imp.contains("metrics"));
  EXPECT_EQ(zoo["metrics"]["layers"], imp["metrics"]["layers"]);
  for (const char* k : {"params", "saved_bytes", "training_forward_peak_bytes", "activation_values_per_sample"})
    EXPECT_EQ(zoo["metrics"]["totals"][k], imp["metrics"]["totals"][k]) << k;
}

// Without autograd a value dies at its last use, except that a module call's input lives until
// the call returns (the caller's frame holds it: `x = self.layer1(x)`, a block's identity).
// torchvision's Bottleneck frees conv2's input when `out = self.conv2(out)` returns; the zoo's
// C++ `out = norm_relu(bn2, relu, conv2(out))` holds it through bn2: one [64, 56, 56] float32
// tensor per sample (layer1's), 802,816 bytes, and nothing else differs.
TEST(GraphImportZoo, ForwardOnlyPeakFollowsPython) {
  const std::string graph = "graph:" + kGraphs + "resnet50.json";
  for (int batch : {1, 4}) {
    json zoo = run_json("summary --model resnet50 --batch " + std::to_string(batch));
    json imp = run_json("summary --model " + graph + " --batch " + std::to_string(batch));
    ASSERT_TRUE(zoo.contains("metrics") && imp.contains("metrics"));
    const int64_t z = zoo["metrics"]["totals"]["forward_only_peak_bytes"];
    const int64_t i = imp["metrics"]["totals"]["forward_only_peak_bytes"];
    EXPECT_EQ(z - i, int64_t(batch) * 64 * 56 * 56 * 4) << "batch " << batch;
  }
}
}  // namespace
