// Boundary validation shared by the CPU and CUDA implementations of the lens ops: named TORCH_CHECKs
// for shapes, dtypes and devices, and the range checks of the enum arguments (kl kind, aggregation).
// Inputs are normalized here (inner dimension contiguous, [N] vectors fp32, uncommon mask dtypes
// to fp32) so that every kernel sees the same few layouts.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <optional>

#include "core/crpo_reduce.h"

namespace lens {

inline bool is_token_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kHalf || t == at::kBFloat16;
}

inline void check_token_dtype(const at::Tensor& t, const char* op, const char* name) {
  TORCH_CHECK(is_token_dtype(t.scalar_type()), op, ": ", name, " must be float32, float16 or bfloat16, got ",
              t.scalar_type());
}

inline void check_same_device(const at::Tensor& a, const at::Tensor& b, const char* op, const char* name) {
  TORCH_CHECK(a.device() == b.device(), op, ": ", name, " is on ", b.device(), " but logp is on ", a.device());
}

// Row-major with a unit inner stride: the kernels take each row's start, so row strides (slices of a
// wider [N, P + T] log-prob tensor) are free; anything else is copied once.
inline at::Tensor rows_contiguous(const at::Tensor& t) {
  return (t.size(1) <= 1 || t.stride(1) == 1) ? t : t.contiguous();
}

// kl and agg arrive as indices into lens.variants.KL_KINDS ("k1", "k2", "k3") and LOSS_AGGS ("token_mean",
// "seq_mean_token_mean", "seq_mean_token_sum_norm"), which lens.ops passes: the names are spelled once, in
// Python, and only their order is mirrored by the enums of core/token_math.h (KlKind counts `none` first).
inline KlKind parse_kl(int64_t kl, bool has_ref) {
  TORCH_CHECK(kl >= 0 && kl <= 2, "lens::crpo_loss: kl must index lens.variants.KL_KINDS (0..2), got ", kl);
  return has_ref ? static_cast<KlKind>(kl + 1) : KlKind::none;
}

inline Agg parse_agg(int64_t agg) {
  TORCH_CHECK(agg >= 0 && agg <= 2, "lens::crpo_loss: agg must index lens.variants.LOSS_AGGS (0..2), got ", agg);
  return static_cast<Agg>(agg);
}

// The validated, normalized inputs of lens::crpo_loss_fwd / _bwd.
struct CrpoInputs {
  at::Tensor logp, old_logp, ref_logp, advantages, weights, mask;  // ref_logp undefined without ref
  KlKind kl;
  Agg agg;
  CrpoHyper hyper;
  int64_t rows, cols;
};

inline at::Tensor row_vector(const at::Tensor& v, const at::Tensor& logp, const char* name) {
  TORCH_CHECK(v.dim() == 1 && v.size(0) == logp.size(0), "lens::crpo_loss: ", name, " must have shape [",
              logp.size(0), "], got ", v.sizes());
  TORCH_CHECK(at::isFloatingType(v.scalar_type()), "lens::crpo_loss: ", name, " must be floating point, got ",
              v.scalar_type());
  check_same_device(logp, v, "lens::crpo_loss", name);
  return v.to(at::kFloat).contiguous();
}

inline at::Tensor token_tensor(const at::Tensor& t, const at::Tensor& logp, const char* name) {
  TORCH_CHECK(t.sizes() == logp.sizes(), "lens::crpo_loss: ", name, " must have shape ", logp.sizes(), ", got ",
              t.sizes());
  TORCH_CHECK(t.scalar_type() == logp.scalar_type(), "lens::crpo_loss: ", name, " must have logp's dtype ",
              logp.scalar_type(), ", got ", t.scalar_type());
  check_same_device(logp, t, "lens::crpo_loss", name);
  return rows_contiguous(t);
}

inline CrpoInputs prepare_crpo(const at::Tensor& logp, const at::Tensor& old_logp,
                               const std::optional<at::Tensor>& ref_logp, const at::Tensor& advantages,
                               const at::Tensor& weights, const at::Tensor& mask, double clip_low, double clip_high,
                               double clip_c, double beta, int64_t kl, int64_t agg) {
  TORCH_CHECK(logp.dim() == 2, "lens::crpo_loss: logp must be [N, T], got shape ", logp.sizes());
  check_token_dtype(logp, "lens::crpo_loss", "logp");
  const bool has_ref = ref_logp.has_value() && ref_logp->defined();
  TORCH_CHECK(has_ref || beta == 0.0, "lens::crpo_loss: beta = ", beta, " != 0 needs ref_logp");
  TORCH_CHECK(clip_c > 1.0, "lens::crpo_loss: clip_c must be > 1, got ", clip_c);
  CrpoInputs in;
  in.logp = rows_contiguous(logp);
  in.old_logp = token_tensor(old_logp, logp, "old_logp");
  if (has_ref) in.ref_logp = token_tensor(*ref_logp, logp, "ref_logp");
  in.advantages = row_vector(advantages, logp, "advantages");
  in.weights = row_vector(weights, logp, "weights");
  TORCH_CHECK(mask.sizes() == logp.sizes(), "lens::crpo_loss: mask must have shape ", logp.sizes(), ", got ",
              mask.sizes());
  check_same_device(logp, mask, "lens::crpo_loss", "mask");
  // bool and fp32 masks are read in place; other dtypes (0/1 ints, fp16, bf16) are converted once.
  const bool native_mask = mask.scalar_type() == at::kBool || mask.scalar_type() == at::kFloat;
  in.mask = rows_contiguous(native_mask ? mask : mask.to(at::kFloat));
  in.kl = parse_kl(kl, has_ref);
  in.agg = parse_agg(agg);
  in.hyper = {static_cast<float>(clip_low), static_cast<float>(clip_high), static_cast<float>(clip_c),
              static_cast<float>(beta)};
  in.rows = logp.size(0);
  in.cols = logp.size(1);
  return in;
}

inline void check_group_inputs(const at::Tensor& rewards, const at::Tensor& group_index, const char* op) {
  TORCH_CHECK(rewards.dim() == 1, op, ": rewards must be 1-D [N], got shape ", rewards.sizes());
  check_token_dtype(rewards, op, "rewards");
  TORCH_CHECK(group_index.sizes() == rewards.sizes(), op, ": group_index must have shape ", rewards.sizes(),
              ", got ", group_index.sizes());
  TORCH_CHECK(group_index.scalar_type() == at::kLong, op, ": group_index must be int64, got ",
              group_index.scalar_type());
  TORCH_CHECK(group_index.device() == rewards.device(), op, ": group_index is on ", group_index.device(),
              " but rewards is on ", rewards.device());
}

inline void check_weights(const at::Tensor& rewards, const at::Tensor& weights) {
  const char* op = "lens::weighted_group_advantages";
  TORCH_CHECK(weights.sizes() == rewards.sizes(), op, ": weights must have shape ", rewards.sizes(), ", got ",
              weights.sizes());
  check_token_dtype(weights, op, "weights");
  TORCH_CHECK(weights.device() == rewards.device(), op, ": weights is on ", weights.device(), " but rewards is on ",
              rewards.device());
}

}  // namespace lens
