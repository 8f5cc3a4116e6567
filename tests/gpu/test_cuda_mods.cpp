// The modifications (core/modifications.h: RoPE, ALiBi, bias, soft-cap, window, documents,
// prefix, and the causal mask of decode shapes) on every CUDA kernel, against the fp64 reference
// (reference_fp64) through verify_trace, whose tolerances `attnlab verify` prints:
//   - every modification alone and in combinations, on the staged chain (every stage it brings
//     back, biased and capped included), the fused fp32 kernel, the fused bf16 kernel (d 64) and,
//     for decode shapes, the split-KV decode kernel in fp32 and bf16; a grouped problem with RoPE
//   - a windowed fused run computes exactly the tiles its block mask leaves (counted on the device:
//     cuda::last_fused_tiles) in fp32, bf16 and 3xTF32, far fewer than all of them
//   - the kept stages: biased and capped equal the reference's, only the ones asked for come
//     back, the rotated Q and K are the host's; the kernel names say which kernels ran with rules
//   - streamed runs (exact rows, the output) with modifications; resident buffers shared by
//     problems with and without them; small runs of every kernel with rules, for
//     compute-sanitizer (scripts/gpu-check runs CudaModsSanitize.* under memcheck and racecheck)
// gpu-check runs CudaMods* again under ATTNLAB_FUSED_CONFIG 1 and 2 (3xTF32 with rules).
// Every test SKIPs ("no CUDA device: <reason>") without a device.
#include "core/backend.h"
#include "core/modify.h"
#include "core/verify.h"
#include "cpu/cpu_backend.h"
#include "tests/test_util.h"

#include "engine/registry.h"
#ifdef ATTNLAB_HAVE_CUDA
#include "kernels/cuda_backend.h"
#include "kernels/fused.h"
#endif

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace attnlab {
namespace {

// A bias of `rows` x m with values in [-2, 2] from `seed`.
MatrixF random_bias(Eigen::Index rows, Eigen::Index m, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-2.f, 2.f);
  MatrixF b(rows, m);
  for (Eigen::Index r = 0; r < rows; ++r)
    for (Eigen::Index c = 0; c < m; ++c) b(r, c) = u(gen);
  return b;
}

// Document ids of m positions: document k is a run of lengths[k] positions; the last one takes
// whatever the lengths leave.
std::vector<int> documents(int m, const std::vector<int>& lengths) {
  std::vector<int> ids;
  for (std::size_t doc = 0; doc < lengths.size(); ++doc)
    for (int i = 0; i < lengths[doc]; ++i) ids.push_back(static_cast<int>(doc));
  ids.resize(m, static_cast<int>(lengths.size()) - 1);
  return ids;
}

// The largest finite |x| of a matrix (masked logits are -inf).
double max_finite(const MatrixD& x) {
  double mx = 0;
  for (Eigen::Index i = 0; i < x.size(); ++i)
    if (std::isfinite(x.data()[i])) mx = std::max(mx, std::abs(x.data()[i]));
  return mx;
}

// (n, m) custom mask blocking about a third of the pairs, never the query's own position.
MatrixF custom_mask(int n, int m) {
  MatrixF mk = MatrixF::Zero(n, m);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < m; ++j)
      if ((i * 5 + j * 11) % 3 == 0 && j != i + m - n) mk(i, j) = -std::numeric_limits<float>::infinity();
  return mk;
}

// One modification case: its shape (n queries at the end of m keys, heads over kv heads, d) and
// what it sets on a random problem of that shape.
struct ModCase {
  const char* name;
  int n, m, heads, kv_heads, d;
  std::function<void(Problem&)> apply;
  double temperature = 0.8;
};

