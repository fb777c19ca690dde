// test_safetensors_io.cpp — atomic file writes (fault injection keeps the old file),
// strict JSON, and the safetensors format: round trip for every dtype, header layout,
// CRC and structural corruption, load_into name/shape/dtype checks and tied-weight aliases.
// ctest tier: unit
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>

#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/core/tensor.h"
#include "engine/io/atomic_file.h"
#include "engine/io/safetensors.h"
#include "tests/temp_dir_util.h"

namespace fs = std::filesystem;
using namespace oomlab;

namespace {

template <class E, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected exception was not thrown";
  return "";
}

// Tensor with a byte pattern in its storage (covers every bit pattern class per dtype).
Tensor patterned(const Shape& shape, DType dt, uint8_t salt) {
  Tensor t = Tensor::empty(shape, dt);
  auto* p = static_cast<uint8_t*>(t.raw_data());
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = uint8_t(i * 31 + salt);
  if (dt == DType::f32 || dt == DType::f64) {  // keep floats finite and readable
    std::vector<double> v(size_t(t.numel()));
    for (size_t i = 0; i < v.size(); ++i) v[i] = double(i) * 0.37 - salt;
    t = Tensor::from_vector(v, shape, dt);
  }
  return t;
}

std::string bytes_of(const Tensor& t) {
  Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.raw_data()), c.nbytes());
}

// Builds a safetensors file from a raw header string and data (for malformed inputs).
std::string raw_file(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

}  // namespace

// ---- atomic file ---------------------------------------------------------------------------

