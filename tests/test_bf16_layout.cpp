// The operand layout of the tensor-core backward (kernels/backward_mma.cu, through
// kernels/bf16_layout.h), checked on the host: ldmatrix.x4 (with and without .trans) and
// mma.sync.m16n8k16 are emulated for a whole warp from the PTX ISA's tables (written out here,
// independently of the header), fed with the addresses the kernel computes for each of its five
// products, for every warp of the block, and compared with plain matrix products; the P^T and dS^T
// stores go through the same accumulator positions and are read back by the next products.
// Also: every ldmatrix the kernel issues reads its eight rows of each matrix from eight different
// 16-byte bank groups (no conflicts).
#include "kernels/bf16_layout.h"

#include <gtest/gtest.h>

#include <array>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <vector>

namespace {

namespace L = attnlab::cuda::bf16mma;

// A lane's four .b32 registers, each two bf16 values (low half first).
using Reg = std::array<double, 2>;
using Frag = std::array<std::array<Reg, 4>, 32>;  // [lane][register]
using Acc = std::array<std::array<double, 4>, 32>;

// A shared-memory tile of bf16 values as the kernel lays it out: rows of `rs` elements.
struct Smem {
  int rows, rs;
  std::vector<double> v;
  double at(int r, int c) const { return v.at(static_cast<std::size_t>(r) * rs + c); }
};

// ldmatrix.sync.aligned.m8n8.x4(.trans).b16: lane l gives the address (row, col) of row l % 8 of
// matrix l / 8; register i of lane l receives matrix i's row l / 4, columns 2 (l % 4) + {0, 1}, or
// with .trans rows 2 (l % 4) + {0, 1} of column l / 4. Fails the test when a row's 8 elements run
// past the row (the kernel's addresses are always 8-aligned, whole 16-byte rows).
Frag ldmatrix_x4(const Smem& s, const std::function<std::pair<int, int>(int)>& address, bool trans) {
  std::array<std::pair<int, int>, 32> addr;
  for (int l = 0; l < 32; ++l) {
    addr[l] = address(l);
    EXPECT_EQ(addr[l].second % 8, 0) << "a row address not on a 16-byte boundary";
    EXPECT_LE(addr[l].second + 8, s.rs);
  }
  Frag f{};
  for (int l = 0; l < 32; ++l)
    for (int i = 0; i < 4; ++i)
      for (int e = 0; e < 2; ++e) {
        const int row = trans ? 2 * (l % 4) + e : l / 4;  // row within matrix i
        const int col = trans ? l / 4 : 2 * (l % 4) + e;  // column within matrix i
        const auto [r, c] = addr[8 * i + row];
        f[l][i][e] = s.at(r, c + col);
      }
  return f;
}

// D (16x8) = A (16x16) B (16x8) + C, fragments as the PTX ISA's tables for .bf16 say:
//   A: reg 0 (g, 2t..), reg 1 (g+8, 2t..), reg 2 (g, 2t+8..), reg 3 (g+8, 2t+8..)
//   B: reg 0 (k 2t.., n g), reg 1 (k 2t+8.., n g)
//   C: c0 (g, 2t), c1 (g, 2t+1), c2 (g+8, 2t), c3 (g+8, 2t+1)
// Fails the test if any matrix element is held by no lane or by two.
void emulate_mma(const Frag& a, const std::array<Reg, 2>* b_of_lane, Acc& c) {
  double A[16][16], B[16][8], C[16][8];
  int seenA[16][16] = {}, seenB[16][8] = {}, seenC[16][8] = {};
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    const int ar[4] = {g, g + 8, g, g + 8}, ac[4] = {2 * t, 2 * t, 2 * t + 8, 2 * t + 8};
    for (int i = 0; i < 4; ++i)
      for (int e = 0; e < 2; ++e) {
        A[ar[i]][ac[i] + e] = a[lane][i][e];
        ++seenA[ar[i]][ac[i] + e];
      }
    for (int i = 0; i < 2; ++i)
      for (int e = 0; e < 2; ++e) {
        B[2 * t + 8 * i + e][g] = b_of_lane[lane][i][e];
        ++seenB[2 * t + 8 * i + e][g];
      }
    const int cr[4] = {g, g, g + 8, g + 8}, cc[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
    for (int i = 0; i < 4; ++i) {
      C[cr[i]][cc[i]] = c[lane][i];
      ++seenC[cr[i]][cc[i]];
    }
  }
  for (int r = 0; r < 16; ++r)
    for (int col = 0; col < 16; ++col) {
      ASSERT_EQ(seenA[r][col], 1);
      if (col < 8) {
        ASSERT_EQ(seenB[r][col], 1);
        ASSERT_EQ(seenC[r][col], 1);
      }
    }
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane / 4, t = lane % 4;
    const int cr[4] = {g, g, g + 8, g + 8}, cc[4] = {2 * t, 2 * t + 1, 2 * t, 2 * t + 1};
    for (int i = 0; i < 4; ++i) {
      double s = C[cr[i]][cc[i]];
      for (int k = 0; k < 16; ++k) s += A[cr[i]][k] * B[k][cc[i]];
      c[lane][i] = s;
    }
  }
}