std::vector<ModCase> mod_cases() {
  return {
      {"rope", 200, 200, 3, 3, 64, [](Problem& p) { p.mods.rope_theta = 10000; }},
      {"rope_grouped_causal", 150, 150, 4, 2, 64,
       [](Problem& p) {
         p.mods.rope_theta = 500;
         p.mask = MaskKind::Causal;
       }},
      {"alibi_standard", 200, 200, 3, 3, 64, [](Problem& p) { p.mods.alibi = true; }},
      {"alibi_given", 200, 200, 3, 3, 64,
       [](Problem& p) {
         p.mods.alibi = true;
         p.mods.alibi_slopes = {0.5, 0.125, 0.03};
       }},
      {"alibi_one_slope_causal", 130, 130, 2, 2, 64,
       [](Problem& p) {
         p.mods.alibi = true;
         p.mods.alibi_slopes = {0.2};
         p.mask = MaskKind::Causal;
       }},
      {"bias_shared", 200, 200, 3, 3, 64, [](Problem& p) { p.edit().bias = random_bias(p.n(), p.m(), 7); }},
      {"bias_per_head", 200, 200, 3, 3, 64,
       [](Problem& p) { p.edit().bias = random_bias(static_cast<Eigen::Index>(p.heads) * p.n(), p.m(), 8); }},
      {"softcap", 200, 200, 3, 3, 64, [](Problem& p) { p.mods.softcap = 1.5; }, 0.5},
      {"window_causal", 300, 300, 2, 2, 64,
       [](Problem& p) {
         p.mods.window = 37;
         p.mask = MaskKind::Causal;
       }},
      {"window_both_sides", 300, 300, 2, 2, 64, [](Problem& p) { p.mods.window = 50; }},
      {"documents_causal", 200, 200, 2, 2, 64,
       [](Problem& p) {
         p.edit().documents = documents(p.m(), {70, 33, 97});
         p.mask = MaskKind::Causal;
       }},
      {"documents", 200, 200, 2, 2, 64, [](Problem& p) { p.edit().documents = documents(p.m(), {64, 5, 131}); }},
      {"prefix", 200, 200, 2, 2, 64, [](Problem& p) { p.mods.prefix = 45; }},
      {"custom_window", 200, 200, 2, 2, 64,
       [](Problem& p) {
         p.mask = MaskKind::Custom;
         p.edit().custom_mask = custom_mask(p.n(), p.m());
         p.mods.window = 80;
       }},
      {"alibi_softcap_causal_window", 300, 300, 4, 4, 64,
       [](Problem& p) {
         p.mods.alibi = true;
         p.mods.softcap = 3;
         p.mask = MaskKind::Causal;
         p.mods.window = 64;
       }},
      {"all", 200, 200, 4, 2, 64,
       [](Problem& p) {
         p.mods.rope_theta = 10000;
         p.mods.alibi = true;
         p.edit().bias = random_bias(static_cast<Eigen::Index>(p.heads) * p.n(), p.m(), 9);
         p.mods.softcap = 4;
         p.edit().documents = documents(p.m(), {90, 110});
         p.mods.prefix = 20;
         p.mods.window = 120;
       }},
      // Decode shapes: n queries at the end of m keys (the decode kernel takes kv_group n <= 16).
      {"decode_causal", 7, 300, 4, 2, 64, [](Problem& p) { p.mask = MaskKind::Causal; }},
      {"decode_causal_window", 7, 300, 4, 2, 64,
       [](Problem& p) {
         p.mask = MaskKind::Causal;
         p.mods.window = 40;
       }},
      {"decode_window_alibi_softcap", 5, 1000, 2, 1, 64,
       [](Problem& p) {
         p.mask = MaskKind::Causal;
         p.mods.window = 300;
         p.mods.alibi = true;
         p.mods.softcap = 2;
       }},
      {"decode_custom_bias_documents_rope", 3, 500, 4, 2, 64,
       [](Problem& p) {
         p.mask = MaskKind::Custom;
         p.edit().custom_mask = custom_mask(p.n(), p.m());
         p.edit().bias = random_bias(p.n(), p.m(), 10);
         p.edit().documents = documents(p.m(), {200, 300});
         p.mods.rope_theta = 10000;
       }},
  };
}

// Every modification at once, on the causal mask: the compute-sanitizer runs' problems.
Problem with_everything(Problem p) {
  p.mods.rope_theta = 10000;
  p.mods.alibi = true;
  p.edit().bias = random_bias(static_cast<Eigen::Index>(p.heads) * p.n(), p.m(), 19);
  p.mods.softcap = 3;
  p.edit().documents = documents(p.m(), {60, 70});
  p.mods.window = 50;
  p.mask = MaskKind::Causal;
  validate(p);
  return p;
}

