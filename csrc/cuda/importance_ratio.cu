// CUDA kernel of the token-level importance ratio (LENS Eq. 5): grid-stride elementwise,
// log_ratio = clamp(logp - old_logp, -20, 20) and ratio = exp(log_ratio), both fp32.
#include "../core/token_math.h"
#include "common.cuh"
#include "launch.h"

namespace lens::cuda {
namespace {

template <typename T>
__global__ void __launch_bounds__(kBlock)
    importance_ratio_kernel(const T* logp, const T* old_logp, int64_t n, float* log_ratio, float* ratio) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kBlock;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kBlock) + threadIdx.x; i < n; i += stride) {
    const float x = clampf(to_float(logp[i]) - to_float(old_logp[i]), -kLogRatioClamp, kLogRatioClamp);
    log_ratio[i] = x;
    ratio[i] = lens_exp(x);
  }
}

}  // namespace

cudaError_t importance_ratio(const void* logp, const void* old_logp, Dtype dtype, int64_t n, float* log_ratio,
                             float* ratio, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  // Enough blocks to fill any current GPU several times over; the loop covers the rest.
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  const unsigned int grid = static_cast<unsigned int>(blocks < 65536 ? blocks : 65536);
  return dispatch_dtype(dtype, [&](auto t_tag) {
    using T = decltype(t_tag);
    importance_ratio_kernel<T><<<grid, kBlock, 0, stream>>>(static_cast<const T*>(logp),
                                                            static_cast<const T*>(old_logp), n, log_ratio, ratio);
    return cudaGetLastError();
  });
}

}  // namespace lens::cuda
