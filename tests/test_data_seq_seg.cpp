// test_data_seq_seg.cpp — the token (synthetic-seq) and segmentation (synthetic-seg)
// datasets, padded variable-length batches, loader resume for both, short trainer runs of
// bert-tiny / unet-small whose loss must fall, and the Korthikanti rows of the summary.
// ctest tier: unit
// ctest slow: SeqSegTrainer.BertMiniReaches95PercentOnSyntheticSeq
#include <cblas.h>
#include <gtest/gtest.h>
#include <omp.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "engine/core/error.h"
#include "engine/data/dataloader.h"
#include "engine/data/synthetic_seg.h"
#include "engine/data/synthetic_seq.h"
#include "experiments/plan/memory_report.h"
#include "experiments/train/train_command.h"
#include "models/model_zoo.h"
#include "tests/temp_dir_util.h"

using namespace oomlab;
namespace fs = std::filesystem;

namespace {
SyntheticSeqOptions seq_opts(int64_t size, int64_t max_len, uint64_t seed) {
  SyntheticSeqOptions o;
  o.size = size;
  o.max_len = max_len;
  o.seed = seed;
  return o;
}

double mean_of(const std::vector<double>& v, size_t begin, size_t end) {
  double s = 0;
  for (size_t i = begin; i < end; ++i) s += v[i];
  return s / double(end - begin);
}
}  // namespace

TEST(SyntheticSeq, DeterministicValidAndBalanced) {
  SyntheticSequenceDataset a(seq_opts(3000, 24, 7)), b(seq_opts(3000, 24, 7)), c(seq_opts(3000, 24, 8));
  EXPECT_EQ(a.sample_shape(), (Shape{24}));
  EXPECT_TRUE(a.is_tokens());
  EXPECT_EQ(a.target_numel(), 1);
  std::vector<int64_t> ta, tb, tc;
  int64_t la, lb, lc, ones = 0, differs = 0;
  std::set<int64_t> lengths;
  for (int64_t i = 0; i < a.size(); ++i) {
    a.get_tokens(i, ta, &la);
    b.get_tokens(i, tb, &lb);
    c.get_tokens(i, tc, &lc);
    ASSERT_EQ(ta, tb);
    ASSERT_EQ(la, lb);
    differs += ta != tc;
    const int64_t len = int64_t(ta.size());
    ASSERT_GE(len, 12);   // min_len defaults to max_len / 2
    ASSERT_LE(len, 24);
    lengths.insert(len);
    ASSERT_EQ(ta[0], SyntheticSequenceDataset::kCls);
    int64_t first_a = -1, last_a = -1, first_b = -1, last_b = -1;
    for (int64_t t = 1; t < len; ++t) {
      ASSERT_GT(ta[size_t(t)], 0);
      ASSERT_LT(ta[size_t(t)], a.id_range());
      ASSERT_NE(ta[size_t(t)], SyntheticSequenceDataset::kCls);
      if (ta[size_t(t)] == SyntheticSequenceDataset::kMarkerA) { if (first_a < 0) first_a = t; last_a = t; }
      if (ta[size_t(t)] == SyntheticSequenceDataset::kMarkerB) { if (first_b < 0) first_b = t; last_b = t; }
    }
    ASSERT_GT(first_a, 0);
    ASSERT_GT(first_b, 0);
    // All A markers before all B markers (label 1) or all after (label 0).
    ASSERT_TRUE(la == 1 ? last_a < first_b : last_b < first_a) << "sample " << i;
    ones += la;
  }
  EXPECT_EQ(lengths.size(), 13u);   // every length 12..24 occurs
  EXPECT_GT(differs, 2900);
  const double frac = double(ones) / double(a.size());
  EXPECT_GT(frac, 0.45);
  EXPECT_LT(frac, 0.55);
  // Order-independent: calling again (or out of order) gives the same sample.
  a.get_tokens(1234, ta, &la);
  a.get_tokens(5, tb, &lb);
  a.get_tokens(1234, tc, &lc);
  EXPECT_EQ(ta, tc);
  EXPECT_THROW(a.get_tokens(3000, ta, &la), ValueError);
  float f;
  EXPECT_THROW(a.get(0, &f, &la), InternalError);
  SyntheticSeqOptions bad = seq_opts(10, 8, 0);
  bad.min_len = 9;
  EXPECT_THROW(SyntheticSequenceDataset{bad}, ValueError);
}

