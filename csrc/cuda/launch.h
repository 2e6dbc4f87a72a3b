// Host-side entry points of the CUDA kernels. Torch-free: the .cu files include only this, the core
// headers and the CUDA toolkit, so they compile with bare nvcc; csrc/cuda/ops_cuda.cpp (the ATen side)
// validates the tensors and calls these on the current stream. Each returns cudaGetLastError().
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "../core/crpo_reduce.h"
#include "../core/token_math.h"

namespace lens::cuda {

enum class Dtype : int32_t { f32, f16, bf16 };  // token and reward dtypes
enum class MaskDtype : int32_t { b8, f32 };     // bool or fp32 masks

// The token tensors of the CRPO loss: row-major with unit inner stride, row strides in elements.
struct CrpoArgs {
  const void* logp;
  const void* old_logp;
  const void* ref_logp;  // null when kl == KlKind::none
  const void* mask;
  int64_t ld_logp, ld_old, ld_ref, ld_mask;
  const float* advantages;  // [rows]
  const float* weights;     // [rows]
  int64_t rows, cols;
  Dtype dtype;
  MaskDtype mask_dtype;
  KlKind kl;
  Agg agg;
  CrpoHyper hyper;
};

// One block per row; the last block to finish reduces the per-row partials (workspace [rows], counter
// zeroed) into loss [1] and stats [kNumStats]. num_tokens / num_seqs <= 0: not given.
cudaError_t crpo_loss_fwd(const CrpoArgs& a, double num_tokens, double num_seqs, RowPartials* workspace,
                          unsigned int* counter, float* loss, float* stats, cudaStream_t stream);

// One block per row: grad [rows, cols] (contiguous, logp's dtype) = grad_loss * factor * d l / d logp,
// with the denominators read from the forward's stats on the device (no host synchronization).
cudaError_t crpo_loss_bwd(const CrpoArgs& a, const float* grad_loss, const float* stats, void* grad,
                          cudaStream_t stream);

// One block per group (the block of a group's first member does the work; ids are labels, any
// values). All groups in one launch.
cudaError_t grpo_advantages(const void* rewards, Dtype dtype, const int64_t* group, int64_t n, float eps,
                            float* out, cudaStream_t stream);
cudaError_t weighted_group_advantages(const void* rewards, Dtype dtype, const float* weights, const int64_t* group,
                                      int64_t n, float eps, float* out, cudaStream_t stream);

}  // namespace lens::cuda
