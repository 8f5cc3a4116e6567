// The precision view's logic (see precision_view.h).
#include "viewer/views/precision/precision_view.h"

#include "core/parallel.h"

#include "viewer/draw/heatmap.h"
#include "viewer/draw/strings.h"
#include "viewer/session/session.h"
#include "cpu/cpu_backend.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <vector>
#include <array>
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
  // floor((log10(error) - kHistLo) * kHistPerDecade), clamped, without a logarithm per cell (a map
  // has up to 16M of them): a bin spans more than one binary octave, so the octave of `error`
  // (its exponent) holds at most one bin edge, looked up with the bin below it.
  constexpr int kLowOctave = -44, kHighOctave = 10;  // 2^-44 < 10^kHistLo, 2^10 > 10^kHistHi
  struct Octave {
    int bin;      // the bin of the octave's lowest value
    double edge;  // the next bin's lower edge inside the octave (or +inf: none)
  };
  static const std::array<Octave, kHighOctave - kLowOctave + 1> table = [] {
    std::array<Octave, kHighOctave - kLowOctave + 1> t{};
    const auto bin_of = [](double v) {
      const double b = std::floor((std::log10(v) - kHistLo) * kHistPerDecade);
      return static_cast<int>(std::clamp(b, 0.0, static_cast<double>(kHistBins - 1)));
    };
    for (int o = kLowOctave; o <= kHighOctave; ++o) {
      Octave& x = t[o - kLowOctave];
      x.bin = bin_of(std::ldexp(1.0, o));
      x.edge = std::numeric_limits<double>::infinity();
      if (x.bin + 1 < kHistBins) {
        const double edge = std::pow(10.0, kHistLo + static_cast<double>(x.bin + 1) / kHistPerDecade);
        if (edge < std::ldexp(1.0, o + 1)) x.edge = edge;
      }
    }
    return t;
  }();
  int octave = 0;
  std::frexp(error, &octave);  // error in [2^(octave-1), 2^octave)
  --octave;
  if (octave < kLowOctave) return 0;
  if (octave > kHighOctave) return kHistBins - 1;
  const Octave& x = table[octave - kLowOctave];
  return x.bin + (error >= x.edge ? 1 : 0);
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
  return min_positive < hi ? log_range(ValueRange{min_positive, hi}) : ValueRange{hi / 10, hi};
}

bool ErrorMap::colour_clamped() const { return min_positive > 0 && min_positive < colour_range().lo; }

