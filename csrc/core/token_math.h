// Per-token math of the CRPO loss (LENS Eq. 5 and 7) and the KL estimators, shared by the CPU and the
// CUDA kernels. Torch-free on purpose: it compiles with bare nvcc and with the C++ test target.
//
// Every function returns the value AND the derivative with respect to logp, with torch's autograd
// conventions for the clamps (inclusive bounds pass the gradient, saturated regions give 0), so the
// native backward equals autograd of lens.algos.crpo_loss_torch.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define LENS_HD __host__ __device__ __forceinline__
#else
#define LENS_HD inline __attribute__((always_inline))
#endif

namespace lens {

constexpr float kLogRatioClamp = 20.0f;  // LENS Eq. (5): log-ratios clamped to [-20, 20]
constexpr float kKlClamp = 10.0f;        // k3 is clamped to <= 10 (k1 and k2 are not, as in verl)

// None: no ref_logp (kl metric 0, no kl term). Values are the template tags of the kernels.
enum class KlKind : int32_t { none = 0, k1 = 1, k2 = 2, k3 = 3 };
enum class Agg : int32_t { token_mean = 0, seq_mean_token_mean = 1, seq_mean_token_sum_norm = 2 };

struct CrpoHyper {
  float clip_low;
  float clip_high;
  float clip_c;
  float beta;
};

LENS_HD float clampf(float x, float lo, float hi) { return x < lo ? lo : (x > hi ? hi : x); }

// exp on the host as a branch-free Cephes-style polynomial (about 1 ulp on [-87, 88]): unlike
// std::exp it auto-vectorizes, which is most of the CPU kernels' speed. On the device: expf.
LENS_HD float lens_exp(float x) {
#if defined(__CUDA_ARCH__)
  return expf(x);
#else
  x = clampf(x, -87.0f, 88.0f);
  const float magic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to the nearest integer
  const float n = (x * 1.44269504088896341f + magic) - magic;
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e = p * r * r + r + 1.0f;
  // 2^n from the exponent bits (a bit cast, not memcpy: memcpy stops GCC's vectorizer).
  return e * __builtin_bit_cast(float, (static_cast<int32_t>(n) + 127) << 23);
#endif
}

struct KlTerm {
  float value;  // kl_t
  float dlogp;  // d kl_t / d logp
};

// y = ref_logp - logp. k1 = -y and k2 = y^2 / 2, unclamped (as verl); k3 = min(exp(d) - d - 1, 10) with
// d = clamp(y, -20, 20), the only estimator whose exp needs the guard. Near d = 0, exp(d) - d - 1 cancels
// to the rounding error of exp (about 1e-7, of either sign), so a policy equal to the reference logged a
// negative KL; there k3 is its Taylor series, accurate and >= 0 (its truncation error is < 2e-9 at |d| = 0.1).
constexpr float kKlSeriesBound = 0.1f;

template <KlKind K>
LENS_HD KlTerm kl_term(float logp, float ref_logp) {
  const float y = ref_logp - logp;
  const float d = clampf(y, -kLogRatioClamp, kLogRatioClamp);
  const bool d_live = (y >= -kLogRatioClamp) & (y <= kLogRatioClamp);
  if constexpr (K == KlKind::k1) {
    return {-y, 1.0f};
  } else if constexpr (K == KlKind::k2) {
    return {0.5f * y * y, -y};
  } else if constexpr (K == KlKind::k3) {
    const float e = lens_exp(d);
    const bool near = (d > -kKlSeriesBound) & (d < kKlSeriesBound);
    const float series = d * d * (0.5f + d * (1.0f / 6.0f + d * (1.0f / 24.0f + d * (1.0f / 120.0f))));
    const float q = near ? series : e - d - 1.0f;
    // d q / d d = exp(d) - 1, its series near 0; d d / d logp = -1.
    const float dq = near ? d * (1.0f + d * (0.5f + d * (1.0f / 6.0f + d * (1.0f / 24.0f)))) : e - 1.0f;
    const float g = q <= kKlClamp ? -dq : 0.0f;
    return {q < kKlClamp ? q : kKlClamp, d_live ? g : 0.0f};
  } else {
    return {0.0f, 0.0f};
  }
}

struct TokenTerms {
  float loss;   // l_t = w * pg + beta * kl (kl only when beta != 0)
  float pg;     // w * pg: the policy-gradient part of l_t
  float kl;     // kl_t (0 without ref_logp)
  float ratio;  // rho_t = exp(clamped log-ratio)
  float dloss;  // d l_t / d logp
  bool clip_high;
  bool clip_low;
  bool dual;
};

// LENS Eq. (7) for one token: the clipped surrogate with verl's dual clip, weighted by w~ (Eq. 4),
// plus the KL penalty. adv and w are the row's advantage and weight.
template <KlKind K>
LENS_HD TokenTerms crpo_token(float logp, float old_logp, float ref_logp, float adv, float w, const CrpoHyper& h) {
  const float x = logp - old_logp;
  const bool x_live = (x >= -kLogRatioClamp) & (x <= kLogRatioClamp);
  const float ratio = lens_exp(clampf(x, -kLogRatioClamp, kLogRatioClamp));  // LENS Eq. (5)
  const float pg1 = -adv * ratio;
  const float pg2 = -adv * clampf(ratio, 1.0f - h.clip_low, 1.0f + h.clip_high);
  const float pg_clipped = pg1 >= pg2 ? pg1 : pg2;
  const float cap = -h.clip_c * adv;
  const bool dual = (adv < 0.0f) & (pg_clipped > cap);
  const float pg = dual ? cap : pg_clipped;
  // Only the unclipped branch depends on logp; clipped, dual-clipped and saturated tokens give 0.
  const float dpg = ((pg1 >= pg2) & !dual & x_live) ? -adv * ratio : 0.0f;
  const KlTerm kl = kl_term<K>(logp, ref_logp);
  TokenTerms out;
  out.pg = w * pg;
  out.kl = kl.value;
  out.loss = h.beta != 0.0f ? out.pg + h.beta * kl.value : out.pg;
  out.dloss = w * dpg + h.beta * kl.dlogp;
  out.ratio = ratio;
  out.clip_high = (adv > 0.0f) & (ratio > 1.0f + h.clip_high);
  out.clip_low = (adv < 0.0f) & (ratio < 1.0f - h.clip_low);
  out.dual = dual;
  return out;
}

}  // namespace lens
