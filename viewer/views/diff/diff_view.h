// The A/B difference view's logic, free of SDL and ImGui (viewer/views/diff/panel.cpp draws it). A is the
// run on screen, B the same request with a few settings changed (a DiffSpec: --diff
// KEY=VALUE[,KEY=VALUE...] or the view's editor); the session runs B on its worker beside A
// (DiffCompanion below) and this file turns the pair into B − A of one step: the signed map, its
// symmetric range, the largest |changes| with their query and key tokens, and the pooled picture
// of a large map (per pixel the change of largest magnitude, its sign kept). Both settings are
// named in words. Unit-tested in tests/viewer/test_diff_view.cpp.
#pragma once

#include "core/problem.h"
#include "core/trace.h"
#include "core/types.h"
#include "core/messages.h"
#include "viewer/draw/layout.h"
#include "viewer/draw/pooling.h"
#include "viewer/session/companion.h"
#include "viewer/views/view.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace attnlab::viewer {

class Session;

// What B changes, each key at most once; an unset key keeps A's value.
//   mask=none|causal  temperature=T (finite > 0)  backend=cpu|cuda  variant=staged|fused
//   precision=fp32|bf16  query=TOKEN|INDEX (the same run, another row: the selected rows compared)
struct DiffSpec {
  std::optional<MaskKind> mask;
  std::optional<double> temperature;
  std::optional<std::string> backend;
  std::optional<Variant> variant;
  std::optional<Precision> precision;
  std::optional<std::string> query;
  bool empty() const { return !mask && !temperature && !backend && !variant && !precision && !query; }
  bool operator==(const DiffSpec&) const = default;
};

// "temperature=0.5,mask=causal" -> DiffSpec. Throws InputError (core/messages.h, Msg::Diff*) naming
// the item, key or value: an empty spec, an item without '=', an unknown key, a key given twice, a
// value the key does not take. The query is resolved later, against the problem (apply_diff).
DiffSpec parse_diff_spec(const std::string& text);
// The spec written back in the same syntax, keys in a fixed order (parse_diff_spec reads it back).
std::string diff_spec_text(const DiffSpec& d);

// The first step where B − A of `d` can differ from 0: 2 (the logits) when it changes only the
// temperature or the mask, which act there; 1 otherwise.
int diff_first_step(const DiffSpec& d);

// A with d's changes (the query resolved against p: token or 0-based index; InputError when it is
// neither). The temperature is validated (InputError).
RunSetting apply_diff(RunSetting a, const DiffSpec& d, const Problem& p);

// One setting in words for the view's "A: ..." / "B: ..." lines, e.g. "T = 0.85 · mask none · CPU ·
// staged · fp32 · query 上下文 (#2)"; `changed` (B's line) marks the settings that differ from A's
// with a leading '*'.
std::string setting_text(const RunSetting& s, const Problem& p, Lang lang, const RunSetting* changed_from = nullptr);

// B − A of one step, rows x cols row-major. A cell where either value is not finite (−∞ logits of
// a masked key) or that both runs mask is `masked`: its difference is NaN there (drawn hatched,
// left out of the range and of the top changes), since −∞ − (−∞) has no value.
struct DiffMap {
  int rows = 0, cols = 0;
  std::vector<float> d;   // B − A, NaN where masked
  int masked = 0;         // how many cells are masked
  double max_abs = 0;     // max |B − A| over the unmasked cells
  int arg_row = -1, arg_col = -1;  // where it is (-1: no unmasked cell)
  double mean_abs = 0;
  int changed = 0;        // cells with B != A
  float at(int r, int c) const { return d[static_cast<std::size_t>(r) * cols + c]; }
};

// a and b: rows x cols row-major (the same shape). mask_a / mask_b (may be null): additive masks of
// mask_rows x cols (0 keeps, −inf blocks), applied to row r as mask row r % mask_rows; a cell both
// mask is masked (the weights there are exactly 0 in both, which says nothing).
DiffMap diff_map(const float* a, const float* b, int rows, int cols, const float* mask_a, const float* mask_b,
                 int mask_rows);
// The query diff: one row, B's selected row qb of mb minus A's qa of ma (the same matrix where only
// the query differs), each side's mask (mask_rows of them, or null) for its row.
DiffMap diff_rows(const float* ma, const float* mb, int cols, int qa, int qb, const float* mask_a, const float* mask_b,
                  int mask_rows);

// The signed colour range: ±max_abs (±1 when the map is all zeros, so a flat map is the centre
// colour).
ValueRange symmetric_range(const DiffMap& m);

// The k largest |B − A| (unmasked), largest first; ties by row then column.
struct Change {
  int row = 0, col = 0;
  double a = 0, b = 0, diff = 0;
};
std::vector<Change> top_changes(const DiffMap& m, const float* a, const float* b, int k);

// The picture of the map over rmap x cmap (map_axis): per block the difference of largest
// magnitude with its sign (max of B − A or of A − B, whichever is larger), masked when every cell
// of the block is.
std::vector<PooledCell> pool_signed(const DiffMap& m, const AxisMap& rmap, const AxisMap& cmap);