// The compute-sanitizer runs' problems (CudaModsSanitize): a prefill and a decode shape.
Problem sanitize_prefill() { return with_everything(random_problem(130, 130, 64, 64, 20, 2, 2)); }
Problem sanitize_decode() { return with_everything(random_problem(3, 130, 64, 64, 21, 4, 2)); }

Problem make_case(const ModCase& c, std::uint64_t seed) {
  Problem p = random_problem(c.n, c.m, c.d, c.d, seed, c.heads, c.kv_heads);
  p.temperature = c.temperature;
  c.apply(p);
  validate(p);
  return p;
}

// The kernels a case runs on: staged fp32, fused fp32, fused bf16, decode fp32 and bf16.
struct KernelRun {
  const char* name;
  Variant variant;
  Precision precision;
};
constexpr KernelRun kRuns[] = {{"staged_fp32", Variant::Staged, Precision::FP32},
                               {"fused_fp32", Variant::Fused, Precision::FP32},
                               {"fused_bf16", Variant::Fused, Precision::BF16},
                               {"decode_fp32", Variant::Decode, Precision::FP32},
                               {"decode_bf16", Variant::Decode, Precision::BF16}};

// Whether a kernel takes the case's shape: the decode kernel decode shapes only (kv_group n <= 16),
// bf16 d 64 / 128.
bool takes(const KernelRun& k, const ModCase& c) {
  if (k.variant == Variant::Decode) return c.n < c.m && (c.heads / c.kv_heads) * c.n <= 16;
  return true;
}

using Param = std::tuple<int, int>;  // case index, kernel index

// Every (case, kernel) pair whose shape the kernel takes.
std::vector<Param> params() {
  std::vector<Param> out;
  const std::vector<ModCase> cases = mod_cases();
  for (int ci = 0; ci < static_cast<int>(cases.size()); ++ci)
    for (int ki = 0; ki < static_cast<int>(std::size(kRuns)); ++ki)
      if (takes(kRuns[ki], cases[ci])) out.emplace_back(ci, ki);
  return out;
}

// The case table itself, without a device: every case is a valid problem whose modifications are
// those named (so that a GPU run checks what its name says), and the fp32 CPU chain matches the
// fp64 reference on it.
TEST(CudaModsCases, EveryCaseIsAValidProblemWithItsModifications) {
  const std::vector<ModCase> cases = mod_cases();
  for (int ci = 0; ci < static_cast<int>(cases.size()); ++ci) {
    const ModCase& c = cases[ci];
    SCOPED_TRACE(c.name);
    const Problem p = make_case(c, 100 + ci);
    EXPECT_TRUE(has_modifications(p) || (p.mask == MaskKind::Causal && p.n() != p.m()));
    EXPECT_EQ(p.n(), c.n);
    EXPECT_EQ(p.m(), c.m);
    const VerifyReport r = verify_trace(p, cpu_staged_plain(p), reference_fp64(p));
    EXPECT_TRUE(r.pass) << render_verify_text(r);
  }
  EXPECT_GE(params().size(), 3 * cases.size());
  EXPECT_NO_THROW(sanitize_prefill());
  EXPECT_NO_THROW(sanitize_decode());
}

// The block mask the fused kernels trust (core's block_mask), without a device: on every case and
// the kernels' tile sizes, an Empty tile has no visible pair and a Full tile no hidden one (a
// Partial tile may be either: it is tested per element), checked pair by pair with MaskRule.
TEST(CudaModsCases, TheBlockMaskNeverHidesAVisiblePairOrSkipsAHiddenOne) {
  std::vector<Problem> problems;
  const std::vector<ModCase> cases = mod_cases();
  for (int ci = 0; ci < static_cast<int>(cases.size()); ++ci) problems.push_back(make_case(cases[ci], 100 + ci));
  problems.push_back(sanitize_prefill());
  problems.push_back(sanitize_decode());
  for (const Problem& p : problems) {
    const MaskRule rule = mask_rule(p);
    for (const auto& [qt, kt] : {std::pair{64, 64}, {32, 64}, {128, 64}, {64, 32}, {128, 32}}) {
      const BlockMask b = block_mask(p, qt, kt);
      ASSERT_EQ(b.q_blocks, (p.n() + qt - 1) / qt);
      ASSERT_EQ(b.k_blocks, (p.m() + kt - 1) / kt);
      for (int qb = 0; qb < b.q_blocks; ++qb)
        for (int kb = 0; kb < b.k_blocks; ++kb) {
          bool any = false, all = true;
          for (int i = qb * qt; i < std::min(p.n(), (qb + 1) * qt); ++i)
            for (int j = kb * kt; j < std::min(p.m(), (kb + 1) * kt); ++j) {
              const bool v = rule.visible(i, j);
              any = any || v;
              all = all && v;
            }
          const BlockKind k = b.at(qb, kb);
          EXPECT_TRUE(k != BlockKind::Empty || !any) << qt << "x" << kt << " tile " << qb << "," << kb;
          EXPECT_TRUE(k != BlockKind::Full || all) << qt << "x" << kt << " tile " << qb << "," << kb;
        }
    }
  }
}