// mma with the B fragment of n tile `which` (0: registers 0, 1; 1: registers 2, 3) of an x4 load.
void mma(Acc& c, const Frag& a, const Frag& b4, int which) {
  std::array<std::array<Reg, 2>, 32> b;
  for (int l = 0; l < 32; ++l) b[l] = {b4[l][2 * which], b4[l][2 * which + 1]};
  emulate_mma(a, b.data(), c);
}

// Small integers: every product and sum below is exact in double (and in bf16).
Smem random_tile(int rows, int cols, int rs, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> dist(-4, 4);
  Smem s{rows, rs, std::vector<double>(static_cast<std::size_t>(rows) * rs)};
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < rs; ++c) s.v[static_cast<std::size_t>(r) * rs + c] = c < cols ? dist(gen) : 1e9;  // pad: never read
  return s;
}

constexpr int BQ = 64, BK = 64;  // kMmaBackwardTile

// The kernel's products for head dim D, every warp (row group rg = warp % 4, half = warp / 4),
// with its addresses: S^T = K Q^T (and dP^T = V dO^T, the same code on other tiles), P^T stored
// from the accumulators, dV = P^T dO (and dK = dS^T Q), dQ = dS K from the stored dS^T.
void check_products(int D) {
  const int RS = D + 8, RP = BQ + 8, DW = D / 2;
  const Smem K = random_tile(BK, D, RS, 1), Q = random_tile(BQ, D, RS, 2), dO = random_tile(BQ, D, RS, 3);
  Smem Pt{BK, RP, std::vector<double>(static_cast<std::size_t>(BK) * RP, 1e9)};  // written by the stores below
  const auto a_rows = [](int base_row, int base_col) {
    return [=](int l) { return std::pair<int, int>{base_row + L::a_rows_row(l), base_col + L::a_rows_col(l)}; };
  };
  const auto b_rows = [](int base_row, int base_col) {
    return [=](int l) { return std::pair<int, int>{base_row + L::b_rows_row(l), base_col + L::b_rows_col(l)}; };
  };
  std::vector<int> covered(static_cast<std::size_t>(BK) * BQ, 0);

  // S^T: keys 16 rg .. by queries 32 half .., then the P^T stores (pairs of elements 2 pr, 2 pr + 1).
  for (int warp = 0; warp < 8; ++warp) {
    const int rg = warp & 3, half = warp >> 2;
    std::array<Acc, 4> sacc{};
    for (int kc = 0; kc < D / 16; ++kc) {
      const Frag ka = ldmatrix_x4(K, a_rows(16 * rg, 16 * kc), false);
      for (int np = 0; np < 2; ++np) {
        const Frag qb4 = ldmatrix_x4(Q, b_rows(32 * half + 16 * np, 16 * kc), false);
        mma(sacc[2 * np], ka, qb4, 0);
        mma(sacc[2 * np + 1], ka, qb4, 1);
      }
    }
    for (int j = 0; j < 4; ++j)
      for (int lane = 0; lane < 32; ++lane)
        for (int pr = 0; pr < 2; ++pr) {
          const int kl = 16 * rg + L::acc_row(lane, 2 * pr);
          const int ql = 32 * half + 8 * j + L::acc_col(lane, 2 * pr);
          for (int e = 0; e < 2; ++e) {
            double want = 0;
            for (int d = 0; d < D; ++d) want += K.at(kl, d) * Q.at(ql + e, d);
            ASSERT_EQ(sacc[j][lane][2 * pr + e], want) << "S^T key " << kl << " query " << ql + e;
            ASSERT_EQ(L::acc_row(lane, 2 * pr + e), L::acc_row(lane, 2 * pr));
            ASSERT_EQ(L::acc_col(lane, 2 * pr + e), L::acc_col(lane, 2 * pr) + e);
            // The stored value: small, so that the products below stay exact.
            Pt.v[static_cast<std::size_t>(kl) * RP + ql + e] = static_cast<int>(want) % 5;
            ++covered[static_cast<std::size_t>(kl) * BQ + ql + e];
          }
        }
  }
  for (int x : covered) ASSERT_EQ(x, 1) << "P^T element stored by no lane or by two";

  // dV = P^T dO: keys 16 rg .. by dims DW half ..; chunks of 16 queries.
  for (int warp = 0; warp < 8; ++warp) {
    const int rg = warp & 3, half = warp >> 2;
    std::vector<Acc> acc(DW / 8, Acc{});
    for (int kc = 0; kc < BQ / 16; ++kc) {
      const Frag pa = ldmatrix_x4(Pt, a_rows(16 * rg, 16 * kc), false);
      for (int dp = 0; dp < DW / 16; ++dp) {
        const Frag ob4 = ldmatrix_x4(dO, a_rows(16 * kc, DW * half + 16 * dp), true);
        mma(acc[2 * dp], pa, ob4, 0);
        mma(acc[2 * dp + 1], pa, ob4, 1);
      }
    }
    for (int j = 0; j < DW / 8; ++j)
      for (int lane = 0; lane < 32; ++lane)
        for (int e = 0; e < 4; ++e) {
          const int key = 16 * rg + L::acc_row(lane, e), col = DW * half + 8 * j + L::acc_col(lane, e);
          double want = 0;
          for (int qq = 0; qq < BQ; ++qq) want += Pt.at(key, qq) * dO.at(qq, col);
          ASSERT_EQ(acc[j][lane][e], want) << "dV key " << key << " dim " << col;
        }
  }

  // dQ = dS K with dS^T stored as P^T above: queries 16 rg .. by dims DW half ..; chunks of 16 keys.
  for (int warp = 0; warp < 8; ++warp) {
    const int rg = warp & 3, half = warp >> 2;
    std::vector<Acc> acc(DW / 8, Acc{});
    for (int kc = 0; kc < BK / 16; ++kc) {
      const Frag da = ldmatrix_x4(Pt, b_rows(16 * kc, 16 * rg), true);
      for (int dp = 0; dp < DW / 16; ++dp) {
        const Frag kb4 = ldmatrix_x4(K, a_rows(16 * kc, DW * half + 16 * dp), true);
        mma(acc[2 * dp], da, kb4, 0);
        mma(acc[2 * dp + 1], da, kb4, 1);
      }
    }
    for (int j = 0; j < DW / 8; ++j)
      for (int lane = 0; lane < 32; ++lane)
        for (int e = 0; e < 4; ++e) {
          const int query = 16 * rg + L::acc_row(lane, e), col = DW * half + 8 * j + L::acc_col(lane, e);
          double want = 0;
          for (int key = 0; key < BK; ++key) want += Pt.at(key, query) * K.at(key, col);
          ASSERT_EQ(acc[j][lane][e], want) << "dQ query " << query << " dim " << col;
        }
  }
}

