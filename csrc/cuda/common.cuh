// Device helpers shared by the lens CUDA kernels: dtype loads/stores and warp/block reductions.
// Torch-free (CUDA toolkit headers only).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "launch.h"

namespace lens::cuda {

constexpr int kBlock = 256;  // threads per block of every kernel
constexpr int kWarps = kBlock / 32;

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(bool x) { return x ? 1.0f : 0.0f; }

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }

struct SumOp {
  template <typename V>
  __device__ V operator()(V a, V b) const { return a + b; }
};
struct MaxOp {
  template <typename V>
  __device__ V operator()(V a, V b) const { return a > b ? a : b; }
};
struct MinOp {
  template <typename V>
  __device__ V operator()(V a, V b) const { return a < b ? a : b; }
};

template <typename V, typename Op>
__device__ __forceinline__ V warp_reduce(V v, Op op) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = op(v, __shfl_down_sync(0xffffffffu, v, offset));
  return v;
}

// Reduction over the block (blockDim.x == kBlock), returned to every thread. Fixed tree: results do
// not depend on scheduling.
template <typename V, typename Op>
__device__ V block_allreduce(V v, Op op, V identity) {
  __shared__ V partial[kWarps];
  __shared__ V result;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  v = warp_reduce(v, op);
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = warp_reduce(lane < kWarps ? partial[lane] : identity, op);
    if (lane == 0) result = v;
  }
  __syncthreads();
  const V out = result;
  __syncthreads();  // the next call may overwrite `result`
  return out;
}

// Calls f(T{}) with the CUDA type of a token dtype.
template <typename F>
__host__ cudaError_t dispatch_dtype(Dtype d, F&& f) {
  if (d == Dtype::f16) return f(__half{});
  if (d == Dtype::bf16) return f(__nv_bfloat16{});
  return f(float{});
}

}  // namespace lens::cuda
