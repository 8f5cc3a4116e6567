// Export from the window (see export.h).
#include "viewer/session/export.h"

#include "core/io.h"
#include "core/report.h"
#include "viewer/draw/png_io.h"

#include <cstring>
#include <ctime>
#include <filesystem>

namespace attnlab::viewer {

std::string export_stem(const std::string& dir, const char* prefix) {
  char stamp[32];
  const std::time_t t = std::time(nullptr);
  std::strftime(stamp, sizeof stamp, "-%Y%m%d-%H%M%S", std::localtime(&t));
  std::string stem = dir;
  if (!stem.empty() && stem.back() != '/') stem += '/';
  return stem + prefix + stamp;
}

std::string unused_name(const std::string& base, const std::string& ext) {
  std::string name = base + ext;
  for (int k = 2; std::filesystem::exists(name); ++k) name = base + "-" + std::to_string(k) + ext;
  return name;
}

std::string export_stage_csv(const Session& c, int step, const std::string& stem) {
  static const char* const kNames[] = {"scores", "logits", "weights", "output"};
  const MatrixF* m = c.stage_matrix(step);
  if (c.stage_pending(step)) throw InputError(Msg::ExportPending, {});
  if (step < 1 || step > 4 || m == nullptr)
    throw InputError(Msg::ExportStreamed, {std::to_string(c.n()), c.reproduce_command()});
  const std::string path = unused_name(stem + "-" + kNames[step - 1], ".csv");
  write_csv(path, *m);
  return path;
}

std::string export_matrix_csv(const MatrixF& m, const std::string& word, const std::string& stem) {
  const std::string path = unused_name(stem + "-" + word, ".csv");
  write_csv(path, m);
  return path;
}

std::string export_trace_json(const Session& c, Lang lang, const std::string& stem) {
  const auto json_command = [&c] {
    std::string cmd = c.reproduce_command();
    return cmd.replace(cmd.rfind("csv"), 3, "json");
  };
  if (!c.stages_kept() || c.n() > kJsonExportMaxTokens)
    throw InputError(Msg::ExportJsonTooLarge,
                     {std::to_string(kJsonExportMaxTokens), std::to_string(c.n()), json_command()});
  if (!c.all_stages_kept()) throw InputError(Msg::ExportJsonStages, {json_command()});
  const std::string path = unused_name(stem + "-trace", ".json");
  write_file(path, render(c.problem(), c.trace(), c.query(), lang, Format::Json));
  return path;
}

std::string export_heatmap_png(const std::vector<std::uint32_t>& px, int w, int h, const std::string& stem) {
  if (w <= 0 || h <= 0 || px.size() != static_cast<std::size_t>(w) * h)
    throw InputError(Msg::ExportNoHeatmap, {});
  Image img;
  img.width = w;
  img.height = h;
  img.rgba.resize(px.size() * 4);
  std::memcpy(img.rgba.data(), px.data(), img.rgba.size());  // pack_rgba: R first in memory
  const std::string path = unused_name(stem + "-heatmap", ".png");
  write_png(path, img);
  return path;
}

}  // namespace attnlab::viewer