TEST(SyntheticSeq, LongSequenceFrequency) {
  SyntheticSeqOptions o = seq_opts(4000, 16, 3);
  o.long_prob = 0.05;
  o.long_len = 200;
  SyntheticSequenceDataset d(o);
  std::vector<int64_t> t;
  int64_t label, longs = 0;
  for (int64_t i = 0; i < d.size(); ++i) {
    d.get_tokens(i, t, &label);
    if (t.size() == 200) {
      ++longs;
      EXPECT_GE(std::count(t.begin(), t.end(), SyntheticSequenceDataset::kMarkerA), 1);
    } else {
      ASSERT_LE(t.size(), 16u);
    }
  }
  EXPECT_GT(longs, 140);   // expected 200, sd ~14
  EXPECT_LT(longs, 260);
  o.long_prob = 0.0;
  SyntheticSequenceDataset none(o);
  for (int64_t i = 0; i < 500; ++i) {
    none.get_tokens(i, t, &label);
    ASSERT_LE(t.size(), 16u);
  }
}

TEST(SyntheticSeq, PaddedVariableLengthBatches) {
  SyntheticSeqOptions o = seq_opts(256, 32, 1);
  o.min_len = 3;
  SyntheticSequenceDataset d(o);
  DataLoader dl(d, 8, /*shuffle=*/true, /*drop_last=*/true, 9, /*prefetch=*/2);
  HostBatch b;
  std::set<int64_t> widths;
  int64_t batches = 0;
  while (dl.next(b)) {
    ++batches;
    ASSERT_TRUE(b.is_tokens());
    ASSERT_EQ(b.shape.size(), 2u);
    ASSERT_EQ(b.shape[0], 8);
    const int64_t T = b.shape[1];
    widths.insert(T);
    ASSERT_EQ(int64_t(b.tokens.size()), 8 * T);
    ASSERT_EQ(b.labels.size(), 8u);
    EXPECT_TRUE(b.images.empty());
    EXPECT_TRUE(b.masks.empty());
    EXPECT_EQ(b.target_shape, (Shape{8}));
    int64_t longest = 0;
    for (int64_t i = 0; i < 8; ++i) {
      const int64_t* row = b.tokens.data() + i * T;
      int64_t len = T;
      while (len > 0 && row[len - 1] == 0) --len;
      for (int64_t t = 0; t < len; ++t) ASSERT_NE(row[t], 0) << "padding inside a sample";
      longest = std::max(longest, len);
      ASSERT_EQ(row[0], SyntheticSequenceDataset::kCls);
    }
    EXPECT_EQ(longest, T);   // T = the batch's longest sample
  }
  EXPECT_EQ(batches, 32);
  EXPECT_GT(widths.size(), 1u);   // T varies per batch
}

