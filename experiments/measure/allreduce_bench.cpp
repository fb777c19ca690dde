// allreduce_bench.cpp — the nccl-tests-style all-reduce benchmark (allreduce_bench.h).
#include "experiments/measure/allreduce_bench.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <cstdio>
#include <cstring>
#include <functional>

#include "engine/core/error.h"
#include "engine/io/atomic_file.h"
#include "engine/parallel/collective_check.h"
#include "engine/parallel/comm_registry.h"
#include "engine/parallel/local_comm.h"
#include "engine/train/results.h"
#include "experiments/launch/exit_codes.h"
#include "experiments/launch/rank_launcher.h"

namespace oomlab {
namespace {
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;


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

// reduce_scatter / all_gather: whole buffers of a multiple of the ranks' elements
int64_t least_buffer_bytes(const BenchOptions& o) {
  return int64_t(dtype_size(bench_dtype(o.dtype))) * (o.collective == "all_reduce" ? 1 : o.ranks);
}

// --max-bytes holds at least one buffer over o.ranks (the launcher's, once known).
void check_holds_a_buffer(const BenchOptions& o) {
  OOMLAB_CHECK(o.max_bytes >= least_buffer_bytes(o), "--max-bytes ", o.max_bytes, " holds no ", o.collective,
               " buffer over ", o.ranks, " ranks: the least is one ", o.dtype, " per rank (", least_buffer_bytes(o),
               " bytes)");
}
}  // namespace

void check_bench_options(BenchOptions& o) {
  const bool local = o.backend == "local";
  if (!local) {
    require_comm_backend(o.backend, "--backend");   // loads the CUDA library for nccl
    o.algo = "-";
  }
  const DType d = bench_dtype(o.dtype);
  OOMLAB_CHECK(
      o.device == "cpu" || (local && o.device == "meta") || ((local || o.backend == "nccl") && o.device == "cuda"),
      "--device '", o.device, "' is not served by --backend ", o.backend,
      " (local: cpu, meta or cuda; gloo, mpi: cpu; nccl: cuda)");
  OOMLAB_CHECK(o.device == "meta" || o.ranks <= 64, "--ranks ", o.ranks,
               " on cpu: at most 64 rank threads (meta allows 1024)");
  OOMLAB_CHECK(o.min_bytes <= o.max_bytes, "--min-bytes (", o.min_bytes, ") is larger than --max-bytes (", o.max_bytes,
               ")");
  OOMLAB_CHECK(o.max_bytes >= int64_t(dtype_size(d)), "--max-bytes ", o.max_bytes, " is smaller than one ", o.dtype);
  if (local) check_holds_a_buffer(o);   // process backends: once the launcher's world is known
}

namespace {

// One thread's memcpy of `bytes` (median of 9 after a touch), in GB/s (1e9 bytes).
double memcpy_gbps(int64_t bytes) {
  std::vector<char> a(static_cast<size_t>(bytes), 1), b(static_cast<size_t>(bytes), 2);
  std::vector<double> t;
  for (int i = 0; i < 9; ++i) {
    const auto t0 = Clock::now();
    std::memcpy(b.data(), a.data(), a.size());
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    const size_t k = size_t(i) % a.size();      // inside even a 2-byte buffer (--max-bytes 2)
    a[k] = b[a.size() - 1 - k];                  // keep the copies observable
  }
  std::sort(t.begin(), t.end());
  return double(bytes) / t[4] / 1e9;
}

std::vector<int64_t> bench_sizes(const BenchOptions& o) {
  const int64_t es = least_buffer_bytes(o);
  std::vector<int64_t> sizes;
  for (int64_t b = std::max(o.min_bytes, es); b <= o.max_bytes; b *= o.step_factor) {
    sizes.push_back(b / es * es);
    if (b > o.max_bytes / o.step_factor) break;
  }
  return sizes;
}

// One rank's figures for one size: times, wrong elements (-1: not checked), bytes per call.
struct RankFigures {
  double oop_us = 0, ip_us = 0;
  int64_t wrong_oop = -1, wrong_ip = -1, sent = 0, received = 0;
};
constexpr int kFigureFields = 6;

// Elements of an all_gather's `out` that differ from rank j / per's check value j % per.
int64_t count_wrong_gathered(const Tensor& out, int64_t per) {
  const std::vector<double> v = out.to_vector();
  int64_t wrong = 0;
  for (int64_t j = 0; j < int64_t(v.size()); ++j) wrong += v[size_t(j)] != check_value(int(j / per), j % per);
  return wrong;
}

// One size's buffers and call: send, recv (in place: the same buffer, or its slice); check
// fills the inputs and counts wrong elements after one more call.
struct BenchCall {
  Tensor send, recv;
  std::function<void()> call;
  std::function<int64_t()> check;
};

BenchCall bench_call(Communicator& c, const BenchOptions& o, int64_t count, bool in_place) {
  const DType d = bench_dtype(o.dtype);
  const ReduceOp op = parse_reduce_op(o.op);
  const bool meta = c.device().type == DeviceType::meta;
  const int r = c.rank(), n = c.world_size();
  const Device dev = c.device();
  auto input = [&](int64_t k, int64_t offset) {
    return meta ? Tensor::empty({k}, d, dev) : check_input(r, k, d, dev, offset);
  };
  BenchCall b;
  const int64_t per = count / n;
  if (o.collective == "reduce_scatter") {
    b.send = input(count, 0);
    b.recv = in_place ? b.send.narrow(0, r * per, per) : Tensor::empty({per}, d, dev);
    b.call = [&c, b, op] { c.reduce_scatter(b.send, b.recv, op); };
    b.check = [&c, b, op, n, r, per, d, dev]() mutable {
      b.send.copy_(check_input(r, per * n, d, dev));
      c.reduce_scatter(b.send, b.recv, op);
      return count_wrong(b.recv, op, n, r * per);
    };
  } else if (o.collective == "all_gather") {
    b.recv = Tensor::empty({count}, d, dev);
    b.send = in_place ? b.recv.narrow(0, r * per, per) : input(per, 0);
    b.call = [&c, b] { c.all_gather(b.send, b.recv); };
    b.check = [&c, b, r, per, d, dev]() mutable {
      b.send.copy_(check_input(r, per, d, dev));
      c.all_gather(b.send, b.recv);
      return count_wrong_gathered(b.recv, per);
    };
  } else {
    b.send = input(count, 0);
    b.recv = in_place ? b.send : Tensor::empty({count}, d, dev);
    b.call = [&c, b, op] { c.all_reduce(b.send, b.recv, op); };
    b.check = [&c, b, op, n, r, count, d, dev]() mutable {
      b.send.copy_(check_input(r, count, d, dev));
      c.all_reduce(b.send, b.recv, op);
      return count_wrong(b.recv, op, n);
    };
  }
  return b;
}

// The benchmark loop of one rank (every rank runs it; the same on threads and processes).
std::vector<RankFigures> bench_rank(Communicator& c, const BenchOptions& o, const std::vector<int64_t>& sizes) {
  const DType d = bench_dtype(o.dtype);
  const bool meta = c.device().type == DeviceType::meta;
  std::vector<RankFigures> out;
  for (int64_t bytes : sizes) {
    const int64_t count = bytes / int64_t(dtype_size(d));
    RankFigures f;
    auto timed = [&](const BenchCall& b) {
      for (int64_t i = 0; i < o.warmup; ++i) b.call();
      c.barrier();
      c.reset_stats();
      const auto t0 = Clock::now();
      for (int64_t i = 0; i < o.iters; ++i) b.call();
      c.barrier();
      return std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / double(o.iters);
    };
    const BenchCall oop = bench_call(c, o, count, false);
    f.oop_us = timed(oop);
    const CommStats st = c.stats();
    f.sent = st.bytes_sent / o.iters;
    f.received = st.bytes_received / o.iters;
    if (!meta) f.wrong_oop = oop.check();   // the inputs filled again, one more call checked
    const BenchCall ip = bench_call(c, o, count, true);
    f.ip_us = timed(ip);
    if (!meta) f.wrong_ip = ip.check();
    out.push_back(f);
  }
  return out;
}

// figures[rank][size] -> rows: time averaged over ranks, wrong summed, bytes per rank.
std::vector<Row> combine(const std::vector<std::vector<RankFigures>>& figures, const std::vector<int64_t>& sizes,
                         DType d) {
  const int n = int(figures.size());
  std::vector<Row> rows(sizes.size());
  for (size_t k = 0; k < sizes.size(); ++k) {
    Row& row = rows[k];
    row.bytes = sizes[k];
    row.count = sizes[k] / int64_t(dtype_size(d));
    for (int r = 0; r < n; ++r) {
      const RankFigures& f = figures[size_t(r)][k];
      row.oop.time_us += f.oop_us / n;
      row.ip.time_us += f.ip_us / n;
      row.oop.wrong = f.wrong_oop < 0 ? -1 : std::max<int64_t>(row.oop.wrong, 0) + f.wrong_oop;
      row.ip.wrong = f.wrong_ip < 0 ? -1 : std::max<int64_t>(row.ip.wrong, 0) + f.wrong_ip;
      row.sent.push_back(f.sent);
      row.received.push_back(f.received);
    }
  }
  return rows;
}

std::vector<Row> run_local(const BenchOptions& o, const std::vector<int64_t>& sizes) {
  std::vector<std::vector<RankFigures>> figures(size_t(o.ranks));
  std::vector<Device> devices;
  for (int r = 0; r < o.ranks; ++r) devices.push_back(Device{parse_device(o.device).type, r});
  run_local_ranks(devices, parse_all_reduce_algo(o.algo), [&](LocalCommunicator& c) {
    figures[size_t(c.rank())] = bench_rank(c, o, sizes);   // each rank its own slot
  }, std::chrono::milliseconds(int64_t(o.timeout_s * 1000)));
  return combine(figures, sizes, bench_dtype(o.dtype));
}

// This process is one rank: its figures go to every rank with an all_gather (float64).
std::vector<Row> run_process(Communicator& c, const BenchOptions& o, const std::vector<int64_t>& sizes) {
  const std::vector<RankFigures> mine = bench_rank(c, o, sizes);
  const int64_t per_rank = int64_t(sizes.size()) * kFigureFields;
  Tensor send = Tensor::empty({per_rank}, DType::f64, c.device());
  Tensor all = Tensor::empty({per_rank * c.world_size()}, DType::f64, c.device());
  double* p = send.data<double>();
  for (const RankFigures& f : mine) {
    for (double v : {f.oop_us, f.ip_us, double(f.wrong_oop), double(f.wrong_ip), double(f.sent), double(f.received)})
      *p++ = v;
  }
  c.all_gather(send, all);
  std::vector<std::vector<RankFigures>> figures(size_t(c.world_size()));
  const double* q = all.data<double>();
  for (auto& rank_figures : figures) {
    for (size_t k = 0; k < sizes.size(); ++k, q += kFigureFields)
      rank_figures.push_back({q[0], q[1], int64_t(q[2]), int64_t(q[3]), int64_t(q[4]), int64_t(q[5])});
  }
  return combine(figures, sizes, bench_dtype(o.dtype));
}

double algbw(int64_t bytes, double us) { return us > 0 ? double(bytes) / (us * 1e-6) / 1e9 : 0.0; }
// nccl-tests' bus bandwidth factor: all_reduce 2(n-1)/n; reduce_scatter, all_gather (n-1)/n.
double bus_factor(const BenchOptions& o) {
  const int n = o.ranks;
  return n > 1 ? (o.collective == "all_reduce" ? 2.0 : 1.0) * (n - 1) / n : 0.0;
}
std::string wrong_str(int64_t w) { return w < 0 ? "N/A" : std::to_string(w); }

json measure_json(const Measure& m, int64_t bytes, double bus) {
  return {{"time_us", m.time_us},
          {"algbw_GBps", algbw(bytes, m.time_us)},
          {"busbw_GBps", algbw(bytes, m.time_us) * bus},
          {"wrong", m.wrong < 0 ? json(nullptr) : json(m.wrong)}};
}
}  // namespace

// nccl-tests' all_reduce_perf table of `rows` (and the memcpy comparison on cpu); returns
// the results' metrics.
static json print_table(const BenchOptions& o, const std::vector<Row>& rows, int64_t wrong_total, double memcpy_bw,
                        int64_t max_size) {
  const int n = o.ranks;
  const double bus = bus_factor(o);
  std::printf(
      "# oomlab allreduce-bench: %s backend %s algo %s ranks %d device %s minBytes %lld maxBytes %lld step: "
      "%lld(factor) warmup iters: %lld iters: %lld validation: %d\n",
      o.collective.c_str(), o.backend.c_str(), o.algo.c_str(), n, o.device.c_str(), (long long)o.min_bytes,
      (long long)o.max_bytes,
      (long long)o.step_factor, (long long)o.warmup, (long long)o.iters, o.device == "meta" ? 0 : 1);
  std::printf("#%62s%35s\n", "out-of-place", "in-place");
  std::printf("#%11s %13s %9s %7s %7s %8s %7s %7s %6s %8s %7s %7s %6s\n", "size", "count", "type", "redop", "root",
              "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong");
  std::printf("#%11s %13s %9s %7s %7s %8s %7s %7s %6s %8s %7s %7s %6s\n", "(B)", "(elements)", "", "", "", "(us)",
              "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  json jrows = json::array();
  double bus_sum = 0;
  for (const Row& r : rows) {
    const double ab = algbw(r.bytes, r.oop.time_us), ib = algbw(r.bytes, r.ip.time_us);
    std::printf(" %11lld %13lld %9s %7s %7d %8.1f %7.2f %7.2f %6s %8.1f %7.2f %7.2f %6s\n", (long long)r.bytes,
                (long long)r.count, o.dtype.c_str(), o.op.c_str(), -1, r.oop.time_us, ab, ab * bus,
                wrong_str(r.oop.wrong).c_str(), r.ip.time_us, ib, ib * bus, wrong_str(r.ip.wrong).c_str());
    bus_sum += (ab + ib) * bus / 2;
    jrows.push_back({{"size_bytes", r.bytes}, {"count", r.count}, {"type", o.dtype}, {"redop", o.op}, {"root", -1},
                     {"out_of_place", measure_json(r.oop, r.bytes, bus)},
                     {"in_place", measure_json(r.ip, r.bytes, bus)},
                     {"bytes_sent_per_rank", r.sent}, {"bytes_received_per_rank", r.received}});
  }
  const double avg_bus = rows.empty() ? 0.0 : bus_sum / double(rows.size());
  std::printf("# Out of bounds values : %lld %s\n", (long long)wrong_total, wrong_total == 0 ? "OK" : "FAILED");
  std::printf("# Avg bus bandwidth    : %g\n", avg_bus);
  json metrics = {{"rows", jrows}, {"avg_busbw_GBps", avg_bus}, {"wrong_total", wrong_total}};
  if (memcpy_bw > 0 && !rows.empty()) {
    const Row& last = rows.back();
    const double oop = algbw(last.bytes, last.oop.time_us) * bus / memcpy_bw;
    const double ip = algbw(last.bytes, last.ip.time_us) * bus / memcpy_bw;
    std::printf("# memcpy bandwidth     : %.2f GB/s (one thread, %lld bytes); busbw at %lld bytes = %.2f (out of "
                "place), %.2f (in place) of it\n", memcpy_bw, (long long)max_size,
                (long long)last.bytes, oop, ip);
    metrics["memcpy_GBps"] = memcpy_bw;
    metrics["busbw_over_memcpy_at_max"] = {{"out_of_place", oop}, {"in_place", ip}};
  }
  return metrics;
}

int run_allreduce_bench(BenchOptions o, const BenchLaunch& launch) {
  check_bench_options(o);
  const std::string& out = launch.json_out;
  if (!out.empty()) check_output_file(out, "--json");
  std::unique_ptr<Communicator> comm;   // a process backend: this process is one rank
  if (o.backend != "local") {
    RankInfo info = discover_rank(launch.rank_flags, current_environment());
    info.timeout = std::chrono::milliseconds(int64_t(o.timeout_s * 1000));   // the rendezvous's bound too
    if (info.source == "single" && o.ranks > 1) {   // no launcher: be one
      check_holds_a_buffer(o);                       // once, before the rank processes
      std::vector<std::string> job = {"allreduce-bench"};
      job.insert(job.end(), launch.args.begin(), launch.args.end());
      return launch_local_job(o.backend, o.ranks, job);
    }
    OOMLAB_CHECK(!launch.ranks_given || o.ranks == info.world_size, "--ranks ", o.ranks, " but the launcher (",
                 info.source, ") started ", info.world_size, " rank(s)");
    o.ranks = info.world_size;
    const Device dev = o.device == "cuda" ? Device{DeviceType::cuda, info.local_rank} : Device{DeviceType::cpu, 0};
    comm = make_communicator(o.backend, info, dev);
  }
  check_holds_a_buffer(o);
  const std::vector<int64_t> sizes = bench_sizes(o);   // over the ranks there are (a launcher's)
  const bool printer = !comm || comm->rank() == 0;
  const double memcpy_bw =
      o.device != "cpu" || !printer ? 0.0 : memcpy_gbps(sizes.back());
  const std::vector<Row> rows = comm ? run_process(*comm, o, sizes) : run_local(o, sizes);
  const int n = o.ranks;
  int64_t wrong_total = 0;
  for (const Row& r : rows) wrong_total += std::max<int64_t>(r.oop.wrong, 0) + std::max<int64_t>(r.ip.wrong, 0);
  if (!printer) return wrong_total == 0 ? 0 : kExitWrongResults;
  const json metrics = print_table(o, rows, wrong_total, memcpy_bw, sizes.back());
  if (!out.empty()) {
    const json config = {{"collective", o.collective}, {"backend", o.backend}, {"algo", o.algo}, {"ranks", n},
                         {"device", o.device},
                         {"min_bytes", o.min_bytes}, {"max_bytes", o.max_bytes}, {"step_factor", o.step_factor},
                         {"op", o.op}, {"dtype", o.dtype}, {"iters", o.iters}, {"warmup", o.warmup}};
    std::vector<Device> devs;
    if (comm) devs.push_back(comm->device());
    else for (int r = 0; r < n; ++r) devs.push_back(Device{parse_device(o.device).type, r});
    write_json_atomic(out, make_results("allreduce-bench", devs, config, metrics, "the whole benchmark"));
  }
  return wrong_total == 0 ? 0 : kExitWrongResults;
}

}  // namespace oomlab
