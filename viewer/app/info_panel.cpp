// The information panel: the selected row's statistics, the description with Copy and Speak, the
// numeric tables of every stage, the per-stage times with Compare, and the scientific notes.
#include "viewer/app/app.h"
#include "viewer/ui/kit.h"

#include "core/format.h"
#include "viewer/session/export.h"
#include "viewer/session/tables.h"
#include "viewer/draw/heatmap.h"
#include "viewer/draw/strings.h"
#include "viewer/views/registry.h"

#include <imgui.h>

#include <functional>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace attnlab::viewer {
namespace {

// ---- information panel ------------------------------------------------------------------------

// The Compare table's names (variants, stages) in the UI language; backend names stay as they are.
std::string compare_term(Lang lang, const std::string& name) {
  static const std::pair<const char*, S> kTerms[] = {
      {"staged", S::TermStaged}, {"fused", S::TermFused},     {"scores", S::TermScores},
      {"scaled", S::TermScaled}, {"logits", S::TermLogits},   {"weights", S::TermWeights},
      {"output", S::TermOutput}};
  for (const auto& [key, s] : kTerms)
    if (name == key) return tr(lang, s);
  return name;
}

// How many value columns of `m` fit beside the token column in the panel's width: the widest
// number the matrix prints (its largest finite magnitude, negative) or column label, plus the
// cell padding and border; at least 1, at most 63 (an ImGui table holds 64 columns).
int table_columns_that_fit(const MatrixF& m, const std::vector<std::string>& rows,
                           const std::vector<std::string>& cols) {
  const float pad = 2 * ImGui::GetStyle().CellPadding.x + 1;
  float token_w = ImGui::CalcTextSize("token").x;
  for (const std::string& r : rows) token_w = std::max(token_w, ImGui::CalcTextSize(r.c_str()).x);
  const float widest = m.size() == 0 ? 0.f : m.array().isFinite().select(m.array().abs(), 0.f).maxCoeff();
  float col_w = std::max(ImGui::CalcTextSize(table_value(-widest).c_str()).x, ImGui::CalcTextSize("−∞").x);
  for (const std::string& c : cols) col_w = std::max(col_w, ImGui::CalcTextSize(c.c_str()).x);
  const float avail = ImGui::GetContentRegionAvail().x - token_w - pad;
  return std::clamp(static_cast<int>(avail / (col_w + pad)), 1, 63);
}

// A matrix too wide for the panel (d_k = 64 of a random sequence, N = 16 at 1280 px) is drawn as
// consecutive tables of the columns that fit, each headed by its column range.
void matrix_table(const char* id, const std::string& title, const MatrixF& m, const std::vector<std::string>& rows,
                  const std::vector<std::string>& cols, int highlight_row, bool current, Lang lang) {
  if (current) {
    ImGui::TextColored(kHighlightV4, "%s  %s", title.c_str(), tr(lang, S::CurrentStep));
  } else {
    ImGui::TextUnformatted(title.c_str());
  }
  const int nc = static_cast<int>(m.cols());
  const int chunk = table_columns_that_fit(m, rows, cols);
  // One number format per matrix: all in exponents when any value reaches 1e6.
  const float big = m.size() == 0 ? 0.f : m.array().isFinite().select(m.array().abs(), 0.f).maxCoeff();
  const bool sci = big >= 1e6f;
  for (int c0 = 0; c0 < nc; c0 += chunk) {
    const int cn = std::min(chunk, nc - c0);
    if (nc > chunk)
      ImGui::TextColored(kDimV4, tr(lang, S::TableColumns), cols.at(c0).c_str(), cols.at(c0 + cn - 1).c_str(), nc);
    ImGui::PushID(c0);
    if (ImGui::BeginTable(id, cn + 1, ImGuiTableFlags_Borders | ImGuiTableFlags_SizingFixedFit)) {
      ImGui::TableSetupColumn("token");
      for (int j = c0; j < c0 + cn; ++j)
        ImGui::TableSetupColumn(j < static_cast<int>(cols.size()) ? cols[j].c_str() : "");
      ImGui::TableHeadersRow();
      for (int i = 0; i < m.rows(); ++i) {
        ImGui::TableNextRow();
        if (i == highlight_row) ImGui::TableSetBgColor(ImGuiTableBgTarget_RowBg1, IM_COL32(255, 140, 0, 70));
        ImGui::TableSetColumnIndex(0);
        ImGui::TextUnformatted(i < static_cast<int>(rows.size()) ? rows[i].c_str() : "");
        for (int j = c0; j < c0 + cn; ++j) {
          ImGui::TableSetColumnIndex(j - c0 + 1);
          ImGui::TextUnformatted((sci && std::isfinite(m(i, j)) ? cell_label(m(i, j), true) : table_value(m(i, j))).c_str());
        }
      }
      ImGui::EndTable();
    }
    ImGui::PopID();
  }
}

// An explicit scale (a bundle's call gives one) as the panel writes it.
std::string given_scale(const Problem& p) { return p.scale ? format_number("%.6g", *p.scale) : std::string(); }
}  // namespace