TEST(SyntheticSeg, DeterministicMasksAndLearnableColours) {
  SyntheticSegmentationDataset a({3, 32, 32}, 200, 4, 5), b({3, 32, 32}, 200, 4, 5), c({3, 32, 32}, 200, 4, 6);
  EXPECT_EQ(a.target_shape(), (Shape{32, 32}));
  EXPECT_EQ(a.target_numel(), 1024);
  EXPECT_FALSE(a.is_tokens());
  std::vector<float> ia(3 * 1024), ib(3 * 1024), ic(3 * 1024);
  std::vector<int64_t> ma(1024), mb(1024), mc(1024);
  std::map<int64_t, int64_t> counts;
  int64_t with_fg = 0, differs = 0, nearest_hits = 0;
  for (int64_t i = 0; i < a.size(); ++i) {
    a.get(i, ia.data(), ma.data());
    b.get(i, ib.data(), mb.data());
    c.get(i, ic.data(), mc.data());
    ASSERT_EQ(ia, ib);
    ASSERT_EQ(ma, mb);
    differs += ma != mc;
    bool fg = false;
    for (int64_t p = 0; p < 1024; ++p) {
      ASSERT_GE(ma[size_t(p)], 0);
      ASSERT_LT(ma[size_t(p)], 4);
      counts[ma[size_t(p)]]++;
      fg |= ma[size_t(p)] != 0;
      for (int64_t ch = 0; ch < 3; ++ch) ASSERT_TRUE(std::isfinite(ia[size_t(ch * 1024 + p)]));
    }
    with_fg += fg;
  }
  EXPECT_EQ(counts.size(), 4u);
  for (auto& [k, n] : counts) EXPECT_GT(n, 200 * 1024 / 40) << "class " << k << " is too rare";
  EXPECT_GT(with_fg, 190);
  EXPECT_GT(differs, 190);
  // Learnable: per-class mean colour (fitted on the first half) classifies pixels of the
  // second half well above chance.
  std::vector<double> sum(4 * 3, 0.0), n(4, 0.0);
  for (int64_t i = 0; i < 100; ++i) {
    a.get(i, ia.data(), ma.data());
    for (int64_t p = 0; p < 1024; ++p) {
      const int64_t k = ma[size_t(p)];
      n[size_t(k)] += 1;
      for (int64_t ch = 0; ch < 3; ++ch) sum[size_t(k * 3 + ch)] += ia[size_t(ch * 1024 + p)];
    }
  }
  int64_t total = 0;
  for (int64_t i = 100; i < 200; ++i) {
    a.get(i, ia.data(), ma.data());
    for (int64_t p = 0; p < 1024; ++p) {
      int64_t best = 0;
      double best_d = 1e30;
      for (int64_t k = 0; k < 4; ++k) {
        double d = 0;
        for (int64_t ch = 0; ch < 3; ++ch) {
          double e = ia[size_t(ch * 1024 + p)] - sum[size_t(k * 3 + ch)] / n[size_t(k)];
          d += e * e;
        }
        if (d < best_d) { best_d = d; best = k; }
      }
      nearest_hits += best == ma[size_t(p)];
      ++total;
    }
  }
  EXPECT_GT(double(nearest_hits) / double(total), 0.6);
  EXPECT_THROW(SyntheticSegmentationDataset({3, 32, 32}, 10, 1, 0), ValueError);
  // past its Philox block layout: shapes into the noise blocks, channels into the stripes'
  EXPECT_THROW(SyntheticSegmentationDataset({3, 32, 32}, 10, 4, 0, 0.5f, 64), ValueError);
  EXPECT_THROW(SyntheticSegmentationDataset({4096, 4, 4}, 10, 4, 0), ValueError);
}

TEST(SyntheticSeg, BatchesCarryMasks) {
  SyntheticSegmentationDataset d({1, 16, 16}, 20, 3, 2);
  DataLoader dl(d, 8, false, false, 0, 0);
  HostBatch b;
  ASSERT_TRUE(dl.next(b));
  EXPECT_EQ(b.shape, (Shape{8, 1, 16, 16}));
  EXPECT_EQ(b.target_shape, (Shape{8, 16, 16}));
  EXPECT_EQ(b.masks.size(), size_t(8 * 256));
  EXPECT_TRUE(b.labels.empty());
  EXPECT_EQ(&b.targets(), &b.masks);
  std::vector<float> img(256);
  std::vector<int64_t> mask(256);
  d.get(3, img.data(), mask.data());
  EXPECT_TRUE(std::equal(mask.begin(), mask.end(), b.masks.begin() + 3 * 256));
  EXPECT_TRUE(std::equal(img.begin(), img.end(), b.images.begin() + 3 * 256));
  ASSERT_TRUE(dl.next(b));
  ASSERT_TRUE(dl.next(b));
  EXPECT_EQ(b.n, 4);   // the last, partial batch
  EXPECT_EQ(b.target_shape, (Shape{4, 16, 16}));
}

