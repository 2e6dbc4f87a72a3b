// CPU implementations of the lens ops (registered for the CPU dispatch key). The math lives in the
// torch-free *_kernel.h headers next to this file; here: validation, dtype dispatch, parallel_for
// over rows, and the deterministic reduction of the per-row partial sums.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <torch/library.h>

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <vector>

#include "../checks.h"
#include "advantages_kernel.h"
#include "crpo_loss_kernel.h"

namespace lens {
namespace {

// Rows per parallel_for task: enough tokens per task to amortize the scheduling.
int64_t row_grain(int64_t cols) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)); }

template <typename F>
void dispatch_kl(KlKind kl, F&& f) {
  switch (kl) {
    case KlKind::none: return f(std::integral_constant<KlKind, KlKind::none>{});
    case KlKind::k1: return f(std::integral_constant<KlKind, KlKind::k1>{});
    case KlKind::k2: return f(std::integral_constant<KlKind, KlKind::k2>{});
    case KlKind::k3: return f(std::integral_constant<KlKind, KlKind::k3>{});
  }
}

// Calls f(T{}) for the token dtypes the ops accept (checked before): fp32, fp16, bf16, and nothing
// else, so no fp64 kernels are compiled.
template <typename F>
void dispatch_dtype(at::ScalarType t, F&& f) {
  if (t == at::kHalf) return f(c10::Half{});
  if (t == at::kBFloat16) return f(c10::BFloat16{});
  return f(float{});
}

// Calls f(T{}, M{}) for the token and mask dtypes of the inputs.
template <typename F>
void dispatch_tokens(const CrpoInputs& in, F&& f) {
  dispatch_dtype(in.logp.scalar_type(), [&](auto t_tag) {
    if (in.mask.scalar_type() == at::kBool) return f(t_tag, bool{});
    return f(t_tag, float{});
  });
}

template <typename T, typename M>
cpu::RowInputs<T, M> row_inputs(const CrpoInputs& in, int64_t i) {
  const T* ref = in.ref_logp.defined() ? in.ref_logp.const_data_ptr<T>() + i * in.ref_logp.stride(0) : nullptr;
  return {in.logp.const_data_ptr<T>() + i * in.logp.stride(0),
          in.old_logp.const_data_ptr<T>() + i * in.old_logp.stride(0),
          ref,
          in.mask.const_data_ptr<M>() + i * in.mask.stride(0),
          in.cols,
          in.advantages.const_data_ptr<float>()[i],
          in.weights.const_data_ptr<float>()[i]};
}

// A bf16 row as raw bits, for the blocked bf16 kernels (c10::BFloat16 is one uint16_t of those bits).
static_assert(sizeof(c10::BFloat16) == sizeof(uint16_t));
template <typename M>
cpu::RowInputs<uint16_t, M> bits_row(const cpu::RowInputs<c10::BFloat16, M>& r) {
  auto bits = [](const c10::BFloat16* p) { return reinterpret_cast<const uint16_t*>(p); };
  return {bits(r.logp), bits(r.old_logp), bits(r.ref_logp), r.mask, r.len, r.adv, r.weight};
}

template <KlKind K, typename T, typename M>
RowPartials row_forward(const CrpoInputs& in, int64_t i) {
  if constexpr (std::is_same_v<T, c10::BFloat16>) {
    return cpu::crpo_row_forward_bf16<K>(bits_row(row_inputs<T, M>(in, i)), in.hyper);
  } else {
    return cpu::crpo_row_forward<K>(row_inputs<T, M>(in, i), in.hyper);
  }
}

template <KlKind K, typename T, typename M>
void row_backward(const cpu::RowInputs<T, M>& row, const CrpoHyper& h, float scale, T* grad) {
  if constexpr (std::is_same_v<T, c10::BFloat16>) {
    cpu::crpo_row_backward_bf16<K>(bits_row(row), h, scale, reinterpret_cast<uint16_t*>(grad));
  } else {
    cpu::crpo_row_backward<K>(row, h, scale, grad);
  }
}

std::tuple<at::Tensor, at::Tensor> crpo_loss_fwd_cpu(const at::Tensor& logp, const at::Tensor& old_logp,
                                                     const std::optional<at::Tensor>& ref_logp,
                                                     const at::Tensor& advantages, const at::Tensor& weights,
                                                     const at::Tensor& mask, double clip_low, double clip_high,
                                                     double clip_c, double beta, int64_t kl, int64_t agg,
                                                     std::optional<double> num_tokens,
                                                     std::optional<double> num_seqs) {
  const CrpoInputs in = prepare_crpo(logp, old_logp, ref_logp, advantages, weights, mask, clip_low, clip_high,
                                     clip_c, beta, kl, agg);
  // One partial-sum record per row, reduced in row order below: the result does not depend on the
  // number of threads.
  std::vector<RowPartials> rows(in.rows);
  dispatch_tokens(in, [&](auto t_tag, auto m_tag) {
    using T = decltype(t_tag);
    using M = decltype(m_tag);
    dispatch_kl(in.kl, [&](auto k_tag) {
      constexpr KlKind K = decltype(k_tag)::value;
      at::parallel_for(0, in.rows, row_grain(in.cols), [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) rows[i] = row_forward<K, T, M>(in, i);
      });
    });
  });
  Totals totals;
  for (const RowPartials& r : rows) accumulate_row(totals, r);
  at::Tensor loss = at::empty({}, logp.options().dtype(at::kFloat));
  at::Tensor stats = at::empty({kNumStats}, logp.options().dtype(at::kFloat));
  finalize_loss(totals, in.cols, in.agg, num_tokens.value_or(-1.0), num_seqs.value_or(-1.0),
                loss.mutable_data_ptr<float>(), stats.mutable_data_ptr<float>());
  return {loss, stats};
}

