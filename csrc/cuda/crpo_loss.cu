// CUDA kernels of the CRPO loss (LENS Eq. 7). Forward: one block per row accumulates the row's masked
// sums; the last block to finish reduces all rows (fixed order: deterministic) and writes the loss and
// stats, so the whole forward is one launch with no host synchronization. Backward: one block per row
// writes d loss / d logp, reading the denominators from the forward's stats on the device.
// Masked-out tokens are never loaded beyond their mask entry (padding costs one byte per token).
#include "../core/crpo_reduce.h"
#include "../core/token_math.h"
#include "common.cuh"
#include "launch.h"

namespace lens::cuda {
namespace {

template <KlKind K, typename T>
__device__ __forceinline__ float load_ref(const T* ref, int64_t t) {
  if constexpr (K == KlKind::none) {
    return 0.0f;
  } else {
    return to_float(ref[t]);
  }
}

template <typename V>
__device__ __forceinline__ V row_ptr(const void* base, int64_t row, int64_t ld) {
  return static_cast<V>(base) + row * ld;
}

__device__ RowPartials block_reduce_partials(RowPartials p) {
  RowPartials r;
  r.loss = block_allreduce(p.loss, SumOp{}, 0.0f);
  r.pg = block_allreduce(p.pg, SumOp{}, 0.0f);
  r.kl = block_allreduce(p.kl, SumOp{}, 0.0f);
  r.count = block_allreduce(p.count, SumOp{}, 0.0f);
  r.clip_high = block_allreduce(p.clip_high, SumOp{}, 0.0f);
  r.clip_low = block_allreduce(p.clip_low, SumOp{}, 0.0f);
  r.dual = block_allreduce(p.dual, SumOp{}, 0.0f);
  r.ratio = block_allreduce(p.ratio, SumOp{}, 0.0f);
  r.ratio_max = block_allreduce(p.ratio_max, MaxOp{}, 0.0f);
  return r;
}

__device__ Totals block_reduce_totals(Totals t) {
  Totals r;
  r.loss = block_allreduce(t.loss, SumOp{}, 0.0);
  r.pg = block_allreduce(t.pg, SumOp{}, 0.0);
  r.seq_loss = block_allreduce(t.seq_loss, SumOp{}, 0.0);
  r.seq_pg = block_allreduce(t.seq_pg, SumOp{}, 0.0);
  r.kl = block_allreduce(t.kl, SumOp{}, 0.0);
  r.count = block_allreduce(t.count, SumOp{}, 0.0);
  r.rows = block_allreduce(t.rows, SumOp{}, 0.0);
  r.clip_high = block_allreduce(t.clip_high, SumOp{}, 0.0);
  r.clip_low = block_allreduce(t.clip_low, SumOp{}, 0.0);
  r.dual = block_allreduce(t.dual, SumOp{}, 0.0);
  r.ratio = block_allreduce(t.ratio, SumOp{}, 0.0);
  r.ratio_max = block_allreduce(t.ratio_max, MaxOp{}, 0.0);
  return r;
}

// Partials written by other blocks: read through L2 (__ldcg), never a stale L1 line.
__device__ RowPartials load_partials(const RowPartials* p) {
  RowPartials r;
  r.loss = __ldcg(&p->loss);
  r.pg = __ldcg(&p->pg);
  r.kl = __ldcg(&p->kl);
  r.count = __ldcg(&p->count);
  r.clip_high = __ldcg(&p->clip_high);
  r.clip_low = __ldcg(&p->clip_low);
  r.dual = __ldcg(&p->dual);
  r.ratio = __ldcg(&p->ratio);
  r.ratio_max = __ldcg(&p->ratio_max);
  return r;
}

template <KlKind K, typename T, typename M>
__device__ RowPartials row_forward(const CrpoArgs& a, int64_t row) {
  RowPartials p;
  if (row >= a.rows) return p;  // grid of max(rows, 1): an empty batch still finalizes
  const T* lp = row_ptr<const T*>(a.logp, row, a.ld_logp);
  const T* old = row_ptr<const T*>(a.old_logp, row, a.ld_old);
  const T* ref = K == KlKind::none ? nullptr : row_ptr<const T*>(a.ref_logp, row, a.ld_ref);
  const M* mk = row_ptr<const M*>(a.mask, row, a.ld_mask);
  const float adv = a.advantages[row];
  const float w = a.weights[row];
  for (int64_t t = threadIdx.x; t < a.cols; t += kBlock) {
    const float m = to_float(mk[t]);
    p.count += m;
    if (m == 0.0f) continue;
    const TokenTerms o = crpo_token<K>(to_float(lp[t]), to_float(old[t]), load_ref<K>(ref, t), adv, w, a.hyper);
    p.loss += o.loss * m;
    p.pg += o.pg * m;
    p.kl += o.kl * m;
    p.clip_high += o.clip_high ? m : 0.0f;
    p.clip_low += o.clip_low ? m : 0.0f;
    p.dual += o.dual ? m : 0.0f;
    p.ratio += o.ratio * m;
    p.ratio_max = fmaxf(p.ratio_max, o.ratio * m);
  }
  return p;
}

template <KlKind K, typename T, typename M>
__global__ void __launch_bounds__(kBlock)
    crpo_fwd_kernel(CrpoArgs a, double num_tokens, double num_seqs, RowPartials* ws, unsigned int* counter,
                    float* loss, float* stats) {
  const RowPartials p = block_reduce_partials(row_forward<K, T, M>(a, blockIdx.x));
  __shared__ bool last;
  if (threadIdx.x == 0) {
    ws[blockIdx.x] = p;
    __threadfence();  // publish the partials before counting this block as done
    last = atomicAdd(counter, 1u) == gridDim.x - 1;
  }
  __syncthreads();
  if (!last) return;
  Totals t;
  for (int64_t r = threadIdx.x; r < gridDim.x; r += kBlock) accumulate_row(t, load_partials(ws + r));
  t = block_reduce_totals(t);
  if (threadIdx.x == 0) {
    finalize_loss(t, a.cols, a.agg, num_tokens, num_seqs, loss, stats);
    *counter = 0;
  }
}

template <KlKind K, typename T, typename M>
__global__ void __launch_bounds__(kBlock) crpo_bwd_kernel(CrpoArgs a, const float* grad_loss, const float* stats,
                                                          T* grad) {
  const int64_t row = blockIdx.x;
  const T* lp = row_ptr<const T*>(a.logp, row, a.ld_logp);
  const T* old = row_ptr<const T*>(a.old_logp, row, a.ld_old);
  const T* ref = K == KlKind::none ? nullptr : row_ptr<const T*>(a.ref_logp, row, a.ld_ref);
  const M* mk = row_ptr<const M*>(a.mask, row, a.ld_mask);
  float len = 0.0f;
  if (a.agg == Agg::seq_mean_token_mean) {
    for (int64_t t = threadIdx.x; t < a.cols; t += kBlock) len += to_float(mk[t]);
    len = block_allreduce(len, SumOp{}, 0.0f);
  }
  const float scale = *grad_loss * row_grad_scale(a.agg, len, a.cols, stats[kTokenDenom], stats[kSeqDenom]);
  const float adv = a.advantages[row];
  const float w = a.weights[row];
  T* g = grad + row * a.cols;
  for (int64_t t = threadIdx.x; t < a.cols; t += kBlock) {
    const float m = to_float(mk[t]);
    float d = 0.0f;
    if (m != 0.0f) {
      d = scale * m *
          crpo_token<K>(to_float(lp[t]), to_float(old[t]), load_ref<K>(ref, t), adv, w, a.hyper).dloss;
    }
    g[t] = from_float<T>(d);
  }
}

// Calls f(kl tag, T{}, M{}) for the arguments' kl kind, token dtype and mask dtype.
template <typename F>
cudaError_t dispatch(const CrpoArgs& a, F&& f) {
  return dispatch_dtype(a.dtype, [&](auto t_tag) {
    auto with_mask = [&](auto k_tag) {
      return a.mask_dtype == MaskDtype::b8 ? f(k_tag, t_tag, bool{}) : f(k_tag, t_tag, float{});
    };
    switch (a.kl) {
      case KlKind::k1: return with_mask(std::integral_constant<KlKind, KlKind::k1>{});
      case KlKind::k2: return with_mask(std::integral_constant<KlKind, KlKind::k2>{});
      case KlKind::k3: return with_mask(std::integral_constant<KlKind, KlKind::k3>{});
      default: return with_mask(std::integral_constant<KlKind, KlKind::none>{});
    }
  });
}

}  // namespace

cudaError_t crpo_loss_fwd(const CrpoArgs& a, double num_tokens, double num_seqs, RowPartials* workspace,
                          unsigned int* counter, float* loss, float* stats, cudaStream_t stream) {
  const unsigned int grid = a.rows > 0 ? static_cast<unsigned int>(a.rows) : 1u;
  return dispatch(a, [&](auto k_tag, auto t_tag, auto m_tag) {
    crpo_fwd_kernel<decltype(k_tag)::value, decltype(t_tag), decltype(m_tag)>
        <<<grid, kBlock, 0, stream>>>(a, num_tokens, num_seqs, workspace, counter, loss, stats);
    return cudaGetLastError();
  });
}

cudaError_t crpo_loss_bwd(const CrpoArgs& a, const float* grad_loss, const float* stats, void* grad,
                          cudaStream_t stream) {
  if (a.rows == 0 || a.cols == 0) return cudaSuccess;
  return dispatch(a, [&](auto k_tag, auto t_tag, auto m_tag) {
    using T = decltype(t_tag);
    crpo_bwd_kernel<decltype(k_tag)::value, T, decltype(m_tag)>
        <<<static_cast<unsigned int>(a.rows), kBlock, 0, stream>>>(a, grad_loss, stats, static_cast<T*>(grad));
    return cudaGetLastError();
  });
}

}  // namespace lens::cuda
