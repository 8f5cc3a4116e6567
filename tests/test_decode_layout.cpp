// The CUDA split-KV decode kernel's layout (kernels/decode_layout.h), on the host: one tile of a
// split block emulated lane by lane with the kernel's own index functions, for both
// configurations (rows one at a time; four at a time, padded with zero queries), fp32 and bf16
// pieces (4 and 8 elements in 16 bytes), d 64 and 128 and every row count a key/value head may
// have (1 to 16):
//   - the 16-byte pieces: every (key, column) of the tile is loaded by exactly one thread;
//   - the scores: each thread's partial dot products, summed over its key's lanes by an emulation
//     of decode.cu's halving exchange (group_sum_halving: what each lane sends and keeps at each
//     step), land where score_at says, every (row, key) exactly once, equal to the dot product;
//     the padded rows score -inf;
//   - P V: every thread's accumulators (acc_row) over the weights read where score_at says give
//     every (row, column) of the output exactly once, equal to P V computed directly.
// And the split count the host asks for (decode_split_count). The kernel itself runs in
// tests/gpu/test_cuda_parity.cpp (CudaDecode.*, on a device).
#include "kernels/decode_layout.h"
#include "kernels/decode.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace {

namespace dl = attnlab::cuda::decode_layout;
constexpr int kMaxRows = attnlab::cuda::kDecodeMaxRows;

// decode.cu's group_sum_halving over the 32 lanes of a warp at once: p[lane] holds `count` values
// (count <= lanes, powers of 2, groups of `lanes` consecutive lanes); on return p[lane][0] is the
// sum over the lane's group of value v[lane].
void halving_sum(std::vector<std::vector<double>>& p, int lanes, int count, std::vector<int>& v) {
  v.assign(32, 0);
  int cnt = count;
  for (int s = lanes / 2; s >= 1; s /= 2) {
    const std::vector<std::vector<double>> old = p;
    for (int lane = 0; lane < 32; ++lane) {
      const int partner = lane ^ s;
      const bool upper = (lane % lanes & s) != 0, partner_upper = (partner % lanes & s) != 0;
      if (cnt > 1) {
        for (int t = 0; t < cnt / 2; ++t) {
          const double keep = upper ? old[lane][t + cnt / 2] : old[lane][t];
          const double received = partner_upper ? old[partner][t] : old[partner][t + cnt / 2];  // what it sends
          p[lane][t] = keep + received;
        }
        if (upper) v[lane] += cnt / 2;
      } else {
        p[lane][0] = old[lane][0] + old[partner][0];
      }
    }
    if (cnt > 1) cnt /= 2;
  }
}

struct Case {
  int d, w, rows;
  bool grouped;
  std::string name() const {
    return "d " + std::to_string(d) + (w == 4 ? " fp32" : " bf16") + " rows " + std::to_string(rows) +
           (grouped ? " by four" : " one at a time");
  }
};

