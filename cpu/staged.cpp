// The staged attention chain on the CPU with Eigen, every stage materialised, written once as a
// template over the matrix type so the fp32 working chain (cpu_staged) and the fp64 reference
// (reference_fp64) are the same code at two precisions:
//   scores = Q Kᵀ, scaled = scores / sqrt(d_k), logits = (scaled + mask) / T,
//   weights = row-wise stable softmax(logits), output = weights V.
#include "core/gcc12_avx512.h"  // first: see there

#include "cpu/cpu_backend.h"

#include <chrono>
#include <cmath>
#include <limits>
#include <string>

namespace attnlab {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Scores or logits that overflow the working precision would turn the softmax into NaN; they are
// refused with the place where it happened instead. The vectorised test runs on every call; the
// element loop that finds the place runs only when something did overflow.
template <class Matrix>
void locate_overflow(const Matrix& a, const Matrix& mask, int n, const char* what) {
  for (Eigen::Index r = 0; r < a.rows(); ++r)
    for (Eigen::Index c = 0; c < a.cols(); ++c)
      if (!std::isinf(mask(r % n, c)) && !std::isfinite(a(r, c)))
        throw InputError(std::string(what) + " overflows at row " + std::to_string(r % n) +
                         ", column " + std::to_string(c) +
                         " (inputs too large for this precision and temperature)");
}

// Row-wise softmax, stable: subtract the row max (over unmasked logits) before exp. Masked
// logits are -inf and their weights are exactly 0.0: selected, not left to exp(-inf), because
// Eigen's vectorised exp clamps its argument on some instruction sets (AVX2: to about -88 in
// float, -709 in double) and returns a tiny positive number there instead of 0.
// logits and weights are (rows, m).
template <class Matrix>
void stable_softmax_rows(const Matrix& logits, Matrix& weights) {
  using Scalar = typename Matrix::Scalar;
  constexpr Scalar kNegInf = -std::numeric_limits<Scalar>::infinity();
  weights.resize(logits.rows(), logits.cols());
  for (Eigen::Index r = 0; r < logits.rows(); ++r) {
    const auto row = logits.row(r).array();
    const auto mx = row.maxCoeff();
    weights.row(r) = (row == kNegInf).select(Scalar(0), (row - mx).exp()).matrix();
    weights.row(r) /= weights.row(r).sum();
  }
}

template <class Matrix>
TraceT<Matrix> staged_chain(const Problem& p, bool keep_stages) {
  using Scalar = typename Matrix::Scalar;
  validate(p);
  const auto t0 = Clock::now();
  const int n = p.n(), m = p.m(), h = p.heads;
  // In fp32 these refer to the problem's own matrices (no copy); in fp64 each is converted once.
  const Eigen::Ref<const Matrix> q = p.q.template cast<Scalar>();
  const Eigen::Ref<const Matrix> k = p.k.template cast<Scalar>();
  const Eigen::Ref<const Matrix> v = p.v.template cast<Scalar>();

  TraceT<Matrix> t;
  t.backend = "cpu";
  t.variant = Variant::Staged;
  t.precision = std::is_same_v<Scalar, double> ? Precision::FP64 : Precision::FP32;
  t.mask = mask_matrix(p).template cast<Scalar>();
  const Scalar temperature = static_cast<Scalar>(p.temperature);

  auto s0 = Clock::now();
  t.scores.resize(static_cast<Eigen::Index>(h) * n, m);
  for (int hd = 0; hd < h; ++hd)
    t.scores.middleRows(static_cast<Eigen::Index>(hd) * n, n).noalias() =
        q.middleRows(static_cast<Eigen::Index>(hd) * n, n) *
        k.middleRows(static_cast<Eigen::Index>(hd) * m, m).transpose();
  t.timings.qk_ms = ms_since(s0);

  s0 = Clock::now();
  t.scaled = t.scores / std::sqrt(Scalar(p.d_k()));
  t.logits.resize(t.scaled.rows(), m);
  for (int hd = 0; hd < h; ++hd)
    t.logits.middleRows(static_cast<Eigen::Index>(hd) * n, n) =
        (t.scaled.middleRows(static_cast<Eigen::Index>(hd) * n, n) + t.mask) / temperature;
  // Unmasked logits are finite exactly when the scores are finite and max|scaled| / T is. A sum
  // is the fast screen (Eigen's allFinite is not vectorised and costs more than the stage):
  // any inf or NaN makes it non-finite; a finite sum that merely overflowed costs one scan.
  if (!std::isfinite(t.scores.sum())) locate_overflow(t.scores, t.mask, n, "QKᵀ");
  if (!std::isfinite(t.scaled.cwiseAbs().maxCoeff() / temperature))
    locate_overflow(t.logits, t.mask, n, "the logits (scaled scores / temperature)");
  t.timings.scale_mask_ms = ms_since(s0);

  s0 = Clock::now();
  stable_softmax_rows(t.logits, t.weights);
  t.timings.softmax_ms = ms_since(s0);

  s0 = Clock::now();
  t.output.resize(static_cast<Eigen::Index>(h) * n, p.d_v());
  for (int hd = 0; hd < h; ++hd)
    t.output.middleRows(static_cast<Eigen::Index>(hd) * n, n).noalias() =
        t.weights.middleRows(static_cast<Eigen::Index>(hd) * n, n) *
        v.middleRows(static_cast<Eigen::Index>(hd) * m, m);
  t.timings.pv_ms = ms_since(s0);

  if (!keep_stages) {
    t.has_stages = false;
    t.scores = t.scaled = t.logits = t.weights = Matrix();
  }
  t.timings.total_ms = ms_since(t0);
  return t;
}

}  // namespace

Trace cpu_staged(const Problem& p) { return staged_chain<MatrixF>(p, true); }

Trace cpu_staged_output_only(const Problem& p) { return staged_chain<MatrixF>(p, false); }

TraceD reference_fp64(const Problem& p) { return staged_chain<MatrixD>(p, true); }

}  // namespace attnlab
