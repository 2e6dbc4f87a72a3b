// Reduction of the CRPO loss (LENS Eq. 7): per-row partial sums -> loss, metrics and the
// denominators the backward pass needs. Torch-free and shared by the CPU and CUDA kernels.
//
// Layout of the `stats` output of lens::crpo_loss_fwd (fp32 [kNumStats]); lens/ops.py names the
// first seven as metrics, the last two are the token / sequence denominators (D, S) of the loss.
#pragma once

#include "token_math.h"

namespace lens {

enum Stat : int32_t {
  kPgLoss = 0,
  kKl,
  kClipfracHigh,
  kClipfracLow,
  kClipfracDual,
  kRatioMean,
  kRatioMax,
  kTokenDenom,
  kSeqDenom,
  kNumStats
};

// Masked sums over one row (mask entries act as multipliers, as in the torch reference).
struct RowPartials {
  float loss = 0.0f;
  float pg = 0.0f;
  float kl = 0.0f;
  float count = 0.0f;
  float clip_high = 0.0f;
  float clip_low = 0.0f;
  float dual = 0.0f;
  float ratio = 0.0f;
  float ratio_max = 0.0f;
};

// Sums over rows, in double so that the result does not depend on how rows were split up.
struct Totals {
  double loss = 0.0;      // sum of masked l_t (token_mean, seq_mean_token_sum_norm)
  double pg = 0.0;
  double seq_loss = 0.0;  // sum over non-empty rows of (row sum / row length) (seq_mean_token_mean)
  double seq_pg = 0.0;
  double kl = 0.0;
  double count = 0.0;
  double rows = 0.0;  // rows with length > 0
  double clip_high = 0.0;
  double clip_low = 0.0;
  double dual = 0.0;
  double ratio = 0.0;
  double ratio_max = 0.0;
};

LENS_HD void accumulate_row(Totals& t, const RowPartials& r) {
  t.loss += r.loss;
  t.pg += r.pg;
  if (r.count > 0.0f) {
    // Row lengths are clamped to >= 1 like the reference's lengths.clamp_min(1) (fractional masks).
    const double len = r.count > 1.0f ? r.count : 1.0f;
    t.seq_loss += r.loss / len;
    t.seq_pg += r.pg / len;
    t.rows += 1.0;
  }
  t.kl += r.kl;
  t.count += r.count;
  t.clip_high += r.clip_high;
  t.clip_low += r.clip_low;
  t.dual += r.dual;
  t.ratio += r.ratio;
  t.ratio_max = t.ratio_max > r.ratio_max ? t.ratio_max : r.ratio_max;
}

LENS_HD void merge_totals(Totals& a, const Totals& b) {
  a.loss += b.loss;
  a.pg += b.pg;
  a.seq_loss += b.seq_loss;
  a.seq_pg += b.seq_pg;
  a.kl += b.kl;
  a.count += b.count;
  a.rows += b.rows;
  a.clip_high += b.clip_high;
  a.clip_low += b.clip_low;
  a.dual += b.dual;
  a.ratio += b.ratio;
  a.ratio_max = a.ratio_max > b.ratio_max ? a.ratio_max : b.ratio_max;
}

// Loss and stats from the totals. num_tokens / num_seqs <= 0 mean "not given": then D is this call's
// token count and S its non-empty row count (each at least 1). With global counts given, losses of
// micro-batches add up to the loss of the whole batch (architecture convention 7).
LENS_HD void finalize_loss(const Totals& t, int64_t seq_len, Agg agg, double num_tokens, double num_seqs, float* loss,
                           float* stats) {
  const double tokens = t.count > 1.0 ? t.count : 1.0;
  const double denom_tokens = num_tokens > 0.0 ? num_tokens : tokens;
  const double denom_seqs = num_seqs > 0.0 ? num_seqs : (t.rows > 1.0 ? t.rows : 1.0);
  double l = 0.0;
  double pg = 0.0;
  if (agg == Agg::token_mean) {
    l = t.loss / denom_tokens;
    pg = t.pg / denom_tokens;
  } else if (agg == Agg::seq_mean_token_mean) {
    l = t.seq_loss / denom_seqs;
    pg = t.seq_pg / denom_seqs;
  } else {
    const double denom = denom_seqs * static_cast<double>(seq_len);
    l = t.loss / denom;
    pg = t.pg / denom;
  }
  *loss = static_cast<float>(l);
  stats[kPgLoss] = static_cast<float>(pg);
  stats[kKl] = static_cast<float>(t.kl / tokens);
  stats[kClipfracHigh] = static_cast<float>(t.clip_high / tokens);
  stats[kClipfracLow] = static_cast<float>(t.clip_low / tokens);
  stats[kClipfracDual] = static_cast<float>(t.dual / tokens);
  stats[kRatioMean] = static_cast<float>(t.ratio / tokens);
  stats[kRatioMax] = static_cast<float>(t.ratio_max);
  stats[kTokenDenom] = static_cast<float>(denom_tokens);
  stats[kSeqDenom] = static_cast<float>(denom_seqs);
}

// Gradient factor of a row for grad_loss = 1 (the aggregation's d loss / d l_t, mask aside).
LENS_HD float row_grad_scale(Agg agg, float row_len, int64_t seq_len, float denom_tokens, float denom_seqs) {
  if (agg == Agg::token_mean) return 1.0f / denom_tokens;
  if (agg == Agg::seq_mean_token_mean) return 1.0f / ((row_len > 1.0f ? row_len : 1.0f) * denom_seqs);
  return 1.0f / (denom_seqs * static_cast<float>(seq_len));
}

}  // namespace lens
