// The shared-memory layout and descriptors of the sm_90a fused kernel (kernels/sm90a/fused_wgmma.cu,
// through kernels/wgmma_layout.h), checked on the host. The tiles are filled the way the kernel's
// copies fill them (tile_offset), then read back the way wgmma reads an operand, written out here
// from the PTX ISA and CUTLASS's canonical GMMA layouts independently of the header: the
// descriptor's fields decoded, the canonical 128-byte-swizzle layout of a K-major operand
// ((8,m),(T,2)):((8T,SBO),(1,T)) or an MN-major one ((T,8,m),(8,k)):((1,T,LBO),(8T,SBO)) in
// elements of 16 bits (T = 8), and the swizzle taken on the absolute shared address (bits 4-6
// XOR bits 7-9). Every element each k-step of each product reads must be the one the algebra
// needs: Q(row, k) and K(key, k) for S = Q Kᵀ, V(key, col) for O += P V. Then the register side:
// the accumulators cover each warpgroup's 64 x N tile once, and the P fragments the kernel packs
// from S's accumulators are mma.m16n8k16's A fragments of the same rows and keys.
#include "kernels/wgmma_layout.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace {

namespace W = attnlab::cuda::wgmma;

// A shared-memory image: 16-bit cells addressed by byte, each holding the id of the element the
// kernel's copy put there (row * 1024 + col + 1), 0 where nothing was put.
struct Image {
  std::uint32_t base;  // the shared address of byte 0
  std::vector<std::uint32_t> cell;
  Image(std::uint32_t b, int bytes) : base(b), cell(bytes / 2, 0) {}
  void put(int byte, std::uint32_t id) {
    ASSERT_EQ(byte % 2, 0);
    ASSERT_LT(byte / 2, static_cast<int>(cell.size()));
    ASSERT_EQ(cell[byte / 2], 0u) << "two elements at byte " << byte;
    cell[byte / 2] = id;
  }
  std::uint32_t at_address(std::uint32_t address) const {
    const std::int64_t byte = static_cast<std::int64_t>(address) - base;
    if (byte < 0 || byte / 2 >= static_cast<std::int64_t>(cell.size())) return 0xFFFFFFFFu;
    return cell[byte / 2];
  }
};

std::uint32_t id(int row, int col) { return static_cast<std::uint32_t>(row * 1024 + col + 1); }

// A (rows x cols) tile filled as the kernel's cp_async_panels fills it, at `base`.
Image filled(std::uint32_t base, int rows, int cols) {
  Image img(base, W::tile_bytes(rows, cols));
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) img.put(W::tile_offset(rows, r, c), id(r, c));
  return img;
}

struct Fields {
  std::uint32_t start, lbo, sbo, base_offset, layout;
};
// The descriptor's fields (PTX ISA, "Matrix Descriptor Format"), in bytes.
Fields decode(std::uint64_t d) {
  return {static_cast<std::uint32_t>(d & 0x3FFF) << 4, static_cast<std::uint32_t>((d >> 16) & 0x3FFF) << 4,
          static_cast<std::uint32_t>((d >> 32) & 0x3FFF) << 4, static_cast<std::uint32_t>((d >> 49) & 7),
          static_cast<std::uint32_t>(d >> 62)};
}

std::uint32_t swizzle128(std::uint32_t address) { return address ^ (((address >> 7) & 7) << 4); }

// The element at (mn, k) of one k-step (k < 16) of an operand with descriptor d.
std::uint32_t read_k_major(const Image& img, std::uint64_t d, int mn, int k) {
  const Fields f = decode(d);
  EXPECT_EQ(f.layout, 1u);
  EXPECT_EQ(f.base_offset, 0u);
  const std::uint32_t elems = static_cast<std::uint32_t>((mn % 8) * 64 + (k % 8) * 1 + (k / 8) * 8);
  return img.at_address(swizzle128(f.start + (mn / 8) * f.sbo + 2 * elems));
}
std::uint32_t read_mn_major(const Image& img, std::uint64_t d, int mn, int k) {
  const Fields f = decode(d);
  EXPECT_EQ(f.layout, 1u);
  EXPECT_EQ(f.base_offset, 0u);
  const std::uint32_t elems = static_cast<std::uint32_t>((mn % 8) + ((mn / 8) % 8) * 8 + (k % 8) * 64);
  return img.at_address(swizzle128(f.start + (mn / 64) * f.lbo + (k / 8) * f.sbo + 2 * elems));
}

