// Where the CUDA split-KV decode kernel (kernels/decode.cu) keeps what, as functions the host can
// call: which key a lane's summed piece belongs to, which of a halving sum's values a lane ends
// with, where a score lies in shared memory and which row a P V accumulator holds. The kernel
// computes its indices with these; tests/test_decode_layout.cpp emulates a block's tile with them
// on the host (lanes, pieces, the halving sum's exchanges) against the scores and P V computed
// directly, for both configurations and every row count.
#pragma once

#if defined(__CUDACC__)
#define ATTNLAB_DECODE_FN __host__ __device__ __forceinline__
#else
#define ATTNLAB_DECODE_FN inline
#endif

namespace attnlab::cuda::decode_layout {

constexpr int kThreads = 128;  // a split block's threads
constexpr int kTile = 32;      // keys per tile: one lane per key in the softmax step
// Configuration 1's P, by key: a row of kPtStride floats per key (the rows in 16-byte groups; a
// stride of 20 keeps the softmax's column reads at 4-way bank conflicts).
constexpr int kPtStride = 20;

// A tile of kTile keys of D values is read in 16-byte pieces of W elements: L = D / W lanes per key,
// kPieces = L / 4 pieces per thread; piece l of thread tid is piece tid + l * kThreads of the tile.
// The key of piece `piece` of the group of L lanes that lane x (tid % L) of thread tid is in.
ATTNLAB_DECODE_FN constexpr int piece_key(int tid, int x, int piece, int lanes) {
  return (tid - x + piece * kThreads) / lanes;
}

// After the halving sum of `count` values over a group of `lanes` lanes (decode.cu's
// group_sum_halving, count <= lanes, both powers of 2), the value lane x holds: lanes that differ
// only in their lowest log2(lanes / count) bits hold the same one, and the lowest of them writes it.
ATTNLAB_DECODE_FN constexpr int summed_value(int x, int lanes, int count) { return x / (lanes / count); }
ATTNLAB_DECODE_FN constexpr bool writes_sum(int x, int lanes, int count) { return x % (lanes / count) == 0; }

// Where row r's score (then weight) of key j of the tile lies in the block's ps: by row, (R, kTile + 1)
// under configuration 0; by key, (kTile, kPtStride) under configuration 1 (grouped).
ATTNLAB_DECODE_FN constexpr int score_at(bool grouped, int r, int j) {
  return grouped ? j * kPtStride + r : r * (kTile + 1) + j;
}

// The row of P V accumulator t of a thread with column band rb = tid / D, RS = kThreads / D bands:
// configuration 0 interleaves the bands' rows (rb, rb + RS, ...); configuration 1 gives a thread
// runs of four rows, run u = t / 4 holding rows 4 (rb + RS u) .. + 3.
ATTNLAB_DECODE_FN constexpr int acc_row(bool grouped, int t, int rb, int rs) {
  return grouped ? 4 * (rb + rs * (t / 4)) + t % 4 : rb + t * rs;
}

}  // namespace attnlab::cuda::decode_layout