// The statistics of every selected query, one row each in its colour, and their mean.
static void draw_queries_table(App& app) {
  const Lang lang = app.lang;
  const Session& c = app.session;
  const Problem& p = c.problem();
  ImGui::Spacing();
  ImGui::TextUnformatted(tr(lang, S::QueriesTable));
  // The cells first: a table wider than the panel scrolls sideways rather than cut its numbers.
  std::vector<std::array<std::string, 5>> rows;
  bool missing = false;
  for (const int q : c.queries()) {
    std::array<std::string, 5>& r = rows.emplace_back();
    r[0] = indexed_label(p.query_tokens(), q);
    const auto st = c.stats_of(q);
    if (!st) {
      missing = true;
      continue;
    }
    r[1] = percent_text(st->max_weight) + "%";
    r[2] = p.key_tokens()[st->argmax];
    r[3] = format_number("%.3f", st->entropy);
    r[4] = format_number("%.3f", st->perplexity);
  }
  const auto mean = c.mean_stats();
  if (mean)
    rows.push_back({tr(lang, S::QueriesMean), percent_text(mean->max_weight) + "%", "", format_number("%.3f", mean->entropy),
                    format_number("%.3f", mean->perplexity)});
  const S heads[5] = {S::TipQuery, S::QueriesColMax, S::Argmax, S::QueriesColEntropy, S::QueriesColPerplexity};
  float need = 0;
  for (int col = 0; col < 5; ++col) {
    float w = text_width(tr(lang, heads[col]));
    for (const auto& r : rows) w = std::max(w, text_width(r[col].c_str()));
    need += w + ImGui::GetStyle().CellPadding.x * 2 + 1;
  }
  const bool scroll = need > ImGui::GetContentRegionAvail().x;
  const ImGuiTableFlags flags = ImGuiTableFlags_Borders | ImGuiTableFlags_RowBg | ImGuiTableFlags_SizingFixedFit |
                                (scroll ? ImGuiTableFlags_ScrollX : 0);
  const float height = scroll ? table_fit_height(static_cast<int>(rows.size()) + 1, FLT_MAX) + ImGui::GetStyle().ScrollbarSize : 0;
  if (!ImGui::BeginTable("###queries", 5, flags, ImVec2(0, height))) return;
  for (S h : heads) ImGui::TableSetupColumn(tr(lang, h));
  ImGui::TableHeadersRow();
  for (std::size_t i = 0; i < rows.size(); ++i) {
    ImGui::TableNextRow();
    const bool query_row = i < c.queries().size();
    for (int col = 0; col < 5; ++col) {
      ImGui::TableNextColumn();
      if (col == 0 && query_row)
        ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(query_colour(static_cast<int>(i))), "%s", rows[i][0].c_str());
      else
        ImGui::TextUnformatted(rows[i][col].c_str());
    }
  }
  ImGui::EndTable();
  if (missing) ImGui::TextColored(kDimV4, "%s", tr(lang, S::QueriesNeedRows));
  ImGui::TextColored(kDimV4, "%s", tr(lang, S::QueriesChart));
}

