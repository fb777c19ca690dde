// test_cli_flags_apply.cpp — no flag is accepted and ignored (flag_table.h: the `models`
// column and the model-use table of model_arch.h; `applies_when` on --device): each flag
// given where it has no effect, whatever its value, is one exit-2 line naming the flag and
// the models or device it applies to; the same flags where they apply still run; `oomlab
// help` takes a command or nothing.
// ctest tier: cli
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/cli_test_util.h"

namespace {
const std::string kGraphs = std::string(OOMLAB_SOURCE_DIR) + "/models/graphs/";
const std::string kSeeds = std::string(OOMLAB_SOURCE_DIR) + "/tests/fuzz/corpus/fuzz_model_graph/";
const std::string kBertGraph = "--model graph:" + kGraphs + "bert.json";
const std::string kTokenRun =
    " --dataset synthetic-seq --seq-len 128 --batch 2 --steps 1 --synthetic-size 4 --device meta";

struct Ignored {
  const char* name;
  std::string args;
  std::string expected;   // the whole error line after "oomlab: error: "
};

const std::string kNotGraph = " is not one";
const Ignored kIgnored[] = {
    {"dropout_on_a_graph", "train " + kBertGraph + kTokenRun + " --dropout 0.1",
     "--dropout applies to BERT models (bert-*) and the VGG classifier (vgg*) of the zoo (an imported graph is its "
     "eval export, without dropout); --model graph:" +
         kGraphs + "bert.json" + kNotGraph},
    {"seq_min_len_without_a_mask", "train --model graph:" + kGraphs + "gpt2.json" + kTokenRun + " --seq-min-len 64",
     "--seq-min-len applies to models that mask padded tokens: BERT models (bert-*) and graphs exported with an "
     "attention mask; --model graph:" +
         kGraphs + "gpt2.json" + kNotGraph},
    {"classes_with_summary_of_a_graph", "summary --model graph:" + kGraphs + "resnet50.json --classes 5",
     "--classes applies to the zoo's models (an imported graph's classes are those of its exported output); --model "
     "graph:" +
         kGraphs + "resnet50.json" + kNotGraph},
    {"classes_with_estimate_of_a_graph", "estimate --batch 2 --model graph:" + kGraphs + "resnet50.json --classes 1000",
     "--classes applies to the zoo's models (an imported graph's classes are those of its exported output); --model "
     "graph:" +
         kGraphs + "resnet50.json" + kNotGraph},
    {"fuse_relu_off_on_bert", "summary --model bert-tiny --fuse-relu off",
     "--fuse-relu applies to the ResNets (resnet18/34/50, resnet20/56) and the VGGs (vgg11/16, *_bn); --model bert-tiny"
     " is not one"},
    {"fuse_relu_off_on_a_graph", "summary --model graph:" + kGraphs + "resnet50.json --fuse-relu off",
     "--fuse-relu applies to the ResNets (resnet18/34/50, resnet20/56) and the VGGs (vgg11/16, *_bn); --model graph:" +
         kGraphs + "resnet50.json" + kNotGraph},
    {"attention_eager_on_a_cnn", "summary --model resnet20 --attention eager",
     "--attention applies to BERT models (bert-*) and imported graphs with attention; --model resnet20 is not one"},
    {"attention_eager_on_a_cnn_graph", "estimate --batch 1 --model graph:" + kGraphs + "vgg16.json --attention eager",
     "--attention applies to BERT models (bert-*) and imported graphs with attention; --model graph:" + kGraphs +
         "vgg16.json" + kNotGraph},
    {"allow_tf32_on_cpu", "train --model mlp --dataset synthetic --steps 1 --allow-tf32 all",
     "--allow-tf32 applies to --device cuda (this run has --device cpu)"},
    {"cudnn_benchmark_on_meta", "train --model mlp --dataset synthetic --steps 1 --device meta --cudnn-benchmark on",
     "--cudnn-benchmark applies to --device cuda (this run has --device meta)"},
    {"cudnn_deterministic_on_cpu", "train --model mlp --dataset synthetic --steps 1 --cudnn-deterministic off",
     "--cudnn-deterministic applies to --device cuda (this run has --device cpu)"},
    {"cudnn_workspace_limit_on_meta",
     "train --model mlp --dataset synthetic --steps 1 --device meta --cudnn-workspace-limit 1GiB",
     "--cudnn-workspace-limit applies to --device cuda (this run has --device meta)"},
    {"hidden_on_a_graph", "summary " + kBertGraph + " --hidden 64",
     "--hidden applies to BERT models of the zoo (bert-*; an imported graph's shape is the exported file's); --model "
     "graph:" +
         kGraphs + "bert.json" + kNotGraph},
    {"norm_on_vgg", "summary --model vgg11 --norm bn",
     "--norm applies to the ResNets (resnet18/34/50, resnet20/56: torchvision's norm_layer); --model vgg11 is not one"},
    {"help_with_a_stray_word", "help extra",
     "help: unknown command 'extra' (commands: train, summary, estimate, plan, run, models, amp-policy, trick, "
     "allreduce-bench, step)"},
    {"help_with_two_words", "help train extra", "help: unexpected argument 'extra' (oomlab help [COMMAND])"},
};

class CliFlagIgnored : public ::testing::TestWithParam<Ignored> {};

TEST_P(CliFlagIgnored, IsOneExitTwoLine) {
  const Ignored& c = GetParam();
  const CliRun r = run_oomlab(c.args);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(r.output, "oomlab: error: " + c.expected + "\n");
}

INSTANTIATE_TEST_SUITE_P(Cases, CliFlagIgnored, ::testing::ValuesIn(kIgnored),
                         [](const auto& info) { return std::string(info.param.name); });

// The same flags where they apply are accepted and run.
TEST(CliFlagApplies, WhereTheModelHasTheUse) {
  for (const std::string& args :
       std::vector<std::string>{"train " + kBertGraph + kTokenRun + " --attention fused",
                                "train --model graph:" + kGraphs + "bert_padded.json" + kTokenRun + " --seq-min-len 64",
                                std::string("summary --model bert-tiny --dropout 0 --attention eager"),
                                std::string("summary --model resnet20 --fuse-relu off --norm gn"),
                                std::string("summary --model mlp --classes 7"),
                                "train --model graph:" + kSeeds +
                                    "small_cnn.json --dataset synthetic --batch 2 --steps 1 --synthetic-size 4 "
                                    "--device meta",
                                std::string("help train"), std::string("help")}) {
    const CliRun r = run_oomlab(args);
    EXPECT_EQ(r.code, 0) << args << "\n" << r.output;
  }
}
}  // namespace