TEST(SeqSegLoader, StateRestoreGivesIdenticalBatches) {
  SyntheticSeqOptions o = seq_opts(120, 20, 4);
  o.min_len = 3;
  SyntheticSequenceDataset seq(o);
  SyntheticSegmentationDataset seg({2, 8, 8}, 120, 3, 4);
  for (const Dataset* ds : {static_cast<const Dataset*>(&seq), static_cast<const Dataset*>(&seg)}) {
    auto take = [](DataLoader& dl, int k) {
      std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> out;
      HostBatch hb;
      while (int(out.size()) < k) {
        if (!dl.next(hb)) continue;
        std::vector<int64_t> in = hb.tokens;
        for (float f : hb.images) in.push_back(int64_t(f * 1e6f));
        in.insert(in.end(), hb.shape.begin(), hb.shape.end());
        out.push_back({in, hb.targets()});
      }
      return out;
    };
    DataLoader a(*ds, 16, true, true, 11);
    take(a, 4);
    LoaderState s = a.state();
    auto expected = take(a, 12);   // crosses an epoch end (7 per epoch)
    for (int prefetch : {0, 1, 3}) {
      DataLoader b(*ds, 16, true, true, 11, prefetch);
      take(b, 2);
      b.restore(s);
      EXPECT_EQ(take(b, 12), expected) << ds->name() << " prefetch " << prefetch;
    }
  }
}

// The learning tests run single-threaded: on a loaded 2-core machine (ctest -j2, or other
// jobs) OpenMP/OpenBLAS thread teams oversubscribe the cores and a step can take many
// times longer; one thread keeps them within seconds whatever the load. Results do not
// depend on the thread count (the kernels' contract), so nothing else changes.
struct SingleThreaded {
  int omp = omp_get_max_threads(), blas = openblas_get_num_threads();
  SingleThreaded() { omp_set_num_threads(1); openblas_set_num_threads(1); }
  ~SingleThreaded() { omp_set_num_threads(omp); openblas_set_num_threads(blas); }
};

TEST(SeqSegTrainer, BertTinyLearnsSyntheticSeq) {
  SingleThreaded one_thread;
  RunSpec c;
  c.model = "bert-tiny";
  c.dataset = "synthetic-seq";
  c.seq_len = 16;
  c.batch = 16;
  c.steps = 80;   // ~50 steps of plateau at chance, then the markers' positions are found
  c.synthetic_size = 1024;
  c.optimizer = "adamw";
  c.lr = 1e-3;
  c.weight_decay = 0.01;
  c.schedule = "constant";
  c.eval_batches = 4;
  c.quiet = true;
  nlohmann::json r = train(c);
  const auto loss = r["metrics"]["history"]["train_loss"].get<std::vector<double>>();
  ASSERT_EQ(loss.size(), 80u);
  EXPECT_LT(mean_of(loss, 70, 80), mean_of(loss, 0, 10) - 0.15) << "loss did not fall";
  for (double l : loss) ASSERT_TRUE(std::isfinite(l));
  const auto& e = r["metrics"]["history"]["epochs"].back();
  EXPECT_EQ(e["test_samples"].get<int64_t>(), 64);
  EXPECT_GT(e["test_accuracy"].get<double>(), 0.6);
  EXPECT_FALSE(e.contains("test_mean_iou"));
}

// Issue 4's bar: bert-mini learns the order-dependent task to >= 95% held-out accuracy
// on CPU within a few minutes (about 47 s single-threaded on the 2-core VM: 80 steps of
// batch 32), with the bert family's default recipe and no recipe flag.
TEST(SeqSegTrainer, BertMiniReaches95PercentOnSyntheticSeq) {
  SingleThreaded one_thread;
  RunSpec c;
  c.model = "bert-mini";
  c.dataset = "synthetic-seq";
  c.seq_len = 32;
  c.batch = 32;
  c.steps = 80;
  c.synthetic_size = 2048;
  c.eval_batches = 8;
  c.quiet = true;   // no recipe flags: the bert family's defaults (recipes.h)
  nlohmann::json r = train(c);
  EXPECT_EQ(r["config"]["recipe"]["family"], "bert");
  EXPECT_EQ(r["config"]["optimizer"], "adamw");
  EXPECT_EQ(r["config"]["lr"], 5e-4);
  EXPECT_EQ(r["config"]["resolved_schedule"], "warmup-cosine:warmup=8,t_max=80");
  EXPECT_TRUE(r["config"]["recipe"]["flags"].empty());
  const auto& e = r["metrics"]["history"]["epochs"].back();
  EXPECT_EQ(e["test_samples"].get<int64_t>(), 256);
  EXPECT_GE(e["test_accuracy"].get<double>(), 0.95);
}