class CudaModsParity : public ::testing::TestWithParam<Param> {};

TEST_P(CudaModsParity, MatchesTheFp64Reference) {
  ATTNLAB_REQUIRE_CUDA();
  const auto [ci, ki] = GetParam();
  const ModCase c = mod_cases()[ci];
  const KernelRun k = kRuns[ki];
  const Problem p = make_case(c, 100 + ci);
  RunOptions o;
  o.variant = k.variant;
  o.precision = k.precision;
  const Trace t = make_backend("cuda")->run(p, o);
  const TraceD ref = reference_fp64(p);
  const VerifyReport r = verify_trace(p, t, ref);
  EXPECT_TRUE(r.pass) << c.name << " on " << k.name << "\n" << render_verify_text(r);
  if (k.variant == Variant::Staged) {
    // Every stage of the problem came back and was compared.
    EXPECT_EQ(present_stages(t), problem_stages(p));
    EXPECT_EQ(r.stages.size(), stage_names(problem_stages(p)).size() + 1);
    EXPECT_TRUE(r.masked_zero);
  }
#ifdef ATTNLAB_HAVE_CUDA
  if (k.variant == Variant::Fused) {
    // With rules whenever the problem has a score or mask mod (or the causal mask of a decode
    // shape); RoPE alone runs the rule-free kernel on the rotated Q and K.
    const bool rules = has_score_mods(p) || has_mask_mods(p) || (p.mask == MaskKind::Causal && p.n() != p.m()) ||
                       (k.precision == Precision::BF16 && p.mask == MaskKind::Custom);
    EXPECT_EQ(cuda::last_fused_kernel().find(" rules") != std::string::npos, rules) << cuda::last_fused_kernel();
  }
#endif
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  return std::string(mod_cases()[std::get<0>(info.param)].name) + "_" + kRuns[std::get<1>(info.param)].name;
}

INSTANTIATE_TEST_SUITE_P(Mods, CudaModsParity, ::testing::ValuesIn(params()), param_name);

#ifdef ATTNLAB_HAVE_CUDA
// A window of W over N tokens: the fused kernels compute exactly the tiles the block mask leaves
// (about N W / tile², counted by their blocks on the device), not all (N / tile)² of them.
TEST(CudaModsTiles, AWindowedFusedRunComputesOnlyTheNonEmptyTiles) {
  ATTNLAB_REQUIRE_CUDA();
  Problem p = random_problem(2000, 64, 64, 11, 2);
  p.mask = MaskKind::Causal;
  p.mods.window = 100;
  const TraceD ref = reference_fp64(p);
  auto cuda = make_backend("cuda");
  struct Run {
    Precision precision;
    const char* config;  // ATTNLAB_FUSED_CONFIG; "" the default
    const char* kernel;  // what last_fused_kernel() starts with
  };
  for (const Run& run : {Run{Precision::FP32, "0", "fp32 D=64"}, Run{Precision::BF16, "", "bf16 D=64"},
                         Run{Precision::FP32, "1", "3xTF32 D=64 warps=4"},
                         Run{Precision::FP32, "2", "3xTF32 D=64 warps=8"}}) {
    test::ScopedEnv env("ATTNLAB_FUSED_CONFIG", run.config);
    SCOPED_TRACE(std::string(run.kernel));
    RunOptions o;
    o.variant = Variant::Fused;
    o.precision = run.precision;
    const Trace t = cuda->run(p, o);
    const std::string kernel = cuda::last_fused_kernel();
    EXPECT_EQ(kernel.rfind(run.kernel, 0), 0u) << kernel;
    EXPECT_NE(kernel.find(" rules"), std::string::npos) << kernel;
    const cuda::FusedTiles tiles = cuda::last_fused_tiles();
    const BlockMask bm = block_mask(p, tiles.q_tile, tiles.k_tile);
    EXPECT_EQ(tiles.planned, static_cast<long long>(bm.visited()) * p.heads);
    EXPECT_EQ(tiles.total, static_cast<long long>(bm.total()) * p.heads);
    EXPECT_EQ(tiles.computed, tiles.planned) << "the kernel computed other tiles than the block mask leaves";
    EXPECT_LT(4 * tiles.planned, tiles.total) << "a window of 100 in 2000 tokens leaves few tiles";
    const VerifyReport r = verify_trace(p, t, ref);
    EXPECT_TRUE(r.pass) << render_verify_text(r);
  }
}

