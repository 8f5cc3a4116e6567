// The precision view's logic (viewer/views/precision/precision_view.h) and the session's fp64 companion: ulps of
// neighbouring floats, the histogram's fixed bins, the error map of a hand-made pair (abs and
// relative to the row, masked cells), and on the demo through the real CPU backend: an fp32 run's
// error is fp32-sized and a bf16 run's bf16-sized, the logits' error grows as T falls, the
// reference belongs to the state on screen (sync and async), streamed problems are refused.
#include "viewer_test_util.h"
#include "core/problem.h"
#include "cpu/cpu_backend.h"
#include "viewer/session/session.h"
#include "viewer/views/precision/precision_view.h"
#include "viewer/app/state_dump.h"
#include "engine/registry.h"

#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>

using namespace attnlab;
using namespace attnlab::viewer;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// The precision view's map of `step` for the session's state (the reference asked for first).
ErrorMap map_of(Session& c, int step, ErrorKind kind = ErrorKind::Abs) {
  c.set_companion(reference_companion(ErrorKind::Abs));
  c.wait();
  PrecisionView v;
  EXPECT_EQ(v.update(c, step, kind), PrecisionView::Status::Ok);
  return v.map();
}

}  // namespace

TEST(PrecisionView, NeighbouringFloatsAreOneUlpApart) {
  for (float x : {1.0f, 0.75f, 3.0e-5f, 1234.5f, -2.5f, 1e-38f}) {
    const float up = std::nextafter(x, INFINITY), down = std::nextafter(x, -INFINITY);
    EXPECT_DOUBLE_EQ(ulps(up, x, Precision::FP32), 1.0) << x;
    EXPECT_DOUBLE_EQ(ulps(x, up, Precision::FP32), 1.0) << x;
    EXPECT_DOUBLE_EQ(ulps(down, x, Precision::FP32), 1.0) << x;
    EXPECT_DOUBLE_EQ(ulps(x, x, Precision::FP32), 0.0);
  }
  // bf16 keeps 8 significant bits: 1 and 1 + 2^-7 are neighbours, 2^-7 is 2^16 fp32 ulps.
  EXPECT_DOUBLE_EQ(ulps(1.0 + 1.0 / 128, 1.0, Precision::BF16), 1.0);
  EXPECT_DOUBLE_EQ(ulps(1.0 + 1.0 / 128, 1.0, Precision::FP32), 65536.0);
  EXPECT_DOUBLE_EQ(ulp_of(3.0, Precision::BF16), std::ldexp(1.0, 1 - 7));
  // Half an ulp: a correctly rounded value.
  EXPECT_DOUBLE_EQ(ulps(1.0 + std::ldexp(1.0, -24), 1.0, Precision::FP32), 0.5);
  // Subnormals are evenly spaced at the smallest normal exponent's spacing; 0 gets it too.
  EXPECT_DOUBLE_EQ(ulp_of(0.0, Precision::FP32), std::ldexp(1.0, -149));
  EXPECT_DOUBLE_EQ(ulp_of(1e-44, Precision::FP32), std::ldexp(1.0, -149));
  EXPECT_DOUBLE_EQ(ulps(-kInf, -kInf, Precision::FP32), 0.0);
  EXPECT_EQ(ulps(-kInf, 1.0, Precision::FP32), kInf);
}

