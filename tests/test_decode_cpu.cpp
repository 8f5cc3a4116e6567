// Decode shapes and the split-KV decode kernel (cpu/decode.h) on the CPU: n new queries at the end
// of m keys (bottom-right causal), grouped-query heads, against the fp64 reference and against the
// prefill kernels (staged, fused) on the same problems; the split plan; the merge of partial
// states (order, identity, exactness against fp64 and against the one-pass state); the last rows
// of a prefill; refusals.
#include "core/modify.h"
#include "cpu/bf16.h"
#include "cpu/cpu_backend.h"
#include "cpu/decode.h"
#include "cpu/online_softmax.h"
#include "engine/registry.h"
#include "tests/test_util.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace attnlab {
namespace {

using test::fp32_tolerance;
using test::message_of;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

double rel_err(const MatrixF& out, const MatrixD& ref) {
  const double scale = std::max(ref.cwiseAbs().maxCoeff(), 1e-300);
  return (out.cast<double>() - ref).cwiseAbs().maxCoeff() / scale;
}

double rel_err(const MatrixF& a, const MatrixF& b) { return rel_err(a, b.cast<double>().eval()); }

// A fixed custom mask that keeps each row's last key.
void add_custom_mask(Problem& p) {
  MatrixF mk = MatrixF::Zero(p.n(), p.m());
  for (int i = 0; i < p.n(); ++i)
    for (int j = 0; j + 1 < p.m(); ++j)
      if ((i + 3 * j) % 4 == 1) mk(i, j) = kNegInf;
  p.edit().custom_mask = mk;
}

// n queries at the end of m keys, heads over kv_heads, with a mask; custom: add_custom_mask.
Problem decode_problem(int n, int m, int d, int heads, int kv_heads, MaskKind mask, std::uint64_t seed,
                       double temperature = 1.0) {
  Problem p = random_problem(n, m, d, d, seed, heads, kv_heads);
  p.mask = mask;
  p.temperature = temperature;
  if (mask == MaskKind::Custom) add_custom_mask(p);
  return p;
}

std::string label(const Problem& p) {
  return "n " + std::to_string(p.n()) + " m " + std::to_string(p.m()) + " d " + std::to_string(p.d_k()) +
         " heads " + std::to_string(p.heads) + "/" + std::to_string(p.kv_heads()) + " mask " +
         std::string(to_string(p.mask)) + " T " + std::to_string(p.temperature);
}

TEST(DecodeCpu, MatchesFp64AndThePrefillKernelsOnDecodeShapes) {
  std::uint64_t seed = 1;
  int cases = 0;
  for (int n : {1, 3, 64})
    for (int m : {64, 1000, 5000})
      for (auto [heads, kv] : {std::pair{1, 1}, {4, 4}, {8, 1}, {8, 2}})
        for (MaskKind mask : {MaskKind::None, MaskKind::Causal, MaskKind::Custom})
          for (int d : {3, 64}) {
            const Problem p = decode_problem(n, m, d, heads, kv, mask, seed++, d == 3 ? 0.85 : 1.0);
            SCOPED_TRACE(label(p));
            const Trace dec = cpu_decode(p);
            const TraceD ref = reference_fp64(p);
            ASSERT_EQ(dec.output.rows(), static_cast<Eigen::Index>(heads) * n);
            ASSERT_EQ(dec.variant, Variant::Decode);
            EXPECT_GE(dec.splits, 1);
            EXPECT_LE(rel_err(dec.output, ref.output), fp32_tolerance(p));
            // The prefill kernels run the same shapes (reading the cache once per query head), in
            // both precisions: bf16 (a grouped key/value head rounded once and read by its group)
            // against the bf16 decode, within one bf16 ulp (each kernel rounds every weight to
            // bf16 against its own running maximum).
            EXPECT_LE(rel_err(cpu_fused(p).output, ref.output), fp32_tolerance(p));
            EXPECT_LE(rel_err(cpu_staged(p).output, ref.output), fp32_tolerance(p));
            RunOptions o;
            o.variant = Variant::Decode;
            o.precision = Precision::BF16;
            const Trace dec_bf16 = make_cpu_backend()->run(p, o);
            EXPECT_LE(rel_err(cpu_fused_bf16(p).output, dec_bf16.output), 0x1p-8);
            Trace staged_bf16;
            cpu_staged_bf16_into(p, o, staged_bf16);
            EXPECT_LE(rel_err(staged_bf16.output, dec_bf16.output), 0x1p-8);
            ++cases;
          }
  EXPECT_EQ(cases, 216);
}

// The kernel's own products (head dims of whole 16-float vectors, up to 16 rows per key/value
// head; AVX-512 and AVX2, both precisions) and Eigen's (every other shape) on the shapes
// that reach each of their branches:
// d_v in pieces of 4 vectors and a rest, d_k != d_v, a short last group of keys, a split shorter
// than a group, rows from 1 to past the direct limit (P V's register tiles of every height: 1, 2,
// 3, 4 + 4 + 5, 5 + 5 + 6 rows, and the one tile of 7 or 8 rows in pieces of 1 to 3 vectors on
// AVX-512, of one vector on AVX2; the scores' tiles of 1 to 8 rows on AVX-512, 1 to 6 on AVX2); fp32
// against fp64, bf16 against fp64 and the fused bf16 kernel (within one bf16 ulp, 2^-8: each
// kernel rounds every weight to bf16 against its own running maximum, so a weight may round the
// other way).
TEST(DecodeCpu, EveryHeadDimAndRowCountMatchesFp64InBothPrecisions) {
  auto cpu = make_cpu_backend();
  std::uint64_t seed = 300;
  int direct = 0;
  for (auto [d_k, d_v] : {std::pair{16, 16}, {48, 48}, {64, 32}, {128, 128}, {144, 144}, {256, 256}, {96, 160},
                          {20, 20}, {64, 40}})
    for (int m : {5, 17, 257, 1500})
      for (auto [heads, kv, n] : {std::tuple{1, 1, 1}, {2, 1, 1}, {3, 1, 1}, {7, 1, 1}, {8, 1, 1}, {8, 1, 2}, {13, 1, 1}, {17, 1, 1}})
        for (MaskKind mask : {MaskKind::None, MaskKind::Causal, MaskKind::Custom}) {
          if (n > m) continue;
          Problem p = random_problem(n, m, d_k, d_v, seed++, heads, kv);
          p.mask = mask;
          if (mask == MaskKind::Custom) add_custom_mask(p);
          SCOPED_TRACE("d " + std::to_string(d_k) + "/" + std::to_string(d_v) + " m " + std::to_string(m) + " heads " +
                       std::to_string(heads) + "/" + std::to_string(kv) + " n " + std::to_string(n) + " " +
                       std::string(to_string(mask)));
          direct += cpu::decode::direct_products(p) ? 1 : 0;
          const TraceD ref = reference_fp64(p);
          RunOptions o;
          o.variant = Variant::Decode;
          o.splits = m > 1000 ? 3 : 1;
          EXPECT_LE(rel_err(cpu->run(p, o).output, ref.output), fp32_tolerance(p));
          o.precision = Precision::BF16;
          const Trace b = cpu->run(p, o);
          EXPECT_LE(rel_err(b.output, ref.output), 2e-2);
          EXPECT_LE(rel_err(b.output, cpu_fused_bf16(p).output), 0x1p-8);
        }
#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
  EXPECT_GT(direct, 0) << "an AVX-512 or AVX2 build takes the direct products for whole-vector head dims";
#else
  EXPECT_EQ(direct, 0);
#endif
}

// However the keys are cut, the merged result is the same computation (to rounding); the count
// asked for is the count run, also where equal whole-key lengths could not give it (6001 splits of
// 10000 keys: parts of one and two keys).
TEST(DecodeCpu, AnySplitCountGivesTheSameOutput) {
  const Problem p = decode_problem(4, 10000, 64, 8, 2, MaskKind::Causal, 5);
  const TraceD ref = reference_fp64(p);
  const Trace one = cpu_decode(p, 1);
  EXPECT_EQ(one.splits, 1);
  for (int s : {2, 3, 7, 40, 6001, 9999, 10000}) {
    const Trace t = cpu_decode(p, s);
    EXPECT_EQ(t.splits, s) << s;
    EXPECT_LE(rel_err(t.output, ref.output), fp32_tolerance(p)) << s;
    EXPECT_LE(rel_err(t.output, one.output), 1e-5) << s;
  }
}

TEST(DecodeCpu, TheSplitPlanFollowsTheCoresAndTheCacheLength) {
  using cpu::decode::plan_splits;
  const Problem longp = decode_problem(1, 262144, 4, 1, 1, MaskKind::None, 1);
  // One key/value head on 2 workers: 4 items per worker.
  EXPECT_EQ(plan_splits(longp, 2).splits, 8);
  EXPECT_EQ(plan_splits(longp, 16).splits, 64);
  // Eight key/value heads already give 8 items: on 2 workers one split each is enough.
  const Problem gqa = decode_problem(1, 65536, 4, 32, 8, MaskKind::None, 1);
  EXPECT_EQ(plan_splits(gqa, 2).splits, 1);
  EXPECT_EQ(plan_splits(gqa, 16).splits, 8);
  // A short cache is one split: no split shorter than a few thousand keys.
  const Problem shortp = decode_problem(1, 1000, 4, 1, 1, MaskKind::None, 1);
  EXPECT_EQ(plan_splits(shortp, 16).splits, 1);
  // Asked for: exactly that many, at most one per key, in parts whose lengths differ by one key
  // at most; the splits cover every key once, in order, and split_of finds each key's.
  EXPECT_EQ(plan_splits(shortp, 2, 7).splits, 7);
  EXPECT_EQ(plan_splits(shortp, 2, 600).splits, 600);
  EXPECT_EQ(plan_splits(shortp, 2, 5000).splits, 1000);
  for (const Problem* p : {&longp, &gqa, &shortp})
    for (int req : {0, 1, 3, 13, 600, 999}) {
      SCOPED_TRACE(std::to_string(p->m()) + " keys, " + std::to_string(req) + " asked");
      const auto plan = plan_splits(*p, 2, req);
      if (req > 0) EXPECT_EQ(plan.splits, req);
      int next = 0, shortest = p->m(), longest = 0;
      for (int s = 0; s < plan.splits; ++s) {
        EXPECT_EQ(plan.begin(s), next);
        EXPECT_GT(plan.end(s, p->m()), plan.begin(s));
        next = plan.end(s, p->m());
        EXPECT_EQ(plan.split_of(plan.begin(s)), s);
        EXPECT_EQ(plan.split_of(next - 1), s);
        shortest = std::min(shortest, next - plan.begin(s));
        longest = std::max(longest, next - plan.begin(s));
      }
      EXPECT_EQ(next, p->m());
      if (req > 0) EXPECT_LE(longest - shortest, 1);
    }
  EXPECT_NE(message_of<InputError>([&] { plan_splits(shortp, 2, -1); }).find("--split must be"), std::string::npos);
}

// The merge of two ranges' states is the state of their union: against the one-pass partial of
// the whole range, against the same merge in fp64, symmetric and associative to rounding, and an
// empty range (m = -inf, l = 0) is its identity, exactly.
TEST(DecodeCpu, MergingPartialStatesIsTheStateOfTheUnion) {
  using namespace cpu::decode;
  const Problem p = decode_problem(2, 6000, 32, 2, 1, MaskKind::Causal, 11);
  const float scale = fused_scale(p);
  MatrixF scratch;
  Partial a, b, c, whole;
  split_partial(p, 0, 0, 2500, a, scratch);
  split_partial(p, 0, 2500, 4100, b, scratch);
  split_partial(p, 0, 4100, 6000, c, scratch);
  split_partial(p, 0, 0, 6000, whole, scratch);
  const int d_v = p.d_v();
  for (int r = 0; r < 4; ++r) {
    SCOPED_TRACE("row " + std::to_string(r));
    float m_ab = a.m[r], l_ab = a.l[r];
    std::vector<float> acc_ab(a.acc.row(r).data(), a.acc.row(r).data() + d_v);
    cpu::online::merge_states(m_ab, l_ab, acc_ab.data(), b.m[r], b.l[r], b.acc.row(r).data(), d_v, scale);
    float m_ba = b.m[r], l_ba = b.l[r];
    std::vector<float> acc_ba(b.acc.row(r).data(), b.acc.row(r).data() + d_v);
    cpu::online::merge_states(m_ba, l_ba, acc_ba.data(), a.m[r], a.l[r], a.acc.row(r).data(), d_v, scale);
    // a l_A + b l_B either way; a fused multiply-add rounds one of the products, so to an ulp.
    const auto ulps = [](float x, float y) { return std::abs(x - y) / std::ldexp(1.f, std::ilogb(std::max(std::abs(x), std::abs(y))) - 23); };
    EXPECT_EQ(m_ab, m_ba);
    EXPECT_LE(ulps(l_ab, l_ba), 1.f);
    float acc_max = 0;
    for (float x : acc_ab) acc_max = std::max(acc_max, std::abs(x));
    for (int k = 0; k < d_v; ++k) EXPECT_LE(std::abs(acc_ab[k] - acc_ba[k]), 4 * std::ldexp(acc_max, -24)) << k;
    // ((A B) C) against the same merge carried out in double on the same partials.
    float m = m_ab, l = l_ab;
    std::vector<float> acc = acc_ab;
    cpu::online::merge_states(m, l, acc.data(), c.m[r], c.l[r], c.acc.row(r).data(), d_v, scale);
    const double M = std::max({a.m[r], b.m[r], c.m[r]});
    const auto w = [&](float mi) { return std::exp((static_cast<double>(mi) - M) * scale); };
    const double L = a.l[r] * w(a.m[r]) + b.l[r] * w(b.m[r]) + c.l[r] * w(c.m[r]);
    EXPECT_EQ(m, static_cast<float>(M));
    EXPECT_LE(std::abs(l - L), 4 * std::ldexp(L, -24)) << l << " vs " << L;
    // (A (B C)): the same to rounding.
    float m2 = b.m[r], l2 = b.l[r];
    std::vector<float> acc2(b.acc.row(r).data(), b.acc.row(r).data() + d_v);
    cpu::online::merge_states(m2, l2, acc2.data(), c.m[r], c.l[r], c.acc.row(r).data(), d_v, scale);
    float m3 = a.m[r], l3 = a.l[r];
    std::vector<float> acc3(a.acc.row(r).data(), a.acc.row(r).data() + d_v);
    cpu::online::merge_states(m3, l3, acc3.data(), m2, l2, acc2.data(), d_v, scale);
    EXPECT_EQ(m3, m);
    EXPECT_LE(std::abs(l3 - l), 4 * std::ldexp(l, -24));
    // Against the one pass over all 6000 keys: the same sum in another order.
    EXPECT_EQ(m, whole.m[r]);
    EXPECT_NEAR(l, whole.l[r], 1e-5 * whole.l[r]);
    for (int k = 0; k < d_v; ++k) EXPECT_NEAR(acc[k] / l, whole.acc(r, k) / whole.l[r], 1e-5);
    // The identity: an empty range changes nothing, on either side.
    float me = kNegInf, le = 0;
    std::vector<float> acce(d_v, 0.f);
    cpu::online::merge_states(me, le, acce.data(), m, l, acc.data(), d_v, scale);
    EXPECT_EQ(me, m);
    EXPECT_EQ(le, l);
    EXPECT_EQ(acce, acc);
    float mk = m, lk = l;
    std::vector<float> acck = acc;
    cpu::online::merge_states(mk, lk, acck.data(), kNegInf, 0.f, acce.data(), d_v, scale);
    EXPECT_EQ(lk, l);
    EXPECT_EQ(acck, acc);
  }
}

// Under the causal mask a query sees no key of a split that starts after it, and a custom mask can
// hide a whole split from a row: that split's state is empty and the merge ignores it.
TEST(DecodeCpu, ASplitARowCannotSeeIsEmptyAndMergesAsNothing) {
  using namespace cpu::decode;
  Problem p = decode_problem(64, 4096, 16, 1, 1, MaskKind::Causal, 3);
  Partial last;
  MatrixF scratch;
  // Keys 4090.. : query 0 (position 4032) sees none of them, query 63 (position 4095) all six.
  split_partial(p, 0, 4090, 4096, last, scratch);
  EXPECT_EQ(last.m[0], kNegInf);
  EXPECT_EQ(last.l[0], 0.f);
  EXPECT_TRUE(last.acc.row(0).isZero(0.f));
  EXPECT_GT(last.l[63], 0.f);
  // A custom mask that hides keys 0..2047 from row 5: with two splits of 2048, its first is empty.
  MatrixF mk = MatrixF::Zero(64, 4096);
  mk.row(5).head(2048).setConstant(kNegInf);
  p.mask = MaskKind::Custom;
  p.edit().custom_mask = mk;
  Partial first;
  split_partial(p, 0, 0, 2048, first, scratch);
  EXPECT_EQ(first.m[5], kNegInf);
  EXPECT_LE(rel_err(cpu_decode(p, 2).output, reference_fp64(p).output), fp32_tolerance(p));
}

// The decode of a prefill's last positions is the prefill's last rows: the lesson's claim.
TEST(DecodeCpu, TheLastQueriesOfAPrefillAreItsLastRows) {
  Problem pre = random_problem(512, 32, 32, 21, 4);
  pre.mask = MaskKind::Causal;
  const Trace full = cpu_fused(pre);
  for (int q : {1, 7, 64}) {
    const Problem dec = decode_view(pre, q, 4);
    ASSERT_EQ(dec.n(), q);
    ASSERT_EQ(dec.m(), 512);
    EXPECT_EQ(dec.causal_offset(), 512 - q);
    EXPECT_EQ(dec.query_tokens().front(), std::to_string(512 - q));
    const Trace t = cpu_decode(dec);
    for (int h = 0; h < 4; ++h) {
      const MatrixF last = full.output.middleRows(static_cast<Eigen::Index>(h) * 512 + 512 - q, q);
      EXPECT_LE(rel_err(t.output.middleRows(static_cast<Eigen::Index>(h) * q, q).eval(), last), 2e-6)
          << "q " << q << " head " << h;
    }
  }
}

// Grouped heads: query head h reads key/value head h / kv_group; the same as giving every query
// head its own copy (expand_kv_heads), for every kernel.
TEST(DecodeCpu, GroupedHeadsAreTheExpandedCacheRead) {
  const Problem p = decode_problem(5, 3000, 64, 8, 2, MaskKind::Causal, 9);
  const Problem e = expand_kv_heads(p);
  EXPECT_EQ(e.kv_group, 1);
  EXPECT_EQ(e.k().rows(), 8 * 3000);
  EXPECT_TRUE(e.k().middleRows(3 * 3000, 3000) == p.k().topRows(3000));
  EXPECT_TRUE(e.k().middleRows(4 * 3000, 3000) == p.k().middleRows(3000, 3000));
  const TraceD ref = reference_fp64(e);
  for (const Trace& t : {cpu_decode(p), cpu_fused(p), cpu_staged(p), cpu_fused_bf16(e)})
    EXPECT_LE(rel_err(t.output, ref.output), t.precision == Precision::BF16 ? 2e-2 : fp32_tolerance(p))
        << to_string(t.variant) << " " << to_string(t.precision);
  EXPECT_LE(rel_err(cpu_fused_bf16(p).output, cpu_fused_bf16(e).output), 0.0);
}

TEST(DecodeCpu, RefusesWhatItDoesNotCompute) {
  const Problem p = decode_problem(2, 100, 8, 2, 1, MaskKind::None, 1);
  auto cpu = make_cpu_backend();
  RunOptions o;
  o.variant = Variant::Decode;
  o.rows = {0};
  EXPECT_NE(message_of<InputError>([&] { cpu->run(p, o); }).find("not the decode kernel"), std::string::npos);
  o.rows.clear();
  o.splits = -2;
  EXPECT_NE(message_of<InputError>([&] { cpu->run(p, o); }).find("--split must be"), std::string::npos);
  // Huge scores overflow fp32: refused, never a NaN.
  Problem big = p;
  big.edit().q *= 1e20f;
  big.edit().k *= 1e20f;
  EXPECT_NE(message_of<InputError>([&] { cpu_decode(big); }).find("overflows"), std::string::npos);
}

}  // namespace
}  // namespace attnlab