// Documents make Empty tiles inside a query tile's range of key tiles: skipped as well.
TEST(CudaModsTiles, DocumentsSkipTheEmptyTilesBetweenOthers) {
  ATTNLAB_REQUIRE_CUDA();
  Problem p = random_problem(1024, 64, 64, 12, 1);
  std::vector<int> ids(1024);
  for (int i = 0; i < 1024; ++i) ids[i] = (i / 64) % 2 == 0 ? 0 : 1 + i / 128;  // document 0 interleaved with others
  p.edit().documents = ids;
  RunOptions o;
  o.variant = Variant::Fused;
  const Trace t = make_backend("cuda")->run(p, o);
  const cuda::FusedTiles tiles = cuda::last_fused_tiles();
  EXPECT_EQ(tiles.computed, tiles.planned);
  EXPECT_LT(tiles.planned, tiles.total);
  const VerifyReport r = verify_trace(p, t, reference_fp64(p));
  EXPECT_TRUE(r.pass) << render_verify_text(r);
}
#endif

// The staged chain's kept stages with score mods: biased and capped equal the reference's (checked
// by verify), only the stages asked for come back, the rotated Q and K are the host's own.
TEST(CudaModsStages, BiasedAndCappedComeBackAsAskedAndEqualTheReference) {
  ATTNLAB_REQUIRE_CUDA();
  Problem p = random_problem(150, 32, 16, 13, 2);
  p.mods.rope_theta = 1000;
  p.mods.alibi = true;
  p.edit().bias = random_bias(p.n(), p.m(), 14);
  p.mods.softcap = 2.5;
  p.mask = MaskKind::Causal;
  auto cuda = make_backend("cuda");
  const TraceD ref = reference_fp64(p);
  const Trace all = cuda->run(p, {});
  ASSERT_EQ(all.biased.rows(), 300);
  ASSERT_EQ(all.capped.rows(), 300);
  const VerifyReport r = verify_trace(p, all, ref);
  EXPECT_TRUE(r.pass) << render_verify_text(r);
  int checked = 0;
  for (const StageCheck& c : r.stages) checked += c.stage == "biased" || c.stage == "capped";
  EXPECT_EQ(checked, 2);
  const std::shared_ptr<const RotatedQK> rot = rotated_qk(p);
  ASSERT_TRUE(rot);
  EXPECT_EQ(all.q_rot, rot->q);
  EXPECT_EQ(all.k_rot, rot->k());

  RunOptions some;
  some.stages = kStageCapped | kStageWeights;
  some.rows = {3, 299};  // exact rows hold every stage the problem has, biased included
  const Trace part = cuda->run(p, some);
  ASSERT_EQ(part.rows.size(), 2u);
  for (const RowStages& rs : part.rows) {
    const auto row = [&](const MatrixF& x) {
      return std::vector<float>(x.data() + static_cast<std::size_t>(rs.row) * x.cols(),
                                x.data() + static_cast<std::size_t>(rs.row + 1) * x.cols());
    };
    EXPECT_EQ(rs.biased, row(all.biased));
    EXPECT_EQ(rs.capped, row(all.capped));
    EXPECT_EQ(rs.logits, row(all.logits));
  }
  EXPECT_EQ(part.biased.size(), 0);
  EXPECT_EQ(part.scores.size() + part.scaled.size() + part.logits.size(), 0);
  EXPECT_EQ(part.capped, all.capped);
  EXPECT_EQ(part.weights, all.weights);
  EXPECT_EQ(part.output, all.output);

  // Without score mods no biased or capped stage exists.
  Problem plain = p;
  plain.mods = Modifications{};
  plain.edit().bias = MatrixF();
  const Trace none = cuda->run(plain, {});
  EXPECT_EQ(none.biased.size() + none.capped.size() + none.q_rot.size(), 0);
}

