// CPU kernel of the token-level importance ratio (LENS Eq. 5): log_ratio = clamp(logp - old, -20, 20),
// ratio = exp(log_ratio), both fp32. Torch-free (tested by the C++ test target); vectorizes.
#pragma once

#include <cstdint>

#include "../core/token_math.h"
#include "simd.h"

namespace lens::cpu {

template <typename T>
LENS_SIMD_CLONES void importance_ratio_range(const T* logp, const T* old_logp, int64_t begin, int64_t end,
                                             float* log_ratio, float* ratio) {
#pragma omp simd
  for (int64_t i = begin; i < end; ++i) {
    const float x =
        clampf(static_cast<float>(logp[i]) - static_cast<float>(old_logp[i]), -kLogRatioClamp, kLogRatioClamp);
    log_ratio[i] = x;
    ratio[i] = lens_exp(x);
  }
}

}  // namespace lens::cpu