TEST(PrecisionView, HistogramBinsAreFixedHalfDecades) {
  EXPECT_EQ(kHistBins, 28);
  EXPECT_EQ(hist_bin(1e-12), 0);
  EXPECT_EQ(hist_bin(1e-20), 0) << "below the first edge: the first bin";
  EXPECT_EQ(hist_bin(2e-12), 0);
  EXPECT_EQ(hist_bin(5e-12), 1);  // log10 = -11.3: the second half of the first decade
  EXPECT_EQ(hist_bin(1e-7), 10);
  EXPECT_EQ(hist_bin(0.5), 23);
  EXPECT_EQ(hist_bin(1e6), kHistBins - 1) << "above the last edge: the last bin";
  EXPECT_EQ(hist_bin(DBL_MAX), kHistBins - 1);
  EXPECT_EQ(hist_bin(DBL_MIN), 0);
  // The table lookup gives the logarithm's bins: at every edge, a hair either side of it, and
  // values spread over 40 decades.
  const auto by_log = [](double e) {
    const double b = std::floor((std::log10(e) - kHistLo) * kHistPerDecade);
    return static_cast<int>(std::clamp(b, 0.0, static_cast<double>(kHistBins - 1)));
  };
  for (int b = 0; b <= kHistBins; ++b) {
    const double edge = std::pow(10.0, kHistLo + static_cast<double>(b) / kHistPerDecade);
    for (double e : {edge * (1 - 1e-12), edge * (1 + 1e-12)}) EXPECT_EQ(hist_bin(e), by_log(e)) << e;
  }
  for (double lg = -25; lg < 15; lg += 0.0137) EXPECT_EQ(hist_bin(std::pow(10.0, lg)), by_log(std::pow(10.0, lg))) << lg;
}

TEST(PrecisionView, MapOfAHandMadePair) {
  // 2 x 3: row 0 has a masked cell (mask row 0, column 2); row 1 has an exact cell.
  const float x[] = {1.0f, 2.5f, -INFINITY, 4.0f, -3.0f, 0.0f};
  const double ref[] = {1.25, 2.0, -kInf, 4.0, -2.0, 0.0};
  const float mask[] = {0, 0, -INFINITY, 0, 0, 0};
  const ErrorMap a = error_map(x, ref, 2, 3, mask, 2, ErrorKind::Abs, Precision::FP32);
  EXPECT_EQ(a.masked, 1);
  EXPECT_TRUE(std::isnan(a.at(0, 2)));
  EXPECT_FLOAT_EQ(a.at(0, 0), 0.25f);
  EXPECT_FLOAT_EQ(a.at(0, 1), 0.5f);
  EXPECT_FLOAT_EQ(a.at(1, 1), 1.0f);
  EXPECT_EQ(a.zeros, 2);
  EXPECT_DOUBLE_EQ(a.max, 1.0);
  EXPECT_EQ(a.arg_row, 1);
  EXPECT_EQ(a.arg_col, 1);
  EXPECT_DOUBLE_EQ(a.mean, (0.25 + 0.5 + 1.0) / 5);
  EXPECT_DOUBLE_EQ(a.min_positive, 0.25);
  EXPECT_EQ(a.hist[hist_bin(0.25)] + a.hist[hist_bin(0.5)] + a.hist[hist_bin(1.0)], 3);
  EXPECT_DOUBLE_EQ(a.colour_range().lo, 0.25);
  EXPECT_DOUBLE_EQ(a.colour_range().hi, 1.0);
  // Relative to the row's largest |fp64| over its unmasked keys: row 0 -> 2.0, row 1 -> 4.0.
  const ErrorMap r = error_map(x, ref, 2, 3, mask, 2, ErrorKind::Rel, Precision::FP32);
  EXPECT_FLOAT_EQ(r.at(0, 0), 0.125f);
  EXPECT_FLOAT_EQ(r.at(0, 1), 0.25f);
  EXPECT_FLOAT_EQ(r.at(1, 1), 0.25f);
  EXPECT_DOUBLE_EQ(r.max, 0.25);
  EXPECT_EQ(r.arg_row, 0) << "ties: the first cell";
  // The hover record.
  const CellError e = cell_error(x, ref, 2, 3, mask, 2, Precision::FP32, 1, 1);
  EXPECT_FALSE(e.masked);
  EXPECT_DOUBLE_EQ(e.value, -3.0);
  EXPECT_DOUBLE_EQ(e.ref, -2.0);
  EXPECT_DOUBLE_EQ(e.abs_err, 1.0);
  EXPECT_DOUBLE_EQ(e.rel_err, 0.25);
  EXPECT_DOUBLE_EQ(e.ulps, 1.0 / std::ldexp(1.0, 1 - 23));
  EXPECT_TRUE(cell_error(x, ref, 2, 3, mask, 2, Precision::FP32, 0, 2).masked);
}

