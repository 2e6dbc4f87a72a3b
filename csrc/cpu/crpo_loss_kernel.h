// CPU row kernels of the CRPO loss (LENS Eq. 7): one pass over a row for the forward partial sums,
// one pass for the gradient. Torch-free: ops_cpu.cpp runs them under at::parallel_for, and the C++
// test target (csrc/tests) checks them on hand-computed values.
//
// T is the token dtype (float, c10::Half, c10::BFloat16: anything convertible to float), M the mask
// dtype (bool or float). Loads are converted to fp32 at once and all sums are fp32 within a row; the
// loops are written so that GCC vectorizes them (`omp simd` with -fopenmp-simd, branch-free bodies).
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "../core/crpo_reduce.h"
#include "../core/token_math.h"
#include "simd.h"

namespace lens::cpu {

// Row pointers of the token tensors. ref is null for KlKind::none.
template <typename T, typename M>
struct RowInputs {
  const T* logp;
  const T* old_logp;
  const T* ref_logp;
  const M* mask;
  int64_t len;  // T, the row length
  float adv;
  float weight;
};

template <KlKind K, typename T>
inline float load_ref(const T* ref, int64_t t) {
  if constexpr (K == KlKind::none) {
    return 0.0f;
  } else {
    return static_cast<float>(ref[t]);
  }
}

// Mask entry as a float. bool masks are read as bytes: GCC cannot vectorize a 1-bit bool -> float
// conversion, but does vectorize uint8 -> float.
template <typename M>
inline float load_mask(const M* mask, int64_t t) {
  if constexpr (std::is_same_v<M, bool>) {
    return static_cast<float>(reinterpret_cast<const uint8_t*>(mask)[t]);
  } else {
    return static_cast<float>(mask[t]);
  }
}

// Masked sums of one row (loss, pg part, kl, counts, clip counts, ratio sum and max).
template <KlKind K, typename T, typename M>
LENS_SIMD_CLONES RowPartials crpo_row_forward(const RowInputs<T, M>& row, const CrpoHyper& h) {
  const RowInputs<T, M> in = row;  // locals, not reads through references: see crpo_row_backward
  const CrpoHyper hyper = h;
  float s_loss = 0.0f, s_pg = 0.0f, s_kl = 0.0f, s_count = 0.0f;
  float s_high = 0.0f, s_low = 0.0f, s_dual = 0.0f, s_ratio = 0.0f, m_ratio = 0.0f;
#pragma omp simd reduction(+ : s_loss, s_pg, s_kl, s_count, s_high, s_low, s_dual, s_ratio) reduction(max : m_ratio)
  for (int64_t t = 0; t < in.len; ++t) {
    const float m = load_mask(in.mask, t);
    const TokenTerms o = crpo_token<K>(static_cast<float>(in.logp[t]), static_cast<float>(in.old_logp[t]),
                                       load_ref<K>(in.ref_logp, t), in.adv, in.weight, hyper);
    // Masked-out tokens are selected away (not multiplied) so padding garbage cannot leak in.
    const bool on = m != 0.0f;
    s_loss += on ? o.loss * m : 0.0f;
    s_pg += on ? o.pg * m : 0.0f;
    s_kl += on ? o.kl * m : 0.0f;
    s_count += m;
    s_high += (on & o.clip_high) ? m : 0.0f;
    s_low += (on & o.clip_low) ? m : 0.0f;
    s_dual += (on & o.dual) ? m : 0.0f;
    s_ratio += on ? o.ratio * m : 0.0f;
    const float r = on ? o.ratio * m : 0.0f;
    m_ratio = m_ratio > r ? m_ratio : r;
  }
  RowPartials p;
  p.loss = s_loss;
  p.pg = s_pg;
  p.kl = s_kl;
  p.count = s_count;
  p.clip_high = s_high;
  p.clip_low = s_low;
  p.dual = s_dual;
  p.ratio = s_ratio;
  p.ratio_max = m_ratio;
  return p;
}

// Sum of the row's mask (its length for the seq_mean_token_mean gradient factor).
template <typename M>
float mask_row_sum(const M* mask, int64_t len) {
  float s = 0.0f;
#pragma omp simd reduction(+ : s)
  for (int64_t t = 0; t < len; ++t) s += load_mask(mask, t);
  return s;
}

// grad[t] = scale * mask[t] * d l_t / d logp, where scale already holds grad_loss and the
// aggregation factor (lens::row_grad_scale).
template <KlKind K, typename T, typename M>
LENS_SIMD_CLONES void crpo_row_backward(const RowInputs<T, M>& in, const CrpoHyper& h, float scale,
                                        T* __restrict__ grad) {
  // Locals, not reads through `in` / `h`: the stores to grad could alias those, and the reloads
  // would stop GCC from vectorizing the loop.
  const RowInputs<T, M> row = in;
  const CrpoHyper hyper = h;
#pragma omp simd
  for (int64_t t = 0; t < row.len; ++t) {
    const float m = load_mask(row.mask, t);
    const TokenTerms o = crpo_token<K>(static_cast<float>(row.logp[t]), static_cast<float>(row.old_logp[t]),
                                       load_ref<K>(row.ref_logp, t), row.adv, row.weight, hyper);
    // A product, as in the reference's autograd (0 for masked tokens with finite inputs): a select on
    // a bool mask would mix byte and float lanes, which GCC does not vectorize.
    grad[t] = static_cast<T>(scale * m * o.dloss);
  }
}

// ---- bf16 rows, in fp32 blocks -----------------------------------------------------------------
// A scalar c10::BFloat16 -> float conversion per element keeps the token loops scalar (the bf16 path
// ran 2.5x slower than fp32 although it reads half the bytes). bf16 is the upper half of an fp32, so
// the row is widened block by block into fp32 buffers by a shift that GCC vectorizes, and the fp32
// kernels above run on the blocks; the gradient is narrowed back with round-to-nearest-even, as
// c10::BFloat16's conversion does. Rows are given as raw bf16 bits (uint16_t), keeping this file torch-free.
constexpr int64_t kBf16Block = 512;

LENS_SIMD_CLONES inline void bf16_to_float(const uint16_t* __restrict__ src, int64_t n, float* __restrict__ dst) {
#pragma omp simd
  for (int64_t t = 0; t < n; ++t) {
    const uint32_t bits = static_cast<uint32_t>(src[t]) << 16;
    float f;
    std::memcpy(&f, &bits, sizeof f);
    dst[t] = f;
  }
}

// Round-to-nearest-even fp32 -> bf16 bits; NaN -> the quiet NaN 0x7FC0 (c10::BFloat16's rule).
LENS_SIMD_CLONES inline void float_to_bf16(const float* __restrict__ src, int64_t n, uint16_t* __restrict__ dst) {
#pragma omp simd
  for (int64_t t = 0; t < n; ++t) {
    uint32_t bits;
    std::memcpy(&bits, &src[t], sizeof bits);
    const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
    dst[t] = src[t] != src[t] ? uint16_t{0x7FC0} : static_cast<uint16_t>(rounded);
  }
}

inline void add_partials(RowPartials& acc, const RowPartials& b) {
  acc.loss += b.loss;
  acc.pg += b.pg;
  acc.kl += b.kl;
  acc.count += b.count;
  acc.clip_high += b.clip_high;
  acc.clip_low += b.clip_low;
  acc.dual += b.dual;
  acc.ratio += b.ratio;
  acc.ratio_max = acc.ratio_max > b.ratio_max ? acc.ratio_max : b.ratio_max;
}

// fp32 copies of one block [b0, b0 + n) of a bf16 row, as the fp32 kernels' RowInputs.
struct Bf16Block {
  float logp[kBf16Block];
  float old_logp[kBf16Block];
  float ref_logp[kBf16Block];