at::Tensor crpo_loss_bwd_cpu(const at::Tensor& grad_loss, const at::Tensor& logp, const at::Tensor& old_logp,
                             const std::optional<at::Tensor>& ref_logp, const at::Tensor& advantages,
                             const at::Tensor& weights, const at::Tensor& mask, const at::Tensor& stats,
                             double clip_low, double clip_high, double clip_c, double beta, int64_t kl,
                             int64_t agg) {
  const CrpoInputs in = prepare_crpo(logp, old_logp, ref_logp, advantages, weights, mask, clip_low, clip_high,
                                     clip_c, beta, kl, agg);
  TORCH_CHECK(grad_loss.numel() == 1, "lens::crpo_loss_bwd: grad_loss must be a scalar, got ", grad_loss.sizes());
  TORCH_CHECK(stats.dim() == 1 && stats.size(0) == kNumStats && stats.scalar_type() == at::kFloat,
              "lens::crpo_loss_bwd: stats must be the float32 [", static_cast<int>(kNumStats),
              "] output of lens::crpo_loss_fwd, got ", stats.scalar_type(), stats.sizes());
  const float g = grad_loss.to(at::kFloat).item<float>();
  const at::Tensor st = stats.contiguous();
  const float denom_tokens = st.const_data_ptr<float>()[kTokenDenom];
  const float denom_seqs = st.const_data_ptr<float>()[kSeqDenom];
  at::Tensor grad = at::empty(in.logp.sizes(), in.logp.options().memory_format(at::MemoryFormat::Contiguous));
  dispatch_tokens(in, [&](auto t_tag, auto m_tag) {
    using T = decltype(t_tag);
    using M = decltype(m_tag);
    dispatch_kl(in.kl, [&](auto k_tag) {
      constexpr KlKind K = decltype(k_tag)::value;
      at::parallel_for(0, in.rows, row_grain(in.cols), [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          const cpu::RowInputs<T, M> row = row_inputs<T, M>(in, i);
          const float len = in.agg == Agg::seq_mean_token_mean ? cpu::mask_row_sum(row.mask, in.cols) : 0.0f;
          const float scale = g * row_grad_scale(in.agg, len, in.cols, denom_tokens, denom_seqs);
          row_backward<K>(row, in.hyper, scale, grad.mutable_data_ptr<T>() + i * in.cols);
        }
      });
    });
  });
  return grad;
}

// Group ids index per-group accumulators on the CPU, so they must lie in [0, N]; returns max id + 1.
int64_t checked_num_groups(const at::Tensor& group_index, const char* op) {
  const int64_t* g = group_index.const_data_ptr<int64_t>();
  const int64_t n = group_index.numel();
  int64_t lo = 0, hi = -1;
  for (int64_t i = 0; i < n; ++i) {
    lo = std::min(lo, g[i]);
    hi = std::max(hi, g[i]);
  }
  TORCH_CHECK(lo >= 0, op, ": group_index must be >= 0, got ", lo);
  return hi + 1;
}

at::Tensor grpo_advantages_cpu(const at::Tensor& rewards, const at::Tensor& group_index, double eps) {
  const char* op = "lens::grpo_advantages";
  check_group_inputs(rewards, group_index, op);
  const at::Tensor r = rewards.contiguous();
  const at::Tensor g = group_index.contiguous();
  const int64_t num_groups = checked_num_groups(g, op);
  at::Tensor out = at::empty(r.sizes(), r.options().dtype(at::kFloat));
  dispatch_dtype(r.scalar_type(), [&](auto t_tag) {
    using T = decltype(t_tag);
    cpu::grpo_advantages(r.const_data_ptr<T>(), g.const_data_ptr<int64_t>(), r.numel(), num_groups,
                         static_cast<float>(eps), out.mutable_data_ptr<float>());
  });
  return out;
}

at::Tensor weighted_group_advantages_cpu(const at::Tensor& rewards, const at::Tensor& weights,
                                         const at::Tensor& group_index, double eps) {
  const char* op = "lens::weighted_group_advantages";
  check_group_inputs(rewards, group_index, op);
  check_weights(rewards, weights);
  const at::Tensor r = rewards.contiguous();
  const at::Tensor w = weights.to(at::kFloat).contiguous();
  const at::Tensor g = group_index.contiguous();
  const int64_t num_groups = checked_num_groups(g, op);
  const float* wp = w.const_data_ptr<float>();
  TORCH_CHECK(std::none_of(wp, wp + w.numel(), [](float v) { return v < 0.0f; }), op, ": weights must be >= 0");
  at::Tensor out = at::empty(r.sizes(), r.options().dtype(at::kFloat));
  dispatch_dtype(r.scalar_type(), [&](auto t_tag) {
    using T = decltype(t_tag);
    cpu::weighted_group_advantages(r.const_data_ptr<T>(), wp, g.const_data_ptr<int64_t>(), r.numel(),
                                   num_groups, static_cast<float>(eps), out.mutable_data_ptr<float>());
  });
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(lens, CPU, m) {
  m.impl("grpo_advantages", &grpo_advantages_cpu);
  m.impl("weighted_group_advantages", &weighted_group_advantages_cpu);
  m.impl("crpo_loss_fwd", &crpo_loss_fwd_cpu);
  m.impl("crpo_loss_bwd", &crpo_loss_bwd_cpu);
}

}  // namespace lens
