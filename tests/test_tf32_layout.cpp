// The operand layout of the 3xTF32 kernels (kernels/tf32_layout.h), checked on the host:
// a warp of mma.sync.m16n8k8 instructions is emulated from the PTX ISA's fragment tables (written
// out here, independently of the header), fed through the header's index functions exactly as
// kernels/fused_tf32.cu and kernels/gemm_tf32.cuh feed the real instruction, and compared with
// plain matrix products.
// Also: every fragment load the kernel issues touches 32 different shared-memory banks.
#include "kernels/tf32_layout.h"

#include <gtest/gtest.h>

#include <array>
#include <random>
#include <set>
#include <vector>

namespace {

namespace t = attnlab::cuda::tf32;

using Lanes4 = std::array<std::array<double, 4>, 32>;
using Lanes2 = std::array<std::array<double, 2>, 32>;

// D (16x8) = A (16x8) B (8x8) + C, fragments distributed as the PTX ISA's tables for .tf32 say:
//   A: a0 (g, t), a1 (g+8, t), a2 (g, t+4), a3 (g+8, t+4)
//   B: b0 (k t, n g), b1 (k t+4, n g)
//   C: c0 (g, 2t), c1 (g, 2t+1), c2 (g+8, 2t), c3 (g+8, 2t+1)
// Fails the test if any matrix element is held by no lane or by two.
void emulate_mma(const Lanes4& a, const Lanes2& b, Lanes4& c) {
  double A[16][8], B[8][8], C[16][8];
  int seenA[16][8] = {}, seenB[8][8] = {}, seenC[16][8] = {};
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, th = lane % 4;
    const int ar[4] = {g, g + 8, g, g + 8}, ac[4] = {th, th, th + 4, th + 4};
    const int cr[4] = {g, g, g + 8, g + 8}, cc[4] = {2 * th, 2 * th + 1, 2 * th, 2 * th + 1};
    for (int i = 0; i < 4; ++i) {
      A[ar[i]][ac[i]] = a[lane][i];
      ++seenA[ar[i]][ac[i]];
      C[cr[i]][cc[i]] = c[lane][i];
      ++seenC[cr[i]][cc[i]];
    }
    B[th][g] = b[lane][0];
    B[th + 4][g] = b[lane][1];
    ++seenB[th][g];
    ++seenB[th + 4][g];
  }
  for (int r = 0; r < 16; ++r)
    for (int col = 0; col < 8; ++col) {
      ASSERT_EQ(seenA[r][col], 1);
      ASSERT_EQ(seenC[r][col], 1);
      if (r < 8) ASSERT_EQ(seenB[r][col], 1);
    }
  double Dm[16][8];
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 8; ++n) {
      double s = C[r][n];
      for (int kk = 0; kk < 8; ++kk) s += A[r][kk] * B[kk][n];
      Dm[r][n] = s;
    }
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, th = lane % 4;
    c[lane] = {Dm[g][2 * th], Dm[g][2 * th + 1], Dm[g + 8][2 * th], Dm[g + 8][2 * th + 1]};
  }
}

// Small integers: every product and sum below is exact in double.
std::vector<double> random_ints(std::size_t count, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> dist(-4, 4);
  std::vector<double> v(count);
  for (double& x : v) x = dist(gen);
  return v;
}

struct Shape {
  int d;   // head-dim bucket
  int bk;  // keys per tile
};

class Tf32Layout : public ::testing::TestWithParam<Shape> {};