// Export from the window, through the CLI's writers (viewer/session/export.h), into the export
// folder; the file name or the reason it was refused goes to the status line.
void export_from_window(App& app, Export what) {
  Session& c = app.session;
  const Lang lang = app.lang;
  c.clear_error();
  try {
    const std::string stem = export_stem(app.export_dir);
    std::string path;
    // The views without the chain's steps (heads, walk, …) draw no stage of a step, and their
    // pictures are not the centre's heatmap: refused rather than a file of something not on screen.
    // The view on screen (app.view may already name the next one, drawn from the next frame on).
    const bool own_picture = what == Export::HeatmapPng && app.heat_px_view != view_names()[app.shown];
    if ((what == Export::StageCsv && !app.shown_view().chain_steps()) || own_picture) {
      set_status(app, [own_picture](Lang l) {
        return std::string(tr(l, S::ErrorPrefix)) + tr(l, own_picture ? S::ExportNoHeatmapHere : S::ExportNoStageHere);
      });
      return;
    }
    switch (what) {
      case Export::StageCsv: {
        // What the heatmap draws: a view's own matrix at this step (step 1's RoPE matrices, step
        // 2's sub-stages), else the step's stage.
        const View::Shown shown = app.shown_view().shown_matrix(c, app.play.step());
        path = shown.matrix ? export_matrix_csv(*shown.matrix, shown.word, stem)
                            : export_stage_csv(c, app.play.step(), stem);
        break;
      }
      case Export::TraceJson: path = export_trace_json(c, lang, stem); break;
      case Export::HeatmapPng: path = export_heatmap_png(app.heat_px, app.heat_px_w, app.heat_px_h, stem); break;
    }
    set_status(app, [path](Lang l) { return fmt(tr(l, S::Exported), path.c_str()); });
  } catch (const std::exception& e) {
    set_status(app, [m = message_of(e)](Lang l) { return std::string(tr(l, S::ErrorPrefix)) + m.text(l); });
  }
}

