// The precision view's logic (see precision_view.h).
#include "viewer/precision_view.h"

#include "viewer/controller.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>

namespace attnlab::viewer {
namespace {

bool blocked(const float* mask, int mask_rows, int cols, int r, int c) {
  return mask && mask[static_cast<std::size_t>(r % mask_rows) * cols + c] != 0.0f;
}

// |x - ref| with equal infinities as 0 and any other non-finite pair as +inf.
double abs_error(double x, double ref) {
  if (std::isfinite(x) && std::isfinite(ref)) return std::abs(x - ref);
  if (x == ref) return 0;  // the same infinity
  return std::numeric_limits<double>::infinity();
}

double relative(double e, double scale) {
  if (e == 0) return 0;
  return scale > 0 ? e / scale : std::numeric_limits<double>::infinity();
}

}  // namespace

double ulp_of(double ref, Precision p) {
  const int mantissa = p == Precision::BF16 ? 7 : p == Precision::FP64 ? 52 : 23;
  const int min_exp = p == Precision::FP64 ? -1022 : -126;  // bf16 shares fp32's exponent range
  int e = min_exp;
  if (ref != 0 && std::isfinite(ref)) {
    int fe = 0;
    std::frexp(ref, &fe);  // |ref| = f * 2^fe, f in [0.5, 1): floor(log2 |ref|) = fe - 1
    e = std::max(fe - 1, min_exp);
  }
  return std::ldexp(1.0, e - mantissa);
}

double ulps(double x, double ref, Precision p) {
  const double e = abs_error(x, ref);
  if (e == 0 || !std::isfinite(e)) return e;
  return e / ulp_of(std::min(std::abs(x), std::abs(ref)), p);
}

int hist_bin(double error) {
  const double b = std::floor((std::log10(error) - kHistLo) * kHistPerDecade);
  return static_cast<int>(std::clamp(b, 0.0, static_cast<double>(kHistBins - 1)));
}

double row_scale(const double* ref, int cols, const float* mask, int mask_rows, int r) {
  double s = 0;
  const double* row = ref + static_cast<std::size_t>(r) * cols;
  for (int c = 0; c < cols; ++c)
    if (!blocked(mask, mask_rows, cols, r, c) && std::isfinite(row[c])) s = std::max(s, std::abs(row[c]));
  return s;
}

ValueRange ErrorMap::colour_range() const {
  if (!(max > 0) || !(min_positive > 0)) return ValueRange{1e-12, 1e-11};
  const double hi = std::min(max, static_cast<double>(FLT_MAX));
  return min_positive < hi ? ValueRange{min_positive, hi} : ValueRange{hi / 10, hi};
}

ErrorMap error_map(const float* x, const double* ref, int rows, int cols, const float* mask, int mask_rows,
                   ErrorKind kind, Precision precision) {
  ErrorMap m;
  m.rows = rows;
  m.cols = cols;
  m.kind = kind;
  m.precision = precision;
  m.err.resize(static_cast<std::size_t>(rows) * cols);
  double sum = 0;
  int counted = 0;
  for (int r = 0; r < rows; ++r) {
    const double scale = kind == ErrorKind::Rel ? row_scale(ref, cols, mask, mask_rows, r) : 1;
    for (int c = 0; c < cols; ++c) {
      const std::size_t i = static_cast<std::size_t>(r) * cols + c;
      const bool same_inf = !std::isfinite(ref[i]) && static_cast<double>(x[i]) == ref[i];
      if (blocked(mask, mask_rows, cols, r, c) || same_inf) {
        m.err[i] = std::numeric_limits<float>::quiet_NaN();
        ++m.masked;
        continue;
      }
      double e = abs_error(x[i], ref[i]);
      if (kind == ErrorKind::Rel) e = relative(e, scale);
      if (!std::isfinite(e)) {
        ++m.non_finite;
        m.err[i] = FLT_MAX;
      } else {
        m.err[i] = static_cast<float>(std::min(e, static_cast<double>(FLT_MAX)));
        sum += e;
        ++counted;
      }
      if (m.arg_row < 0 || e > m.max) {
        m.max = e;
        m.arg_row = r;
        m.arg_col = c;
      }
      if (e == 0) {
        ++m.zeros;
      } else {
        ++m.hist[hist_bin(std::isfinite(e) ? e : DBL_MAX)];
        if (m.min_positive == 0 || e < m.min_positive) m.min_positive = e;
      }
    }
  }
  m.mean = counted ? sum / counted : 0;
  return m;
}

CellError cell_error(const float* x, const double* ref, int rows, int cols, const float* mask, int mask_rows,
                     Precision precision, int row, int col) {
  (void)rows;
  CellError c;
  c.row = row;
  c.col = col;
  const std::size_t i = static_cast<std::size_t>(row) * cols + col;
  c.value = x[i];
  c.ref = ref[i];
  c.masked = blocked(mask, mask_rows, cols, row, col) || (!std::isfinite(c.ref) && c.value == c.ref);
  c.abs_err = abs_error(c.value, c.ref);
  c.rel_err = relative(c.abs_err, row_scale(ref, cols, mask, mask_rows, row));
  c.ulps = ulps(c.value, c.ref, precision);
  return c;
}

namespace {

// The run's and the reference's matrices of step 1..4 and the mask that applies to them.
struct StagePair {
  const MatrixF* x = nullptr;
  const MatrixD* ref = nullptr;
  const MatrixF* mask = nullptr;
};

StagePair stage_pair(const Controller& c, int step) {
  const Trace& t = c.trace();
  const TraceD* r = c.reference();
  StagePair s;
  if (!r) return s;
  switch (step) {
    case 1: s = {&t.scores, &r->scores}; break;
    case 2: s = {&t.logits, &r->logits}; break;
    case 3: s = {&t.weights, &r->weights}; break;
    default: s = {&t.output, &r->output}; break;
  }
  if (c.step_shows_mask(step) && t.mask.size() > 0) s.mask = &t.mask;
  return s;
}

}  // namespace

PrecisionView::Status PrecisionView::update(const Controller& c, int step, ErrorKind kind) {
  if (c.streaming()) return status_ = Status::Streamed;
  if (!c.reference()) return status_ = c.reference_error().empty() ? Status::Computing : Status::Failed;
  if (c.revision() == revision_ && step == asked_step_ && kind == kind_ && status_ == Status::Ok) return status_;
  output_only_ = !c.trace().has_stages && step < 4;
  const int s = output_only_ ? 4 : step;
  const StagePair p = stage_pair(c, s);
  if (p.x->rows() != p.ref->rows() || p.x->cols() != p.ref->cols() || p.x->size() == 0)
    return status_ = Status::Computing;
  map_ = error_map(p.x->data(), p.ref->data(), static_cast<int>(p.x->rows()), static_cast<int>(p.x->cols()),
                   p.mask ? p.mask->data() : nullptr, p.mask ? static_cast<int>(p.mask->rows()) : 0, kind,
                   c.precision());
  ++computed_;
  revision_ = c.revision();
  asked_step_ = step;
  step_ = s;
  kind_ = kind;
  return status_ = Status::Ok;
}

CellError PrecisionView::cell(const Controller& c, int row, int col) const {
  const StagePair p = stage_pair(c, step_);
  if (!p.x || status_ != Status::Ok) return CellError{};
  return cell_error(p.x->data(), p.ref->data(), static_cast<int>(p.x->rows()), static_cast<int>(p.x->cols()),
                    p.mask ? p.mask->data() : nullptr, p.mask ? static_cast<int>(p.mask->rows()) : 0,
                    map_.precision, row, col);
}

std::string PrecisionView::state_json() const {
  static constexpr const char* names[] = {"ok", "streamed", "computing", "failed"};
  nlohmann::json j;
  j["status"] = names[static_cast<int>(status_)];
  if (status_ == Status::Ok) {
    j["step"] = step_;
    j["output_only"] = output_only_;
    j["kind"] = kind_ == ErrorKind::Abs ? "abs" : "rel";
    j["precision"] = std::string(to_string(map_.precision));
    j["rows"] = map_.rows;
    j["cols"] = map_.cols;
    j["max"] = std::isfinite(map_.max) ? nlohmann::json(map_.max) : nlohmann::json(nullptr);
    j["mean"] = map_.mean;
    j["arg_row"] = map_.arg_row;
    j["arg_col"] = map_.arg_col;
    j["zeros"] = map_.zeros;
    j["masked"] = map_.masked;
    j["non_finite"] = map_.non_finite;
    j["hist"] = map_.hist;
  }
  return j.dump();
}

}  // namespace attnlab::viewer