// S = Q K^T and O = P V for one warp's 16 rows and one key tile, through the kernel's index
// functions, equal to the plain products.
TEST_P(Tf32Layout, WarpTileProductsMatchPlainMatrixProducts) {
  const int D = GetParam().d, BK = GetParam().bk, RS = D + 4;
  // Shared tiles as the kernel holds them: rows of RS floats, the pad filled with junk that must
  // never be read.
  std::vector<double> Qs = random_ints(16 * RS, 1), Ks = random_ints(BK * RS, 2),
                      Vs = random_ints(BK * RS, 3);
  for (int r = 0; r < 16; ++r)
    for (int c = D; c < RS; ++c) Qs[r * RS + c] = 1e9;
  for (int r = 0; r < BK; ++r)
    for (int c = D; c < RS; ++c) Ks[r * RS + c] = Vs[r * RS + c] = 1e9;

  // S accumulators, per key tile nt, as in the kernel's S loop.
  std::vector<Lanes4> sacc(BK / 8, Lanes4{});
  for (int kc = 0; kc < D / 8; ++kc) {
    Lanes4 a;
    for (int lane = 0; lane < 32; ++lane)
      for (int i = 0; i < 4; ++i) a[lane][i] = Qs[t::a_frag_offset(lane, i, kc, RS)];
    for (int nt = 0; nt < BK / 8; ++nt) {
      Lanes2 b;
      for (int lane = 0; lane < 32; ++lane)
        for (int i = 0; i < 2; ++i) b[lane][i] = Ks[t::bt_frag_offset(lane, i, nt, kc, RS)];
      emulate_mma(a, b, sacc[nt]);
    }
  }
  std::vector<double> S(16 * BK);  // the plain product, and the accumulators read back
  for (int r = 0; r < 16; ++r)
    for (int key = 0; key < BK; ++key) {
      double s = 0;
      for (int d = 0; d < D; ++d) s += Qs[r * RS + d] * Ks[key * RS + d];
      S[r * BK + key] = s;
    }
  for (int nt = 0; nt < BK / 8; ++nt)
    for (int lane = 0; lane < 32; ++lane)
      for (int i = 0; i < 4; ++i) {
        const int r = t::acc_row(lane, i), key = 8 * nt + t::acc_col(lane, i);
        ASSERT_EQ(sacc[nt][lane][i], S[r * BK + key]) << "S row " << r << " key " << key;
      }

  // O += P V with P = the S accumulators, as in the kernel's P V loop.
  std::vector<Lanes4> oacc(D / 8, Lanes4{});
  for (int j = 0; j < BK / 8; ++j) {
    Lanes4 a;
    for (int lane = 0; lane < 32; ++lane)
      for (int i = 0; i < 4; ++i) a[lane][i] = sacc[j][lane][t::p_a_from_c(i)];
    for (int dt = 0; dt < D / 8; ++dt) {
      Lanes2 b;
      for (int lane = 0; lane < 32; ++lane)
        for (int i = 0; i < 2; ++i) b[lane][i] = Vs[t::v_frag_offset(lane, i, j, dt, RS)];
      emulate_mma(a, b, oacc[dt]);
    }
  }
  for (int dt = 0; dt < D / 8; ++dt)
    for (int lane = 0; lane < 32; ++lane)
      for (int i = 0; i < 4; ++i) {
        const int r = t::acc_row(lane, i), col = 8 * dt + t::acc_col(lane, i);
        double o = 0;
        for (int key = 0; key < BK; ++key) o += S[r * BK + key] * Vs[key * RS + col];
        ASSERT_EQ(oacc[dt][lane][i], o) << "O row " << r << " dim " << col;
      }
}

// Each fragment load (one i, one chunk/tile) of the 32 lanes hits 32 distinct banks.
TEST_P(Tf32Layout, FragmentLoadsAreBankConflictFree) {
  const int D = GetParam().d, BK = GetParam().bk, RS = D + 4;
  const auto distinct_banks = [](auto offset_of_lane) {
    std::set<int> banks;
    for (int lane = 0; lane < 32; ++lane) banks.insert(offset_of_lane(lane) % 32);
    return static_cast<int>(banks.size());
  };
  for (int i = 0; i < 4; ++i)
    for (int kc = 0; kc < D / 8; ++kc)
      EXPECT_EQ(distinct_banks([&](int l) { return t::a_frag_offset(l, i, kc, RS); }), 32);
  for (int i = 0; i < 2; ++i) {
    for (int kc = 0; kc < D / 8; ++kc)
      for (int nt = 0; nt < BK / 8; ++nt)
        EXPECT_EQ(distinct_banks([&](int l) { return t::bt_frag_offset(l, i, nt, kc, RS); }), 32);
    for (int j = 0; j < BK / 8; ++j)
      for (int dt = 0; dt < D / 8; ++dt)
        EXPECT_EQ(distinct_banks([&](int l) { return t::v_frag_offset(l, i, j, dt, RS); }), 32);
  }
}