  template <KlKind K, typename M>
  RowInputs<float, M> load(const RowInputs<uint16_t, M>& row, int64_t b0, int64_t n) {
    bf16_to_float(row.logp + b0, n, logp);
    bf16_to_float(row.old_logp + b0, n, old_logp);
    if constexpr (K != KlKind::none) bf16_to_float(row.ref_logp + b0, n, ref_logp);
    return {logp, old_logp, K == KlKind::none ? nullptr : ref_logp, row.mask + b0, n, row.adv, row.weight};
  }
};

// crpo_row_forward of a bf16 row (bits): the fp32 kernel's partial sums per block, added up.
template <KlKind K, typename M>
RowPartials crpo_row_forward_bf16(const RowInputs<uint16_t, M>& row, const CrpoHyper& h) {
  Bf16Block block;
  RowPartials acc;
  for (int64_t b0 = 0; b0 < row.len; b0 += kBf16Block) {
    const int64_t n = row.len - b0 < kBf16Block ? row.len - b0 : kBf16Block;
    add_partials(acc, crpo_row_forward<K>(block.load<K>(row, b0, n), h));
  }
  return acc;
}

// crpo_row_backward of a bf16 row (bits), the gradient written as bf16 bits.
template <KlKind K, typename M>
void crpo_row_backward_bf16(const RowInputs<uint16_t, M>& row, const CrpoHyper& h, float scale, uint16_t* grad) {
  Bf16Block block;
  float g[kBf16Block];
  for (int64_t b0 = 0; b0 < row.len; b0 += kBf16Block) {
    const int64_t n = row.len - b0 < kBf16Block ? row.len - b0 : kBf16Block;
    crpo_row_backward<K>(block.load<K>(row, b0, n), h, scale, g);
    float_to_bf16(g, n, grad + b0);
  }
}

}  // namespace lens::cpu
