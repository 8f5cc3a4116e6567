// A Problem's modifications as the backends read them (core/modify.h): rules, slopes, the block
// mask, RoPE's rotated Q and K, their checks and their text.
#include "core/gcc12_avx512.h"  // first: see there

#include "core/modify.h"

#include "core/format.h"
#include "core/messages.h"
#include "core/parallel.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

namespace attnlab {

bool has_score_mods(const Problem& p) { return p.mods.alibi || p.mods.softcap > 0 || p.bias().size() > 0; }
bool has_mask_mods(const Problem& p) { return p.mods.window > 0 || p.mods.prefix > 0 || !p.documents().empty(); }
bool has_modifications(const Problem& p) { return p.mods.rope_theta > 0 || has_score_mods(p) || has_mask_mods(p); }

std::vector<double> standard_alibi_slopes(int heads) {
  std::vector<double> s;
  if (heads < 1) return s;
  int pow2 = 1;
  while (pow2 * 2 <= heads) pow2 *= 2;
  for (int h = 0; h < pow2; ++h) s.push_back(std::exp2(-8.0 * (h + 1) / pow2));
  // The rest: every other slope of 2 * pow2 heads (those between the ones above).
  for (int h = 0; static_cast<int>(s.size()) < heads; h += 2) s.push_back(std::exp2(-8.0 * (h + 1) / (2 * pow2)));
  return s;
}

void keep_head_slope(Problem& p, int heads, int head) {
  std::vector<double>& given = p.mods.alibi_slopes;
  if (!p.mods.alibi || given.size() == 1 || head < 0 || head >= heads) return;
  if (given.empty()) {
    given = {standard_alibi_slopes(heads)[static_cast<std::size_t>(head)]};
  } else if (static_cast<int>(given.size()) == heads) {
    given = {given[static_cast<std::size_t>(head)]};
  }
}

std::vector<double> alibi_slopes(const Problem& p) {
  if (!p.mods.alibi) return {};
  const std::vector<double>& given = p.mods.alibi_slopes;
  if (given.empty()) return standard_alibi_slopes(p.heads);
  if (given.size() == 1) return std::vector<double>(p.heads, given[0]);
  return given;
}

float online_scale(const Problem& p) {
  return has_score_mods(p) ? static_cast<float>(1.0 / p.temperature) : fused_scale(p);
}

MaskRule mask_rule(const Problem& p) {
  MaskRule r;
  r.m = p.m();
  r.offset = p.causal_offset();
  r.causal = p.mask == MaskKind::Causal || p.mods.prefix > 0;
  r.window = p.mods.window;
  r.prefix = p.mods.prefix;
  r.documents = p.documents().empty() ? nullptr : p.documents().data();
  r.custom = p.mask == MaskKind::Custom ? p.custom_mask().data() : nullptr;
  return r;
}

void decode_keys_read(const Problem& p, int used, int& lo, int& hi) {
  MaskRule rule = mask_rule(p);
  rule.offset = used - p.n();
  rule.union_interval(p.n(), lo, hi);
  hi = std::min(hi, used);
  if (lo >= hi) {  // no query sees a key: every key (whose element masks then block them all)
    lo = 0;
    hi = used;
    return;
  }
  lo -= lo % 16;
}

int decode_first_key(const Problem& p, int keys) {
  int lo, hi;
  decode_keys_read(p, keys > 0 ? std::min(keys, p.m()) : p.m(), lo, hi);
  return lo;
}

std::size_t BlockMask::visited() const {
  return static_cast<std::size_t>(std::count_if(kind.begin(), kind.end(), [](BlockKind k) { return k != BlockKind::Empty; }));
}

BlockMask block_mask(const Problem& p, int q_tile, int k_tile) {
  const int n = p.n(), m = p.m();
  BlockMask b;
  b.q_tile = q_tile;
  b.k_tile = k_tile;
  b.q_blocks = (n + q_tile - 1) / q_tile;
  b.k_blocks = (m + k_tile - 1) / k_tile;
  b.kind.assign(static_cast<std::size_t>(b.q_blocks) * b.k_blocks, BlockKind::Full);
  const MaskRule rule = mask_rule(p);
  const std::vector<int>& doc = p.documents();
  const float* custom = rule.custom;
  // Per key tile: the smallest and largest document id among its keys.
  std::vector<int> kdoc_lo, kdoc_hi;
  if (!doc.empty()) {
    kdoc_lo.assign(b.k_blocks, std::numeric_limits<int>::max());
    kdoc_hi.assign(b.k_blocks, std::numeric_limits<int>::min());
    for (int j = 0; j < m; ++j) {
      kdoc_lo[j / k_tile] = std::min(kdoc_lo[j / k_tile], doc[j]);
      kdoc_hi[j / k_tile] = std::max(kdoc_hi[j / k_tile], doc[j]);
    }
  }
  for (int qb = 0; qb < b.q_blocks; ++qb) {
    const int i0 = qb * q_tile, i1 = std::min(n, i0 + q_tile);
    // The union and the intersection of the rows' key intervals.
    int union_lo = m, union_hi = 0, inter_lo = 0, inter_hi = m;
    int qdoc_lo = std::numeric_limits<int>::max(), qdoc_hi = std::numeric_limits<int>::min();
    for (int i = i0; i < i1; ++i) {
      int lo, hi;
      rule.interval(i, lo, hi);
      if (lo < hi) {
        union_lo = std::min(union_lo, lo);
        union_hi = std::max(union_hi, hi);
      }
      inter_lo = std::max(inter_lo, lo);
      inter_hi = std::min(inter_hi, hi);
      if (!doc.empty()) {
        qdoc_lo = std::min(qdoc_lo, doc[i + rule.offset]);
        qdoc_hi = std::max(qdoc_hi, doc[i + rule.offset]);
      }
    }
    for (int kb = 0; kb < b.k_blocks; ++kb) {
      const int j0 = kb * k_tile, j1 = std::min(m, j0 + k_tile);
      BlockKind k = BlockKind::Full;
      if (j1 <= union_lo || j0 >= union_hi) {
        k = BlockKind::Empty;
      } else {
        if (j0 < inter_lo || j1 > inter_hi) k = BlockKind::Partial;
        if (!doc.empty()) {
          if (kdoc_hi[kb] < qdoc_lo || kdoc_lo[kb] > qdoc_hi) {
            k = BlockKind::Empty;  // no query's document among the keys'
          } else if (!(kdoc_lo[kb] == kdoc_hi[kb] && qdoc_lo == qdoc_hi && qdoc_lo == kdoc_lo[kb])) {
            k = BlockKind::Partial;
          }
        }
        if (custom != nullptr && k != BlockKind::Empty) {
          // A custom mask's tile: scanned (the mask is (n, m) already).
          bool any_open = false, any_blocked = false;
          for (int i = i0; i < i1; ++i)
            for (int j = j0; j < j1; ++j) (custom[static_cast<std::size_t>(i) * m + j] == 0.f ? any_open : any_blocked) = true;
          if (!any_open) k = BlockKind::Empty;
          else if (any_blocked) k = BlockKind::Partial;
        }
      }
      b.kind[static_cast<std::size_t>(qb) * b.k_blocks + kb] = k;
    }
  }
  return b;
}

long long visible_pairs(const Problem& p) {
  const MaskRule rule = mask_rule(p);
  long long total = 0;
  for (int i = 0; i < p.n(); ++i) {
    int lo, hi;
    rule.interval(i, lo, hi);
    if (!rule.elementwise()) {
      total += hi - lo;
      continue;
    }
    for (int j = lo; j < hi; ++j) total += rule.visible(i, j) ? 1 : 0;
  }
  return total;
}

namespace {

// RoPE's cos and sin of positions [first, last] and every pair [0, d/2), in double: angle =
// pos · θ^(-2c/d). With pos = hi + lo (hi a multiple of kFine, 0 <= lo < kFine), cos and sin of
// the angle are those of hi · f + lo · f by the addition rule, from the cos and sin of
// (last - first) / kFine + 2 coarse angles and kFine fine ones per pair: a few sincos calls per
// pair instead of one per position (they were most of the rotation's time), each value within a
// few ulp of double (fp32's rounding is 2^29 ulp of double wider). rope_rotate, the fp64
// reference, takes its angles from here too: one definition.
class RopeAngles {
 public:
  RopeAngles(int first, int last, int d, double theta)
      : half_(d / 2), a0_(coarse(first)), cc_(static_cast<std::size_t>(coarse(last) - a0_ + 1) * half_),
        sc_(cc_.size()), cf_(static_cast<std::size_t>(kFine) * half_), sf_(cf_.size()) {
    for (int c = 0; c < half_; ++c) {
      const double f = rope_frequency(theta, c, d);
      for (std::size_t a = 0; a < cc_.size() / half_; ++a) {
        const double x = static_cast<double>(a0_ + static_cast<int>(a)) * kFine * f;
        cc_[a * half_ + c] = std::cos(x);
        sc_[a * half_ + c] = std::sin(x);
      }
      for (int b = 0; b < kFine; ++b) {
        const double x = static_cast<double>(b) * f;
        cf_[static_cast<std::size_t>(b) * half_ + c] = std::cos(x);
        sf_[static_cast<std::size_t>(b) * half_ + c] = std::sin(x);
      }
    }
  }
  // cs[c], sn[c] (d/2 each): cos and sin of position pos's angles.
  void at(int pos, double* cs, double* sn) const {
    const int a = coarse(pos), b = pos - a * kFine;
    const double* c1 = cc_.data() + static_cast<std::size_t>(a - a0_) * half_;
    const double* s1 = sc_.data() + static_cast<std::size_t>(a - a0_) * half_;
    const double* c2 = cf_.data() + static_cast<std::size_t>(b) * half_;
    const double* s2 = sf_.data() + static_cast<std::size_t>(b) * half_;
    for (int c = 0; c < half_; ++c) {
      cs[c] = c1[c] * c2[c] - s1[c] * s2[c];
      sn[c] = s1[c] * c2[c] + c1[c] * s2[c];
    }
  }

