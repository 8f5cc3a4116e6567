// V scaled by a power of two where the online softmax's unnormalised sum would overflow (see
// values_range.h).
#include "cpu/values_range.h"

#include "core/messages.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

namespace attnlab::cpu {

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
  for (Eigen::Index r = 0; r < out.rows(); ++r)
    if (!out.row(r).allFinite()) refuse_output_row(static_cast<int>(r / n), static_cast<int>(r % n), precision);
}

}  // namespace attnlab::cpu