// The view's state for the session's pair on screen (A = trace(), B = b_trace_of()): B − A of
// `step` (1..4 as the chain view's steps; 4 when either run kept only the output), its top
// changes; recomputed only when the state on screen (revision), the step or the query changed.
// B − A of step 1..4 as the diff view shows it, with its largest changes: computed by the view,
// or by the session's worker beside each run (DiffCompanion), so that a new temperature costs the
// UI thread no map.
struct StepDiff {
  int step = 0;               // the step shown (4 when a side kept only the output)
  int query = -1;             // A's query it was computed for
  bool output_only = false;   // a fused run on one side: step 4 shown
  bool query_diff = false;    // one row: B's query row minus A's (of B's run, with the spec's other changes)
  bool same_run = false;      // B is A (the spec changes nothing)
  DiffMap map;
  std::vector<Change> top;
};
// a and b: A's and B's traces (the same trace for a query diff); query_named: the spec names the
// query. Null while a step's matrix is missing on either side or the shapes differ.
std::shared_ptr<const StepDiff> step_diff(const Trace& a, const Trace& b, const RunSetting& sa, const RunSetting& sb,
                                          bool query_named, int step);

// The view's companion run (viewer/session/companion.h): B, the run on screen with the spec's
// changes, computed on the session's worker beside A and adopted with it, and beside a run B − A
// of the step on screen (step_diff), so that a new temperature costs the UI thread no map.
struct DiffResult : CompanionResult {
  DiffSpec spec;
  RunSetting b_setting;
  std::shared_ptr<const Problem> b_problem;
  std::shared_ptr<const Trace> b_trace;  // null when B is A's own run (b_same_run) or failed
  bool b_same_run = false;               // only the query differs: B is A's trace, another row
  Message b_error;                       // why B could not run (empty: it ran)
  std::shared_ptr<const StepDiff> step_diff;  // beside a run; null for the trace on screen
  int diff_step = 0;
};
class DiffCompanion final : public Companion {
 public:
  explicit DiffCompanion(DiffSpec spec) : spec_(std::move(spec)) {}
  std::string key() const override { return "diff: " + diff_spec_text(spec_); }
  std::shared_ptr<const CompanionResult> compute(const CompanionInput& in) const override;

 private:
  DiffSpec spec_;
};
std::shared_ptr<const Companion> diff_companion(const DiffSpec& spec);
// The diff result on screen (null: none asked for or not computed yet), and B's trace (A's own,
// trace(), when only the query differs).
const DiffResult* diff_of(const Session& s);
const Trace* b_trace_of(const Session& s);
// Throws InputError when B of `d` cannot run beside the problem on screen: a query that is no
// token nor index, CUDA without a device, bf16 staged on CUDA (what --diff is checked with).
void check_diff(const Session& s, const DiffSpec& d);

class DiffView final : public View {
 public:
  enum class Status { Ok, NoSpec, Streamed, Computing, Failed };
  static constexpr int kTop = 8;
  struct Options {
    std::optional<DiffSpec> spec;  // --diff KEY=VALUE,...: B's changes (needs --view diff)
  };
  static const char* label(Lang lang);
  static bool parse_flag(const std::string& flag, const FlagValue& value, Options& o);
  static void finish_options(Options&, bool, std::string&) {}
  static std::string usage();
  DiffView() = default;
  // Checks --diff against the problem on screen (check_diff: InputError, exit 2).
  DiffView(const ViewContext& ctx, const Options& o);

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
  bool info_panel() const override { return false; }
  // B's changes as applied (--diff, the editor's Apply; empty: none); apply checks them against
  // the session first (false and edit_error() when refused).
  const std::optional<DiffSpec>& spec() const { return spec_; }
  bool apply(const Session& s, const DiffSpec& d);
  // The step to show, given the playback's: the first time the view is drawn with a spec, at
  // least the first step where the spec's change shows (diff_first_step), unless --step was given
  // with the --diff; the playback's after.
  int open_at(int step);
  DiffSpec edit;                 // the editor's fields
  const Message& edit_error() const { return edit_error_; }

  Status update(const Session& c, int step);
  Status status() const { return status_; }
  const DiffMap& map() const { return d_->map; }
  const std::vector<Change>& top() const { return d_->top; }
  int step() const { return d_->step; }
  bool output_only() const { return d_->output_only; }
  bool query_diff() const { return d_->query_diff; }
  bool same_run() const { return d_->same_run; }
  int computed() const { return computed_; }  // how many maps the view computed itself
  // A's and B's value of a cell of the map (row 0 of a query diff is A's query row).
  std::pair<double, double> values(const Session& c, int row, int col) const;
  // The view's part of the state dump: status, spec, step, rows, cols, max_abs, arg, changed,
  // masked, top, and the panel's last frame (panel, header, table_narrow).
  std::string state_json(const Session& c) const;
  // Where the panel drew its window (the state dump), screen pixels.
  struct Placed {
    float x = 0, w = 0;
  } panel;
  // The panel's last frame: B's editor and the settings' lines as a header that scrolls above the
  // map (kit.h begin_header), and the height of what it keeps in view under the header (the
  // figures, the map's controls), and whether the panel was too narrow for the map beside the
  // whole table. In the state dump.
  ScrollHeader header;
  float below_h = 0;
  std::string summary;  // the line that sums B − A up, as the panel drew it last (the state dump)
  bool table_narrow = false;  // the largest changes' table without its A and B columns
  bool map_too_small = false;  // MapPlot::too_small
  float table_w = 0, table_need = 0;  // its width, and the width its columns' widest cells need

 private:
  Status status_ = Status::NoSpec;
  std::shared_ptr<const StepDiff> d_ = std::make_shared<const StepDiff>();
  std::uint64_t revision_ = ~std::uint64_t{0};
  int asked_step_ = -1, query_ = -1;
  int computed_ = 0;
  bool opened_ = false;
  std::optional<DiffSpec> spec_;
  Message edit_error_;
  std::shared_ptr<const Companion> companion_;
};

void draw_panel(DiffView& v, Shell& app, const Layout& l);

}  // namespace attnlab::viewer