// A streamed run (exact rows, no kept stages) with modifications: its rows (the biased and capped
// stages included) and output against the reference's; the output comes from the fused fp32
// kernel with rules, by whole heads.
TEST(CudaModsStreamed, ExactRowsAndOutputMatchTheReference) {
  ATTNLAB_REQUIRE_CUDA();
  Problem p = random_problem(260, 64, 64, 15, 3);
  p.mods.rope_theta = 10000;
  p.mods.alibi = true;
  p.mods.softcap = 3;
  p.mods.window = 70;
  p.mask = MaskKind::Causal;
  p.edit().bias = random_bias(static_cast<Eigen::Index>(p.heads) * p.n(), p.m(), 16);
  RunOptions o;
  o.keep_stages = false;
  o.rows = {0, 259, 300, 777};
  const Trace t = make_backend("cuda")->run(p, o);
  const TraceD ref = reference_fp64(p);
  ASSERT_EQ(t.rows.size(), 4u);
  const double logit_tol = 1e-5 * max_finite(ref.logits);
  for (const RowStages& rs : t.rows) {
    SCOPED_TRACE("row " + std::to_string(rs.row));
    for (int j = 0; j < p.m(); ++j) {
      const double rl = ref.logits(rs.row, j);
      EXPECT_EQ(rs.mask[j] == 0.f, ref.mask(rs.row % p.n(), j) == 0.0) << j;
      if (std::isinf(rl)) {
        EXPECT_TRUE(std::isinf(rs.logits[j]) && rs.logits[j] < 0) << j;
        EXPECT_EQ(rs.weights[j], 0.f) << j;
      } else {
        EXPECT_NEAR(rs.logits[j], rl, logit_tol + 1e-5 * std::abs(rl)) << j;
        EXPECT_NEAR(rs.weights[j], ref.weights(rs.row, j), 1e-5) << j;
      }
    }
    // The score mods' stages of the row, every key (masked ones too, as the reference keeps them).
    ASSERT_EQ(rs.biased.size(), static_cast<std::size_t>(p.m()));
    ASSERT_EQ(rs.capped.size(), static_cast<std::size_t>(p.m()));
    const double biased_tol = 1e-5 * max_finite(ref.biased), capped_tol = 1e-5 * max_finite(ref.capped);
    for (int j = 0; j < p.m(); ++j) {
      EXPECT_NEAR(rs.biased[j], ref.biased(rs.row, j), biased_tol + 1e-5 * std::abs(ref.biased(rs.row, j))) << j;
      EXPECT_NEAR(rs.capped[j], ref.capped(rs.row, j), capped_tol + 1e-5 * std::abs(ref.capped(rs.row, j))) << j;
    }
  }
  Trace out;
  out.backend = "cuda";
  out.has_stages = false;
  out.output = t.output;
  const VerifyReport r = verify_trace(p, out, ref);
  EXPECT_TRUE(r.pass) << render_verify_text(r);
}

