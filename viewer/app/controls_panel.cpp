// The controls panel: language, step playback and speed, query, temperature (slider and typed
// entry), mask, backend, and the demo or random input with its fields and Generate.
#include "viewer/app/app.h"
#include "viewer/ui/kit.h"

#include "core/modify.h"

#include "core/format.h"
#include "viewer/draw/strings.h"

#include <imgui.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace attnlab::viewer {

namespace {

// The modifications (core/modifications.h): RoPE with θ, ALiBi, a soft-cap C, a window W, a prefix
// P; every change is one request (Session::set_mods, refused with the core's message). A bias and
// document ids are files (the fields and their Load, or the command line's --score-mod bias:FILE,
// --mask-mod document:FILE).
void mods_controls(App& app) {
  Session& c = app.session;
  const Lang lang = app.lang;
  const Problem& p = c.problem();
  if (!header_fit(tr(lang, S::Mods), "mods", has_modifications(p) ? ImGuiTreeNodeFlags_DefaultOpen : 0))
    return;
  wrapped(app, tr(lang, S::ModsHint), &kDimV4);
  ModSettings m = c.requested_mods();
  bool changed = false;
  // A slider's value, typed (Ctrl+click) or dragged, is one request (set_mod_value refuses what a
  // setting cannot hold, 0 among them); a checkbox changes `m`.
  using Knob = Session::ModKnob;
  bool rope = m.rope_theta > 0;
  if (ImGui::Checkbox(fmt("%s###mrope", tr(lang, S::ModRope)).c_str(), &rope)) {
    m.rope_theta = rope ? 10000 : 0;
    changed = true;
  }
  if (rope) {
    double theta = m.rope_theta;
    ImGui::SetNextItemWidth(-(ImGui::CalcTextSize(tr(lang, S::ModRopeTheta)).x + ImGui::GetStyle().ItemInnerSpacing.x));
    if (slider_double(fmt("%s###mtheta", tr(lang, S::ModRopeTheta)).c_str(), theta, kRopeThetaMin, kRopeThetaMax, "%.6g",
                      ImGuiSliderFlags_Logarithmic))
      c.set_mod_value(Knob::RopeTheta, theta);
  }
  if (ImGui::Checkbox(fmt("%s###malibi", tr(lang, S::ModAlibi)).c_str(), &m.alibi)) changed = true;
  bool cap = m.softcap > 0;
  if (ImGui::Checkbox(fmt("%s###mcap", tr(lang, S::ModSoftcap)).c_str(), &cap)) {
    m.softcap = cap ? 5 : 0;
    changed = true;
  }
  if (cap) {
    double cv = m.softcap;
    ImGui::SetNextItemWidth(-(ImGui::CalcTextSize(tr(lang, S::ModSoftcapC)).x + ImGui::GetStyle().ItemInnerSpacing.x));
    if (slider_double(fmt("%s###mcapc", tr(lang, S::ModSoftcapC)).c_str(), cv, 0.1, 100, "%.3g",
                      ImGuiSliderFlags_Logarithmic))
      c.set_mod_value(Knob::Softcap, cv);
  }
  const int positions = std::max(1, p.m());
  bool window = m.window > 0;
  if (ImGui::Checkbox(fmt("%s###mwin", tr(lang, S::ModWindow)).c_str(), &window)) {
    m.window = window ? std::max(1, positions / 4) : 0;
    changed = true;
  }
  if (window) {
    int w = m.window;
    ImGui::SetNextItemWidth(-(ImGui::CalcTextSize(tr(lang, S::ModWindowW)).x + ImGui::GetStyle().ItemInnerSpacing.x));
    if (ImGui::SliderInt(fmt("%s###mwinw", tr(lang, S::ModWindowW)).c_str(), &w, 1, positions, "%d",
                         positions > 64 ? ImGuiSliderFlags_Logarithmic : 0))
      c.set_mod_value(Knob::Window, w);
  }
  bool prefix = m.prefix > 0;
  if (ImGui::Checkbox(fmt("%s###mpre", tr(lang, S::ModPrefix)).c_str(), &prefix)) {
    m.prefix = prefix ? std::max(1, positions / 2) : 0;
    changed = true;
  }
  if (prefix) {
    int pv = m.prefix;
    ImGui::SetNextItemWidth(-(ImGui::CalcTextSize(tr(lang, S::ModPrefixP)).x + ImGui::GetStyle().ItemInnerSpacing.x));
    if (ImGui::SliderInt(fmt("%s###mprep", tr(lang, S::ModPrefixP)).c_str(), &pv, 1, positions, "%d",
                         positions > 64 ? ImGuiSliderFlags_Logarithmic : 0))
      c.set_mod_value(Knob::Prefix, pv);
  }
  if (changed) c.set_mods(m);
  // The files: a bias, document ids (Load reads both again).
  const auto field = [](const char* label, std::string& text) {
    char buf[4096];
    std::snprintf(buf, sizeof buf, "%s", text.c_str());
    ImGui::SetNextItemWidth(-FLT_MIN);
    if (ImGui::InputTextWithHint(label, "", buf, sizeof buf)) text = buf;
  };
  wrapped(app, tr(lang, S::ModBiasFile), &kDimV4);
  field("###mbias", app.in_bias);
  wrapped(app, tr(lang, S::ModDocsFile), &kDimV4);
  field("###mdocs", app.in_documents);
  if (ImGui::Button(fmt("%s###mload", tr(lang, S::Load)).c_str())) c.set_mod_files(app.in_bias, app.in_documents);
  const std::string named = modifications_text(c.problem(), lang);  // the problem a change above may have brought
  if (!named.empty()) wrapped(app, named, &kDimV4);
}

}  // namespace

