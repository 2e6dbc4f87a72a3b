// CUDA kernels of the group advantages: GRPO (verl numerics) and LENS Eq. (6). One launch for all
// groups: block b belongs to rollout b, and only the block of a group's FIRST member works (the others
// find an earlier member and exit), so group ids are plain labels, the number of groups need not be
// known on the host, and nothing synchronizes with it. Sums are in double, in a fixed order.
#include <cmath>

#include "common.cuh"
#include "launch.h"

namespace lens::cuda {
namespace {

// True (in every thread) when rollout `b`'s group id occurs at an index below b. Scans backwards in
// block-sized chunks: members are usually adjacent, so most blocks stop after one chunk.
__device__ bool has_earlier_member(const int64_t* group, int64_t b) {
  const int64_t id = group[b];
  for (int64_t end = b; end > 0; end -= kBlock) {
    const int64_t i = end - 1 - threadIdx.x;
    if (__syncthreads_or(i >= 0 && group[i] == id)) return true;
  }
  return false;
}

template <typename T>
__global__ void __launch_bounds__(kBlock) grpo_kernel(const T* rewards, const int64_t* group, int64_t n, float eps,
                                                      float* out) {
  const int64_t b = blockIdx.x;
  if (has_earlier_member(group, b)) return;
  const int64_t id = group[b];
  double count = 0.0, sum = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += kBlock) {
    if (group[i] != id) continue;
    count += 1.0;
    sum += to_float(rewards[i]);
  }
  count = block_allreduce(count, SumOp{}, 0.0);
  sum = block_allreduce(sum, SumOp{}, 0.0);
  const double mean = count > 1.0 ? sum / count : 0.0;  // a group of one: mean 0, std 1 (verl)
  double sq = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += kBlock) {
    if (group[i] != id) continue;
    const double dev = to_float(rewards[i]) - mean;
    sq += dev * dev;
  }
  sq = block_allreduce(sq, SumOp{}, 0.0);
  const double std = count > 1.0 ? sqrt(sq / (count - 1.0)) : 1.0;
  for (int64_t i = threadIdx.x; i < n; i += kBlock) {
    if (group[i] != id) continue;
    const double centered = to_float(rewards[i]) - mean;
    out[i] = static_cast<float>(centered / (std + eps));
  }
}

// LENS Eq. (6). A negative weight (rejected by the Python face and the CPU op) makes its group NaN.
template <typename T>
__global__ void __launch_bounds__(kBlock) weighted_kernel(const T* rewards, const float* weights, const int64_t* group,
                                                          int64_t n, float eps, float* out) {
  const int64_t b = blockIdx.x;
  if (has_earlier_member(group, b)) return;
  const int64_t id = group[b];
  double w_sum = 0.0, wr = 0.0, r_min = INFINITY, r_max = -INFINITY;
  int negative = 0;
  for (int64_t i = threadIdx.x; i < n; i += kBlock) {
    if (group[i] != id) continue;
    const double w = weights[i];
    const double r = to_float(rewards[i]);
    w_sum += w;
    wr += w * r;
    negative |= w < 0.0;
    if (w > 0.0) {
      r_min = fmin(r_min, r);
      r_max = fmax(r_max, r);
    }
  }
  w_sum = block_allreduce(w_sum, SumOp{}, 0.0);
  wr = block_allreduce(wr, SumOp{}, 0.0);
  r_min = block_allreduce(r_min, MinOp{}, static_cast<double>(INFINITY));
  r_max = block_allreduce(r_max, MaxOp{}, -static_cast<double>(INFINITY));
  negative = __syncthreads_or(negative);
  const double mu = w_sum > 0.0 ? wr / w_sum : 0.0;
  double var = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += kBlock) {
    if (group[i] != id || !(w_sum > 0.0)) continue;
    const double dev = to_float(rewards[i]) - mu;
    var += weights[i] / w_sum * dev * dev;
  }
  var = block_allreduce(var, SumOp{}, 0.0);
  const bool informative = w_sum > 0.0 && r_max > r_min;
  for (int64_t i = threadIdx.x; i < n; i += kBlock) {
    if (group[i] != id) continue;
    const double a = (to_float(rewards[i]) - mu) / (sqrt(var) + eps);
    out[i] = negative ? NAN : (informative ? static_cast<float>(a) : 0.0f);
  }
}

}  // namespace

cudaError_t grpo_advantages(const void* rewards, Dtype dtype, const int64_t* group, int64_t n, float eps,
                            float* out, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return dispatch_dtype(dtype, [&](auto t_tag) {
    using T = decltype(t_tag);
    grpo_kernel<T><<<static_cast<unsigned int>(n), kBlock, 0, stream>>>(static_cast<const T*>(rewards), group, n,
                                                                         eps, out);
    return cudaGetLastError();
  });
}

cudaError_t weighted_group_advantages(const void* rewards, Dtype dtype, const float* weights, const int64_t* group,
                                      int64_t n, float eps, float* out, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  return dispatch_dtype(dtype, [&](auto t_tag) {
    using T = decltype(t_tag);
    weighted_kernel<T><<<static_cast<unsigned int>(n), kBlock, 0, stream>>>(static_cast<const T*>(rewards), weights,
                                                                             group, n, eps, out);
    return cudaGetLastError();
  });
}

}  // namespace lens::cuda