TEST(AtomicFile, WritesReplacesAndKeepsMode) {
  TempDir d;
  const std::string p = d.file("a.txt");
  write_file_atomic(p, "hello");
  EXPECT_EQ(read_file(p), "hello");
  struct stat st;
  ASSERT_EQ(::stat(p.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  write_file_atomic(p, std::string(100000, 'x'));
  EXPECT_EQ(read_file(p), std::string(100000, 'x'));
  write_file_atomic(p, "");
  EXPECT_EQ(read_file(p), "");
  EXPECT_EQ(d.entries(), 1u);  // no temp files left behind
  std::string msg = error_of<IoError>([&] { write_file_atomic(d.file("missing/dir/x"), "y"); });
  EXPECT_NE(msg.find("missing/dir/x"), std::string::npos) << msg;
  msg = error_of<IoError>([&] { read_file(d.file("nope")); });
  EXPECT_NE(msg.find("nope"), std::string::npos) << msg;
}

TEST(AtomicFile, FaultBeforeRenameKeepsOldContent) {
  TempDir d;
  const std::string p = d.file("ckpt.json");
  write_file_atomic(p, "old content");
  std::string seen_temp;
  atomic_write_fault_hook() = [&](const std::string& tmp) {
    seen_temp = tmp;
    EXPECT_EQ(read_file(tmp), "new content");  // fully written and synced before the crash point
    throw std::runtime_error("simulated crash");
  };
  std::string msg = error_of<IoError>([&] { write_file_atomic(p, "new content"); });
  atomic_write_fault_hook() = nullptr;
  EXPECT_NE(msg.find(p), std::string::npos) << msg;
  EXPECT_NE(msg.find("simulated crash"), std::string::npos) << msg;
  EXPECT_EQ(read_file(p), "old content");
  EXPECT_FALSE(seen_temp.empty());
  EXPECT_FALSE(fs::exists(seen_temp));
  EXPECT_EQ(d.entries(), 1u);
  write_file_atomic(p, "new content");
  EXPECT_EQ(read_file(p), "new content");
}

// A writer killed (SIGKILL, in a child process) between its fsync and its rename leaves its
// temp; the next write of the same target removes it. A temp whose writer still runs stays.
TEST(AtomicFile, TempsOfKilledWritersAreRemovedByTheNextWrite) {
  TempDir d;
  const std::string p = d.file("latest");
  write_file_atomic(p, "step-2");
  const pid_t child = ::fork();
  if (child == 0) {
    atomic_write_fault_hook() = [](const std::string&) { ::raise(SIGKILL); };
    write_file_atomic(p, "step-4");
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  EXPECT_EQ(read_file(p), "step-2");
  EXPECT_EQ(d.entries(), 2u);   // the target and the dead writer's temp
  const std::string live = d.file(".latest.tmp." + std::to_string(::getppid()) + ".abcdef");   // a running writer's
  write_file_atomic(live, "in flight");
  write_file_atomic(p, "step-6");
  EXPECT_EQ(read_file(p), "step-6");
  EXPECT_EQ(d.entries(), 2u);   // the target and the live writer's temp
  EXPECT_TRUE(fs::exists(live));
}

TEST(AtomicFile, StrictJsonRejectsNonFinite) {
  TempDir d;
  nlohmann::json j = {{"metrics", {{"curve", {{{"loss", 1.0}}, {{"loss", std::nan("")}}}}}}};
  std::string msg = error_of<ValueError>([&] { write_json_atomic(d.file("r.json"), j); });
  EXPECT_NE(msg.find("metrics.curve[1].loss"), std::string::npos) << msg;
  EXPECT_FALSE(fs::exists(d.file("r.json")));
  nlohmann::ordered_json oj = {{"a", {1.0, std::numeric_limits<double>::infinity()}}};
  msg = error_of<ValueError>([&] { dump_json_strict(oj); });
  EXPECT_NE(msg.find("a[1]"), std::string::npos) << msg;
  j["metrics"]["curve"][1]["loss"] = 0.5;
  write_json_atomic(d.file("r.json"), j);
  EXPECT_EQ(nlohmann::json::parse(read_file(d.file("r.json"))), j);
  EXPECT_THROW(dump_json_strict(nlohmann::json(std::string("\xff\xfe"))), ValueError);
}

// ---- safetensors ---------------------------------------------------------------------------

TEST(Safetensors, RoundTripEveryDtype) {
  TempDir d;
  NamedTensors ts;
  uint8_t salt = 1;
  for (DType dt : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i64, DType::u8})
    ts.emplace_back(std::string("t_") + dtype_name(dt), patterned({3, 5}, dt, salt++));
  ts.emplace_back("scalar", Tensor::from_vector({2.5}, {}, DType::f32));
  ts.emplace_back("empty", Tensor::empty({0, 4}, DType::f16));
  Tensor base = patterned({4, 3}, DType::f32, 9);
  ts.emplace_back("transposed", base.transpose(0, 1));  // non-contiguous source
  const std::string p = d.file("m.safetensors");
  write_safetensors(p, ts, {{"step", "17"}, {"note", "héllo"}});
  SafetensorsContents back = read_safetensors(p);
  ASSERT_EQ(back.tensors.size(), ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    SCOPED_TRACE(ts[i].first);
    EXPECT_EQ(back.tensors[i].first, ts[i].first);  // insertion order kept
    EXPECT_EQ(back.tensors[i].second.dtype(), ts[i].second.dtype());
    EXPECT_EQ(back.tensors[i].second.shape(), ts[i].second.shape());
    EXPECT_TRUE(back.tensors[i].second.device().is_cpu());
    EXPECT_EQ(bytes_of(back.tensors[i].second), bytes_of(ts[i].second));
  }
  EXPECT_EQ(back.metadata.at("step"), "17");
  EXPECT_EQ(back.metadata.at("note"), "héllo");
  EXPECT_EQ(back.metadata.at(kSafetensorsCrcKey).size(), 8u);
}

TEST(Safetensors, HeaderLayout) {
  std::string f = serialize_safetensors({{"w", Tensor::from_vector({1, 2, 3}, {3}, DType::f32)},
                                         {"b", Tensor::from_vector_i64({7}, {1})}});
  uint64_t n;
  std::memcpy(&n, f.data(), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(f.size(), 8 + n + 12 + 8);
  auto h = nlohmann::ordered_json::parse(f.substr(8, n));
  EXPECT_EQ(h["w"]["dtype"], "F32");
  EXPECT_EQ(h["w"]["shape"], nlohmann::ordered_json::array({3}));
  EXPECT_EQ(h.begin().key(), "__metadata__");
  EXPECT_EQ(std::next(h.begin()).key(), "w");  // header in insertion order
  EXPECT_EQ(h["b"]["dtype"], "I64");
  EXPECT_EQ(h["b"]["data_offsets"], nlohmann::ordered_json::array({0, 8}));  // data: 8-byte items first
  EXPECT_EQ(h["w"]["data_offsets"], nlohmann::ordered_json::array({8, 20}));
  EXPECT_TRUE(h["__metadata__"].contains(kSafetensorsCrcKey));
  float w1;
  std::memcpy(&w1, f.data() + 8 + n + 8 + 4, 4);
  EXPECT_EQ(w1, 2.0f);
  // Every tensor starts at a multiple of its itemsize whatever the insertion order.
  std::string g = serialize_safetensors({{"u", Tensor::empty({3}, DType::u8)}, {"h", Tensor::zeros({3}, DType::f16)},
                                         {"f", Tensor::zeros({1})}, {"d", Tensor::zeros({1}, DType::f64)}});
  std::memcpy(&n, g.data(), 8);
  auto hg = nlohmann::json::parse(g.substr(8, n));
  for (auto [name, size] : {std::pair{"u", 1}, {"h", 2}, {"f", 4}, {"d", 8}})
    EXPECT_EQ(hg[name]["data_offsets"][0].get<uint64_t>() % size, 0u) << name;
  EXPECT_THROW(serialize_safetensors({{"a", Tensor::zeros({1})}, {"a", Tensor::zeros({1})}}), ValueError);
  EXPECT_THROW(serialize_safetensors({{"x", Tensor::empty({2}, DType::f32, meta_device())}}), DeviceError);
}

// A header that names a tensor twice is corrupt (JSON would keep the last one silently).
TEST(Safetensors, DuplicateTensorNameInTheHeaderIsRejected) {
  std::string header = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                       R"("w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})";
  while (header.size() % 8) header += ' ';
  const uint64_t n = header.size();
  std::string bytes(reinterpret_cast<const char*>(&n), 8);
  bytes += header + std::string(8, '\0');
  const std::string msg = error_of<IoError>([&] { parse_safetensors(bytes, "dup.safetensors"); });
  EXPECT_NE(msg.find("dup.safetensors: the header names 'w' twice"), std::string::npos) << msg;
}

TEST(Safetensors, CorruptionIsAnIoErrorNamingFileAndProblem) {
  TempDir d;
  const std::string p = d.file("c.safetensors");
  NamedTensors ts = {{"w", patterned({64}, DType::f32, 3)}, {"b", patterned({8}, DType::f64, 4)}};
  const std::string good = serialize_safetensors(ts);
  auto expect = [&](const std::string& bytes, const std::string& fragment) {
    write_file_atomic(p, bytes);
    std::string msg = error_of<IoError>([&] { read_safetensors(p); });
    EXPECT_NE(msg.find(p), std::string::npos) << msg;
    EXPECT_NE(msg.find(fragment), std::string::npos) << "expected '" << fragment << "' in: " << msg;
  };
  std::string flipped = good;
  flipped[flipped.size() - 5] ^= 0x10;
  expect(flipped, "CRC32 mismatch");
  expect(good.substr(0, good.size() - 3), "truncated file");
  expect(good.substr(0, 5), "too short");
  expect(good.substr(0, 40), "truncated file: header length");
  std::string huge = good;
  uint64_t big = uint64_t(1) << 40;
  std::memcpy(huge.data(), &big, 8);
  expect(huge, "header length");
  expect(raw_file("{not json", ""), "not valid JSON");
  expect(raw_file("[1, 2]  ", ""), "not a JSON object");
  expect(raw_file(R"({"x":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})", "abcd"), "unsupported dtype 'I32'");
  expect(raw_file(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", "abcd"), "needs 8 bytes");
  expect(raw_file(R"({"x":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "abcd"), "invalid shape");
  expect(raw_file(R"({"x":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})", "abcd"), "not contiguous");
  expect(raw_file(R"({"x":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", "abcd"), "trailing bytes");
  expect(raw_file(R"({"x":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                  R"("y":{"dtype":"U8","shape":[3],"data_offsets":[1,4]}})", "abcd"), "overlap");
  expect(raw_file(R"({"x":{"dtype":"U8","shape":[1]}})", "a"), "data_offsets");
  expect(raw_file(R"({"__metadata__":{"k":1}})", ""), "__metadata__");
  // A file from another writer without our CRC still loads.
  write_file_atomic(p, raw_file(R"({"x":{"dtype":"U8","shape":[2,2],"data_offsets":[0,4]}})", "abcd"));
  SafetensorsContents c = read_safetensors(p);
  ASSERT_EQ(c.tensors.size(), 1u);
  EXPECT_EQ(bytes_of(c.tensors[0].second), "abcd");
  EXPECT_NE(error_of<IoError>([&] { read_safetensors(d.file("absent.safetensors")); }).find("absent"),
            std::string::npos);
}

TEST(Safetensors, LoadIntoChecksNamesShapesDtypes) {
  TempDir d;
  const std::string p = d.file("s.safetensors");
  Tensor w = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3}), b = Tensor::from_vector({7, 8}, {2});
  write_safetensors(p, {{"fc.weight", w}, {"fc.bias", b}}, {{"epoch", "3"}});

  Tensor w2 = Tensor::zeros({2, 3}), b2 = Tensor::zeros({2});
  LoadReport r = load_into(p, {{"fc.weight", w2}, {"fc.bias", b2}});
  EXPECT_EQ(w2.to_vector(), w.to_vector());
  EXPECT_EQ(b2.to_vector(), b.to_vector());
  EXPECT_EQ(r.metadata.at("epoch"), "3");

  Tensor wt = Tensor::zeros({3, 2}), bd = Tensor::zeros({2}, DType::f64), extra = Tensor::zeros({1});
  std::string msg = error_of<IoError>([&] { load_into(p, {{"fc.weight", wt}, {"fc.bias", bd}, {"fc.extra", extra}}); });
  EXPECT_NE(msg.find(p), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing keys (1): fc.extra"), std::string::npos) << msg;
  EXPECT_NE(msg.find("shape mismatch for 'fc.weight': file has [2, 3], target has [3, 2]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("dtype mismatch for 'fc.bias': file has float32, target has float64"), std::string::npos) << msg;
  EXPECT_EQ(wt.to_vector(), std::vector<double>(6, 0.0));  // nothing copied on failure

  msg = error_of<IoError>([&] { load_into(p, {{"fc.weight", w2}}); });
  EXPECT_NE(msg.find("unexpected keys (1): fc.bias"), std::string::npos) << msg;
  Tensor w3 = Tensor::zeros({2, 3});
  r = load_into(p, {{"fc.weight", w3}, {"other", Tensor::zeros({1})}}, /*strict=*/false);
  EXPECT_EQ(r.missing, std::vector<std::string>{"other"});
  EXPECT_EQ(r.unexpected, std::vector<std::string>{"fc.bias"});
  EXPECT_EQ(w3.to_vector(), w.to_vector());
}

// A tied weight's second name (GPT-2's transformer.wte.weight = lm_head.weight), given as an
// alias: accepted in a strict load when it holds the same values, an error when it does not.
TEST(Safetensors, LoadIntoAcceptsATiedWeightsSecondName) {
  TempDir d;
  const std::string p = d.file("tied.safetensors"), q = d.file("untied.safetensors");
  Tensor w = Tensor::from_vector({1, 2, 3, 4}, {2, 2});
  write_safetensors(p, {{"lm_head.weight", w}, {"wte.weight", w}});
  write_safetensors(q, {{"lm_head.weight", w}, {"wte.weight", Tensor::from_vector({1, 2, 3, 5}, {2, 2})}});
  Tensor t = Tensor::zeros({2, 2});
  EXPECT_THROW(load_into(p, {{"lm_head.weight", t}}), IoError);   // without the alias: unexpected
  LoadReport r = load_into(p, {{"lm_head.weight", t}}, true, {{"wte.weight", "lm_head.weight"}});
  EXPECT_TRUE(r.unexpected.empty());
  EXPECT_EQ(t.to_vector(), w.to_vector());
  const std::string msg = error_of<IoError>([&] {
    load_into(q, {{"lm_head.weight", t}}, true, {{"wte.weight", "lm_head.weight"}});
  });
  EXPECT_NE(msg.find("'wte.weight' is tied to 'lm_head.weight' but holds other values"), std::string::npos) << msg;
}