// The shapes the kernel instantiates: (head dim, key tile, warpgroups).
const std::vector<std::tuple<int, int, int>> kShapes = {{64, 128, 2}, {64, 64, 2}, {128, 128, 2}, {128, 64, 2}};

TEST(WgmmaLayout, EveryElementOfATileHasItsOwnPlaceInsideTheTile) {
  for (const auto& [d, bk, nwg] : kShapes) {
    for (int rows : {64 * nwg, bk}) {
      const Image img = filled(0, rows, d);  // put() fails on a collision or an overflow
      for (std::uint32_t c : img.cell) EXPECT_NE(c, 0u);
      EXPECT_EQ(W::tile_bytes(rows, d) % W::kAtomBytes, 0) << "the next tile's panels stay aligned";
    }
  }
}

TEST(WgmmaLayout, TheDescriptorsFieldsAreWhereThePtxIsaPutsThem) {
  const std::uint64_t d = W::descriptor(0x1F2A0, 0x4000, 1024);
  const Fields f = decode(d);
  EXPECT_EQ(f.start, 0x1F2A0u);
  EXPECT_EQ(f.lbo, 0x4000u);
  EXPECT_EQ(f.sbo, 1024u);
  EXPECT_EQ(f.base_offset, 0u);
  EXPECT_EQ(f.layout, 1u) << "the 128-byte swizzle";
  // Nothing outside the fields: bits 14-15, 30-31, 46-48 and 52-61 are 0.
  EXPECT_EQ(d & ((3ull << 14) | (3ull << 30) | (7ull << 46) | (0x3FFull << 52)), 0u);
  // The largest shared address of an SM (228 KB) still fits the start field.
  EXPECT_EQ(decode(W::descriptor(228 * 1024 - 16, 16, 1024)).start, 228u * 1024 - 16);
}

TEST(WgmmaLayout, QueryAndKeyTilesReadAsKMajorOperandsOfSEqualsQKt) {
  // Bases as in the kernel: Q at a 1024-aligned address, K's two buffers after it.
  for (const auto& [d, bk, nwg] : kShapes) {
    SCOPED_TRACE("d " + std::to_string(d) + " BK " + std::to_string(bk));
    const int bq = 64 * nwg;
    const std::uint32_t qs = 3 * 1024;
    const std::uint32_t ks = qs + W::tile_bytes(bq, d);
    const Image qimg = filled(qs, bq, d);
    for (int buf = 0; buf < 2; ++buf) {
      const std::uint32_t kb = ks + buf * W::tile_bytes(bk, d);
      const Image kimg = filled(kb, bk, d);
      int bad = 0;
      for (int wg = 0; wg < nwg; ++wg)
        for (int s = 0; s < d / 16; ++s) {
          const std::uint64_t a = W::descriptor(qs + W::kmajor_start(bq, 64 * wg, s), W::kKMajorLbo, W::kKMajorSbo);
          const std::uint64_t b = W::descriptor(kb + W::kmajor_start(bk, 0, s), W::kKMajorLbo, W::kKMajorSbo);
          for (int k = 0; k < 16; ++k) {
            for (int r = 0; r < 64; ++r)
              if (read_k_major(qimg, a, r, k) != id(64 * wg + r, 16 * s + k) && bad++ < 5)
                ADD_FAILURE() << "Q: warpgroup " << wg << " step " << s << " row " << r << " k " << k;
            for (int key = 0; key < bk; ++key)
              if (read_k_major(kimg, b, key, k) != id(key, 16 * s + k) && bad++ < 5)
                ADD_FAILURE() << "K: step " << s << " key " << key << " k " << k;
          }
        }
      EXPECT_EQ(bad, 0);
    }
  }
}

