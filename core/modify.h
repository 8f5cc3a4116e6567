// A Problem's modifications (core/modifications.h has what each one is) as every backend reads
// them: the rules with their pointers into the problem's inputs, the standard ALiBi slopes, the
// block mask of a tile grid, Q and K rotated by RoPE (made once per problem), the checks of
// validate() and the text every output shows.
#pragma once

#include "core/modifications.h"
#include "core/problem.h"

#include <memory>
#include <string>
#include <vector>

namespace attnlab {

// Whether p has any modification; any score mod; any mask mod beyond the mask kind.
bool has_modifications(const Problem& p);
bool has_score_mods(const Problem& p);
bool has_mask_mods(const Problem& p);

// The standard ALiBi slopes of H heads (Press et al. 2022): 2^(-8(h+1)/H) for H a power of two;
// otherwise those of the largest power of two below H, then every other one of twice that.
std::vector<double> standard_alibi_slopes(int heads);
// The slope of every query head of p: given (one per head, or one for all) or standard for
// p.heads; empty without ALiBi.
std::vector<double> alibi_slopes(const Problem& p);
// p is query head `head` of a call of `heads` heads read alone (a bundle's --head): ALiBi's slopes
// become that head's own among the heads (standard for `heads`, or the given one of the head), as
// one_head gives a head of a whole problem. One given slope for all, or none without ALiBi, stay;
// a given count that fits neither is left to validate's refusal.
void keep_head_slope(Problem& p, int heads, int head);

// The scale the online softmax applies inside its exp: fused_scale(p) on raw scores q . k (no score
// mods), or 1 / T on scores already scaled and modified (score_rule applied to q . k * scale).
float online_scale(const Problem& p);

// p's mask rule (pointers into p's inputs: valid while p lives).
MaskRule mask_rule(const Problem& p);

// The keys [lo, hi) a decode kernel reads for the queries at the end of the first `used` keys
// (0 < used <= p.m(): a cache in use): those some query may see (MaskRule::union_interval: a
// window's), lo rounded down to 16 keys (the CPU kernel's panels); all `used` keys where no query
// sees one (never for queries at the end of the keys: each sees itself). The CPU and CUDA decode
// kernels' machine plans cut only these.
void decode_keys_read(const Problem& p, int used, int& lo, int& hi);
// decode_keys_read's lo for the cache's first `keys` keys (0: p.m()): where every split's reads
// begin (0 without a window).
int decode_first_key(const Problem& p, int keys = 0);
// p's score rule in T; `slopes` receives the ALiBi slopes the rule points at (keep it alive).
template <class T>
ScoreRuleT<T> score_rule(const Problem& p, std::vector<T>& slopes) {
  ScoreRuleT<T> r;
  r.n = p.n();
  r.m = p.m();
  r.offset = p.causal_offset();
  const std::vector<double> s = alibi_slopes(p);
  slopes.assign(s.begin(), s.end());
  r.slopes = slopes.empty() ? nullptr : slopes.data();
  if (p.bias().size() > 0) {
    r.bias = p.bias().data();
    r.bias_per_head = p.bias().rows() != p.n();
  }
  r.softcap = static_cast<T>(p.mods.softcap);
  return r;
}

// The block mask of p over tiles of q_tile queries by k_tile keys (computed on each call; a
// kernel asks once per run).
BlockMask block_mask(const Problem& p, int q_tile, int k_tile);

// Keys query i may see (the mask kind and the mask mods), and the pairs of one head.
long long visible_pairs(const Problem& p);

// Q and K rotated by RoPE at p's θ: Q (heads n, d_k) with query i at position i + m - n, K
// (kv_heads m, d_k) with key j at position j, each value computed in double and rounded once to
// fp32. Made on first use and kept with p's inputs (Problem::derived); every fp32 and bf16 kernel
// multiplies these. The rotated K is kept as K and V's own ("kv/…"), so a new Q against the same
// cache (Problem::edit_q: the decode view's next token) turns Q alone. Null without RoPE.
struct RotatedQK {
  MatrixF q;
  std::shared_ptr<const MatrixF> k_kept;
  const MatrixF& k() const { return *k_kept; }
};
std::shared_ptr<const RotatedQK> rotated_qk(const Problem& p);
// RoPE's angular frequency of pair c (0 <= c < d/2: values c and c + d/2 of a row) at base θ
// for d dimensions, θ^(-2c/d): a row at position pos turns that pair by pos times it. The one
// definition of the angles (the rotation below, rotated_qk's tables, the viewer's tooltip).
double rope_frequency(double theta, int c, int d);
// The same rotation in double, of rows [row0, row0 + rows) of x whose first row is at position
// `pos0` (what the fp64 reference and the tests use).
MatrixD rope_rotate(const MatrixD& x, int pos0, double theta);
// The transpose (and inverse) of that rotation: each pair turned back by its angle. What takes a
// gradient with respect to rotated Q or K back to the inputs' frame (the backward pass). Written
// through rope_rotate, so the angles have one definition: with F negating the second half of a
// row, R(-a) = F R(a) F.
MatrixD rope_rotate_back(const MatrixD& x, int pos0, double theta);
// The same in place on fp32 rows: `blocks` stacked blocks of `rows` rows each (heads of dQ or dK),
// row r of every block at position pos0 + r, each value computed in double and rounded once:
// bit for bit rope_rotate_back(block.cast<double>(), pos0, theta).cast<float>(), over the cores.
void rope_rotate_back_rows(MatrixF& x, int blocks, int rows, int pos0, double theta);
// Q and K as the kernels multiply them: rotated when p has RoPE, else p's own.
inline const MatrixF& kernel_q(const Problem& p, const RotatedQK* r) { return r ? r->q : p.q(); }
inline const MatrixF& kernel_k(const Problem& p, const RotatedQK* r) { return r ? r->k() : p.k(); }

// Throws InputError (catalogued, both languages) for a modification that cannot apply: θ <= 0 or
// not finite, RoPE with an odd d_k, C <= 0, W < 1, P < 1 or P > m, ALiBi slopes neither one nor
// one per head (or not finite), a bias of the wrong shape or with values that are not finite,
// document ids whose count is not m. A row that the mask mods leave without a key is refused by
// validate() as a fully masked row. Part of validate().
void validate_modifications(const Problem& p);

// The mask the queries see, named for the texts: mask_name of the kind, or prefix-LM where a
// prefix rule P >= 1 makes it (a prefix implies causal: the first P positions are seen both ways,
// the rest causally), with a custom mask as well: "custom + prefix-LM".
std::string mask_text(MaskKind mask, int prefix, Lang lang);

// One line naming p's modifications ("RoPE θ=10000; ALiBi (standard slopes); soft-cap C=30;
// window 256"), empty without any; in Chinese for Lang::Zh.
std::string modifications_text(const Problem& p, Lang lang);

}  // namespace attnlab
