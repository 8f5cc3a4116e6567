// Launcher of the CUDA split-KV decode kernel (kernels/decode.cu). Plain C++ header: no CUDA types.
// All pointers are DEVICE pointers, row-major (fp32, or bf16 for decode_attention_bf16):
//   q (heads*n, d)  k (kv_heads*m, d)  v (kv_heads*m, d)  o (heads*n, d)
// with kv_heads = heads / kv_group; query head h reads key/value head h / kv_group; d = d_k = d_v.
// The n queries are the last n of the m positions: causal (when `causal`) lets query i see the keys
// j <= i + m - n. `scale` = 1 / (sqrt(d) T) (or s / T). `partials` is scratch of
// decode_partials_floats(...) floats. `stream` is a cudaStream_t passed as void*.
// With `rules` (kernels/rules.h, device pointers; causal false): the problem's mask (any kind and
// the mask mods) and score mods; `scale` is then 1 / T, rules->scale the softmax scale.
#pragma once

#include "kernels/rules.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

namespace attnlab::cuda {

// What the kernel takes: d_k == d_v in {64, 128}, at most kDecodeMaxRows query rows per key/value
// head (kv_group * n); "" when it takes the shape, else why not.
// Inline: the bench's planning asks it in builds without CUDA too.
inline constexpr int kDecodeMaxRows = 16;
inline std::string decode_shape_error(int d_k, int d_v, int kv_group, int n) {
  if (d_k != d_v || (d_k != 64 && d_k != 128))
    return "the CUDA decode kernel takes d_k = d_v = 64 or 128, got d_k " + std::to_string(d_k) + ", d_v " +
           std::to_string(d_v);
  if (static_cast<long long>(kv_group) * n > kDecodeMaxRows)
    return "the CUDA decode kernel takes at most " + std::to_string(kDecodeMaxRows) +
           " query rows per key/value head (query heads per key/value head x queries), got " +
           std::to_string(static_cast<long long>(kv_group) * n);
  return "";
}

// Whether a launch with `rows` query rows per key/value head (kv_group x n) runs configuration 1,
// the rows four at a time (kernels/decode.cu): ATTNLAB_DECODE_CONFIG (kernels/tile_config.h) asks
// for it and there are two rows or more; a single row runs configuration 0 whatever the switch.
// Throws InputError for a value out of range.
bool decode_rows_grouped(int rows);

// The split count for `sms` SMs and `keys` keys cut: about four blocks per SM over every
// key/value head, no split under kDecodeMinSplitKeys keys; `requested` > 0 asks for exactly that
// many (at most one per key). Pure, so that host tests check it.
inline constexpr int kDecodeMinSplitKeys = 256;
inline int decode_split_count(int sms, int kv_heads, int keys, int requested) {
  int splits = requested;
  if (splits <= 0)
    splits = std::clamp((4 * sms + kv_heads - 1) / std::max(1, kv_heads), 1, std::max(1, keys / kDecodeMinSplitKeys));
  return std::min(splits, keys);
}
// decode_split_count with this device's SM count.
int decode_splits(int kv_heads, int keys, int requested);

// Scratch floats the kernel needs for `splits` splits: (m, l, acc) of every row of every split.
std::size_t decode_partials_floats(int heads, int n, int d, int splits);

// Phase 1: one block per (split, key/value head) computes the partial (m, l, acc) of every query
// row of the group over its keys; phase 2: one block per query row merges its splits' states by
// the log-sum-exp rule and writes O = acc / l. The keys [first, m) (0 <= first < m; the keys
// before `first` are not read: decode_first_key, core/modify.h, for a window's plan) are cut into
// `splits` parts of near-equal length (1 <= splits <= m - first; decode_splits gives the device's
// count). Throws InputError for shapes it does not take.
void decode_attention_fp32(const float* q, const float* k, const float* v, float* o, float* partials,
                           int heads, int kv_group, int n, int m, int d, int first, int splits, float scale,
                           bool causal, void* stream, const KernelRules* rules = nullptr);

// The same on a bf16 cache: q, k and v are bf16 bit patterns (round to nearest even of the fp32
// inputs), widened to fp32 as they are loaded; the weights are rounded to bf16 (l sums the rounded
// weights), every sum and the output fp32.
void decode_attention_bf16(const std::uint16_t* q, const std::uint16_t* k, const std::uint16_t* v, float* o,
                           float* partials, int heads, int kv_group, int n, int m, int d, int first, int splits,
                           float scale, bool causal, void* stream, const KernelRules* rules = nullptr);

}  // namespace attnlab::cuda