 private:
  static constexpr int kFine = 64;
  // a of pos = a · kFine + b, 0 <= b < kFine (a position may be negative: the position view
  // shifts its keys).
  static int coarse(int pos) { return pos >= 0 ? pos / kFine : -((-pos + kFine - 1) / kFine); }
  int half_, a0_;
  std::vector<double> cc_, sc_, cf_, sf_;  // (coarse steps, half), (kFine, half)
};

// One row x (fp32, d values) rotated by the angles cs, sn into y (fp32, may be x): each value
// computed in double and rounded once.
void rotate_row(const float* x, float* y, int half, const double* cs, const double* sn) {
  for (int c = 0; c < half; ++c) {
    const double lo = x[c], hi = x[c + half];
    y[c] = static_cast<float>(lo * cs[c] - hi * sn[c]);
    y[c + half] = static_cast<float>(hi * cs[c] + lo * sn[c]);
  }
}

// fn(pos, cs, sn) for every position of [first, first + count), with the cos and sin of its angles
// (d/2 of each; with `back`, of the angles negated: the sines negated), the positions in chunks
// over the cores; `work`: the caller's flops, for the worker count.
template <class Fn>
void each_position(int first, int count, int d, double theta, bool back, double work, Fn fn) {
  constexpr int kChunk = 2048;  // positions of an item: its coarse angles stay few
  const int chunks = (count + kChunk - 1) / kChunk;
  parallel_items(static_cast<std::size_t>(chunks), worker_count(chunks, work), [&](unsigned, std::size_t it) {
    const int p0 = first + static_cast<int>(it) * kChunk, p1 = std::min(first + count, p0 + kChunk);
    const RopeAngles angles(p0, p1 - 1, d, theta);
    std::vector<double> cs(d / 2), sn(d / 2);
    for (int pos = p0; pos < p1; ++pos) {
      angles.at(pos, cs.data(), sn.data());
      if (back)
        for (double& x : sn) x = -x;
      fn(pos, cs.data(), sn.data());
    }
  });
}

// `blocks` stacked blocks of `rows` rows (heads), row r of every block at position pos0 + r, turned
// by RoPE's angles (negated with `back`) from x into y (may be x), over the cores. A position's
// angles do not depend on the range turned: rows turned apart are the bits they are turned together.
void turn_rows(const float* x, float* y, int blocks, int rows, int d, int pos0, double theta, bool back) {
  each_position(pos0, rows, d, theta, back, 8.0 * blocks * static_cast<double>(rows) * d,
                [&](int pos, const double* cs, const double* sn) {
                  for (int b = 0; b < blocks; ++b) {
                    const std::size_t row = (static_cast<std::size_t>(b) * rows + pos - pos0) * d;
                    rotate_row(x + row, y + row, d / 2, cs, sn);
                  }
                });
}

}  // namespace

double rope_frequency(double theta, int c, int d) { return std::pow(theta, -2.0 * c / d); }

MatrixD rope_rotate(const MatrixD& x, int pos0, double theta) {
  const int d = static_cast<int>(x.cols()), half = d / 2;
  MatrixD y = x;
  if (x.rows() == 0 || half == 0) return y;
  const RopeAngles angles(pos0, pos0 + static_cast<int>(x.rows()) - 1, d, theta);
  std::vector<double> cs(half), sn(half);
  for (Eigen::Index r = 0; r < x.rows(); ++r) {
    angles.at(pos0 + static_cast<int>(r), cs.data(), sn.data());
    for (int c = 0; c < half; ++c) {
      y(r, c) = x(r, c) * cs[c] - x(r, c + half) * sn[c];
      y(r, c + half) = x(r, c + half) * cs[c] + x(r, c) * sn[c];
    }
  }
  return y;
}

MatrixD rope_rotate_back(const MatrixD& x, int pos0, double theta) {
  const Eigen::Index half = x.cols() / 2;
  MatrixD f = x;
  f.rightCols(x.cols() - half) *= -1.0;
  MatrixD y = rope_rotate(f, pos0, theta);
  y.rightCols(x.cols() - half) *= -1.0;
  return y;
}

std::shared_ptr<const RotatedQK> rotated_qk(const Problem& p) {
  if (p.mods.rope_theta <= 0) return nullptr;
  const double theta = p.mods.rope_theta;
  const int n = p.n(), m = p.m(), heads = p.heads, kvh = p.kv_heads(), d = p.d_k();
  const std::string angle = format_number("%.17g", theta);
  // K (key j at position j) is kept with K and V: a new Q against the same cache turns Q alone.
  // One θ kept in each family.
  const std::shared_ptr<const MatrixF> k = p.derived<MatrixF>(
      "kv/rope_k/" + angle + "/" + std::to_string(kvh),
      [&](const ProblemInputs& in) {
        MatrixF r(in.k.rows(), in.k.cols());
        turn_rows(in.k.data(), r.data(), kvh, m, d, 0, theta, /*back=*/false);
        return r;
      },
      "kv/rope_k/");
  // Q: the queries are the last n of the m positions (with more queries than keys the first
  // n - m of them sit at negative positions).
  const auto make = [&](const ProblemInputs& in) {
    RotatedQK r;
    r.k_kept = k;
    r.q.resize(in.q.rows(), in.q.cols());
    turn_rows(in.q.data(), r.q.data(), heads, n, d, p.causal_offset(), theta, /*back=*/false);
    return r;
  };
  return p.derived<RotatedQK>("rope/" + angle + "/" + std::to_string(heads) + "/" + std::to_string(kvh), make,
                              "rope/");
}

void rope_rotate_back_rows(MatrixF& x, int blocks, int rows, int pos0, double theta) {
  const int d = static_cast<int>(x.cols()), half = d / 2;
  if (blocks <= 0 || rows <= 0 || half == 0) return;
  // The turn by -angle: rotate_row with the sines negated. As rope_rotate_back writes it (F R(a) F,
  // F negating a row's second half), per value out_c = x_c cos + x_(c+d/2) sin and out_(c+d/2) =
  // x_(c+d/2) cos - x_c sin: the same double operations up to exact negations, the same bits.
  turn_rows(x.data(), x.data(), blocks, rows, d, pos0, theta, /*back=*/true);
}

void validate_modifications(const Problem& p) {
  const Modifications& md = p.mods;
  const int n = p.n(), m = p.m();
  if (md.rope_theta != 0) {
    if (!std::isfinite(md.rope_theta) || md.rope_theta <= 0)
      throw InputError(Msg::RopeTheta, {format_number("%.9g", md.rope_theta)});
    if (p.d_k() % 2 != 0) throw InputError(Msg::RopeOddDim, {std::to_string(p.d_k())});
  }
  if (md.softcap != 0 && (!std::isfinite(md.softcap) || md.softcap <= 0))
    throw InputError(Msg::SoftcapInvalid, {format_number("%.9g", md.softcap)});
  if (md.window < 0) throw InputError(Msg::WindowInvalid, {std::to_string(md.window)});
  if (md.prefix < 0 || md.prefix > m) throw InputError(Msg::PrefixInvalid, {std::to_string(md.prefix), std::to_string(m)});
  if (md.alibi) {
    const std::size_t given = md.alibi_slopes.size();
    if (given > 1 && static_cast<int>(given) != p.heads)
      throw InputError(Msg::AlibiSlopeCount, {std::to_string(given), std::to_string(p.heads)});
    // The bias -slope |i - j| is formed in fp32; the largest distance is max(n, m) - 1 (query i at
    // i + m - n, key j at j). Half of fp32's range, so that adding it to a score cannot overflow
    // where the score itself is no larger.
    const double far = std::max(n, m) - 1;
    for (double s : md.alibi_slopes) {
      if (!std::isfinite(s)) throw InputError(Msg::AlibiSlopeValue, {format_number("%.9g", s)});
      if (std::abs(s) * far > std::numeric_limits<float>::max() / 2)
        throw InputError(Msg::AlibiSlopeRange, {format_number("%.9g", s), std::to_string(static_cast<long long>(far))});
    }
  }
  const MatrixF& b = p.bias();
  if (b.size() > 0) {
    if ((b.cols() != m || b.rows() != n) && p.heads == 1)
      throw InputError(Msg::BiasShapeShared, {std::to_string(b.rows()), std::to_string(b.cols()), std::to_string(n),
                                              std::to_string(m)});
    if (b.cols() != m || (b.rows() != n && b.rows() != static_cast<Eigen::Index>(p.heads) * n))
      throw InputError(Msg::BiasShape, {std::to_string(b.rows()), std::to_string(b.cols()), std::to_string(n),
                                        std::to_string(m), std::to_string(static_cast<long long>(p.heads) * n)});
    for (Eigen::Index r = 0; r < b.rows(); ++r)
      for (Eigen::Index c = 0; c < b.cols(); ++c)
        if (!std::isfinite(b(r, c)))
          throw InputError(Msg::BiasValue, {format_number("%.9g", b(r, c)), std::to_string(r), std::to_string(c)});
  }
  if (!p.documents().empty() && static_cast<int>(p.documents().size()) != m)
    throw InputError(Msg::DocumentsLength, {std::to_string(p.documents().size()), std::to_string(m)});
  // Query i sits at position i + m - n, whose id the documents give: none for n > m.
  if (!p.documents().empty() && n > m) throw InputError(Msg::DocumentsQueriesOverKeys, {std::to_string(n), std::to_string(m)});
}

std::string mask_text(MaskKind mask, int prefix, Lang lang) {
  const bool zh = lang == Lang::Zh;
  if (prefix < 1) return std::string(mask_name(mask, lang));
  const std::string lm = zh ? "前缀 LM" : "prefix-LM";
  return mask == MaskKind::Custom ? std::string(mask_name(mask, lang)) + " + " + lm : lm;
}

std::string modifications_text(const Problem& p, Lang lang) {
  const bool zh = lang == Lang::Zh;
  const Modifications& md = p.mods;
  std::vector<std::string> parts;
  if (md.rope_theta > 0) parts.push_back("RoPE θ=" + short_number(md.rope_theta));
  if (md.alibi) {
    if (md.alibi_slopes.empty()) {
      parts.push_back(zh ? "ALiBi（标准斜率）" : "ALiBi (standard slopes)");
    } else {
      std::string s;
      for (std::size_t i = 0; i < md.alibi_slopes.size() && i < 4; ++i) {
        if (i) s += '/';
        s += short_number(md.alibi_slopes[i]);
      }
      if (md.alibi_slopes.size() > 4) s += "/…";
      parts.push_back((zh ? "ALiBi（斜率 " : "ALiBi (slopes ") + s + (zh ? "）" : ")"));
    }
  }
  if (p.bias().size() > 0) {
    const std::string name = md.bias_name.empty() ? std::string() : " " + md.bias_name;
    const std::string h = std::to_string(md.bias_head);
    parts.push_back((zh ? "偏置" : "bias") + name +
                    (md.bias_head >= 0           ? (zh ? "（每个头一份，这里是头 " + h + " 的）" : " (one per head, head " + h + "'s)")
                     : p.bias().rows() != p.n() ? (zh ? "（每个头一份）" : " (per head)")
                                                : (zh ? "（所有头共用）" : " (shared)")));
  }
  if (md.softcap > 0) parts.push_back((zh ? "软上限 C=" : "soft-cap C=") + short_number(md.softcap));
  if (md.window > 0) parts.push_back((zh ? "窗口 " : "window ") + std::to_string(md.window));
  if (!p.documents().empty()) {
    std::vector<int> ids = p.documents();
    std::sort(ids.begin(), ids.end());
    const long count = std::unique(ids.begin(), ids.end()) - ids.begin();
    const std::string name = md.documents_name.empty() ? std::string() : " " + md.documents_name;
    parts.push_back(zh ? "文档" + name + "（" + std::to_string(count) + " 篇）"
                       : "documents" + name + " (" + std::to_string(count) + ")");
  }
  if (md.prefix > 0) parts.push_back((zh ? "前缀 " : "prefix ") + std::to_string(md.prefix));
  std::string out;
  for (const std::string& s : parts) out += (out.empty() ? "" : zh ? "；" : "; ") + s;
  return out;
}

}  // namespace attnlab
