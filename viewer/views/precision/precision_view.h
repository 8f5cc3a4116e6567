// The precision view's logic, free of SDL and ImGui (viewer/views/precision/panel.cpp draws it): for one
// step of the run on screen, the error of every cell against the fp64 reference chain
// (reference_fp64, computed by the session's worker beside the run), absolute or relative to
// the row's scale, with its max, mean and where the max sits, a histogram of log10 error over
// fixed bins, the log colour range of the map, and the hover record of one cell (the value in the
// run's precision, in fp64, and their distance in units in the last place of that precision).
// Unit-tested in tests/viewer/test_precision_view.cpp.
#pragma once

#include "core/messages.h"
#include "core/trace.h"
#include "core/types.h"
#include "viewer/draw/layout.h"
#include "viewer/draw/pooling.h"
#include "viewer/session/companion.h"
#include "viewer/views/view.h"

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace attnlab::viewer {

class Session;

// Abs: |x − ref|. Rel: |x − ref| / max_j |ref(i, j)|, the largest |reference value| of the cell's
// row over its unmasked keys (the row's scale: a softmax row's largest weight, an output row's
// largest component); 0 / 0 counts as 0 and x / 0 as +inf.
enum class ErrorKind { Abs, Rel };

// The spacing of the floating-point numbers of precision p (fp32: 24 significant bits, bf16: 8) at
// the magnitude of `ref`: 2^(e − 23) or 2^(e − 7) with e = floor(log2 |ref|), never below the
// smallest normal exponent (subnormals are evenly spaced; 0 gets that spacing too).
double ulp_of(double ref, Precision p);
// |x − ref| in units of ulp_of at the smaller of |x| and |ref| (the spacing of p between them, so
// that neighbouring numbers of p are 1 apart, also across a power of two): 0.5 is a correctly
// rounded value, 1 the neighbouring number (fractional: the distance is measured, not counted).
// Equal infinities are 0; any other non-finite pair is +inf.
double ulps(double x, double ref, Precision p);

// The histogram's fixed bins: log10 error from kHistLo to kHistHi in kHistPerDecade bins per
// decade; errors below the first edge count in the first bin, above the last in the last. Exact
// zeros (and masked cells) are counted apart.
constexpr int kHistLo = -12, kHistHi = 2, kHistPerDecade = 2;
constexpr int kHistBins = (kHistHi - kHistLo) * kHistPerDecade;
int hist_bin(double error);  // the bin of an error > 0

struct ErrorMap {
  int rows = 0, cols = 0;
  ErrorKind kind = ErrorKind::Abs;
  Precision precision = Precision::FP32;
  std::vector<float> err;  // rows x cols; NaN where masked; +inf errors stored as FLT_MAX
  int masked = 0, zeros = 0, non_finite = 0;  // masked cells, exact matches, inf/NaN mismatches
  double max = 0, mean = 0;                   // over the unmasked cells
  int arg_row = -1, arg_col = -1;             // where max is (-1: nothing unmasked)
  double min_positive = 0;                    // the smallest error > 0 (0: none)
  std::array<int, kHistBins> hist{};
  float at(int r, int c) const { return err[static_cast<std::size_t>(r) * cols + c]; }
  // The log colour scale's range: [min_positive, max] over at most kLogDecades decades, as the
  // chain view's log scale (log_range: lo is at least max · 10^−6, so a few errors near 0 cannot
  // stretch the scale over dozens of decades and leave the map one colour); one decade when they
  // are equal; a placeholder [1e-12, 1e-11] when every error is 0. Cells below lo, exact zeros
  // included, take the bottom colour.
  ValueRange colour_range() const;
  // Whether some errors above 0 lie below colour_range().lo (the legend says so).
  bool colour_clamped() const;
};

// x: the run's stage, ref: the fp64 reference's, both rows x cols row-major. mask (may be null):
// mask_rows x cols, 0 keeps, −inf blocks, row r uses mask row r % mask_rows; a blocked cell is
// masked (its value says nothing: −inf logits, weight 0). A cell where both values are the same
// infinity is masked too.
ErrorMap error_map(const float* x, const double* ref, int rows, int cols, const float* mask, int mask_rows,
                   ErrorKind kind, Precision precision);

// The error map of step 1..4 (scores, logits, weights, output) of `t` against `ref` as the view
// shows it: t's kept mask (the mask and the mask mods) applies at steps 2 and 3; the precision is t's. Null
// when t lacks that step's matrix or its shape differs from ref's. What the view computes for a
// step change, and the session's worker beside each run (ReferenceCompanion) for the step on screen (so that a new
// temperature costs the UI thread nothing).
std::shared_ptr<const ErrorMap> step_error_map(const Trace& t, const TraceD& ref, int step, ErrorKind kind);

// The view's companion run (viewer/session/companion.h): the fp64 reference chain of the problem
// on screen and, beside a run, the error map of the run's step (of step 4 when the run kept only
// the output) in the view's kind, so that a new temperature costs the UI thread no map; the view
// computes a map itself only for another step or kind. The kind is a hint: a companion of
// another kind is the same computation (no new run); the runs after it use the new kind.
struct ReferenceResult : CompanionResult {
  std::shared_ptr<const TraceD> reference;  // null when it could not be computed (error says why)
  Message error;
  std::shared_ptr<const ErrorMap> map;      // beside a run; null for the trace on screen
  int map_step = 0;
  ErrorKind map_kind = ErrorKind::Abs;
};
class ReferenceCompanion final : public Companion {
 public:
  explicit ReferenceCompanion(ErrorKind kind) : kind_(kind) {}
  std::string key() const override { return "precision: fp64 reference"; }
  std::shared_ptr<const CompanionResult> compute(const CompanionInput& in) const override;

 private:
  ErrorKind kind_;
};
std::shared_ptr<const Companion> reference_companion(ErrorKind kind);
// The reference chain on screen (null: not asked for, streamed, not computed yet or failed) and
// why it failed (empty otherwise).
const TraceD* reference_of(const Session& s);
Message reference_error_of(const Session& s);
// The map the worker computed beside the run on screen, when it is of step 1..4 and `kind`.
std::shared_ptr<const ErrorMap> worker_error_map(const Session& s, int step, ErrorKind kind);

// One cell for the hover tooltip.
struct CellError {
  int row = 0, col = 0;
  bool masked = false;
  double value = 0, ref = 0;  // the run's value (in its precision, held as fp32), fp64
  double abs_err = 0, rel_err = 0, ulps = 0;
};
CellError cell_error(const float* x, const double* ref, int rows, int cols, const float* mask, int mask_rows,
                     Precision precision, int row, int col);

// The largest |reference value| of row r over its unmasked, finite cells (rel's denominator).
double row_scale(const double* ref, int cols, const float* mask, int mask_rows, int r);

// The view's state for the session's state on screen: the error map of `step` (1..4: scores,
// logits, weights, output, as the chain view's heatmap) against the companion's fp64 reference,
// recomputed only when the state on screen (revision), the step or the kind changed.
class PrecisionView final : public View, public WithoutFlags {
 public:
  enum class Status { Ok, Streamed, Computing, Failed };
  static const char* label(Lang lang);
  PrecisionView() = default;
  PrecisionView(const ViewContext&, const Options&) {}

  void prepare(Session& s, int step) override;
  bool chain_steps() const override { return true; }
  // The chain's step keys; the wheel and a drag zoom and pan its map (a double-click: all of it).
  StepKeysHelp step_keys_help(Lang lang) const override {
    StepKeysHelp h = View::step_keys_help(lang);
    h.wheel = zoomable_map_help(lang);
    return h;
  }
  std::shared_ptr<const Companion> companion() const override { return companion_; }
  void dump(nlohmann::json& j, const Session& s) const override;
  std::string broken(const Session& s) const override;
  // The error kind the panel shows (its radio buttons); the companion follows it.
  ErrorKind kind() const { return shown_kind_; }
  void set_kind(ErrorKind k);

  Status update(const Session& c, int step, ErrorKind kind);
  Status status() const { return status_; }
  const ErrorMap& map() const { return *map_; }
  int step() const { return step_; }   // the step shown (4 when the run kept only the output)
  bool output_only() const { return output_only_; }
  int computed() const { return computed_; }  // how many maps the view computed itself (cache tests)
  // The cell under the pointer, from the matrices the map was computed from.
  CellError cell(const Session& c, int row, int col) const;
  // The view's part of the state dump: status, the header, step, kind, precision, max, mean,
  // argmax, zeros, masked, hist.
  std::string state_json() const;
  // The panel's last frame: the settings and the explanation as a header that scrolls above the
  // map (kit.h begin_header), and the height of the figures it keeps in view under the header. In
  // the state dump.
  ScrollHeader header;
  float below_h = 0;
  float map_label_scale = 1;  // the map's labels (MapPlot)
  bool map_all_labels = false;
  bool map_too_small = false;  // MapPlot::too_small

 private:
  Status status_ = Status::Computing;
  std::shared_ptr<const ErrorMap> map_ = std::make_shared<const ErrorMap>();
  std::uint64_t revision_ = ~std::uint64_t{0};
  int asked_step_ = -1, step_ = 0;
  ErrorKind kind_ = ErrorKind::Abs;
  bool output_only_ = false;
  int computed_ = 0;
  ErrorKind shown_kind_ = ErrorKind::Abs;
  std::shared_ptr<const Companion> companion_ = reference_companion(ErrorKind::Abs);
};

void draw_panel(PrecisionView& v, Shell& app, const Layout& l);

}  // namespace attnlab::viewer
