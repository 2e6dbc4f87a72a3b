// C++ test of the torch-free CPU kernels on hand-computed values (run by ctest; see CMakeLists.txt).
//
//   cmake -S . -B build/cmake -DLENS_BUILD_EXTENSION=OFF && cmake --build build/cmake && ctest --test-dir build/cmake
//
// Covers each clip branch of LENS Eq. (7), the KL estimators, one masked row, the three
// aggregations, GRPO and LENS Eq. (6) advantages, and the bf16 rows
// widened to fp32 in blocks (bit conversions and block sums against the fp32 kernel).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "../core/crpo_reduce.h"
#include "../core/token_math.h"
#include "../cpu/advantages_kernel.h"
#include "../cpu/crpo_loss_kernel.h"

namespace {

int failures = 0;

void check_close(double got, double want, const char* what, double tol = 1e-5) {
  if (std::fabs(got - want) > tol * (1.0 + std::fabs(want))) {
    std::printf("FAIL %s: got %.9g, want %.9g\n", what, got, want);
    ++failures;
  }
}

void check_true(bool ok, const char* what) {
  if (!ok) {
    std::printf("FAIL %s\n", what);
    ++failures;
  }
}

const lens::CrpoHyper kHyper{0.2f, 0.2f, 3.0f, 0.0f};

void test_exp() {
  double worst = 0.0;
  for (int i = -2000; i <= 2000; ++i) {
    const float x = i * 0.01f;
    worst = std::fmax(worst, std::fabs(lens::lens_exp(x) / std::exp(static_cast<double>(x)) - 1.0));
  }
  check_true(worst < 5e-7, "lens_exp within 5e-7 relative of exp on [-20, 20]");
}

void test_clip_branches() {
  using lens::KlKind;
  // A > 0, ratio 1.1 inside the clip range: unclipped, d/dlogp = -A * ratio.
  auto t = lens::crpo_token<KlKind::none>(std::log(1.1f), 0.0f, 0.0f, 1.0f, 1.0f, kHyper);
  check_close(t.pg, -1.1, "pg inside");
  check_close(t.dloss, -1.1, "grad inside");
  // A > 0, ratio 1.5 > 1.2: clipped to -1.2, no gradient, counted in clipfrac_high.
  t = lens::crpo_token<KlKind::none>(std::log(1.5f), 0.0f, 0.0f, 1.0f, 1.0f, kHyper);
  check_close(t.pg, -1.2, "pg clip high");
  check_close(t.dloss, 0.0, "grad clip high");
  check_true(t.clip_high && !t.clip_low && !t.dual, "flags clip high");
  // A < 0, ratio 0.5 < 0.8: max(0.5, 0.8) = 0.8, clipped, clipfrac_low.
  t = lens::crpo_token<KlKind::none>(std::log(0.5f), 0.0f, 0.0f, -1.0f, 1.0f, kHyper);
  check_close(t.pg, 0.8, "pg clip low");
  check_close(t.dloss, 0.0, "grad clip low");
  check_true(t.clip_low && !t.dual, "flags clip low");
  // A < 0, ratio 2: pg = 2 < clip_c * |A| = 3, unclipped, d/dlogp = -A * ratio = 2.
  t = lens::crpo_token<KlKind::none>(std::log(2.0f), 0.0f, 0.0f, -1.0f, 1.0f, kHyper);
  check_close(t.pg, 2.0, "pg negative adv");
  check_close(t.dloss, 2.0, "grad negative adv");
  // A < 0, ratio 5: dual clip caps pg at 3, no gradient.
  t = lens::crpo_token<KlKind::none>(std::log(5.0f), 0.0f, 0.0f, -1.0f, 0.5f, kHyper);
  check_close(t.pg, 0.5 * 3.0, "pg dual clip (weighted 0.5)");
  check_close(t.dloss, 0.0, "grad dual clip");
  check_true(t.dual, "flag dual");
  // log-ratio 30 saturates at 20: ratio e^20, no gradient even where unclipped would apply.
  t = lens::crpo_token<KlKind::none>(30.0f, 0.0f, 0.0f, -1e-9f, 1.0f, kHyper);
  check_close(t.ratio, std::exp(20.0), "ratio saturated", 1e-6);
  check_close(t.dloss, 0.0, "grad saturated");
}

void test_kl() {
  using lens::KlKind;
  auto k = lens::kl_term<KlKind::k3>(0.0f, std::log(2.0f));  // d = ln 2
  check_close(k.value, 2.0 - std::log(2.0) - 1.0, "k3 value");
  check_close(k.dlogp, 1.0 - 2.0, "k3 grad");
  k = lens::kl_term<KlKind::k2>(0.0f, 1.0f);
  check_close(k.value, 0.5, "k2 value");
  check_close(k.dlogp, -1.0, "k2 grad");
  k = lens::kl_term<KlKind::k2>(0.0f, 5.0f);  // unclamped, as verl: 12.5, and its gradient keeps pulling
  check_close(k.value, 12.5, "k2 far from the reference");
  check_close(k.dlogp, -5.0, "k2 far from the reference grad");
  k = lens::kl_term<KlKind::k1>(0.5f, 0.25f);
  check_close(k.value, 0.25, "k1 value");
  check_close(k.dlogp, 1.0, "k1 grad");
  // beta adds beta * kl to the loss and beta * dkl to the gradient.
  const lens::CrpoHyper h{0.2f, 0.2f, 3.0f, 0.5f};
  const auto t = lens::crpo_token<KlKind::k1>(0.5f, 0.5f, 0.25f, 2.0f, 1.0f, h);
  check_close(t.loss, -2.0 + 0.5 * 0.25, "loss with kl");
  check_close(t.dloss, -2.0 + 0.5, "grad with kl");
}

void test_row_and_aggregation() {
  // Row 0: ratios 1, 1.1, (masked 100), 1.5 with A = 1, w = 2: pg = -1, -1.1, -, -1.2 (each x 2).
  const float lp0[4] = {0.0f, std::log(1.1f), std::log(100.0f), std::log(1.5f)};
  const float old0[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  const bool m0[4] = {true, true, false, true};
  // Row 1: one token, ratio 1, A = -1, w = 1: pg = 1. Row 2: no tokens.
  const float lp1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  const bool m1[4] = {true, false, false, false};
  const bool m2[4] = {false, false, false, false};
  using In = lens::cpu::RowInputs<float, bool>;
  const lens::RowPartials r0 = lens::cpu::crpo_row_forward<lens::KlKind::none>(In{lp0, old0, nullptr, m0, 4, 1.0f, 2.0f}, kHyper);
  const lens::RowPartials r1 = lens::cpu::crpo_row_forward<lens::KlKind::none>(In{lp1, old0, nullptr, m1, 4, -1.0f, 1.0f}, kHyper);
  const lens::RowPartials r2 = lens::cpu::crpo_row_forward<lens::KlKind::none>(In{lp1, old0, nullptr, m2, 4, 1.0f, 1.0f}, kHyper);
  check_close(r0.loss, -2.0 * (1.0 + 1.1 + 1.2), "row loss");
  check_close(r0.count, 3.0, "row count");
  check_close(r0.clip_high, 1.0, "row clip high");
  check_close(r0.ratio_max, 1.5, "row ratio max (masked 100 ignored)");
  check_close(r2.count, 0.0, "empty row");
  lens::Totals t;
  for (const auto& r : {r0, r1, r2}) lens::accumulate_row(t, r);
  float loss = 0.0f, stats[lens::kNumStats];
  lens::finalize_loss(t, 4, lens::Agg::token_mean, -1.0, -1.0, &loss, stats);
  check_close(loss, (-6.6 + 1.0) / 4.0, "token_mean");
  check_close(stats[lens::kClipfracHigh], 0.25, "clipfrac_high");
  check_close(stats[lens::kRatioMean], (1.0 + 1.1 + 1.5 + 1.0) / 4.0, "ratio_mean");
  lens::finalize_loss(t, 4, lens::Agg::token_mean, 10.0, -1.0, &loss, stats);
  check_close(loss, (-6.6 + 1.0) / 10.0, "token_mean with num_tokens");
  lens::finalize_loss(t, 4, lens::Agg::seq_mean_token_mean, -1.0, -1.0, &loss, stats);
  check_close(loss, (-6.6 / 3.0 + 1.0) / 2.0, "seq_mean_token_mean (empty row not counted)");
  check_close(stats[lens::kSeqDenom], 2.0, "seq denominator");
  lens::finalize_loss(t, 4, lens::Agg::seq_mean_token_sum_norm, -1.0, 5.0, &loss, stats);
  check_close(loss, (-6.6 + 1.0) / (5.0 * 4.0), "seq_mean_token_sum_norm with num_seqs");
  // Gradient of row 0 under token_mean over 4 tokens: -2 * ratio / 4 where unclipped, 0 elsewhere.
  float grad[4];
  lens::cpu::crpo_row_backward<lens::KlKind::none>(In{lp0, old0, nullptr, m0, 4, 1.0f, 2.0f}, kHyper, 0.25f, grad);
  check_close(grad[0], -0.5, "grad token 0");
  check_close(grad[1], -0.55, "grad token 1");
  check_close(grad[2], 0.0, "grad masked token");
  check_close(grad[3], 0.0, "grad clipped token");
}

void test_advantages() {
  // Group 0 = {1, 0, 1}: mean 2/3, unbiased std sqrt(1/3). Group 1 = {0.5}: mean 0, std 1.
  const float r[4] = {1.0f, 0.0f, 0.5f, 1.0f};
  const int64_t g[4] = {0, 0, 1, 0};
  float a[4];
  lens::cpu::grpo_advantages(r, g, 4, 2, 1e-6f, a);
  const double s = std::sqrt(1.0 / 3.0);
  check_close(a[0], (1.0 / 3.0) / (s + 1e-6), "grpo A(1)");
  check_close(a[1], (-2.0 / 3.0) / (s + 1e-6), "grpo A(0)");
  check_close(a[2], 0.5 / (1.0 + 1e-6), "grpo group of one");
  // Eq. (6): rewards {1, 0, 0}, weights {0.25, 0.75, 0.75}: mu = 1/7, sigma = sqrt(6) / 7.
  // Group 1 has weight 0 (A = 0); group 2's positive-weight rewards are equal (A = 0).
  const float wr[7] = {1.0f, 0.0f, 0.0f, 1.0f, 0.0f, 1.0f, 0.0f};
  const float ww[7] = {0.25f, 0.75f, 0.75f, 0.0f, 0.0f, 1.0f, 0.0f};
  const int64_t wg[7] = {0, 0, 0, 1, 1, 2, 2};
  float wa[7];
  lens::cpu::weighted_group_advantages(wr, ww, wg, 7, 3, 1e-6f, wa);
  check_close(wa[0], (6.0 / 7.0) / (std::sqrt(6.0) / 7.0 + 1e-6), "weighted A(success)");
  check_close(wa[1], (-1.0 / 7.0) / (std::sqrt(6.0) / 7.0 + 1e-6), "weighted A(failure)");
  check_true(wa[3] == 0.0f && wa[4] == 0.0f, "weighted: zero weight sum gives 0");
  check_true(wa[5] == 0.0f && wa[6] == 0.0f, "weighted: one positive-weight member gives 0");
}

uint16_t bf16_bits(float f) {  // truncation: the test values are exact in bf16
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return static_cast<uint16_t>(u >> 16);
}

void test_bf16_blocks() {
  using lens::KlKind;
  namespace cpu = lens::cpu;
  // Conversions: widening is exact, narrowing rounds to nearest even and keeps NaN quiet.
  const float in[5] = {1.0f + 1.0f / 256.0f, 1.0f + 3.0f / 256.0f, -2.5f, 1.0f + 1.0f / 512.0f, NAN};
  uint16_t out[5];
  cpu::float_to_bf16(in, 5, out);
  check_true(out[0] == 0x3F80 && out[1] == 0x3F82, "bf16 ties round to even");
  check_true(out[2] == bf16_bits(-2.5f) && out[3] == 0x3F80 && out[4] == 0x7FC0, "bf16 exact, below half, NaN");
  float back[5];
  cpu::bf16_to_float(out, 5, back);
  check_close(back[2], -2.5, "bf16 widening");
  // A row of 3 blocks + 37 tokens (values exact in bf16) against the fp32 kernel on the same values.
  const int64_t n = 3 * cpu::kBf16Block + 37;
  std::vector<float> lp(n), old(n), ref(n);
  std::vector<uint16_t> lp16(n), old16(n), ref16(n);
  std::vector<uint8_t> mask(n);
  for (int64_t t = 0; t < n; ++t) {
    lp[t] = -0.25f * static_cast<float>(t % 13) / 8.0f;
    old[t] = lp[t] + 0.125f * static_cast<float>(t % 5 - 2);
    ref[t] = lp[t] - 0.0625f * static_cast<float>(t % 3);
    lp16[t] = bf16_bits(lp[t]), old16[t] = bf16_bits(old[t]), ref16[t] = bf16_bits(ref[t]);
    mask[t] = t % 7 != 0;
  }
  const bool* m = reinterpret_cast<const bool*>(mask.data());
  const lens::CrpoHyper h{0.2f, 0.2f, 3.0f, 0.5f};
  const cpu::RowInputs<float, bool> f32{lp.data(), old.data(), ref.data(), m, n, 1.5f, 0.75f};
  const cpu::RowInputs<uint16_t, bool> b16{lp16.data(), old16.data(), ref16.data(), m, n, 1.5f, 0.75f};
  const lens::RowPartials want = cpu::crpo_row_forward<KlKind::k3>(f32, h);
  const lens::RowPartials got = cpu::crpo_row_forward_bf16<KlKind::k3>(b16, h);
  check_close(got.loss, want.loss, "bf16 blocks: loss", 1e-4);
  check_close(got.kl, want.kl, "bf16 blocks: kl", 1e-4);
  check_close(got.count, want.count, "bf16 blocks: count");
  check_close(got.clip_high + got.clip_low, want.clip_high + want.clip_low, "bf16 blocks: clip counts");
  check_close(got.ratio_max, want.ratio_max, "bf16 blocks: ratio max");
  std::vector<float> g32(n), gwant(n);
  std::vector<uint16_t> g16(n), gwant16(n);
  cpu::crpo_row_backward<KlKind::k3>(f32, h, 0.01f, g32.data());
  cpu::float_to_bf16(g32.data(), n, gwant16.data());
  cpu::crpo_row_backward_bf16<KlKind::k3>(b16, h, 0.01f, g16.data());
  check_true(g16 == gwant16, "bf16 blocks: gradient bits equal the fp32 gradient rounded");
}

}  // namespace

int main() {
  test_exp();
  test_clip_branches();
  test_kl();
  test_row_and_aggregation();
  test_advantages();
  test_bf16_blocks();
  if (failures) {
    std::printf("%d check(s) failed\n", failures);
    return 1;
  }
  std::printf("all CPU kernel checks passed\n");
  return 0;
}