// The emulation itself, on the one bf16 kernel a GPU has verified (the fused forward,
// kernels/fused_bf16.cu, configuration 0): its addresses for Q (A), K (B, two n tiles) and V
// (B through .trans), and P taken from the S accumulators as the A operand of P V, give S = Q K^T
// and O = P V here too.
TEST(Bf16Layout, EmulationReproducesTheVerifiedForwardKernel) {
  constexpr int D = 64, RS = D + 8, kBK = 64;
  const Smem Q = random_tile(16, D, RS, 4), K = random_tile(kBK, D, RS, 5), V = random_tile(kBK, D, RS, 6);
  std::array<Acc, kBK / 8> sacc{};
  for (int kc = 0; kc < D / 16; ++kc) {
    const Frag qf = ldmatrix_x4(Q, [&](int lane) {  // load_q
      return std::pair<int, int>{(lane & 7) + 8 * ((lane >> 3) & 1), kc * 16 + 8 * (lane >> 4)};
    }, false);
    for (int np = 0; np < kBK / 16; ++np) {
      const Frag b = ldmatrix_x4(K, [&](int lane) {
        return std::pair<int, int>{np * 16 + (lane & 7) + 8 * (lane >> 4), kc * 16 + 8 * ((lane >> 3) & 1)};
      }, false);
      mma(sacc[2 * np], qf, b, 0);
      mma(sacc[2 * np + 1], qf, b, 1);
    }
  }
  for (int j = 0; j < kBK / 8; ++j)
    for (int lane = 0; lane < 32; ++lane)
      for (int e = 0; e < 4; ++e) {
        const int r = L::acc_row(lane, e), key = 8 * j + L::acc_col(lane, e);
        double want = 0;
        for (int d = 0; d < D; ++d) want += Q.at(r, d) * K.at(key, d);
        ASSERT_EQ(sacc[j][lane][e], want) << "S row " << r << " key " << key;
      }
  // P = S here (exact small integers): pf[kc2][2 half + 0] = (c0, c1), [2 half + 1] = (c2, c3) of
  // n tile 2 kc2 + half.
  std::array<Acc, D / 8> oacc{};
  for (int kc2 = 0; kc2 < kBK / 16; ++kc2) {
    Frag pf{};
    for (int lane = 0; lane < 32; ++lane)
      for (int half = 0; half < 2; ++half) {
        const auto& sv = sacc[2 * kc2 + half][lane];
        pf[lane][2 * half + 0] = {sv[0], sv[1]};
        pf[lane][2 * half + 1] = {sv[2], sv[3]};
      }
    for (int dp = 0; dp < D / 16; ++dp) {
      const Frag b = ldmatrix_x4(V, [&](int lane) {
        return std::pair<int, int>{kc2 * 16 + (lane & 7) + 8 * ((lane >> 3) & 1), dp * 16 + 8 * (lane >> 4)};
      }, true);
      mma(oacc[2 * dp], pf, b, 0);
      mma(oacc[2 * dp + 1], pf, b, 1);
    }
  }
  for (int j = 0; j < D / 8; ++j)
    for (int lane = 0; lane < 32; ++lane)
      for (int e = 0; e < 4; ++e) {
        const int r = L::acc_row(lane, e), col = 8 * j + L::acc_col(lane, e);
        double want = 0;
        for (int key = 0; key < kBK; ++key) {
          double s = 0;
          for (int d = 0; d < D; ++d) s += Q.at(r, d) * K.at(key, d);
          want += s * V.at(key, col);
        }
        ASSERT_EQ(oacc[j][lane][e], want) << "O row " << r << " dim " << col;
      }
}

