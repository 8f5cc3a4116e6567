// An output that fp32 can hold although a kernel's running sums cannot (see output_range.h).
#include "core/gcc12_avx512.h"  // first: see there

#include "core/output_range.h"

#include "core/modify.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace attnlab {

int values_exponent(const Problem& p) {
  const double bound = static_cast<double>(p.m()) * static_cast<double>(p.v().cwiseAbs().maxCoeff());
  const double room = 0.5 * static_cast<double>(std::numeric_limits<float>::max());
  return std::max(1, static_cast<int>(std::ceil(std::log2(bound / room))));
}

Problem with_values_scaled(const Problem& p, int e) {
  Problem q = p;
  MatrixF& v = q.edit().v;
  v *= std::ldexp(1.f, -e);
  return q;
}

void refuse_output_row(int head, int row, Precision precision) {
  throw InputError(Msg::OverflowOutputRow, {std::to_string(head), std::to_string(row), std::string(to_string(precision))});
}

void scale_values_back(MatrixF& out, int e, int n, Precision precision) {
  out *= std::ldexp(1.f, e);
  if (const Eigen::Index r = first_row_not_finite(out); r >= 0)
    refuse_output_row(static_cast<int>(r / n), static_cast<int>(r % n), precision);
}

Eigen::Index first_row_not_finite(const MatrixF& out) {
  for (Eigen::Index r = 0; r < out.rows(); ++r)
    if (!out.row(r).allFinite()) return r;
  return -1;
}

bool row_scores_overflow(const Problem& p, int head, int row, Precision precision) {
  const double largest = static_cast<double>(std::numeric_limits<float>::max()) *
                         (precision == Precision::BF16 ? 1.0 - std::ldexp(1.0, -7) : 1.0);
  const std::shared_ptr<const RotatedQK> rot = rotated_qk(p);
  const MatrixF& q = kernel_q(p, rot.get());
  const MatrixF& k = kernel_k(p, rot.get());
  const MaskRule mask = mask_rule(p);
  std::vector<double> slopes;
  const ScoreRuleT<double> mods = score_rule<double>(p, slopes);
  const Eigen::Index qr = static_cast<Eigen::Index>(head) * p.n() + row;
  const Eigen::Index k0 = static_cast<Eigen::Index>(p.kv_head(head)) * p.m();
  for (int j = 0; j < p.m(); ++j) {
    if (!mask.visible(row, j)) continue;
    double s = 0, bound = 0;
    for (int c = 0; c < p.d_k(); ++c) {
      const double x = static_cast<double>(q(qr, c)) * static_cast<double>(k(k0 + j, c));
      s += x;
      bound += std::abs(x);
    }
    if (!(bound <= largest)) return true;
    if (mods.any() && !(std::abs(mods.apply(s * p.scale_value(), head, row, j)) <= largest)) return true;
  }
  return false;
}

}  // namespace attnlab