ErrorMap error_map(const float* x, const double* ref, int rows, int cols, const float* mask, int mask_rows,
                   ErrorKind kind, Precision precision) {
  ErrorMap m;
  m.rows = rows;
  m.cols = cols;
  m.kind = kind;
  m.precision = precision;
  m.err.resize(static_cast<std::size_t>(rows) * cols);
  // Blocks of rows on every core (the UI waits for the map), each with its own figures, merged in
  // block order: the same result, first maximum included, whatever the threads did.
  constexpr int kBlockRows = 64;
  struct Part {
    double sum = 0, max = 0, min_positive = 0;
    long long counted = 0;
    int masked = 0, zeros = 0, non_finite = 0, arg_row = -1, arg_col = -1;
    std::array<int, kHistBins> hist{};
  };
  const int blocks = (rows + kBlockRows - 1) / kBlockRows;
  std::vector<Part> parts(static_cast<std::size_t>(std::max(blocks, 0)));
  const double cells = static_cast<double>(rows) * cols;
  parallel_items(parts.size(), worker_count(parts.size(), 20 * cells), [&](unsigned, std::size_t b) {
    // Locals, not the Part's fields, in the loop: the compiler keeps them in registers.
    Part pt;
    float* err = m.err.data();
    const int r0 = static_cast<int>(b) * kBlockRows, r1 = std::min(rows, r0 + kBlockRows);
    double sum = 0, max = 0, min_positive = 0;
    long long counted = 0;
    int masked = 0, zeros = 0, non_finite = 0, arg_row = -1, arg_col = -1;
    for (int r = r0; r < r1; ++r) {
      const double scale = kind == ErrorKind::Rel ? row_scale(ref, cols, mask, mask_rows, r) : 1;
      const std::size_t base = static_cast<std::size_t>(r) * cols;
      const float* mrow = mask ? mask + static_cast<std::size_t>(r % mask_rows) * cols : nullptr;
      for (int c = 0; c < cols; ++c) {
        const std::size_t i = base + c;
        const double xv = x[i], rv = ref[i];
        if ((mrow && mrow[c] != 0.0f) || (!std::isfinite(rv) && xv == rv)) {
          err[i] = std::numeric_limits<float>::quiet_NaN();
          ++masked;
          continue;
        }
        double e = abs_error(xv, rv);
        if (kind == ErrorKind::Rel) e = relative(e, scale);
        if (!std::isfinite(e)) {
          ++non_finite;
          err[i] = FLT_MAX;
        } else {
          err[i] = static_cast<float>(std::min(e, static_cast<double>(FLT_MAX)));
          sum += e;
          ++counted;
        }
        if (arg_row < 0 || e > max) {
          max = e;
          arg_row = r;
          arg_col = c;
        }
        if (e == 0) {
          ++zeros;
        } else {
          ++pt.hist[hist_bin(std::isfinite(e) ? e : DBL_MAX)];
          if (min_positive == 0 || e < min_positive) min_positive = e;
        }
      }
    }
    pt.sum = sum;
    pt.max = max;
    pt.min_positive = min_positive;
    pt.counted = counted;
    pt.masked = masked;
    pt.zeros = zeros;
    pt.non_finite = non_finite;
    pt.arg_row = arg_row;
    pt.arg_col = arg_col;
    parts[b] = pt;
  });
  double sum = 0;
  long long counted = 0;
  for (const Part& pt : parts) {
    sum += pt.sum;
    counted += pt.counted;
    m.masked += pt.masked;
    m.zeros += pt.zeros;
    m.non_finite += pt.non_finite;
    if (pt.arg_row >= 0 && (m.arg_row < 0 || pt.max > m.max)) {
      m.max = pt.max;
      m.arg_row = pt.arg_row;
      m.arg_col = pt.arg_col;
    }
    if (pt.min_positive > 0 && (m.min_positive == 0 || pt.min_positive < m.min_positive))
      m.min_positive = pt.min_positive;
    for (int k = 0; k < kHistBins; ++k) m.hist[k] += pt.hist[k];
  }
  m.mean = counted ? sum / static_cast<double>(counted) : 0;
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

StagePair stage_pair(const Trace& t, const TraceD& r, int step) {
  StagePair s;
  switch (step) {
    case 1: s = {&t.scores, &r.scores}; break;
    case 2: s = {&t.logits, &r.logits}; break;
    case 3: s = {&t.weights, &r.weights}; break;
    default: s = {&t.output, &r.output}; break;
  }
  // The run's kept mask: the mask's cells and those the mask mods block (a window with mask
  // "none" blocks cells too); 0 where nothing is blocked.
  if ((step == 2 || step == 3) && t.mask.size() > 0) s.mask = &t.mask;
  return s;
}

}  // namespace

std::shared_ptr<const ErrorMap> step_error_map(const Trace& t, const TraceD& ref, int step, ErrorKind kind) {
  const StagePair p = stage_pair(t, ref, step);
  if (p.x->rows() != p.ref->rows() || p.x->cols() != p.ref->cols() || p.x->size() == 0) return nullptr;
  return std::make_shared<const ErrorMap>(error_map(p.x->data(), p.ref->data(), static_cast<int>(p.x->rows()),
                                                    static_cast<int>(p.x->cols()), p.mask ? p.mask->data() : nullptr,
                                                    p.mask ? static_cast<int>(p.mask->rows()) : 0, kind, t.precision));
}

std::shared_ptr<const CompanionResult> ReferenceCompanion::compute(const CompanionInput& in) const {
  auto out = std::make_shared<ReferenceResult>();
  try {
    out->reference = std::make_shared<const TraceD>(reference_fp64(*in.problem));
    if (in.main) {
      out->map_step = in.main->has_stages ? in.step : 4;
      out->map_kind = kind_;
      out->map = step_error_map(*in.main, *out->reference, out->map_step, kind_);
    }
  } catch (const std::exception& e) {
    out->reference.reset();
    out->error = message_of(e);
  }
  return out;
}

std::shared_ptr<const Companion> reference_companion(ErrorKind kind) {
  return std::make_shared<const ReferenceCompanion>(kind);
}

const TraceD* reference_of(const Session& s) {
  const ReferenceResult* r = s.companion<ReferenceResult>();
  return r && !s.streaming() ? r->reference.get() : nullptr;
}

