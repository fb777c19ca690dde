// allreduce_bench.cpp — the nccl-tests-style all-reduce benchmark (allreduce_bench.h).
#include "experiments/cli/allreduce_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "engine/core/error.h"
#include "engine/io/atomic_file.h"
#include "engine/parallel/collective_check.h"
#include "engine/parallel/local_comm.h"
#include "engine/train/results.h"
#include "experiments/cli/cli_args.h"
#include "experiments/cli/commands.h"

namespace oomlab {
namespace {
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct BenchOptions {
  std::string backend = "local", algo = "ring", device = "cpu", dtype = "float", op = "sum";
  int ranks = 2;
  int64_t min_bytes = 8, max_bytes = int64_t(64) << 20, step_factor = 2, iters = 20, warmup = 5;
  double timeout_s = 300;
};

// nccl-tests' type names.
DType bench_dtype(const std::string& s) {
  if (s == "float") return DType::f32;
  if (s == "double") return DType::f64;
  if (s == "half") return DType::f16;
  if (s == "bfloat16") return DType::bf16;
  if (s == "int64") return DType::i64;
  throw ValueError(str_cat("--dtype '", s, "' is not one of float, double, half, bfloat16, int64"));
}

struct Measure {
  double time_us = 0;
  int64_t wrong = 0;   // -1: not checked (meta)
};
struct Row {
  int64_t bytes = 0, count = 0;
  Measure oop, ip;
  std::vector<int64_t> sent, received;   // per rank, bytes per call
};

BenchOptions bench_options(const CliArgs& a) {
  BenchOptions o;
  o.backend = a.get("backend", o.backend);
  o.algo = a.get("algo", o.algo);
  o.device = a.get("device", o.device);
  o.dtype = a.get("dtype", o.dtype);
  o.op = a.get("op", o.op);
  o.ranks = int(a.get_int("ranks", o.ranks));
  if (a.has("min-bytes")) o.min_bytes = int64_t(parse_size(a.get("min-bytes", "")));
  if (a.has("max-bytes")) o.max_bytes = int64_t(parse_size(a.get("max-bytes", "")));
  o.step_factor = a.get_int("step-factor", o.step_factor);
  o.iters = a.get_int("iters", o.iters);
  o.warmup = a.get_int("warmup", o.warmup);
  o.timeout_s = a.get_double("timeout", o.timeout_s);
  OOMLAB_CHECK(o.backend == "local", "--backend ", o.backend, ": only the local backend is built so far "
               "(gloo, mpi and nccl are not yet)");
  parse_all_reduce_algo(o.algo);
  parse_reduce_op(o.op);
  const DType d = bench_dtype(o.dtype);
  OOMLAB_CHECK(o.device == "cpu" || o.device == "meta", "--device must be cpu or meta for the local backend (got '",
               o.device, "')");
  OOMLAB_CHECK(o.ranks >= 1 && o.ranks <= 1024, "--ranks must be in 1..1024 (got ", o.ranks, ")");
  OOMLAB_CHECK(o.device == "meta" || o.ranks <= 64, "--ranks ", o.ranks, " on cpu: at most 64 rank threads (meta allows 1024)");
  OOMLAB_CHECK(o.min_bytes <= o.max_bytes, "--min-bytes (", o.min_bytes, ") is larger than --max-bytes (", o.max_bytes, ")");
  OOMLAB_CHECK(o.max_bytes <= (int64_t(4) << 30), "--max-bytes is at most 4 GiB (got ", o.max_bytes, ")");
  OOMLAB_CHECK(o.max_bytes >= int64_t(dtype_size(d)), "--max-bytes ", o.max_bytes, " is smaller than one ", o.dtype);
  OOMLAB_CHECK(o.step_factor >= 2, "--step-factor must be >= 2 (got ", o.step_factor, ")");
  OOMLAB_CHECK(o.iters >= 1 && o.warmup >= 0, "--iters must be >= 1 and --warmup >= 0");
  OOMLAB_CHECK(o.timeout_s > 0, "--timeout must be > 0 seconds");
  return o;
}

// One thread's memcpy of `bytes` (median of 9 after a touch), in GB/s (1e9 bytes).
double memcpy_gbps(int64_t bytes) {
  std::vector<char> a(static_cast<size_t>(bytes), 1), b(static_cast<size_t>(bytes), 2);
  std::vector<double> t;
  for (int i = 0; i < 9; ++i) {
    const auto t0 = Clock::now();
    std::memcpy(b.data(), a.data(), a.size());
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    a[size_t(i)] = b[size_t(bytes - 1 - i)];   // keep the copies observable
  }
  std::sort(t.begin(), t.end());
  return double(bytes) / t[4] / 1e9;
}

std::vector<Row> run_local(const BenchOptions& o) {
  const DType d = bench_dtype(o.dtype);
  const ReduceOp op = parse_reduce_op(o.op);
  const int64_t es = int64_t(dtype_size(d));
  std::vector<int64_t> sizes;
  for (int64_t b = std::max(o.min_bytes, es); b <= o.max_bytes; b *= o.step_factor) {
    sizes.push_back(b / es * es);
    if (b > o.max_bytes / o.step_factor) break;
  }
  std::vector<Row> rows(sizes.size());
  std::vector<std::vector<double>> oop_us(sizes.size(), std::vector<double>(size_t(o.ranks))), ip_us = oop_us;
  std::mutex mu;
  std::vector<Device> devices;
  for (int r = 0; r < o.ranks; ++r) devices.push_back(Device{o.device == "meta" ? DeviceType::meta : DeviceType::cpu, r});
  const bool meta = o.device == "meta";
  run_local_ranks(devices, parse_all_reduce_algo(o.algo), [&](LocalCommunicator& c) {
    const int r = c.rank(), n = c.world_size();
    for (size_t k = 0; k < sizes.size(); ++k) {
      const int64_t count = sizes[k] / es;
      Tensor in = meta ? Tensor::empty({count}, d, c.device()) : check_input(r, count, d, c.device());
      Tensor out = Tensor::empty({count}, d, c.device());
      auto timed = [&](const Tensor& send, const Tensor& recv) {
        for (int64_t i = 0; i < o.warmup; ++i) c.all_reduce(send, recv, op);
        c.barrier();
        c.reset_stats();
        const auto t0 = Clock::now();
        for (int64_t i = 0; i < o.iters; ++i) c.all_reduce(send, recv, op);
        c.barrier();
        return std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / double(o.iters);
      };
      oop_us[k][size_t(r)] = timed(in, out);
      const CommStats st = c.stats();
      // The check: a fresh call on the check data (the timed calls reduced `in` repeatedly
      // only in place, so `out` of one more call is exact).
      int64_t wrong_oop = -1, wrong_ip = -1;
      if (!meta) {
        c.all_reduce(in, out, op);
        wrong_oop = count_wrong(out, op, n);
      }
      Tensor inplace = meta ? out : check_input(r, count, d, c.device());
      ip_us[k][size_t(r)] = timed(inplace, inplace);
      if (!meta) {
        inplace.copy_(check_input(r, count, d, c.device()));
        c.all_reduce(inplace, op);
        wrong_ip = count_wrong(inplace, op, n);
      }
      std::lock_guard<std::mutex> lk(mu);
      Row& row = rows[k];
      row.bytes = sizes[k];
      row.count = count;
      if (row.sent.empty()) { row.sent.assign(size_t(n), 0); row.received.assign(size_t(n), 0); }
      row.sent[size_t(r)] = st.bytes_sent / o.iters;
      row.received[size_t(r)] = st.bytes_received / o.iters;
      if (!meta) {
        row.oop.wrong = (row.oop.wrong < 0 ? 0 : row.oop.wrong) + wrong_oop;
        row.ip.wrong = (row.ip.wrong < 0 ? 0 : row.ip.wrong) + wrong_ip;
      } else {
        row.oop.wrong = row.ip.wrong = -1;
      }
    }
  }, std::chrono::milliseconds(int64_t(o.timeout_s * 1000)));
  for (size_t k = 0; k < rows.size(); ++k) {
    for (int r = 0; r < o.ranks; ++r) {
      rows[k].oop.time_us += oop_us[k][size_t(r)] / o.ranks;
      rows[k].ip.time_us += ip_us[k][size_t(r)] / o.ranks;
    }
  }
  return rows;
}

double algbw(int64_t bytes, double us) { return us > 0 ? double(bytes) / (us * 1e-6) / 1e9 : 0.0; }
double bus_factor(int n) { return n > 1 ? 2.0 * (n - 1) / n : 0.0; }
std::string wrong_str(int64_t w) { return w < 0 ? "N/A" : std::to_string(w); }

json measure_json(const Measure& m, int64_t bytes, int n) {
  return {{"time_us", m.time_us}, {"algbw_GBps", algbw(bytes, m.time_us)},
          {"busbw_GBps", algbw(bytes, m.time_us) * bus_factor(n)}, {"wrong", m.wrong < 0 ? json(nullptr) : json(m.wrong)}};
}
}  // namespace

int cmd_allreduce_bench(const std::vector<std::string>& args) {
  const std::set<std::string> valued = {"backend", "algo", "ranks", "device", "min-bytes", "max-bytes", "step-factor",
                                        "op", "dtype", "iters", "warmup", "timeout", "json"};
  if (std::find(args.begin(), args.end(), "--help") != args.end() || std::find(args.begin(), args.end(), "-h") != args.end()) {
    std::puts("oomlab allreduce-bench [--backend local] [--algo ring|ps] [--ranks N] [--device cpu|meta]\n"
              "  [--min-bytes 8] [--max-bytes 64M] [--step-factor 2] [--op sum|avg|max]\n"
              "  [--dtype float|double|half|bfloat16|int64] [--iters 20] [--warmup 5] [--timeout SECONDS] [--json FILE]\n"
              "  nccl-tests' all_reduce_perf columns; sizes take K/M/G (binary) suffixes");
    return 0;
  }
  CliArgs a(args, valued, {}, "allreduce-bench");
  const BenchOptions o = bench_options(a);
  const std::string out = a.get("json", "");
  if (!out.empty()) check_output_file(out, "--json");
  const double memcpy_bw = o.device == "meta" ? 0.0 : memcpy_gbps(std::min<int64_t>(o.max_bytes, int64_t(256) << 20));
  const std::vector<Row> rows = run_local(o);
  const int n = o.ranks;
  std::printf("# oomlab allreduce-bench: backend %s algo %s ranks %d device %s minBytes %lld maxBytes %lld step: %lld(factor) "
              "warmup iters: %lld iters: %lld validation: %d\n",
              o.backend.c_str(), o.algo.c_str(), n, o.device.c_str(), (long long)o.min_bytes, (long long)o.max_bytes,
              (long long)o.step_factor, (long long)o.warmup, (long long)o.iters, o.device == "meta" ? 0 : 1);
  std::printf("#%62s%35s\n", "out-of-place", "in-place");
  std::printf("#%11s %13s %9s %7s %7s %8s %7s %7s %6s %8s %7s %7s %6s\n", "size", "count", "type", "redop", "root",
              "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
  std::printf("#%11s %13s %9s %7s %7s %8s %7s %7s %6s %8s %7s %7s %6s\n", "(B)", "(elements)", "", "", "", "(us)",
              "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  json jrows = json::array();
  double bus_sum = 0;
  int64_t wrong_total = 0;
  for (const Row& r : rows) {
    const double ab = algbw(r.bytes, r.oop.time_us), ib = algbw(r.bytes, r.ip.time_us);
    std::printf(" %11lld %13lld %9s %7s %7d %8.1f %7.2f %7.2f %6s %8.1f %7.2f %7.2f %6s\n", (long long)r.bytes,
                (long long)r.count, o.dtype.c_str(), o.op.c_str(), -1, r.oop.time_us, ab, ab * bus_factor(n),
                wrong_str(r.oop.wrong).c_str(), r.ip.time_us, ib, ib * bus_factor(n), wrong_str(r.ip.wrong).c_str());
    bus_sum += (ab + ib) * bus_factor(n) / 2;
    wrong_total += std::max<int64_t>(r.oop.wrong, 0) + std::max<int64_t>(r.ip.wrong, 0);
    jrows.push_back({{"size_bytes", r.bytes}, {"count", r.count}, {"type", o.dtype}, {"redop", o.op}, {"root", -1},
                     {"out_of_place", measure_json(r.oop, r.bytes, n)}, {"in_place", measure_json(r.ip, r.bytes, n)},
                     {"bytes_sent_per_rank", r.sent}, {"bytes_received_per_rank", r.received}});
  }
  const double avg_bus = rows.empty() ? 0.0 : bus_sum / double(rows.size());
  std::printf("# Out of bounds values : %lld %s\n", (long long)wrong_total, wrong_total == 0 ? "OK" : "FAILED");
  std::printf("# Avg bus bandwidth    : %g\n", avg_bus);
  json metrics = {{"rows", jrows}, {"avg_busbw_GBps", avg_bus}, {"wrong_total", wrong_total}};
  if (o.device != "meta" && !rows.empty()) {
    const Row& last = rows.back();
    const double bus = algbw(last.bytes, last.oop.time_us) * bus_factor(n);
    std::printf("# memcpy bandwidth     : %.2f GB/s (one thread, %lld bytes); out-of-place busbw at %lld bytes = %.2f "
                "of it\n", memcpy_bw, (long long)std::min<int64_t>(o.max_bytes, int64_t(256) << 20),
                (long long)last.bytes, memcpy_bw > 0 ? bus / memcpy_bw : 0.0);
    metrics["memcpy_GBps"] = memcpy_bw;
    metrics["busbw_over_memcpy_at_max"] = memcpy_bw > 0 ? bus / memcpy_bw : 0.0;
  }
  if (!out.empty()) {
    const json config = {{"backend", o.backend}, {"algo", o.algo}, {"ranks", n}, {"device", o.device},
                         {"min_bytes", o.min_bytes}, {"max_bytes", o.max_bytes}, {"step_factor", o.step_factor},
                         {"op", o.op}, {"dtype", o.dtype}, {"iters", o.iters}, {"warmup", o.warmup}};
    std::vector<Device> devs;
    for (int r = 0; r < n; ++r) devs.push_back(Device{o.device == "meta" ? DeviceType::meta : DeviceType::cpu, r});
    write_json_atomic(out, make_results("allreduce-bench", devs, config, metrics));
  }
  return wrong_total == 0 ? 0 : kExitWrongResults;
}

}  // namespace oomlab