void check_tile(const Case& cs, std::mt19937& rng) {
  SCOPED_TRACE(cs.name());
  const int d = cs.d, lanes = d / cs.w, pieces = dl::kTile * d / cs.w / dl::kThreads;
  ASSERT_EQ(pieces * 4, lanes);  // four rows' pieces are one sum per lane
  const int rg = cs.grouped ? 4 : 1, rp = cs.grouped ? (cs.rows + 3) / 4 * 4 : cs.rows;
  std::normal_distribution<double> g;
  std::vector<double> q(kMaxRows * d, 0.0), k(dl::kTile * d), v(dl::kTile * d);
  for (int i = 0; i < cs.rows * d; ++i) q[i] = g(rng);  // the padded rows' queries stay zero
  for (double& x : k) x = g(rng);
  for (double& x : v) x = g(rng);

  // The pieces each thread holds (kf in the kernel), and that they cover the tile once.
  std::vector<int> loaded(dl::kTile * d, 0);
  std::vector<std::vector<double>> kf(dl::kThreads, std::vector<double>(pieces * cs.w));
  for (int tid = 0; tid < dl::kThreads; ++tid) {
    const int x = tid % lanes, cc = x * cs.w;
    for (int l = 0; l < pieces; ++l) {
      const int j = dl::piece_key(tid, x, l, lanes);
      ASSERT_LT(j, dl::kTile);
      for (int e = 0; e < cs.w; ++e) {
        kf[tid][l * cs.w + e] = k[j * d + cc + e];
        ++loaded[j * d + cc + e];
      }
    }
  }
  for (int c : loaded) ASSERT_EQ(c, 1);
  // The scores and weights computed directly.
  std::vector<double> score(cs.rows * dl::kTile, 0.0), weight(cs.rows * dl::kTile);
  for (int r = 0; r < cs.rows; ++r)
    for (int j = 0; j < dl::kTile; ++j) {
      for (int c = 0; c < d; ++c) score[r * dl::kTile + j] += q[r * d + c] * k[j * d + c];
      weight[r * dl::kTile + j] = std::exp(-std::abs(score[r * dl::kTile + j]) / 8);  // any values do
    }

  // The scores, rg rows at a time, through the halving sum, into ps.
  const double unset = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> ps(std::max(dl::kTile * dl::kPtStride, kMaxRows * (dl::kTile + 1)), unset);
  std::vector<int> written(ps.size(), 0);
  const int count = rg * pieces;
  for (int r0 = 0; r0 < rp; r0 += rg)
    for (int warp = 0; warp < dl::kThreads / 32; ++warp) {
      std::vector<std::vector<double>> part(32, std::vector<double>(count));
      for (int lane = 0; lane < 32; ++lane) {
        const int tid = warp * 32 + lane, cc = tid % lanes * cs.w;
        for (int rr = 0; rr < rg; ++rr)
          for (int l = 0; l < pieces; ++l) {
            double a = 0;
            for (int e = 0; e < cs.w; ++e) a += q[(r0 + rr) * d + cc + e] * kf[tid][l * cs.w + e];
            part[lane][rr * pieces + l] = a;
          }
      }
      std::vector<int> value;
      halving_sum(part, lanes, count, value);
      for (int lane = 0; lane < 32; ++lane) {
        const int tid = warp * 32 + lane, x = tid % lanes;
        ASSERT_EQ(value[lane], dl::summed_value(x, lanes, count));
        if (!dl::writes_sum(x, lanes, count)) continue;
        const int r = r0 + value[lane] / pieces, j = dl::piece_key(tid, x, value[lane] % pieces, lanes);
        const int at = dl::score_at(cs.grouped, r, j);
        ps[at] = r < cs.rows ? part[lane][0] : -std::numeric_limits<double>::infinity();
        ++written[at];
      }
    }
  for (int r = 0; r < rp; ++r)
    for (int j = 0; j < dl::kTile; ++j) {
      const int at = dl::score_at(cs.grouped, r, j);
      ASSERT_EQ(written[at], 1) << "row " << r << " key " << j;
      if (r >= cs.rows) {
        EXPECT_TRUE(std::isinf(ps[at]) && ps[at] < 0) << "padded row " << r;
        continue;
      }
      const double s = score[r * dl::kTile + j];
      EXPECT_NEAR(ps[at], s, 1e-9 * (1 + std::abs(s))) << "row " << r << " key " << j;
    }
  // Rows never overlap (distinct slots), so the softmax's per-row reads see only their own row.

  // The weights in place of the scores (the padded rows' weigh 0), then P V.
  for (int r = 0; r < rp; ++r)
    for (int j = 0; j < dl::kTile; ++j)
      ps[dl::score_at(cs.grouped, r, j)] = r < cs.rows ? weight[r * dl::kTile + j] : 0.0;
  const int bands = dl::kThreads / d, accs = kMaxRows / bands;
  std::vector<double> out(kMaxRows * d, unset);
  std::vector<int> out_written(kMaxRows * d, 0);
  for (int tid = 0; tid < dl::kThreads; ++tid) {
    const int c = tid % d, rb = tid / d;
    for (int t = 0; t < accs; ++t) {
      const int row = dl::acc_row(cs.grouped, t, rb, bands);
      ASSERT_LT(row, kMaxRows);
      // The kernel computes a run of four (grouped) or a row (one at a time) below rp.
      const int first = cs.grouped ? dl::acc_row(true, t / 4 * 4, rb, bands) : row;
      if (first >= rp) continue;
      double a = 0;
      for (int j = 0; j < dl::kTile; ++j) a += ps[dl::score_at(cs.grouped, row, j)] * v[j * d + c];
      if (row < cs.rows) {
        out[row * d + c] = a;
        ++out_written[row * d + c];
      }
    }
  }
  for (int r = 0; r < cs.rows; ++r)
    for (int c = 0; c < d; ++c) {
      ASSERT_EQ(out_written[r * d + c], 1) << "row " << r << " column " << c;
      double want = 0;
      for (int j = 0; j < dl::kTile; ++j) want += weight[r * dl::kTile + j] * v[j * d + c];
      EXPECT_NEAR(out[r * d + c], want, 1e-9 * (1 + std::abs(want))) << "row " << r << " column " << c;
    }
}