Message reference_error_of(const Session& s) {
  const ReferenceResult* r = s.companion<ReferenceResult>();
  return r ? r->error : Message{};
}

std::shared_ptr<const ErrorMap> worker_error_map(const Session& s, int step, ErrorKind kind) {
  const ReferenceResult* r = s.companion<ReferenceResult>();
  return r && r->map && r->map_step == step && r->map_kind == kind ? r->map : nullptr;
}

PrecisionView::Status PrecisionView::update(const Session& c, int step, ErrorKind kind) {
  if (c.streaming()) return status_ = Status::Streamed;
  const TraceD* ref = reference_of(c);
  if (!ref) return status_ = reference_error_of(c).empty() ? Status::Computing : Status::Failed;
  if (c.revision() == revision_ && step == asked_step_ && kind == kind_ && status_ == Status::Ok) return status_;
  output_only_ = !c.trace().has_stages && step < 4;
  const int s = output_only_ ? 4 : step;
  // The worker's map, when it computed this one beside the run; else computed here.
  std::shared_ptr<const ErrorMap> m = worker_error_map(c, s, kind);
  if (!m) {
    m = step_error_map(c.trace(), *ref, s, kind);
    if (!m) return status_ = Status::Computing;
    ++computed_;
  }
  map_ = std::move(m);
  revision_ = c.revision();
  asked_step_ = step;
  step_ = s;
  kind_ = kind;
  return status_ = Status::Ok;
}

CellError PrecisionView::cell(const Session& c, int row, int col) const {
  const TraceD* ref = reference_of(c);
  if (status_ != Status::Ok || !ref) return CellError{};
  const StagePair p = stage_pair(c.trace(), *ref, step_);
  if (p.x->size() == 0 || p.x->rows() != p.ref->rows() || p.x->cols() != p.ref->cols()) return CellError{};
  return cell_error(p.x->data(), p.ref->data(), static_cast<int>(p.x->rows()), static_cast<int>(p.x->cols()),
                    p.mask ? p.mask->data() : nullptr, p.mask ? static_cast<int>(p.mask->rows()) : 0,
                    map_->precision, row, col);
}

std::string PrecisionView::state_json() const {
  static constexpr const char* names[] = {"ok", "streamed", "computing", "failed"};
  nlohmann::json j;
  j["status"] = names[static_cast<int>(status_)];
  j["header"] = {{"h", header.h}, {"scrolled", header.scrolled}, {"below_h", below_h}};
  if (status_ == Status::Ok) {
    j["step"] = step_;
    j["output_only"] = output_only_;
    j["kind"] = kind_ == ErrorKind::Abs ? "abs" : "rel";
    j["precision"] = std::string(to_string(map_->precision));
    j["rows"] = map_->rows;
    j["cols"] = map_->cols;
    j["max"] = std::isfinite(map_->max) ? nlohmann::json(map_->max) : nlohmann::json(nullptr);
    j["mean"] = map_->mean;
    j["arg_row"] = map_->arg_row;
    j["arg_col"] = map_->arg_col;
    j["zeros"] = map_->zeros;
    j["masked"] = map_->masked;
    j["non_finite"] = map_->non_finite;
    j["hist"] = map_->hist;
    const ValueRange r = map_->colour_range();
    j["colour_range"] = {r.lo, r.hi};
    j["colour_clamped"] = map_->colour_clamped();
    j["map_labels"] = {{"scale", map_label_scale}, {"all", map_all_labels}};
    j["map_too_small"] = map_too_small;
  }
  return j.dump();
}

const char* PrecisionView::label(Lang lang) { return tr(lang, S::ViewPrecision); }

void PrecisionView::prepare(Session& s, int step) { s.set_step(step); }

void PrecisionView::set_kind(ErrorKind k) {
  if (k == shown_kind_) return;
  shown_kind_ = k;
  companion_ = reference_companion(k);
}

void PrecisionView::dump(nlohmann::json& j, const Session&) const {
  j["precision_view"] = nlohmann::json::parse(state_json());
}

std::string PrecisionView::broken(const Session&) const {
  if (status_ == Status::Ok && (step_ < 1 || step_ > 4)) return "the precision view shows step " + std::to_string(step_);
  return {};
}

}  // namespace attnlab::viewer