namespace attnlab {
namespace {

using test::first_keys;

}  // namespace

// A cache with room for more keys than it holds (the viewer's decode view grows one a token): the
// kernel over its first keys is the kernel on a problem of those keys alone, bit for bit, causal
// placing the queries at the end of the keys in use.
TEST(DecodeCpu, TheKernelOverTheFirstKeysIsTheKernelOnThoseKeysAlone) {
  for (MaskKind mask : {MaskKind::None, MaskKind::Causal}) {
    const Problem p = decode_problem(3, 5000, 32, 4, 2, mask, 11);
    for (int keys : {3, 700, 4999}) {
      for (int splits : {1, 3}) {
        SCOPED_TRACE(std::to_string(keys) + " keys, " + std::to_string(splits) + " splits");
        const cpu::decode::SplitPlan plan = cpu::decode::plan_splits(p, 2, splits, keys);
        std::vector<cpu::decode::Partial> parts;
        MatrixF out;
        cpu::decode::decode_keys(p, keys, plan, nullptr, nullptr, parts, out);
        const Trace whole = cpu_decode(first_keys(p, keys), splits);
        EXPECT_EQ(whole.splits, plan.splits);
        EXPECT_TRUE(out == whole.output);
        EXPECT_EQ(parts.size(), static_cast<std::size_t>(p.kv_heads() * plan.splits));
      }
    }
  }
}

// prepare_keys lays out K as the kernel reads it (and turns it by RoPE) ahead of a token, so the
// viewer's clock holds the kernel alone: the kernel's call finds the layout made and makes none.
TEST(DecodeCpu, PreparedKeysAreTheLayoutTheKernelReads) {
  for (const double theta : {0.0, 500.0}) {
    Problem p = decode_problem(2, 3000, 64, 4, 2, MaskKind::Causal, 5);
    p.mods.rope_theta = theta;
    if (!cpu::decode::direct_products(p)) GTEST_SKIP() << "the kernel forms no panels in this build";
    const auto& items = p.inputs()->derived.items;
    const auto count = [&items](const std::string& prefix) {
      return std::count_if(items.begin(), items.end(), [&](const auto& kv) { return kv.first.rfind(prefix, 0) == 0; });
    };
    cpu::decode::prepare_keys(p);
    EXPECT_EQ(count("kv/decode_k_panels/"), 1);
    EXPECT_EQ(count("kv/rope_k/"), theta > 0 ? 1 : 0);
    const std::size_t made = items.size();
    const cpu::decode::SplitPlan plan = cpu::decode::plan_splits(p, 2, 2, 2500);
    std::vector<cpu::decode::Partial> parts;
    MatrixF out;
    cpu::decode::decode_keys(p, 2500, plan, nullptr, nullptr, parts, out);
    EXPECT_EQ(items.size(), made);
    MatrixF whole;
    std::vector<cpu::decode::Partial> whole_parts;
    cpu::decode::decode_keys(first_keys(p, 2500), 2500, plan, nullptr, nullptr, whole_parts, whole);
    EXPECT_TRUE(out == whole);
  }
}

// The same with the modifications (the viewer decodes its input with them): the queries sit at
// the end of the keys in use, so RoPE turns Q by that position, not by the cache's last (it did),
// and ALiBi, the window, the documents and the bias's row count from there; fp32 and bf16.
TEST(DecodeCpu, TheKernelOverTheFirstKeysKeepsTheModificationsAtTheQueriesPositions) {
  Problem p = decode_problem(2, 1200, 32, 4, 2, MaskKind::Causal, 17);
  p.mods.rope_theta = 500;
  p.mods.alibi = true;
  p.mods.softcap = 6;
  p.mods.window = 300;
  ProblemInputs& in = p.edit();
  in.bias = MatrixF::Random(static_cast<Eigen::Index>(p.heads) * p.n(), p.m());
  in.documents.resize(p.m());
  for (int j = 0; j < p.m(); ++j) in.documents[j] = j < 100 ? 0 : 1 + (j % 7 == 0);
  for (Precision precision : {Precision::FP32, Precision::BF16})
    for (int keys : {150, 700}) {
      SCOPED_TRACE(std::to_string(keys) + " keys, " + std::string(to_string(precision)));
      const cpu::decode::SplitPlan plan = cpu::decode::plan_splits(p, 2, 3, keys);
      std::vector<cpu::decode::Partial> parts;
      MatrixF out;
      cpu::decode::decode_keys(p, keys, plan, nullptr, nullptr, parts, out, precision);
      const Problem alone = first_keys(p, keys);
      validate(alone);
      MatrixF whole;
      std::vector<cpu::decode::Partial> whole_parts;
      cpu::decode::decode_keys(alone, keys, plan, nullptr, nullptr, whole_parts, whole, precision);
      EXPECT_TRUE(out == whole) << (out - whole).cwiseAbs().maxCoeff();
      // And the fp64 row over the first keys (what the viewer checks a token against).
      const TraceD ref = reference_fp64(alone);
      EXPECT_LT((out.cast<double>() - ref.output).cwiseAbs().maxCoeff(), precision == Precision::BF16 ? 2e-2 : 1e-5);
    }
}

// A window: the kernel reads the keys some query may see, from the window's first key rounded down
// to a panel of 16, and no other (K and V before it are NaN here, which any read would carry into
// the output: 0 times NaN); the machine's plan cuts only those keys, so its split count follows
// the window's length; a requested plan cuts the whole cache, its splits before the window empty.
TEST(DecodeCpu, AWindowIsTheOnlyPartOfTheCacheRead) {
  using attnlab::decode_first_key;
  using cpu::decode::plan_splits;
  for (MaskKind mask : {MaskKind::Causal, MaskKind::None}) {
    Problem clean = decode_problem(2, 20000, 32, 4, 2, mask, 23);
    clean.mods.window = 1000;
    // The last query sits at 19999; the first at 19998 sees keys from 19998 - 999 = 18999 on.
    EXPECT_EQ(decode_first_key(clean), 18992);
    EXPECT_EQ(decode_first_key(clean, 10000), 8992);  // the queries at the end of 10000 keys
    const cpu::decode::SplitPlan own = plan_splits(clean, 2);
    EXPECT_EQ(own.first, 18992);
    EXPECT_EQ(own.splits, 1);  // 1008 keys: one split, not the cache's 4
    EXPECT_EQ(own.end(0, clean.m()), clean.m());
    EXPECT_EQ(plan_splits(clean, 2, 3).first, 0);
    for (int keys : {20000, 10000}) {
      const int first = decode_first_key(clean, keys);
      Problem bad = clean;
      ProblemInputs& in = bad.edit();
      for (int g = 0; g < bad.kv_heads(); ++g) {
        in.k.middleRows(static_cast<Eigen::Index>(g) * bad.m(), first).setConstant(std::nanf(""));
        in.v.middleRows(static_cast<Eigen::Index>(g) * bad.m(), first).setConstant(std::nanf(""));
      }
      const TraceD ref = reference_fp64(first_keys(clean, keys));
      for (Precision precision : {Precision::FP32, Precision::BF16})
        for (int splits : {0, 3}) {
          SCOPED_TRACE(std::string(to_string(mask)) + ", " + std::to_string(keys) + " keys, " +
                       std::string(to_string(precision)) + ", " + std::to_string(splits) + " splits");
          const cpu::decode::SplitPlan plan = plan_splits(bad, 2, splits, keys);
          std::vector<cpu::decode::Partial> parts;
          MatrixF out;
          cpu::decode::decode_keys(bad, keys, plan, nullptr, nullptr, parts, out, precision);
          ASSERT_TRUE(out.allFinite());
          EXPECT_LT((out.cast<double>() - ref.output).cwiseAbs().maxCoeff(),
                    precision == Precision::BF16 ? 2e-2 : 1e-5);
          if (splits == 3) {  // splits 0 and 1 end before the window: empty states
            EXPECT_EQ(parts[0].m[0], kNegInf);
            EXPECT_EQ(parts[0].l[0], 0.f);
          }
        }
    }
  }
  // A long window over a longer cache on 16 workers: the splits the window's 50000 keys allow
  // (24, no split under 2048 keys; 8 or 9 whole key blocks of 256 each), where the whole cache
  // takes 64 (12 or 13 blocks).
  Problem longp = decode_problem(1, 200000, 4, 1, 1, MaskKind::Causal, 1);
  EXPECT_EQ(plan_splits(longp, 16).splits, 64);
  longp.mods.window = 50000;
  const cpu::decode::SplitPlan plan = plan_splits(longp, 16);
  EXPECT_EQ(plan.first, 150000);
  EXPECT_EQ(plan.splits, 24);
  EXPECT_EQ(plan.unit, 256);
  EXPECT_EQ(plan.begin(0), 150000);
  for (int s = 0; s < plan.splits; ++s) {
    EXPECT_EQ((plan.begin(s) - plan.first) % 256, 0) << s;
    if (s + 1 < plan.splits) EXPECT_TRUE(plan.end(s, longp.m()) - plan.begin(s) == 8 * 256 ||
                                         plan.end(s, longp.m()) - plan.begin(s) == 9 * 256) << s;
  }
  EXPECT_EQ(plan.end(plan.splits - 1, longp.m()), longp.m());
}

// The fp64 row is the fp64 chain's row, over every key or the first ones, under every mask.
TEST(DecodeCpu, TheFp64RowIsTheReferenceChainsRow) {
  for (MaskKind mask : {MaskKind::None, MaskKind::Causal, MaskKind::Custom}) {
    const Problem p = decode_problem(4, 300, 16, 4, 2, mask, 5, 0.6);
    for (int keys : {0, 150}) {
      SCOPED_TRACE(std::to_string(static_cast<int>(mask)) + " " + std::to_string(keys));
      const Problem q = keys ? first_keys(p, keys) : p;
      const TraceD ref = reference_fp64(q);
      for (int h : {0, 3})
        for (int i : {0, 3}) {
          const RowReference ref_row = reference_fp64_row(p, h, i, keys);
          const std::vector<double>&row = ref_row.output, &w = ref_row.weights;
          const double big = ref_row.max_abs_logit;
          const Eigen::Index r = static_cast<Eigen::Index>(h) * p.n() + i;
          for (int c = 0; c < p.d_v(); ++c) EXPECT_NEAR(row[c], ref.output(r, c), 1e-12);
          ASSERT_EQ(static_cast<Eigen::Index>(w.size()), q.m());
          for (Eigen::Index j = 0; j < q.m(); ++j) EXPECT_NEAR(w[j], ref.weights(r, j), 1e-14);
          double want = 0;
          for (Eigen::Index j = 0; j < q.m(); ++j)
            if (std::isfinite(ref.logits(r, j))) want = std::max(want, std::abs(ref.logits(r, j)));
          EXPECT_NEAR(big, want, 1e-12);
        }
    }
  }
  EXPECT_THROW(reference_fp64_row(random_problem(2, 8, 4, 4, 1), 1, 0), InputError);
}

// A score beyond fp32's range below the row's largest (q·k = -1e40) rounds to -inf and weighs 0,
// as in fp64: the decode kernel runs the row in fp32 and in bf16 (its scores are fp32 sums of
// bf16 products), where the bf16 staged and fused kernels refuse it (README, "overflow").
TEST(DecodeCpu, AScoreOverflowingBelowTheRowsLargestWeighsZeroInBothPrecisions) {
  Problem p = random_problem(2, 2, 2, 1);
  p.edit().q << 1e20f, -1e20f, 1.f, 1.f;
  p.edit().k << 1.f, 1.f, -1e20f, 1e20f;
  const TraceD ref = reference_fp64(p);
  auto cpu = make_cpu_backend();
  for (Precision pr : {Precision::FP32, Precision::BF16}) {
    RunOptions o;
    o.variant = Variant::Decode;
    o.precision = pr;
    const Trace t = cpu->run(p, o);
    EXPECT_TRUE(t.output.allFinite());
    EXPECT_LE(rel_err(t.output, ref.output), pr == Precision::BF16 ? 2e-2 : 1e-6);
  }
  for (Variant v : {Variant::Staged, Variant::Fused}) {
    RunOptions o;
    o.variant = v;
    o.precision = Precision::BF16;
    EXPECT_NE(message_of<InputError>([&] { cpu->run(p, o); }).find("overflows"), std::string::npos);
  }
}

// A cache stored in bf16: the kernel in the lab's bf16 arithmetic reads the problem's bf16 copy of
// K and V (made once, kept with the inputs, dropped by an edit); its output is the fused bf16
// kernel's on the same problem up to the order of the sums, and within verify's bf16 bound of fp64.
TEST(DecodeCpu, ABf16CacheIsReadInTheLabsBf16Arithmetic) {
  auto cpu = make_cpu_backend();
  for (MaskKind mask : {MaskKind::None, MaskKind::Causal, MaskKind::Custom}) {
    Problem p = decode_problem(3, 3000, 64, 8, 2, mask, 21, 0.7);
    SCOPED_TRACE(label(p));
    RunOptions o;
    o.variant = Variant::Decode;
    o.precision = Precision::BF16;
    const Trace t = cpu->run(p, o);
    EXPECT_EQ(t.precision, Precision::BF16);
    EXPECT_EQ(t.variant, Variant::Decode);
    const TraceD ref = reference_fp64(p);
    EXPECT_LE(rel_err(t.output, ref.output), 2e-2);
    EXPECT_GT(rel_err(t.output, ref.output), 1e-5) << "bf16 operands, not the fp32 ones";
    EXPECT_LE(rel_err(t.output, cpu_fused_bf16(p).output), 2e-3);
    // The split count changes only the order of the merges.
    o.splits = 1;
    EXPECT_LE(rel_err(cpu->run(p, o).output, t.output), 1e-5);
  }
  // Made once and kept with the inputs; a copy of the problem shares it; an edit drops it.
  Problem p = decode_problem(1, 500, 16, 2, 1, MaskKind::None, 3);
  const auto a = cpu::decode::bf16_cache(p);
  EXPECT_EQ(cpu::decode::bf16_cache(p).get(), a.get());
  const Problem copy = p;
  EXPECT_EQ(cpu::decode::bf16_cache(copy).get(), a.get());
  ASSERT_EQ(a->k.size(), static_cast<std::size_t>(p.k().size()));
  EXPECT_EQ(a->k[7], bf16_bits(p.k().data()[7]));
  Problem edited = p;
  edited.edit().k(0, 0) = 42.f;
  const auto b = cpu::decode::bf16_cache(edited);
  EXPECT_NE(b.get(), a.get());
  EXPECT_EQ(b->k[0], bf16_bits(42.f));
  EXPECT_EQ(cpu::decode::bf16_cache(p).get(), a.get()) << "the original keeps its own";
}

}  // namespace attnlab