TEST(DecodeLayout, ATileEmulatedLaneByLaneGivesEveryScoreAndOutputOnce) {
  std::mt19937 rng(5);
  for (int d : {64, 128})
    for (int w : {4, 8})
      for (int rows = 1; rows <= kMaxRows; ++rows)
        for (bool grouped : {false, true})
          if (!grouped || rows >= 2) check_tile({d, w, rows, grouped}, rng);
}

// The shapes' constants as the kernel assumes them: the by-key P holds every row in whole 16-byte
// groups, and a tile is whole pieces with kThreads pieces making whole keys.
TEST(DecodeLayout, TheConstantsFitTheRowsAndTheTile) {
  EXPECT_EQ(dl::kPtStride % 4, 0);
  EXPECT_GE(dl::kPtStride, kMaxRows);
  EXPECT_EQ(kMaxRows % 4, 0);
  for (int d : {64, 128})
    for (int w : {4, 8}) {
      const int lanes = d / w;
      EXPECT_EQ(dl::kThreads % lanes, 0);
      EXPECT_EQ(32 % lanes, 0) << "a key's lanes lie in one warp";
      EXPECT_EQ(dl::kTile * d % (w * dl::kThreads), 0);
    }
}

}  // namespace

// The split count for an H100's 132 SMs: four blocks per SM over the key/value heads, no split
// under 256 keys; a requested count exactly, at most one per key. Under a window the
// backend asks for the window's keys only (m - decode_first_key), so the count follows the window.
TEST(DecodeLayout, TheSplitCountFollowsTheKeysCut) {
  using attnlab::cuda::decode_split_count;
  EXPECT_EQ(decode_split_count(132, 1, 262144, 0), 528);
  EXPECT_EQ(decode_split_count(132, 8, 262144, 0), 66);
  EXPECT_EQ(decode_split_count(132, 2, 5000, 0), 19);   // 5000 / 256
  EXPECT_EQ(decode_split_count(132, 1, 4096 + 16, 0), 16);  // a window of 4096, its first key on a panel
  EXPECT_EQ(decode_split_count(132, 2, 344, 0), 1);
  EXPECT_EQ(decode_split_count(1, 64, 100000, 0), 1);  // fewer blocks than key/value heads
  EXPECT_EQ(decode_split_count(132, 1, 5000, 7), 7);
  EXPECT_EQ(decode_split_count(132, 1, 10, 40), 10);  // one per key
  EXPECT_EQ(decode_split_count(132, 1, 10, 6), 6);    // exactly as asked: parts of one or two keys
}