TEST(PrecisionView, InfiniteMismatchesAndAllExactMaps) {
  const float x[] = {-INFINITY, 1.0f};
  const double ref[] = {-3.0, 1.0};
  const ErrorMap m = error_map(x, ref, 1, 2, nullptr, 0, ErrorKind::Abs, Precision::FP32);
  EXPECT_EQ(m.non_finite, 1);
  EXPECT_EQ(m.at(0, 0), FLT_MAX) << "drawn with the top colour, never as masked";
  EXPECT_EQ(m.max, kInf);
  const double same[] = {-kInf, 1.0};
  const ErrorMap z = error_map(x, same, 1, 2, nullptr, 0, ErrorKind::Abs, Precision::FP32);
  EXPECT_EQ(z.masked, 1) << "the same infinity: a masked cell";
  EXPECT_EQ(z.zeros, 1);
  EXPECT_EQ(z.max, 0);
  EXPECT_GT(z.colour_range().hi, z.colour_range().lo);
}

TEST(PrecisionView, Fp32ErrorIsFp32SizedAndBf16ErrorIsBf16Sized) {
  for (int step = 1; step <= 4; ++step) {
    SCOPED_TRACE(step);
    Session f(test::cpu_viewer_options());
    const ErrorMap e32 = map_of(f, step);
    auto o = test::cpu_viewer_options();
    o.precision = Precision::BF16;
    Session b(o);
    EXPECT_EQ(b.precision(), Precision::BF16);
    EXPECT_EQ(b.trace().precision, Precision::BF16);
    const ErrorMap e16 = map_of(b, step);
    EXPECT_EQ(e16.precision, Precision::BF16);
    // fp32: a few fp32 ulps of values of order 1; bf16: inputs rounded to 8 bits.
    EXPECT_GT(e32.max, 0);
    EXPECT_LT(e32.max, 1e-6);
    EXPECT_GT(e16.max, 1e-4);
    EXPECT_LT(e16.max, 0.05);
    EXPECT_GT(e16.max, 100 * e32.max);
    // Measured in the run's own ulps the two are of the same order.
    const PrecisionView::Status ok = PrecisionView::Status::Ok;
    PrecisionView v32, v16;
    ASSERT_EQ(v32.update(f, step, ErrorKind::Abs), ok);
    ASSERT_EQ(v16.update(b, step, ErrorKind::Abs), ok);
    EXPECT_LT(v32.cell(f, e32.arg_row, e32.arg_col).ulps, 64);
    EXPECT_LT(v16.cell(b, e16.arg_row, e16.arg_col).ulps, 64);
  }
}

TEST(PrecisionView, LogitsErrorGrowsAsTemperatureFalls) {
  auto o = test::cpu_viewer_options();
  o.precision = Precision::BF16;
  Session c(o);
  ASSERT_TRUE(c.set_temperature(1.0));
  const ErrorMap t1 = map_of(c, 2);
  ASSERT_TRUE(c.set_temperature(0.1));
  const ErrorMap t01 = map_of(c, 2);
  // logits = scaled / T: the scores' rounding error is multiplied by 1 / T.
  EXPECT_GT(t01.max, 5 * t1.max);
  EXPECT_LT(t01.max, 20 * t1.max);
}