// The decode kernel with rules at several split counts, a window skipping whole splits; the
// machine's plan cuts only the window's keys (the queries at 4998 and 4999 see keys from 4666 on,
// 4656 on a panel of 16: 344 keys, one split where the whole cache takes 19).
TEST(CudaModsDecode, SplitsAndWindowsMatchTheReference) {
  ATTNLAB_REQUIRE_CUDA();
  auto cuda = make_backend("cuda");
  for (int d : {64, 128})
    for (int splits : {0, 1, 7, 40}) {
      Problem p = random_problem(2, 5000, d, d, 17 + splits, 8, 2);
      p.mask = MaskKind::Causal;
      p.mods.window = 333;
      p.mods.alibi = true;
      p.mods.rope_theta = 10000;
      SCOPED_TRACE("d " + std::to_string(d) + " splits " + std::to_string(splits));
      RunOptions o;
      o.variant = Variant::Decode;
      o.splits = splits;
      const Trace t = cuda->run(p, o);
      const VerifyReport r = verify_trace(p, t, reference_fp64(p));
      EXPECT_TRUE(r.pass) << render_verify_text(r);
      EXPECT_EQ(t.splits, splits == 0 ? 1 : splits);
      if (splits == 0) {
        const BenchSample b = cuda->bench(p, o, 0, 1);
        EXPECT_NE(b.kernel.find("splits=1 from key 4656"), std::string::npos) << b.kernel;
      }
    }
}

// One backend's resident buffers serve problems with and without modifications in turn as fresh
// backends would.
TEST(CudaModsResident, PlainAndModifiedRunsShareTheBackend) {
  ATTNLAB_REQUIRE_CUDA();
  Problem plain = random_problem(300, 64, 64, 18, 2);
  plain.mask = MaskKind::Causal;
  Problem windowed = plain;
  windowed.mods.window = 50;
  windowed.mods.alibi = true;
  auto cuda = make_backend("cuda");
  const auto fresh = [](const Problem& p, const RunOptions& o) { return make_backend("cuda")->run(p, o); };
  for (Variant v : {Variant::Staged, Variant::Fused}) {
    RunOptions o;
    o.variant = v;
    for (const Problem* p : {&plain, &windowed, &plain, &windowed}) {
      Trace t;
      cuda->run_into(*p, o, t);
      const Trace f = fresh(*p, o);
      EXPECT_EQ(t.output, f.output) << to_string(v);
      EXPECT_EQ(t.weights, f.weights) << to_string(v);
    }
  }
}

// Small runs of every kernel with rules, each problem carrying every modification: what
// compute-sanitizer's memcheck and racecheck run in scripts/gpu-check (one test per kernel, so
// that a run can pick some), so they must stay small.
void sanitize_run(const Problem& p, Variant variant, Precision precision) {
  RunOptions o;
  o.variant = variant;
  o.precision = precision;
  const VerifyReport r = verify_trace(p, make_backend("cuda")->run(p, o), reference_fp64(p));
  EXPECT_TRUE(r.pass) << render_verify_text(r);
}
TEST(CudaModsSanitize, Staged) {
  ATTNLAB_REQUIRE_CUDA();
  sanitize_run(sanitize_prefill(), Variant::Staged, Precision::FP32);
}

TEST(CudaModsSanitize, FusedFp32) {
  ATTNLAB_REQUIRE_CUDA();
  sanitize_run(sanitize_prefill(), Variant::Fused, Precision::FP32);
  sanitize_run(sanitize_decode(), Variant::Fused, Precision::FP32);
}

// Head dims above 128: the CUDA-core kernel's widest tile with rules (gpu-check's sanitize-mods
// runs it under memcheck and racecheck with the other fused runs).
TEST(CudaModsSanitize, FusedFp32WideHeads) {
  ATTNLAB_REQUIRE_CUDA();
  sanitize_run(with_everything(random_problem(130, 130, 200, 200, 22, 2, 2)), Variant::Fused, Precision::FP32);
}

TEST(CudaModsSanitize, FusedBf16) {
  ATTNLAB_REQUIRE_CUDA();
  sanitize_run(sanitize_prefill(), Variant::Fused, Precision::BF16);
}

TEST(CudaModsSanitize, Decode) {
  ATTNLAB_REQUIRE_CUDA();
  sanitize_run(sanitize_decode(), Variant::Decode, Precision::FP32);
  sanitize_run(sanitize_decode(), Variant::Decode, Precision::BF16);
}

TEST(CudaModsSanitize, Streamed) {
  ATTNLAB_REQUIRE_CUDA();
  RunOptions o;
  o.keep_stages = false;
  o.rows = {5, 200};
  const Trace t = make_backend("cuda")->run(sanitize_prefill(), o);
  EXPECT_EQ(t.rows.size(), 2u);
}

}  // namespace
}  // namespace attnlab