namespace {

// An ImGui text field over a std::string (ImGui 1.86 without imgui_stdlib): edits a copy in a
// buffer of the path length any file system allows.
void input_text(const char* label, std::string& text) {
  char buf[4096];
  std::snprintf(buf, sizeof buf, "%s", text.c_str());
  if (ImGui::InputText(label, buf, sizeof buf)) text = buf;
}

}  // namespace

// ---- the input's buttons -----------------------------------------------------------------------

void choose_demo(App& app) {
  Session& c = app.session;
  app.in_mode = 0;
  if (!c.demo() && c.load_demo()) {
    input_loaded(app);
  }
}

// A refusal stays the session's (the bottom bar, the state dump); the controls show it beside
// the button that asked (Session::input_refused).
bool generate_random(App& app) {
  if (!app.session.load_random(app.in_n, app.in_dk, app.in_dv, app.in_seed, app.in_heads)) return false;
  input_loaded(app);
  app.in_mode = 1;
  return true;
}

bool load_typed_files(App& app) {
  if (!app.session.load_files(app.in_files)) return false;
  input_loaded(app);
  return true;
}

// ---- controls ---------------------------------------------------------------------------------

void draw_controls(App& app, const Layout& l) {
  const Lang lang = app.lang;
  Session& c = app.session;
  ImGui::SetNextWindowPos(ImVec2(l.controls.x, l.controls.y), ImGuiCond_Always);
  ImGui::SetNextWindowSize(ImVec2(l.controls.w, l.controls.h), ImGuiCond_Always);
  ImGui::Begin(fmt("%s###controls", tr(lang, S::Controls)).c_str(), nullptr,
               ImGuiWindowFlags_NoMove | ImGuiWindowFlags_NoResize | ImGuiWindowFlags_NoCollapse |
                   ImGuiWindowFlags_NoBringToFrontOnFocus);
  // Language.
  // Each control goes on the line before it only where it fits (a large UI scale, a small window).
  ImGui::TextUnformatted(tr(lang, S::Language));
  same_line_if_fits(radio_width("中文"));
  if (ImGui::RadioButton("中文", app.lang == Lang::Zh)) app.lang = Lang::Zh;
  same_line_if_fits(radio_width("English"));
  if (ImGui::RadioButton("English", app.lang == Lang::En)) app.lang = Lang::En;
  // The centre panel's view: one radio button per registered view.
  ImGui::TextUnformatted(tr(lang, S::ViewLabel));
  const std::vector<std::string>& names = view_names();
  for (std::size_t i = 0; i < names.size(); ++i) {
    const char* label = view_label(static_cast<int>(i), lang);
    if (i > 0) same_line_if_fits(radio_width(label));
    if (radio_fit(label, app.view == names[i])) app.view = names[i];
  }
  // The layer and the head every view shows, when the problem has more than one.
  if (c.layer_count() > 1 || c.heads() > 1) {
    const Bundle* b = c.from_bundle() ? c.bundle() : nullptr;
    if (b && c.layer_count() > 1) {
      const auto layer_name = [&](int i) { return fmt("%d · %s###layer%d", i, b->calls[i].name.c_str(), i); };
      ImGui::SetNextItemWidth(-(text_width(tr(lang, S::HeadsLayer)) + ImGui::GetStyle().ItemInnerSpacing.x));
      if (ImGui::BeginCombo(fmt("%s###layer", tr(lang, S::HeadsLayer)).c_str(), layer_name(c.layer()).c_str())) {
        for (int i = 0; i < c.layer_count(); ++i) {
          const bool sel = i == c.layer();
          if (ImGui::Selectable(layer_name(i).c_str(), sel) && !sel && c.set_layer(i)) input_loaded(app);
          if (sel) ImGui::SetItemDefaultFocus();
        }
        ImGui::EndCombo();
      }
    }
    if (c.heads() > 1) {
      int h = c.head();
      ImGui::SetNextItemWidth(-(text_width(tr(lang, S::HeadsHead)) + ImGui::GetStyle().ItemInnerSpacing.x));
      if (ImGui::SliderInt(fmt("%s###head", tr(lang, S::HeadsHead)).c_str(), &h, 0, c.heads() - 1))
        c.set_head(std::clamp(h, 0, c.heads() - 1));
    }
  }

  // Step playback: only in the views that show the chain's steps (the others have their own
  // buttons, or no steps).
  if (app.shown_view().chain_steps()) {
    section(tr(lang, S::Steps));
    ImGui::TextColored(kHighlightV4, tr(lang, S::StepOf), app.play.step());
    for (int k = 1; k <= kSteps; ++k) {
      if (selectable_wrapped(app, step_name(lang, k, c.problem()), app.play.step() == k)) {
        c.clear_error();
        app.play.set_step(k);
      }
    }
    if (ImGui::Button(tr(lang, S::Prev))) {
      c.clear_error();
      app.play.prev();
    }
    const char* play = tr(lang, app.play.playing() ? S::Pause : S::Play);
    same_line_if_fits(button_width(play));
    if (ImGui::Button(fmt("%s###play", play).c_str())) {
      c.clear_error();
      app.play.toggle_play();
    }
    same_line_if_fits(button_width(tr(lang, S::Next)));
    if (ImGui::Button(tr(lang, S::Next))) {
      c.clear_error();
      app.play.next();
    }
    same_line_if_fits(button_width(tr(lang, S::Reset)));
    if (ImGui::Button(tr(lang, S::Reset))) {
      c.clear_error();
      app.play.home();
    }
    float speed = static_cast<float>(app.play.speed());
    ImGui::SetNextItemWidth(-(ImGui::CalcTextSize(tr(lang, S::Speed)).x + ImGui::GetStyle().ItemInnerSpacing.x));
    if (ImGui::SliderFloat(fmt("%s###speed", tr(lang, S::Speed)).c_str(), &speed, kMinSpeed, kMaxSpeed, "%.2f",
                           ImGuiSliderFlags_Logarithmic)) {
      c.clear_error();
      app.play.set_speed(speed);
    }
  }

  // Query, temperature, mask.
  section(tr(lang, S::Query));
  const Problem& p = c.problem();
  if (p.n() <= 256) {
    const std::string cur = indexed_label(p.query_tokens(), c.query());
    ImGui::SetNextItemWidth(-FLT_MIN);
    if (ImGui::BeginCombo("###query", cur.c_str())) {
      for (int i = 0; i < p.n(); ++i) {
        const bool sel = i == c.query();
        if (ImGui::Selectable(fmt("%s###q%d", indexed_label(p.query_tokens(), i).c_str(), i).c_str(), sel)) c.set_query(i);
        if (sel) ImGui::SetItemDefaultFocus();
      }
      ImGui::EndCombo();
    }
  } else {
    int q = c.query();
    if (ImGui::InputInt("###queryidx", &q)) c.set_query(std::clamp(q, 0, p.n() - 1));
  }
  // Several queries: a typed list (shift-click in the heatmap does the same), shown as indices.
  wrapped(app, tr(lang, S::QueriesLabel), &kDimV4);
  if (!app.queries_entry_active) {
    std::string list;
    for (int q : c.queries()) list += (list.empty() ? "" : ", ") + std::to_string(q);
    std::snprintf(app.queries_text, sizeof app.queries_text, "%s", list.c_str());
  }
  ImGui::SetNextItemWidth(-FLT_MIN);
  if (ImGui::InputTextWithHint("###queries", tr(lang, S::QueriesHint), app.queries_text, sizeof app.queries_text,
                               ImGuiInputTextFlags_EnterReturnsTrue)) {
    c.set_queries_text(app.queries_text);
  }
  app.queries_entry_active = ImGui::IsItemActive();
  if (c.queries().size() > 1 && ImGui::Button(fmt("%s###onlyq", tr(lang, S::QueriesClear)).c_str())) {
    c.set_queries({c.query()});
  }
  ImGui::TextUnformatted(tr(lang, S::Temperature));
  // Live at every size: each value the slider reports is a request, run off this thread; the
  // latest one wins and the picture follows as fast as the backend does.
  double t = c.requested_temperature();
  ImGui::SetNextItemWidth(-FLT_MIN);
  if (slider_double("###tslider", t, kTemperatureMin, kTemperatureMax, "%.6g", ImGuiSliderFlags_Logarithmic))
    c.set_temperature(t);
  // The typed entry follows the state whenever the user is not typing in it.
  if (!app.temp_entry_active) std::snprintf(app.temp_text, sizeof app.temp_text, "%.6g", c.requested_temperature());
  ImGui::SetNextItemWidth(ImGui::GetContentRegionAvail().x * 0.5f);
  if (ImGui::InputText("###ttext", app.temp_text, sizeof app.temp_text, ImGuiInputTextFlags_EnterReturnsTrue)) {
    c.set_temperature_text(app.temp_text);
  }
  app.temp_entry_active = ImGui::IsItemActive();
  same_line_if_fits(text_width(tr(lang, S::TemperatureEntry)));
  ImGui::TextColored(kDimV4, "%s", tr(lang, S::TemperatureEntry));
  // A new input's refusal is shown beside Generate or Load instead, when they are open.
  const bool beside_input = c.input_refused() && (app.in_mode == 1 || app.in_mode == 2);
  if (!c.error().empty() && !beside_input) {
    wrapped(app, std::string(tr(lang, S::ErrorPrefix)) + c.error_text(lang), &kErrorV4);
  }
  // A view that uses neither the temperature nor the mask set here (its key help says so: the
  // decode view's new token reads the keys up to its own; the perf view's sweep has its own) says
  // so beside them, as F1 and the keyboard line do.
  const StepKeysHelp help = app.shown_view().step_keys_help(lang);
  if (!help.temperature.empty()) wrapped(app, tr(lang, S::PanelTemperatureOtherViews), &kDimV4);
  ImGui::TextUnformatted(tr(lang, S::Mask));
  const MaskKind mk = c.requested_mask();
  ImGui::BeginDisabled(c.from_bundle());  // the CLI refuses --mask with --bundle too
  if (radio_fit(tr(lang, S::MaskNone), mk == MaskKind::None)) c.set_mask(MaskKind::None);
  same_line_if_fits(radio_width(tr(lang, S::MaskCausal)));
  if (radio_fit(tr(lang, S::MaskCausal), mk == MaskKind::Causal)) c.set_mask(MaskKind::Causal);
  if (c.has_custom_mask()) {
    same_line_if_fits(radio_width(tr(lang, S::MaskCustom)));
    if (radio_fit(tr(lang, S::MaskCustom), mk == MaskKind::Custom)) c.set_mask(MaskKind::Custom);
  }
  ImGui::EndDisabled();
  if (c.from_bundle()) wrapped(app, tr(lang, S::HeadsBundleMask), &kDimV4);
  if (!help.mask.empty()) wrapped(app, tr(lang, S::PanelMaskOtherViews), &kDimV4);
  mods_controls(app);

  // Backend.
  ImGui::TextUnformatted(tr(lang, S::Backend));
  if (ImGui::RadioButton("CPU (Eigen)", c.backend() == "cpu")) c.set_backend("cpu");
  same_line_if_fits(radio_width("CUDA"));
  ImGui::BeginDisabled(!c.cuda_ok());
  if (ImGui::RadioButton("CUDA", c.backend() == "cuda")) c.set_backend("cuda");
  ImGui::EndDisabled();
  if (!c.cuda_ok()) {
    // What it means for the user; the runtime's own words ("cudaGetDeviceCount: ...") in the
    // tooltip of the radio button and of the note.
    const bool over_radio = ImGui::IsItemHovered(ImGuiHoveredFlags_AllowWhenDisabled);
    wrapped(app, message_of(Msg::CudaUnusable, {}).text(lang), &kDimV4);
    if (over_radio || ImGui::IsItemHovered())
      ImGui::SetTooltip("%s", fmt(tr(lang, S::CudaUnavailable), cuda_reason_text(c.cuda_reason(), lang).c_str()).c_str());
  }
  // The run's precision (every view shows that pipeline); a refusal (bf16 on CUDA, or streamed)
  // shows as the error line above, in the UI language.
  ImGui::TextUnformatted(tr(lang, S::RunPrecision));
  same_line_if_fits(radio_width("fp32"));
  if (ImGui::RadioButton("fp32###prec32", c.requested_precision() == Precision::FP32)) c.set_precision(Precision::FP32);
  same_line_if_fits(radio_width("bf16"));
  if (ImGui::RadioButton("bf16###prec16", c.requested_precision() == Precision::BF16)) c.set_precision(Precision::BF16);

  // Input: demo or random.
  section(tr(lang, S::Input));
  if (radio_fit(tr(lang, S::ModeDemo), app.in_mode == 0)) choose_demo(app);
  if (radio_fit(tr(lang, S::ModeRandom), app.in_mode == 1)) app.in_mode = 1;
  if (app.in_mode == 1) {
    ImGui::SetNextItemWidth(ImGui::GetContentRegionAvail().x * 0.5f);
    ImGui::InputInt("N", &app.in_n, 256, 1024);
    ImGui::SetNextItemWidth(ImGui::GetContentRegionAvail().x * 0.5f);
    ImGui::InputInt("d_k", &app.in_dk);
    ImGui::SetNextItemWidth(ImGui::GetContentRegionAvail().x * 0.5f);
    ImGui::InputInt("d_v", &app.in_dv);
    ImGui::SetNextItemWidth(ImGui::GetContentRegionAvail().x * 0.5f);
    ImGui::InputInt(fmt("%s###heads", tr(lang, S::HeadsCount)).c_str(), &app.in_heads);
    ImGui::SetNextItemWidth(ImGui::GetContentRegionAvail().x * 0.5f);
    // The whole 64-bit range the command line takes (an int field lost seeds above 2^31 - 1).
    ImGui::InputScalar(fmt("%s###seed", tr(lang, S::Seed)).c_str(), ImGuiDataType_U64, &app.in_seed);
    // Out-of-range values stay in the fields as typed and are refused by Generate, with the
    // reason (they used to be clamped silently).
    if (ImGui::Button(tr(lang, S::Generate))) generate_random(app);
    if (c.input_refused()) wrapped(app, std::string(tr(lang, S::ErrorPrefix)) + c.error_text(lang), &kErrorV4);
    if (c.demo()) wrapped(app, tr(lang, S::RandomPending), &kDimV4);
    wrapped(app, tr(lang, S::RandomLimits), &kDimV4);
  }
  // Your own inputs: paths typed (CSV or .npy, as the command line takes them).
  if (radio_fit(tr(lang, S::ModeFiles), app.in_mode == 2)) app.in_mode = 2;
  if (app.in_mode == 2) {
    const float w = ImGui::GetContentRegionAvail().x * 0.7f;
    const std::pair<const char*, std::string*> fields[] = {{"Q###fq", &app.in_files.q},
                                                           {"K###fk", &app.in_files.k},
                                                           {"V###fv", &app.in_files.v}};
    for (const auto& [label, text] : fields) {
      ImGui::SetNextItemWidth(w);
      input_text(label, *text);
    }
    // The longer labels above their fields, wrapped: beside a field they were cut at the panel's edge.
    wrapped(app, tr(lang, S::FilesMask));
    ImGui::SetNextItemWidth(-1);
    input_text("###fmask", app.in_files.mask);
    wrapped(app, tr(lang, S::FilesTokens));
    ImGui::SetNextItemWidth(-1);
    input_text("###ftok", app.in_files.tokens);
    if (ImGui::Button(fmt("%s###load", tr(lang, S::Load)).c_str())) load_typed_files(app);
    if (c.input_refused()) wrapped(app, std::string(tr(lang, S::ErrorPrefix)) + c.error_text(lang), &kErrorV4);
    wrapped(app, tr(lang, S::FilesHint), &kDimV4);
  }
  // The bundle of --bundle: back to it after another input.
  if (const Bundle* b = c.bundle()) {
    if (radio_fit(fmt(tr(lang, S::ModeBundle), b->dir.c_str()).c_str(), app.in_mode == 3)) {
      app.in_mode = 3;
      if (!c.from_bundle() && c.load_bundle(0)) input_loaded(app);
    }
  }
  ImGui::Separator();
  wrapped(app, keyboard_line(app), &kDimV4);
  ImGui::End();
}

}  // namespace attnlab::viewer