TEST(WgmmaLayout, ValueTilesReadAsMNMajorOperandsOfOPlusEqualsPV) {
  for (const auto& [d, bk, nwg] : kShapes) {
    SCOPED_TRACE("d " + std::to_string(d) + " BK " + std::to_string(bk));
    const std::uint32_t vb = 7 * 1024;
    const Image vimg = filled(vb, bk, d);
    int bad = 0;
    for (int kc = 0; kc < bk / 16; ++kc) {
      const std::uint64_t b = W::descriptor(vb + W::mnmajor_start(kc), W::mnmajor_lbo(bk), W::kMNMajorSbo);
      for (int k = 0; k < 16; ++k)
        for (int col = 0; col < d; ++col)
          if (read_mn_major(vimg, b, col, k) != id(16 * kc + k, col) && bad++ < 5)
            ADD_FAILURE() << "V: step " << kc << " key " << k << " col " << col;
    }
    EXPECT_EQ(bad, 0);
  }
}

// The eight rows of each core matrix (eight 16-byte rows the tensor cores read together) lie in
// eight different 16-byte bank groups: the point of the swizzle.
TEST(WgmmaLayout, CoreMatricesSpreadOverAllBankGroups) {
  for (int rows : {64, 128})
    for (int d : {64, 128})
      for (int r0 = 0; r0 < rows; r0 += 8)
        for (int c = 0; c < d; c += 8) {
          std::set<int> groups;
          for (int r = r0; r < r0 + 8; ++r) groups.insert((W::tile_offset(rows, r, c) / 16) % 8);
          EXPECT_EQ(groups.size(), 8u) << "rows " << r0 << ".." << r0 + 7 << ", col " << c;
        }
}

TEST(WgmmaLayout, AccumulatorsCoverTheWarpgroupTileOnce) {
  for (int n : {64, 128}) {
    std::set<std::pair<int, int>> seen;
    for (int warp = 0; warp < 4; ++warp)
      for (int lane = 0; lane < 32; ++lane)
        for (int i = 0; i < n / 2; ++i) {
          const int row = 16 * warp + W::acc_row(lane, i);
          const int col = W::acc_col(lane, i);
          ASSERT_TRUE(row >= 0 && row < 64 && col >= 0 && col < n);
          EXPECT_TRUE(seen.insert({row, col}).second) << row << "," << col;
        }
    EXPECT_EQ(seen.size(), static_cast<std::size_t>(64 * n));
    // The PTX ISA's table for wgmma's D: element i of lane l is row l / 4 + 8 ((i / 2) % 2),
    // column 8 (i / 4) + 2 (l % 4) + i % 2 of the warp's 16 rows.
    EXPECT_EQ(W::acc_row(13, 6), 3 + 8);
    EXPECT_EQ(W::acc_col(13, 6), 8 + 2);
  }
}

TEST(WgmmaLayout, PFragmentsAreTheAFragmentsOfTheSameRowsAndKeys) {
  for (int bk : {64, 128})
    for (int lane = 0; lane < 32; ++lane)
      for (int kc = 0; kc < bk / 16; ++kc)
        for (int r = 0; r < 4; ++r)
          for (int half = 0; half < 2; ++half) {
            const int e = W::p_element(kc, r, half);
            ASSERT_LT(e, bk / 2);
            // mma.m16n8k16's A (PTX ISA): register r holds row g + 8 (r % 2), columns
            // 2t + 8 (r / 2) + {0, 1}, the lower column in the low half.
            EXPECT_EQ(W::acc_row(lane, e), lane / 4 + 8 * (r % 2));
            EXPECT_EQ(W::acc_col(lane, e), 16 * kc + 2 * (lane % 4) + 8 * (r / 2) + half);
          }
}

}  // namespace
