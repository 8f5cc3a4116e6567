// Bundles: the attention calls of a real model, captured elsewhere (scripts/attnlab_capture.py
// writes them; any tool may) and read here like CSV and .npy. A bundle is a directory:
//
//   manifest.json   {"format": "attnlab-bundle", "version": 1,
//                    "model": "gpt2" (optional, free text), "tokens": ["The", " cat", ...],
//                    "calls": [ {"name": "transformer.h.0.attn", "heads": 12, "kv_heads": 12,
//                                "n": 7, "m": 7, "d_k": 64, "d_v": 64,
//                                "scale": 0.125 | null, "causal": true,
//                                "mask": "0003_mask.npy" | null,
//                                "q": "0003_q.npy", "k": "0003_k.npy", "v": "0003_v.npy",
//                                "output": "0003_out.npy" | null}, ... ]}
//   *.npy           float32 (float64 accepted), 2-D, C order, heads stacked along rows:
//                   q (heads*n, d_k), k (kv_heads*m, d_k), v (kv_heads*m, d_v),
//                   output (heads*n, d_v) what the model's call returned (optional),
//                   mask (n, m) shared by every head, or (heads*n, m) one per head; 0 keeps, -inf
//                   blocks (boolean and additive masks are written in these terms).
//
// One call is one "layer" of the lab: --layer takes its index in "calls" or its name. Query head
// h reads key/value head h / (heads / kv_heads) (grouped-query attention, as the model does).
// scale null = the default 1/sqrt(d_k). causal = a causal mask aligned top-left (query i sees keys
// 0..i), as torch's is_causal; with n != m the reader builds it as a custom mask. Tokens label
// the keys when m equals their count and the queries when n does (the last n tokens when n < m).
#pragma once

#include "core/problem.h"

#include <optional>
#include <string>
#include <vector>

namespace attnlab {

struct BundleCall {
  std::string name;
  int heads = 1, kv_heads = 1, n = 0, m = 0, d_k = 0, d_v = 0;
  std::optional<double> scale;  // empty: 1/sqrt(d_k)
  bool causal = false;
  std::string q, k, v, mask, output;  // file names inside the bundle; mask/output may be empty
};

struct Bundle {
  std::string dir;
  std::string model;
  std::vector<std::string> tokens;
  std::vector<BundleCall> calls;
};

// Reads and checks DIR/manifest.json (not the arrays): InputError "<dir>/manifest.json: ..." naming
// what is missing or wrong.
Bundle read_bundle(const std::string& dir);

// The call named by `layer`: a 0-based index into calls, or a call's name.
int resolve_layer(const Bundle& b, const std::string& layer);

// The Problem of one call: all heads stacked (head empty) or one head; the bundle's scale, mask,
// causality and tokens; Problem::source says where it came from. Every array is checked against
// the manifest ("<file>: q of call 0 'attn' is 12x64 but the manifest says 14x64 (heads 2 x n 7,
// d_k 64)"). The result is validated.
Problem bundle_problem(const Bundle& b, int layer, std::optional<int> head);

// The output the model returned for that call, (heads*n, d_v) or the one head's (n, d_v); empty
// when the bundle has none.
MatrixF bundle_output(const Bundle& b, int layer, std::optional<int> head);

}  // namespace attnlab