TEST(PrecisionView, ReferenceBelongsToTheStateOnScreen) {
  Session c(test::cpu_viewer_options());
  EXPECT_EQ(reference_of(c), nullptr) << "only when the view asks";
  c.set_companion(reference_companion(ErrorKind::Abs));
  ASSERT_NE(reference_of(c), nullptr);
  ASSERT_TRUE(c.set_temperature(0.3));
  ASSERT_NE(reference_of(c), nullptr) << "the main run brings its companion";
  const TraceD expect = reference_fp64(c.problem());
  EXPECT_EQ(reference_of(c)->logits(2, 3), expect.logits(2, 3));
  EXPECT_NEAR(reference_of(c)->logits(2, 3), c.trace().logits(2, 3), 1e-5);
  ASSERT_TRUE(c.set_mask(MaskKind::Causal));
  EXPECT_EQ(reference_of(c)->logits(0, 4), -kInf);
  const ErrorMap m = map_of(c, 2);
  EXPECT_EQ(m.masked, 10) << "the causal mask's upper triangle";
  // Cached by revision: the same state computes nothing new.
  PrecisionView v;
  v.update(c, 3, ErrorKind::Abs);
  v.update(c, 3, ErrorKind::Abs);
  EXPECT_EQ(v.computed(), 1);
  v.update(c, 3, ErrorKind::Rel);
  EXPECT_EQ(v.computed(), 2);
  c.set_companion(nullptr);
  EXPECT_EQ(reference_of(c), nullptr) << "dropped when the view is left";
  EXPECT_EQ(v.update(c, 3, ErrorKind::Abs), PrecisionView::Status::Computing);
}

// A window with mask "none" blocks cells too: at steps 2 and 3 they are masked, not exact zeros.
TEST(PrecisionView, MaskModsMaskTheirCellsWithMaskNone) {
  viewer::ViewerOptions o = test::cpu_random_options(16, 4, 4);
  o.mods.window = 2;
  o.mask_mods_given = true;
  Session c(o);
  c.set_companion(reference_companion(ErrorKind::Abs));
  c.set_step(3);
  ASSERT_TRUE(c.set_temperature(0.5));
  PrecisionView v;
  ASSERT_EQ(v.update(c, 3, ErrorKind::Abs), PrecisionView::Status::Ok);
  EXPECT_EQ(v.map().masked, 16 * 16 - (2 * 2 + 14 * 3));  // |i - j| < 2: three keys, two at the ends
  ASSERT_EQ(v.update(c, 4, ErrorKind::Abs), PrecisionView::Status::Ok);
  EXPECT_EQ(v.map().masked, 0);
}

// Beside each run the worker computes the map of the step on screen in the view's kind: the view
// then computes nothing (a temperature drag costs the UI thread no map), and the map is the one
// the view would compute.
TEST(PrecisionView, TheWorkerComputesTheMapOfTheStepOnScreen) {
  Session c(test::cpu_random_options(40, 8, 4, MaskKind::Causal));
  c.set_companion(reference_companion(ErrorKind::Abs));
  c.set_step(3);
  ASSERT_TRUE(c.set_temperature(0.5));
  PrecisionView v;
  ASSERT_EQ(v.update(c, 3, ErrorKind::Abs), PrecisionView::Status::Ok);
  EXPECT_EQ(v.computed(), 0) << "the worker's map";
  const auto own = step_error_map(c.trace(), *reference_of(c), 3, ErrorKind::Abs);
  ASSERT_NE(own, nullptr);
  EXPECT_EQ(v.map().max, own->max);
  EXPECT_EQ(v.map().masked, own->masked);
  EXPECT_EQ(v.map().hist, own->hist);
  ASSERT_EQ(v.map().err.size(), own->err.size());  // bit for bit (masked cells are NaN)
  EXPECT_EQ(std::memcmp(v.map().err.data(), own->err.data(), own->err.size() * sizeof(float)), 0);
  // Another kind: the view computes it; once the session knows the kind, the worker does.
  ASSERT_EQ(v.update(c, 3, ErrorKind::Rel), PrecisionView::Status::Ok);
  EXPECT_EQ(v.computed(), 1);
  c.set_companion(reference_companion(ErrorKind::Rel));
  ASSERT_TRUE(c.set_temperature(0.7));
  ASSERT_EQ(v.update(c, 3, ErrorKind::Rel), PrecisionView::Status::Ok);
  EXPECT_EQ(v.computed(), 1);
  EXPECT_EQ(v.map().kind, ErrorKind::Rel);
}