// A meaningful IoU: predicting background everywhere scores mean IoU < 0.25 on four
// classes; a learnt UNet separates the shapes (about 0.95 after 60 steps here).
TEST(SeqSegTrainer, UnetSmallLearnsSyntheticSeg) {
  SingleThreaded one_thread;
  RunSpec c;
  c.model = "unet-small";
  c.dataset = "synthetic-seg";
  c.input = {3, 32, 32};
  c.num_classes = 4;
  c.batch = 8;
  c.steps = 60;
  c.synthetic_size = 512;
  c.eval_batches = 4;
  c.quiet = true;   // no recipe flags: the unet family's defaults (recipes.h)
  nlohmann::json r = train(c);
  EXPECT_EQ(r["config"]["recipe"]["family"], "unet");
  EXPECT_EQ(r["config"]["optimizer"], "adam");
  const auto loss = r["metrics"]["history"]["train_loss"].get<std::vector<double>>();
  ASSERT_EQ(loss.size(), 60u);
  EXPECT_LT(mean_of(loss, 50, 60), 0.5 * mean_of(loss, 0, 10)) << "loss did not fall";
  const auto& e = r["metrics"]["history"]["epochs"].back();
  ASSERT_TRUE(e.contains("test_mean_iou"));
  EXPECT_GT(e["test_mean_iou"].get<double>(), 0.75);
  EXPECT_LE(e["test_mean_iou"].get<double>(), 1.0);
  EXPECT_GT(e["test_accuracy"].get<double>(), 0.9);
}

TEST(SeqSegSummary, KorthikantiRowsForBertTiny) {
  const TempDir dir("seqseg");
  const std::string json_path = dir.file("summary.json");
  std::string cmd = std::string(OOMLAB_BINARY_DIR) +
                    "/oomlab summary --model bert-tiny --seq-len 32 --batch 2 --json " + json_path +
                    " > /dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  nlohmann::json j = nlohmann::json::parse(std::ifstream(json_path));
  const auto& m = j["metrics"];
  ASSERT_TRUE(m.contains("transformer_layers")) << m.dump();
  const auto& t = m["transformer_layers"];
  ASSERT_EQ(t.size(), 2u);
  for (int64_t i = 0; i < 2; ++i) {
    const auto& r = t[size_t(i)];
    EXPECT_EQ(r["name"], "bert.encoder.layer." + std::to_string(i));
    EXPECT_EQ(r["seq"], 32);
    EXPECT_EQ(r["batch"], 2);
    EXPECT_EQ(r["hidden"], 128);
    EXPECT_EQ(r["heads"], 2);
    const int64_t sbh = 32 * 2 * 128, as2b = 2 * 32 * 32 * 2;
    EXPECT_EQ(r["korthikanti_fp16_bytes"].get<int64_t>(), 34 * sbh + 5 * as2b);
    EXPECT_EQ(r["korthikanti_fp32_bytes"].get<int64_t>(), 66 * sbh + 9 * as2b);
    // Our ops save the paper's terms in fp32, plus layer_norm's mean/rstd (16*s*b bytes).
    const double ratio = r["saved_over_korthikanti_fp32"].get<double>();
    EXPECT_GT(ratio, 0.95);
    EXPECT_LT(ratio, 1.05);
    EXPECT_EQ(r["saved_bytes"].get<int64_t>(), 66 * sbh + 9 * as2b + 16 * 32 * 2);
  }
  EXPECT_EQ(m["input"], (std::vector<int64_t>{32}));
}