TEST(Bf16Layout, BackwardWarpProductsMatchPlainMatrixProductsD64) { check_products(64); }
TEST(Bf16Layout, BackwardWarpProductsMatchPlainMatrixProductsD128) { check_products(128); }

// Each 8x8 matrix of an ldmatrix is eight 16-byte row reads; they are conflict-free when the eight
// rows fall in eight different groups of four banks. Checked for every address pattern and row
// stride the kernel uses.
TEST(Bf16Layout, LdmatrixRowsHitEightBankGroups) {
  for (int D : {64, 128})
    for (int rs : {D + 8, BQ + 8})
      for (int base_row : {0, 16, 48})
        for (int base_col : {0, 8, 16, 32})
          for (bool b_pattern : {false, true}) {
            if (base_col + 16 > rs - 8) continue;
            for (int i = 0; i < 4; ++i) {
              std::set<int> groups;
              for (int r = 0; r < 8; ++r) {
                const int l = 8 * i + r;
                const int row = base_row + (b_pattern ? L::b_rows_row(l) : L::a_rows_row(l));
                const int col = base_col + (b_pattern ? L::b_rows_col(l) : L::a_rows_col(l));
                groups.insert(((row * rs + col) * 2 / 16) % 8);  // 2-byte elements, 16-byte groups of 4 banks
              }
              EXPECT_EQ(groups.size(), 8u) << "D " << D << " stride " << rs << " matrix " << i;
            }
          }
}

}  // namespace
