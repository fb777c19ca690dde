// collective_suite.h — the collective checks every communicator backend must pass, run on
// each rank with that rank's communicator (threads for local, processes under mpirun for
// mpi ...). Inputs are collective_check.h's small integers, so every result is compared
// bit for bit with the serial reference: all_reduce (every dtype x sum/avg/max x in-place
// and out-of-place x counts 1, 5 (chunks smaller than the world) and 1000), broadcast,
// reduce, all_gather, reduce_scatter, barrier; ranks holding identical bits after an
// all-reduce of random float32 data; NaN propagating through max.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "engine/core/rng.h"
#include "engine/parallel/collective_check.h"
#include "engine/parallel/communicator.h"

namespace oomlab::testing {

inline const DType kCollectiveDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i64};
inline const ReduceOp kReduceOps[] = {ReduceOp::sum, ReduceOp::avg, ReduceOp::max};

inline std::vector<double> host_values(const Tensor& t) {
  if (t.dtype() == DType::i64) {
    const std::vector<int64_t> v = t.to_vector_i64();
    return {v.begin(), v.end()};
  }
  return t.to_vector();
}

inline void check_all_reduce(Communicator& c) {
  const int n = c.world_size(), r = c.rank();
  for (DType d : kCollectiveDTypes)
    for (ReduceOp op : kReduceOps)
      for (bool in_place : {false, true})
        for (int64_t count : {int64_t(1), int64_t(5), int64_t(1000)}) {
          SCOPED_TRACE(str_cat("all_reduce ", dtype_name(d), " ", reduce_op_name(op), in_place ? " in-place" : "",
                               " count ", count, " rank ", r, " of ", n));
          Tensor in = check_input(r, count, d, c.device());
          Tensor out = in_place ? in : Tensor::zeros({count}, d, c.device());
          c.all_reduce(in, out, op);
          EXPECT_EQ(count_wrong(out, op, n), 0);
          if (!in_place) {
            EXPECT_EQ(host_values(in), host_values(check_input(r, count, d, c.device())));
          }
        }
}

inline void check_other_collectives(Communicator& c) {
  const int n = c.world_size(), r = c.rank(), root = n - 1;
  const int64_t count = 11;
  const Device dev = c.device();
  for (DType d : kCollectiveDTypes)
    for (bool in_place : {false, true}) {
      SCOPED_TRACE(str_cat(dtype_name(d), in_place ? " in-place" : " out-of-place", " rank ", r, " of ", n));
      {
        Tensor in = check_input(r, count, d, dev);
        Tensor out = in_place ? in : Tensor::zeros({count}, d, dev);
        c.broadcast(in, out, root);
        EXPECT_EQ(host_values(out), host_values(check_input(root, count, d, dev))) << "broadcast";
      }
      for (ReduceOp op : kReduceOps) {
        Tensor in = check_input(r, count, d, dev);
        Tensor out = in_place ? in : Tensor::full({count}, 99.0, d, dev);
        c.reduce(in, out, op, root);
        if (r == root) {
          EXPECT_EQ(count_wrong(out, op, n), 0) << "reduce " << reduce_op_name(op);
        } else if (!in_place) {
          EXPECT_EQ(host_values(out), std::vector<double>(static_cast<size_t>(count), 99.0))
              << "reduce wrote a non-root recv";
        }
      }
      {
        Tensor recv = Tensor::zeros({count * n}, d, dev);
        Tensor send = in_place ? recv.narrow(0, count * r, count) : check_input(r, count, d, dev);
        if (in_place) send.copy_(check_input(r, count, d, dev));
        c.all_gather(send, recv);
        const std::vector<double> v = host_values(recv);
        for (int p = 0; p < n; ++p)
          for (int64_t i = 0; i < count; ++i) ASSERT_EQ(v[size_t(p * count + i)], check_value(p, i)) << "all_gather";
      }
      for (ReduceOp op : kReduceOps) {
        Tensor send = check_input(r, count * n, d, dev);
        Tensor recv = in_place ? send.narrow(0, count * r, count) : Tensor::zeros({count}, d, dev);
        c.reduce_scatter(send, recv, op);
        EXPECT_EQ(count_wrong(recv, op, n, count * r), 0) << "reduce_scatter " << reduce_op_name(op);
      }
    }
  c.barrier();
}

// Random float32 data (each rank its own stream): the average is close to the serial one
// and every rank holds the same bits (checked by gathering everyone's result).
inline void check_identical_results(Communicator& c) {
  const int n = c.world_size(), r = c.rank();
  const int64_t count = 100003;
  device_generator(c.device()).set_state(Generator{uint64_t(100 + r), 0});
  Tensor x = Tensor::normal({count}, 0.0, 1.0, DType::f32, c.device());
  Tensor all_in = Tensor::zeros({count * n}, DType::f32, c.device());
  c.all_gather(x, all_in);
  c.all_reduce(x, ReduceOp::avg);
  Tensor all_out = Tensor::zeros({count * n}, DType::f32, c.device());
  c.all_gather(x, all_out);
  const std::vector<double> ins = all_in.to_vector(), outs = all_out.to_vector(), mine = x.to_vector();
  for (int p = 0; p < n; ++p)
    for (int64_t i = 0; i < count; ++i)
      ASSERT_EQ(outs[size_t(p * count + i)], mine[size_t(i)]) << "rank " << p << " differs at " << i;
  for (int64_t i = 0; i < count; i += 997) {
    double s = 0;
    for (int p = 0; p < n; ++p) s += ins[size_t(p * count + i)];
    EXPECT_NEAR(mine[size_t(i)], s / n, 1e-6 * (1 + std::abs(s)));
  }
}

inline void check_max_propagates_nan(Communicator& c) {
  Tensor t = Tensor::from_vector({1.0, c.rank() == c.world_size() - 1 ? std::nan("") : 2.0, -1.0}, {3}, DType::f32,
                                 c.device());
  c.all_reduce(t, ReduceOp::max);
  const std::vector<double> v = t.to_vector();
  EXPECT_EQ(v[0], 1.0);
  EXPECT_TRUE(std::isnan(v[1]));
  EXPECT_EQ(v[2], -1.0);
}

}  // namespace oomlab::testing