TEST(PrecisionView, AsyncReferenceArrivesWithItsRun) {
  Session c(test::cpu_viewer_options(), true);
  c.set_companion(reference_companion(ErrorKind::Abs));
  c.wait();
  ASSERT_NE(reference_of(c), nullptr);
  for (double t : {0.2, 0.7, 1.9}) {
    c.set_temperature(t);
    c.wait();
    ASSERT_NE(reference_of(c), nullptr);
    // The pair on screen is one request's: the reference's logits are this T's.
    EXPECT_NEAR(reference_of(c)->logits(2, 0), c.trace().logits(2, 0), 1e-5) << t;
    EXPECT_DOUBLE_EQ(c.problem().temperature, t);
  }
  // The view left while a run that carries the reference is queued or in flight: the late
  // reference is not kept.
  c.set_temperature(0.45);
  c.set_companion(nullptr);
  c.wait();
  EXPECT_DOUBLE_EQ(c.problem().temperature, 0.45);
  EXPECT_EQ(reference_of(c), nullptr);
}

TEST(PrecisionView, Bf16IsRefusedOnCudaAndForStreamedProblems) {
  Session c(test::cpu_viewer_options());
  ASSERT_TRUE(c.load_random(kKeepStagesMaxTokens + 4, 8, 4, 1));
  ASSERT_TRUE(c.streaming());
  EXPECT_FALSE(c.set_precision(Precision::BF16));
  EXPECT_EQ(c.error_message().id, Msg::Bf16Streamed);
  EXPECT_NE(c.error_text(Lang::Zh).find("bf16"), std::string::npos);
  c.set_companion(reference_companion(ErrorKind::Abs));
  PrecisionView v;
  EXPECT_EQ(v.update(c, 3, ErrorKind::Abs), PrecisionView::Status::Streamed);
  EXPECT_EQ(reference_of(c), nullptr);

  auto o = test::cpu_viewer_options();
  o.precision = Precision::BF16;
  o.backend = "cuda";
  if (!cuda_available()) {
    EXPECT_THROW(Session{o}, NoDeviceError);
  } else {
    EXPECT_THROW(Session{o}, InputError) << "bf16 staged on CUDA";
  }
}

TEST(PrecisionView, PrecisionFlagReproduceCommandAndStateDump) {
  const ViewerOptions o = parse_viewer_args({"--view", "precision", "--precision", "bf16", "--backend", "cpu"});
  EXPECT_EQ(o.view, "precision");
  EXPECT_EQ(o.precision, Precision::BF16);
  EXPECT_THROW(parse_viewer_args({"--precision", "fp64"}), InputError);
  EXPECT_THROW(parse_viewer_args({"--precision", ""}), InputError);
  Session c(o);
  EXPECT_NE(c.reproduce_command().find(" --precision bf16"), std::string::npos) << c.reproduce_command();
  // --backend auto with bf16 takes the CPU (on a GPU machine too: CUDA's bf16 is fused only).
  ViewerOptions a;
  a.precision = Precision::BF16;
  EXPECT_EQ(Session(a).backend(), "cpu");
  ASSERT_TRUE(c.set_precision(Precision::FP32));
  EXPECT_EQ(c.reproduce_command().find("--precision"), std::string::npos);
  ViewSnapshot s;
  s.view = "precision";
  PrecisionView v;
  map_of(c, 1);
  v.update(c, 1, ErrorKind::Rel);
  s.view_fields["precision_view"] = nlohmann::json::parse(v.state_json());
  const auto j = nlohmann::json::parse(state_json(c, s));
  EXPECT_EQ(j["view"], "precision");
  EXPECT_EQ(j["precision"], "fp32");
  EXPECT_EQ(j["precision_view"]["status"], "ok");
  EXPECT_EQ(j["precision_view"]["kind"], "rel");
  EXPECT_EQ(j["precision_view"]["hist"].size(), static_cast<std::size_t>(kHistBins));
}
