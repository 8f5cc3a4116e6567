// Bundles: the attention calls of a real model, captured elsewhere (scripts/attnlab_capture.py
// writes them; any tool may) and read here like CSV and .npy. A bundle is a directory:
//
//   manifest.json   {"format": "attnlab-bundle", "version": 1,
//                    "model": "gpt2" (optional, free text), "tokens": ["The", " cat", ...],
//                    "calls": [ {"name": "transformer.h.0.attn", "heads": 12, "kv_heads": 12,
//                                "n": 7, "m": 7, "d_k": 64, "d_v": 64,
//                                "scale": 0.125 | null, "causal": true,
//                                "mask": "0003_mask.npy" | null,
//                                "bias": "0003_bias.npy" | null,
//                                "rope_theta": 10000.0 | null,
//                                "q": "0003_q.npy", "k": "0003_k.npy", "v": "0003_v.npy",
//                                "output": "0003_out.npy" | null,
//                                "notes": ["..."] (optional)}, ... ]}
//   *.npy           float32 (float64 accepted), 2-D, C order, heads stacked along rows:
//                   q (heads*n, d_k), k (kv_heads*m, d_k), v (kv_heads*m, d_v),
//                   output (heads*n, d_v) what the model's call returned (optional),
//                   mask (n, m) shared by every head, or (heads*n, m) one per head; 0 keeps, -inf
//                   blocks (boolean and additive masks are written in these terms),
//                   bias (n, m) shared by every head, or (heads*n, m) one per head: finite values
//                   added to the scaled scores (a model's additive float mask less its blocking
//                   entries, such as ALiBi's distances; 0 where the mask blocks).
//
// rope_theta: a number > 0 says the model rotated Q and K by RoPE with that base (the rotate-half
// convention of core/modifications.h: value c paired with c + d_k/2, query i at position
// i + m - n, key j at j) and that q and k hold them BEFORE the rotation; the lab rotates them
// itself (Problem::mods.rope_theta), so d_k must be even. null or absent: q and k are used as they
// are (a model whose rotation the capture could not see leaves them rotated and says so in a note).
// bias sets the Problem's bias (Problem::mods.bias_name is the file name), applied after the scale
// and before the soft-cap and the mask, as torch adds attn_mask to the scaled scores.
// notes: free text for a person (what the capture did or could not do); the lab keeps them (blanks
// around each dropped, blank ones left out) in BundleCall::notes, writes them after the problem's source ("; note: …", every text that names
// the source shows them) and computes nothing from them.
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
  double rope_theta = 0;        // > 0: q and k are un-rotated, the lab applies RoPE; 0: none
  std::string q, k, v, mask, bias, output;  // file names inside the bundle; mask/bias/output may be empty
  std::vector<std::string> notes;           // the manifest's notes of this call
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

// The call named by `layer`: a whole number is a 0-based index into calls (always, even where a
// call is named "0"); anything else is a call's name.
int resolve_layer(const Bundle& b, const std::string& layer);

// The Problem of one call: all heads stacked (head empty) or one head; the bundle's scale, mask,
// bias, RoPE base, causality and tokens; Problem::source says where it came from. Every array is
// checked against the manifest ("<file>: q of call 0 'attn' is 12x64 but the manifest says 14x64
// (heads 2 x n 7, d_k 64)"); a bias's values must be finite. One head of a per-head bias is its
// rows. The result is validated.
Problem bundle_problem(const Bundle& b, int layer, std::optional<int> head);

// The output the model returned for that call, (heads*n, d_v) or the one head's (n, d_v); empty
// when the bundle has none.
MatrixF bundle_output(const Bundle& b, int layer, std::optional<int> head);

}  // namespace attnlab