// The staged chain's GEMM (kernels/gemm_tf32.cuh): one warp's 2 x 4 mma tiles of a 32-deep k
// slice, A row-major (stride 36), B transposed (K in Q K^T, stride 36) or row-major (V in P V,
// stride BN + 8 = 72), through the index functions tc_gemm_tile uses.
void check_gemm_warp_tile(bool b_transposed) {
  constexpr int MT = 2, NT = 4, BK = 32, RSA = BK + 4, BN = 64;
  const int RSB = b_transposed ? BK + 4 : BN + 8;
  const int warp_n = 1;  // the warp's n tiles start at tile NT of the block
  const std::vector<double> As = random_ints(16 * MT * RSA, 4);
  const std::vector<double> Bs = random_ints(b_transposed ? BN * RSB : BK * RSB, 5);
  // B as a function of (k, n) of the block tile.
  const auto B = [&](int k, int n) { return b_transposed ? Bs[n * RSB + k] : Bs[k * RSB + n]; };
  std::vector<std::vector<Lanes4>> acc(MT, std::vector<Lanes4>(NT, Lanes4{}));
  for (int kc = 0; kc < BK / 8; ++kc)
    for (int mt = 0; mt < MT; ++mt) {
      Lanes4 a;
      for (int lane = 0; lane < 32; ++lane)
        for (int i = 0; i < 4; ++i) a[lane][i] = As[16 * mt * RSA + t::a_frag_offset(lane, i, kc, RSA)];
      for (int nt = 0; nt < NT; ++nt) {
        const int tile_nt = warp_n * NT + nt;
        Lanes2 b;
        for (int lane = 0; lane < 32; ++lane)
          for (int i = 0; i < 2; ++i)
            b[lane][i] = b_transposed ? Bs[t::bt_frag_offset(lane, i, tile_nt, kc, RSB)]
                                      : Bs[t::b_frag_offset(lane, i, kc, tile_nt, RSB)];
        emulate_mma(a, b, acc[mt][nt]);
      }
    }
  for (int mt = 0; mt < MT; ++mt)
    for (int nt = 0; nt < NT; ++nt)
      for (int lane = 0; lane < 32; ++lane)
        for (int i = 0; i < 4; ++i) {
          const int r = 16 * mt + t::acc_row(lane, i);
          const int c = 8 * (warp_n * NT + nt) + t::acc_col(lane, i);
          double want = 0;
          for (int k = 0; k < BK; ++k) want += As[r * RSA + k] * B(k, c);
          ASSERT_EQ(acc[mt][nt][lane][i], want) << "row " << r << " col " << c;
        }
  // Conflict-free B loads at this stride.
  for (int i = 0; i < 2; ++i)
    for (int kc = 0; kc < BK / 8; ++kc)
      for (int tile_nt = 0; tile_nt < BN / 8; ++tile_nt) {
        std::set<int> banks;
        for (int lane = 0; lane < 32; ++lane)
          banks.insert((b_transposed ? t::bt_frag_offset(lane, i, tile_nt, kc, RSB)
                                     : t::b_frag_offset(lane, i, kc, tile_nt, RSB)) %
                       32);
        EXPECT_EQ(banks.size(), 32u);
      }
}

TEST(Tf32LayoutStagedGemm, TransposedBLikeQKt) { check_gemm_warp_tile(true); }
TEST(Tf32LayoutStagedGemm, RowMajorBLikeV) { check_gemm_warp_tile(false); }

// The key order within a chunk is a permutation (every key used once).
TEST(Tf32LayoutKeyOrder, IsAPermutationOfTheChunk) {
  std::set<int> keys;
  for (int k = 0; k < 8; ++k) keys.insert(t::pv_key_of_k(k));
  EXPECT_EQ(keys, (std::set<int>{0, 1, 2, 3, 4, 5, 6, 7}));
}

// The kernel with rules counts ALiBi's distance i + offset - j of accumulator element e of n-tile j
// as the lane's element (0, 0) distance plus 8 (e / 2) - 8 j - e % 2: what the C layout's rows and
// columns give for every lane.
TEST(Tf32LayoutAccumulators, TheDistanceStepsAreTheLayouts) {
  for (int lane = 0; lane < 32; ++lane)
    for (int j = 0; j < 8; ++j)
      for (int e = 0; e < 4; ++e) {
        const int d0 = t::acc_row(lane, 0) - t::acc_col(lane, 0);
        const int d = t::acc_row(lane, e) - (8 * j + t::acc_col(lane, e));
        EXPECT_EQ(d, d0 + 8 * (e >> 1) - 8 * j - (e & 1)) << "lane " << lane << " j " << j << " e " << e;
      }
}

// The (D, BK) pairs kernels/fused_tf32.cu instantiates.
INSTANTIATE_TEST_SUITE_P(KernelTiles, Tf32Layout,
                         ::testing::Values(Shape{32, 64}, Shape{64, 64}, Shape{128, 32}),
                         [](const auto& info) {
                           // Appended, not "D" + to_string(...): GCC 12 warns
                           // (-Wstringop-overflow) on that operator+ here.
                           std::string name = "D";
                           name += std::to_string(info.param.d);
                           name += "_BK";
                           name += std::to_string(info.param.bk);
                           return name;
                         });

}  // namespace
