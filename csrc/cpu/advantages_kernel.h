// CPU kernels of the group advantages: GRPO (verl numerics) and LENS Eq. (6) (weighted). Torch-free
// (tested by the C++ test target). N is a few thousand rollouts, so these are sequential O(N + G)
// passes with double accumulators per group; threads would cost more than they save.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace lens::cpu {

// A[n] = (r - mean_g) / (std_g + eps) with the unbiased std; a group of one has mean 0 and std 1 (verl). group ids must lie in [0, num_groups).
template <typename T>
void grpo_advantages(const T* rewards, const int64_t* group, int64_t n, int64_t num_groups, float eps,
                     float* out) {
  std::vector<double> count(num_groups, 0.0), sum(num_groups, 0.0), sq(num_groups, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    count[group[i]] += 1.0;
    sum[group[i]] += static_cast<float>(rewards[i]);
  }
  for (int64_t g = 0; g < num_groups; ++g) sum[g] = count[g] > 1.0 ? sum[g] / count[g] : 0.0;  // now the mean
  for (int64_t i = 0; i < n; ++i) {
    const double dev = static_cast<float>(rewards[i]) - sum[group[i]];
    sq[group[i]] += dev * dev;
  }
  for (int64_t i = 0; i < n; ++i) {
    const int64_t g = group[i];
    const double centered = static_cast<float>(rewards[i]) - sum[g];
    const double std = count[g] > 1.0 ? std::sqrt(sq[g] / (count[g] - 1.0)) : 1.0;
    out[i] = static_cast<float>(centered / (std + eps));
  }
}

// LENS Eq. (6): W = sum_g w, mu = sum (w / W) r, sigma = sqrt(sum (w / W) (r - mu)^2),
// A = (r - mu) / (sigma + eps); A = 0 for a group with W <= 0 or whose members with w > 0 all have the
// same reward. Weights must be >= 0 (checked by the caller).
template <typename T, typename W>
void weighted_group_advantages(const T* rewards, const W* weights, const int64_t* group, int64_t n,
                               int64_t num_groups, float eps, float* out) {
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<double> w_sum(num_groups, 0.0), wr(num_groups, 0.0), var(num_groups, 0.0);
  std::vector<double> r_min(num_groups, inf), r_max(num_groups, -inf);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t g = group[i];
    const double w = static_cast<float>(weights[i]);
    const double r = static_cast<float>(rewards[i]);
    w_sum[g] += w;
    wr[g] += w * r;
    if (w > 0.0) {
      r_min[g] = r < r_min[g] ? r : r_min[g];
      r_max[g] = r > r_max[g] ? r : r_max[g];
    }
  }
  for (int64_t g = 0; g < num_groups; ++g) wr[g] = w_sum[g] > 0.0 ? wr[g] / w_sum[g] : 0.0;  // now mu
  for (int64_t i = 0; i < n; ++i) {
    const int64_t g = group[i];
    const double dev = static_cast<float>(rewards[i]) - wr[g];
    if (w_sum[g] > 0.0) var[g] += static_cast<float>(weights[i]) / w_sum[g] * dev * dev;
  }
  for (int64_t i = 0; i < n; ++i) {
    const int64_t g = group[i];
    const bool informative = w_sum[g] > 0.0 && r_max[g] > r_min[g];
    const double a = (static_cast<float>(rewards[i]) - wr[g]) / (std::sqrt(var[g]) + eps);
    out[i] = informative ? static_cast<float>(a) : 0.0f;
  }
}

}  // namespace lens::cpu
