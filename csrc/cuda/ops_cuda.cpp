// CUDA implementations of the lens ops (registered for the CUDA dispatch key): validation (shared
// with the CPU side, csrc/checks.h), allocation and launch on the current stream. The kernels are
// in the torch-free .cu files next to this one. Only c10/cuda stream, guard and exception headers:
// ATen/cuda/CUDAContext.h needs cuSPARSE headers that a bare toolkit does not have.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <algorithm>
#include <tuple>

#include "../checks.h"
#include "launch.h"

namespace lens {
namespace {

cuda::Dtype cuda_dtype(at::ScalarType t) {
  if (t == at::kHalf) return cuda::Dtype::f16;
  if (t == at::kBFloat16) return cuda::Dtype::bf16;
  return cuda::Dtype::f32;
}

void check_cuda(const at::Tensor& t, const char* op, const char* name) {
  TORCH_CHECK(t.is_cuda(), op, ": ", name, " must be a CUDA tensor, got ", t.device());
}

cuda::CrpoArgs crpo_args(const CrpoInputs& in) {
  const bool has_ref = in.ref_logp.defined();
  return {in.logp.const_data_ptr(),
          in.old_logp.const_data_ptr(),
          has_ref ? in.ref_logp.const_data_ptr() : nullptr,
          in.mask.const_data_ptr(),
          in.logp.stride(0),
          in.old_logp.stride(0),
          has_ref ? in.ref_logp.stride(0) : 0,
          in.mask.stride(0),
          in.advantages.const_data_ptr<float>(),
          in.weights.const_data_ptr<float>(),
          in.rows,
          in.cols,
          cuda_dtype(in.logp.scalar_type()),
          in.mask.scalar_type() == at::kBool ? cuda::MaskDtype::b8 : cuda::MaskDtype::f32,
          in.kl,
          in.agg,
          in.hyper};
}

std::tuple<at::Tensor, at::Tensor> crpo_loss_fwd_cuda(const at::Tensor& logp, const at::Tensor& old_logp,
                                                      const std::optional<at::Tensor>& ref_logp,
                                                      const at::Tensor& advantages, const at::Tensor& weights,
                                                      const at::Tensor& mask, double clip_low, double clip_high,
                                                      double clip_c, double beta, int64_t kl, int64_t agg,
                                                      std::optional<double> num_tokens,
                                                      std::optional<double> num_seqs) {
  check_cuda(logp, "lens::crpo_loss", "logp");
  const c10::cuda::CUDAGuard guard(logp.device());
  const CrpoInputs in = prepare_crpo(logp, old_logp, ref_logp, advantages, weights, mask, clip_low, clip_high,
                                     clip_c, beta, kl, agg);
  const auto f32 = logp.options().dtype(at::kFloat);
  at::Tensor loss = at::empty({}, f32);
  at::Tensor stats = at::empty({kNumStats}, f32);
  const int64_t ws_floats = std::max<int64_t>(in.rows, 1) * static_cast<int64_t>(sizeof(RowPartials) / sizeof(float));
  at::Tensor workspace = at::empty({ws_floats}, f32);
  at::Tensor counter = at::zeros({1}, logp.options().dtype(at::kInt));
  C10_CUDA_CHECK(cuda::crpo_loss_fwd(crpo_args(in), num_tokens.value_or(-1.0), num_seqs.value_or(-1.0),
                                     reinterpret_cast<RowPartials*>(workspace.mutable_data_ptr<float>()),
                                     reinterpret_cast<unsigned int*>(counter.mutable_data_ptr<int32_t>()),
                                     loss.mutable_data_ptr<float>(), stats.mutable_data_ptr<float>(),
                                     c10::cuda::getCurrentCUDAStream()));
  return {loss, stats};
}

at::Tensor crpo_loss_bwd_cuda(const at::Tensor& grad_loss, const at::Tensor& logp, const at::Tensor& old_logp,
                              const std::optional<at::Tensor>& ref_logp, const at::Tensor& advantages,
                              const at::Tensor& weights, const at::Tensor& mask, const at::Tensor& stats,
                              double clip_low, double clip_high, double clip_c, double beta, int64_t kl,
                              int64_t agg) {
  check_cuda(logp, "lens::crpo_loss_bwd", "logp");
  const c10::cuda::CUDAGuard guard(logp.device());
  const CrpoInputs in = prepare_crpo(logp, old_logp, ref_logp, advantages, weights, mask, clip_low, clip_high,
                                     clip_c, beta, kl, agg);
  TORCH_CHECK(grad_loss.numel() == 1, "lens::crpo_loss_bwd: grad_loss must be a scalar, got ", grad_loss.sizes());
  TORCH_CHECK(stats.dim() == 1 && stats.size(0) == kNumStats && stats.scalar_type() == at::kFloat,
              "lens::crpo_loss_bwd: stats must be the float32 [", static_cast<int>(kNumStats),
              "] output of lens::crpo_loss_fwd, got ", stats.scalar_type(), stats.sizes());
  check_same_device(logp, grad_loss, "lens::crpo_loss_bwd", "grad_loss");
  check_same_device(logp, stats, "lens::crpo_loss_bwd", "stats");
  // Both stay on the device: the kernel reads grad_loss and the denominators itself (no sync).
  const at::Tensor g = grad_loss.to(at::kFloat).contiguous();
  const at::Tensor st = stats.contiguous();
  at::Tensor grad = at::empty(in.logp.sizes(), in.logp.options().memory_format(at::MemoryFormat::Contiguous));
  C10_CUDA_CHECK(cuda::crpo_loss_bwd(crpo_args(in), g.const_data_ptr<float>(), st.const_data_ptr<float>(),
                                     grad.mutable_data_ptr(), c10::cuda::getCurrentCUDAStream()));
  return grad;
}

at::Tensor grpo_advantages_cuda(const at::Tensor& rewards, const at::Tensor& group_index, double eps) {
  const char* op = "lens::grpo_advantages";
  check_group_inputs(rewards, group_index, op);
  check_cuda(rewards, op, "rewards");
  const c10::cuda::CUDAGuard guard(rewards.device());
  const at::Tensor r = rewards.contiguous();
  const at::Tensor g = group_index.contiguous();
  at::Tensor out = at::empty(r.sizes(), r.options().dtype(at::kFloat));
  C10_CUDA_CHECK(cuda::grpo_advantages(r.const_data_ptr(), cuda_dtype(r.scalar_type()), g.const_data_ptr<int64_t>(),
                                       r.numel(), static_cast<float>(eps),
                                       out.mutable_data_ptr<float>(), c10::cuda::getCurrentCUDAStream()));
  return out;
}

at::Tensor weighted_group_advantages_cuda(const at::Tensor& rewards, const at::Tensor& weights,
                                          const at::Tensor& group_index, double eps) {
  const char* op = "lens::weighted_group_advantages";
  check_group_inputs(rewards, group_index, op);
  check_weights(rewards, weights);
  check_cuda(rewards, op, "rewards");
  const c10::cuda::CUDAGuard guard(rewards.device());
  const at::Tensor r = rewards.contiguous();
  const at::Tensor w = weights.to(at::kFloat).contiguous();
  const at::Tensor g = group_index.contiguous();
  at::Tensor out = at::empty(r.sizes(), r.options().dtype(at::kFloat));
  C10_CUDA_CHECK(cuda::weighted_group_advantages(r.const_data_ptr(), cuda_dtype(r.scalar_type()),
                                                 w.const_data_ptr<float>(), g.const_data_ptr<int64_t>(), r.numel(),
                                                 static_cast<float>(eps), out.mutable_data_ptr<float>(),
                                                 c10::cuda::getCurrentCUDAStream()));
  return out;
}

}  // namespace

TORCH_LIBRARY_IMPL(lens, CUDA, m) {
  m.impl("grpo_advantages", &grpo_advantages_cuda);
  m.impl("weighted_group_advantages", &weighted_group_advantages_cuda);
  m.impl("crpo_loss_fwd", &crpo_loss_fwd_cuda);
  m.impl("crpo_loss_bwd", &crpo_loss_bwd_cuda);
}

}  // namespace lens