void draw_info(App& app, const Layout& l) {
  const Lang lang = app.lang;
  Session& c = app.session;
  const Problem& p = c.problem();
  const Trace& t = c.trace();
  ImGui::SetNextWindowPos(ImVec2(l.info.x, l.info.y), ImGuiCond_Always);
  ImGui::SetNextWindowSize(ImVec2(l.info.w, l.info.h), ImGuiCond_Always);
  ImGui::Begin(fmt("%s###info", tr(lang, S::RowStats)).c_str(), nullptr,
               ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoResize | ImGuiWindowFlags_NoCollapse |
                   ImGuiWindowFlags_NoBringToFrontOnFocus | ImGuiWindowFlags_NoTitleBar);

  // Row statistics.
  if (header_fit(tr(lang, S::RowStats), "stats", ImGuiTreeNodeFlags_DefaultOpen)) {
    // Each line wrapped: at a large UI scale a statistic's name alone may fill the column.
    wrapped(app, fmt("%s: %s", tr(lang, S::TipQuery), indexed_label(p.query_tokens(), c.query()).c_str()));
    // A bundle's layer and head; random heads have no layers.
    if (c.from_bundle())
      wrapped(app, fmt(tr(lang, S::HeadsShown), c.shown_layer(), c.shown_head(), c.shown_heads()), &kHighlightV4);
    else if (c.shown_heads() > 1)
      wrapped(app, fmt(tr(lang, S::HeadsShownHead), c.shown_head(), c.shown_heads()), &kHighlightV4);
    if (auto st = c.stats()) {
      // One decimal as on the page; significant digits below 1 %, where thousands of keys share it.
      wrapped(app, fmt("%s: %s%% (%s %s)", tr(lang, S::MaxWeight), percent_text(st->max_weight).c_str(),
                       tr(lang, S::Argmax), p.key_tokens()[st->argmax].c_str()));
      wrapped(app, fmt("%s: %.3f", tr(lang, S::Entropy), st->entropy));
      wrapped(app, fmt("%s: %d", tr(lang, S::Effective), st->unmasked));
      wrapped(app, fmt("%s: %.3f", tr(lang, S::Perplexity), st->perplexity));
      wrapped(app, fmt("%s: %.6f", tr(lang, S::WeightSum), st->weight_sum));
      // The page's own sentence (查询“上下文”对“上下文”的权重最高，为 26.0%).
      // The same digits as the max weight line above.
      const std::string pct = percent_text(st->max_weight);
      wrapped(app, fmt(tr(lang, S::PageSentence), p.query_tokens()[c.query()].c_str(),
                       p.key_tokens()[st->argmax].c_str(), pct.c_str()));
    }
    if (c.queries().size() > 1) draw_queries_table(app);
    if (p.scale)
      wrapped(app, fmt("%s: %s", tr(lang, S::Scale), fmt(tr(lang, S::ScaleExplicit), given_scale(p).c_str()).c_str()));
    else
      wrapped(app, fmt("%s: 1/√%d = %.4f", tr(lang, S::Scale), p.d_k(), 1.0 / std::sqrt(static_cast<double>(p.d_k()))));
    wrapped(app, fmt("%s: %d×%d", tr(lang, S::OutputShape), p.n(), p.d_v()));
  }

  // Description, regenerated from the current state every frame (it is cheap: one row).
  if (header_fit(tr(lang, S::Description), "desc", ImGuiTreeNodeFlags_DefaultOpen)) {
    const std::string& d = c.description(lang);
    wrapped(app, d);
    if (ImGui::Button(fmt("%s###copy", tr(lang, S::Copy)).c_str())) {
      c.clear_error();
      SDL_SetClipboardText(d.c_str());
      set_status(app, [](Lang l) { return std::string(tr(l, S::Copied)); });
    }
    ImGui::SameLine();
    ImGui::BeginDisabled(!app.speaker.available());
    if (app.speaker.speaking()) {
      if (ImGui::Button(fmt("%s###speak", tr(lang, S::StopSpeaking)).c_str())) app.speaker.stop();
    } else if (ImGui::Button(fmt("%s###speak", tr(lang, S::Speak)).c_str())) {
      c.clear_error();
      app.speaker.speak(d, lang);
    }
    ImGui::EndDisabled();
    if (!app.speaker.available()) ImGui::TextColored(kDimV4, "%s", tr(lang, S::NoEspeak));
    if (!app.speaker.speaking() && !app.speaker.problem().empty()) {
      wrapped(app, fmt(tr(lang, S::SpeakProblem), app.speaker.problem().c_str()), &kDimV4);
    }
  }

  // Numeric tables of every stage.
  if (header_fit(tr(lang, S::Tables), "tables",
                 p.n() <= 8 ? ImGuiTreeNodeFlags_DefaultOpen : 0)) {
    ImGui::TextColored(kHighlightV4, "%s", tr(lang, S::PageHeading));
    wrapped(app, p.scale ? fmt(tr(lang, S::PageIntroExplicit), p.d_k(), given_scale(p).c_str())
                         : fmt(tr(lang, S::PageIntro), p.d_k()));
    // The exact command of the problem on screen, to export every stage (or to check it).
    const std::string cmd = c.reproduce_command();
    wrapped(app, tr(lang, S::Reproduce), &kDimV4);
    wrapped(app, cmd);
    if (ImGui::Button(fmt("%s###copycmd", tr(lang, S::Copy)).c_str())) {
      c.clear_error();
      SDL_SetClipboardText(cmd.c_str());
      set_status(app, [](Lang l) { return std::string(tr(l, S::Copied)); });
    }
    if (ImGui::Button(fmt("%s###excsv", tr(lang, S::ExportCsv)).c_str())) export_from_window(app, Export::StageCsv);
    same_line_if_fits(button_width(tr(lang, S::ExportJson)));
    if (ImGui::Button(fmt("%s###exjson", tr(lang, S::ExportJson)).c_str())) export_from_window(app, Export::TraceJson);
    same_line_if_fits(button_width(tr(lang, S::ExportPng)));
    if (ImGui::Button(fmt("%s###expng", tr(lang, S::ExportPng)).c_str())) export_from_window(app, Export::HeatmapPng);
    if (p.n() > kTableMaxTokens || !t.has_stages) {
      wrapped(app, fmt(tr(lang, S::TablesTooLarge), kTableMaxTokens, p.n()));
    } else {
      const int step = app.play.step();
      const int q = c.query();
      // Columns as the CLI's tables head them: the key tokens over the keys, features from 1.
      for (const NumericTable& tb : numeric_tables(p, t)) {
        std::string title = tr(lang, tb.title);
        if (tb.title == S::TableQRot) title = fmt(tr(lang, S::TableQRot), short_number(p.mods.rope_theta).c_str());
        if (tb.title == S::TableScaled)
          title = p.scale ? fmt(tr(lang, S::TableScaledExplicit), given_scale(p).c_str(), p.d_k())
                          : fmt(tr(lang, S::TableScaled), p.d_k());
        if (tb.title == S::TableCapped) title = fmt(tr(lang, S::TableCapped), short_number(p.mods.softcap).c_str());
        matrix_table(tb.id, title, *tb.m, tb.query_rows ? p.query_tokens() : p.key_tokens(),
                     table_column_labels(p, tb), tb.query_rows ? q : -1, tb.step == step, lang);
        // The demo's QKᵀ against the page it comes from (README says the same under the CLI's).
        if (tb.title == S::TableScores && c.demo()) wrapped(app, tr(lang, S::DemoTies), &kDimV4);
      }
    }
  }

  // Performance.
  if (header_fit(tr(lang, S::Performance), "perf", ImGuiTreeNodeFlags_DefaultOpen)) {
    wrapped(app, fmt("%s: %s (N=%d, d_k=%d, d_v=%d)", tr(lang, S::BackendRan), t.backend.c_str(), p.n(), p.d_k(), p.d_v()));
    const StageTimings& tm = t.timings;
    if (ImGui::BeginTable("timings", 2, ImGuiTableFlags_Borders | ImGuiTableFlags_SizingFixedFit)) {
      const std::pair<S, double> rows[] = {{S::TimeUpload, tm.upload_ms},   {S::TimeQk, tm.qk_ms},
                                           {S::TimeScaleMask, tm.scale_mask_ms}, {S::TimeSoftmax, tm.softmax_ms},
                                           {S::TimePv, tm.pv_ms},           {S::TimeDownload, tm.download_ms},
                                           {S::TimeTotal, tm.total_ms}};
      for (const auto& [label, ms] : rows) {
        ImGui::TableNextRow();
        ImGui::TableSetColumnIndex(0);
        ImGui::TextUnformatted(tr(lang, label));
        ImGui::TableSetColumnIndex(1);
        ImGui::Text("%.3f ms", ms);
      }
      ImGui::EndTable();
    }
    wrapped(app, fmt(tr(lang, S::Redraw), c.last_run_ms(), app.last_raster_ms));
    // Compare: CPU vs CUDA (needs a device), and staged vs fused on the chosen backend (always).
    const std::string why = compare_unavailable_reason(c);
    ImGui::BeginDisabled(!why.empty());
    if (ImGui::Button(fmt("%s###compare", tr(lang, S::Compare)).c_str())) app.compare = run_compare(c);
    ImGui::EndDisabled();
    same_line_if_fits(button_width(tr(lang, S::CompareVariants)));
    if (ImGui::Button(fmt("%s###comparev", tr(lang, S::CompareVariants)).c_str())) app.compare = run_variant_compare(c);
    if (!why.empty()) {
      if (!c.cuda_ok()) {
        wrapped(app, fmt(tr(lang, S::CompareNeedsCuda), cuda_reason_text(why, lang).c_str()), &kDimV4);
      } else {
        wrapped(app, fmt(tr(lang, S::CompareCpuLimit), kKeepStagesMaxTokens), &kDimV4);
      }
    }
    // A comparison belongs to the run it compared: a newer run on screen hides it.
    static const CompareResult kNone;
    const CompareResult& cr = app.compare.run == c.run_revision() ? app.compare : kNone;
    if (!cr.error.empty()) wrapped(app, cr.error, &kErrorV4);
    if (cr.done) {
      const std::string a_name = compare_term(lang, cr.a_name), b_name = compare_term(lang, cr.b_name);
      wrapped(app, fmt("%s: %.2f× (%s %.3f ms / %s %.3f ms)", tr(lang, S::SpeedUp), cr.speed_up(),
                       a_name.c_str(), cr.a_total_ms, b_name.c_str(), cr.b_total_ms));
      if (ImGui::BeginTable("compare", 4, ImGuiTableFlags_Borders | ImGuiTableFlags_SizingFixedFit)) {
        ImGui::TableSetupColumn(tr(lang, S::Stage));
        ImGui::TableSetupColumn(fmt("%s ms", a_name.c_str()).c_str());
        ImGui::TableSetupColumn(fmt("%s ms", b_name.c_str()).c_str());
        ImGui::TableSetupColumn(tr(lang, S::MaxDiff));
        ImGui::TableHeadersRow();
        for (const StageCompare& s : cr.stages) {
          ImGui::TableNextRow();
          ImGui::TableSetColumnIndex(0);
          ImGui::TextUnformatted(compare_term(lang, s.stage).c_str());
          ImGui::TableSetColumnIndex(1);
          ImGui::Text("%.3f", s.a_ms);
          ImGui::TableSetColumnIndex(2);
          ImGui::Text("%.3f", s.b_ms);
          ImGui::TableSetColumnIndex(3);
          ImGui::Text("%.3g", s.max_abs_diff);
        }
        ImGui::EndTable();
      }
    }
  }

  // Scientific notes (SPEC.md).
  if (header_fit(tr(lang, S::Notes), "notes")) {
    wrapped(app, tr(lang, S::NotesIntro));
    for (const auto& [heading, body] : science_notes(lang)) {
      wrapped(app, heading, &kHighlightV4);  // a heading or the last line wraps as the text does
      wrapped(app, body);
    }
    wrapped(app, tr(lang, S::NotesRelated), &kDimV4);
  }
  ImGui::End();
}

}  // namespace attnlab::viewer
