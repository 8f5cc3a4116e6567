// Export from the window (viewer/session/export.h): the current stage as CSV that the CSV reader gives
// back as the same matrix, the trace as the CLI's JSON, the heatmap's pixels as a PNG; streamed
// stages and large traces are refused with the command that does it instead.
#include "viewer_test_util.h"
#include "core/io.h"
#include "viewer/session/session.h"
#include "viewer/session/export.h"
#include "viewer/draw/png_io.h"

#include "../test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using namespace attnlab;
using namespace attnlab::viewer;

TEST(Export, StageCsvTraceJsonAndHeatmapPng) {
  const test::TempDir dir("attnlab-export");
  const std::string stem = (dir.path() / "x").string();
  Session c(test::cpu_viewer_options());
  const std::string csv = export_stage_csv(c, 3, stem);
  EXPECT_EQ(csv, stem + "-weights.csv");
  const MatrixF back = read_matrix(csv);
  EXPECT_LT((back - *c.stage_matrix(3)).cwiseAbs().maxCoeff(), 1e-6f);
  const auto j = nlohmann::json::parse(test::read_file(export_trace_json(c, Lang::En, stem)));
  EXPECT_EQ(j["tokens"][2], "上下文");
  EXPECT_EQ(j["stages"]["weights"].size(), 5u);
  const std::vector<std::uint32_t> px(6, 0xFF0000FFu);  // red, opaque
  const Image img = read_png(export_heatmap_png(px, 3, 2, stem));
  EXPECT_EQ(img.width, 3);
  EXPECT_EQ(img.height, 2);
  EXPECT_EQ(img.at(2, 1)[0], 255);
  EXPECT_EQ(img.at(2, 1)[1], 0);
  EXPECT_THROW(export_heatmap_png({}, 0, 0, stem), InputError);
  // A second export of a kind in the same second (the same stem) keeps the first file.
  ASSERT_TRUE(c.set_temperature(2));
  const std::string again = export_stage_csv(c, 3, stem), third = export_stage_csv(c, 3, stem);
  EXPECT_EQ(again, stem + "-weights-2.csv");
  EXPECT_EQ(third, stem + "-weights-3.csv");
  EXPECT_TRUE(read_matrix(csv) == back) << "the first export stays";
  EXPECT_LT((read_matrix(again) - *c.stage_matrix(3)).cwiseAbs().maxCoeff(), 1e-6f);
  EXPECT_EQ(export_heatmap_png(px, 3, 2, stem), stem + "-heatmap-2.png");
  EXPECT_EQ(export_trace_json(c, Lang::En, stem), stem + "-trace-2.json");
}

TEST(Export, StreamedStagesAndLargeTracesPointToTheCommandLine) {
  const test::TempDir dir("attnlab-export2");
  const std::string stem = (dir.path() / "x").string();
  Session c(test::cpu_viewer_options());
  ASSERT_TRUE(c.load_random(kKeepStagesMaxTokens + 8, 4, 2, 1));
  const std::string m = test::message_of<InputError>([&] { export_stage_csv(c, 1, stem); });
  EXPECT_NE(m.find("attnlab run --random 4104"), std::string::npos) << m;
  EXPECT_EQ(export_stage_csv(c, 4, stem), stem + "-output.csv") << "the output is kept whole";
  const std::string mj = test::message_of<InputError>([&] { export_trace_json(c, Lang::En, stem); });
  EXPECT_NE(mj.find("--format json"), std::string::npos) << mj;
}
