// The backward view's logic (--view backward), free of SDL and ImGui (viewer/views/backward/panel.cpp
// draws it; unit-tested in tests/viewer/test_backward_view.cpp): the staged backward pass of the
// problem on screen (cpu/backward.h: backward_of on the session's run when it kept every stage in
// fp32, else cpu_backward's own staged run), played in reverse, one step per gradient:
//   dO beside O, dV beside V, dP beside P, D beside O, dS = P ∘ (dP − D) beside P, the score
//   mods' gradients beside their stages (soft-cap, bias), the scaled scores' and the raw scores'
//   gradients, RoPE's rotated Q and K, dQ beside Q, dK beside K, and dT: the entries
//   dS ∘ (−logits / T) whose sum it is, beside the logits.
// The backward is the view's companion run (viewer/session/companion.h): the session's worker
// computes it beside every run of the state on screen, so a temperature change (the view's slider
// sets the session's) costs the UI thread nothing. dO is a seeded standard normal matrix
// (--dout-seed S) or the sum loss's ones (--loss sum). Beside it, for the selected query, the dS
// row in its two parts and their product, the row sum (0: Σ_j P_ij (dP_ij − D_i) = D_i − D_i), and
// how the |dS| mass gathers on the top key as T falls. Refused (said, not computed) above
// kBackwardMaxTokens: the staged backward keeps N × N matrices.
#pragma once

#include "core/backward.h"
#include "core/messages.h"
#include "viewer/session/companion.h"
#include "viewer/draw/heatmap.h"
#include "viewer/session/options.h"
#include "viewer/views/view.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace attnlab::viewer {

class Session;

// The view's words (backward_view.cpp), English and Chinese.
enum class BT {
  Label, Title, StepOf, Play, Pause, Prev, Next, Home, Upstream, UpRandom, UpSum, Seed, Temperature,
  NeedsStages, Computing, Failed, Forward, Gradient, Pooled,
  StepDout, StepDv, StepDp, StepD, StepDs, StepCapped, StepBiased, StepTemperature, StepScores, StepRope,
  StepDq, StepDk, StepDt,
  WhyDout, WhyDv, WhyDp, WhyD, WhyDs, WhyCapped, WhyBiased, WhyTemperature, WhyScores, WhyRope, WhyDq, WhyDk, WhyDt,
  RowTitle, RowWeights, RowCentered, RowProduct, RowKey, RowSum, RowWhy, Concentration, TopKey, TopTwo,
  Dt, TemperatureLesson, Caveats, SweepTitle, SweepAxis, SweepTop, SweepTopTwo, SweepMass, SweepNone, SweepRounding,
  TipQuery, TipKey, TipDim, LogNote,
  Count_
};
const char* btr(Lang lang, BT id);
std::vector<std::string> backward_texts();

// Above this N the view says why and computes nothing: the staged backward keeps N × N matrices
// (the forward's stages and dP, dS, the scores' gradients), as the views that need every stage.
constexpr int kBackwardMaxTokens = kKeepStagesMaxTokens;
constexpr double kBackwardTMin = 0.05, kBackwardTMax = 5;  // the slider's range

// One step of the walk back: which pair of matrices it shows.
enum class BackStep { Dout, Dv, Dp, D, Ds, Capped, Biased, Scaled, Scores, Rope, Dq, Dk, Dt };
// The steps of a backward, in the order the chain runs back: the mods' steps only when the
// problem has them (their gradient is not empty).
std::vector<BackStep> backward_steps(const GradTrace& g);
const char* back_step_word(BackStep s);  // "dout", "dv", ... (the state dump)
// A step's title and why: how its gradient came back, through the forward's stage after the
// step's own. After the scaled scores come ALiBi / the bias, the cap and ÷ T, each where g has it:
// d capped comes through ÷ T, d biased through the cap (or ÷ T), d scaled through the first of them.
struct StepTexts {
  BT title, why;
};
StepTexts back_step_texts(BackStep s, const GradTrace& g);

// The forward's stage (left: p's inputs for dV, dQ, dK) and the gradient (right) a step shows;
// `dt` is the dT step's matrix (dt_terms). For RoPE the pair is (rotated Q, its gradient).
struct StepPair {
  // A matrix's name: a symbol both languages write alike ("dO"), or a word with its Chinese.
  struct Name {
    Name(const char* en_, const char* zh_ = nullptr) : en(en_), zh(zh_) {}
    const char* in(Lang lang) const { return lang == Lang::Zh && zh ? zh : en; }
    const char* en;
    const char* zh;
  };
  const MatrixF* forward = nullptr;
  const MatrixF* grad = nullptr;
  Name forward_name = "";         // "O", "V", "P", ...
  Name grad_name = "";            // "dO", "dV", ...
  bool query_rows = true;         // rows are queries (false: keys, for dV and dK)
  // Columns are keys (the (n, m) steps, else dimensions); the mask hides cells of every such
  // gradient (0 there; dP is multiplied by P = 0 there).
  bool key_cols = false;
  bool forward_weights = false;   // the forward is the weights P (a log scale above 64 tokens)
  bool forward_masked = false;    // the mask hides cells of the forward too (P, the logits)
};
StepPair step_pair(const Problem& p, const GradTrace& g, BackStep s, const MatrixF& dt);

// What a map's edges are labelled with: its rows' the query or the key tokens, its columns' the
// key tokens, the dimensions, or nothing on a single column (D, one value per row).
enum class Edge { Queries, Keys, Dims, None };
struct MapEdges {
  Edge rows = Edge::Queries, cols = Edge::None;
};
// The edges of matrix m, the forward's or the gradient of a step's pair.
MapEdges map_edges(const StepPair& pair, const MatrixF& m);

// A map of the view as drawn: each pixel block's entry of largest |value| (so a lone large entry of
// a block of thousands stays visible), the cells `mask` hides left out (a block with none left is
// masked: hatched). A forward stage: viridis over its range, logarithmic with `log_scale` (the
// weights P above 64 tokens, as the chain view draws them: log_range). A gradient: the diverging
// scale over [−a, a] (a: the largest |value|); with `log_scale` symmetric-log: the sign times the
// place of |value| on log_range([0, a]), so entries decades below the largest still take a colour.
struct MapPicture {
  std::vector<PooledCell> cells;  // rows.size() x cols.size(), row-major: each block's entry shown
  ValueRange range;               // the scale's ends: the legend's bottom and top
  bool gradient = false, log_scale = false;
  int masked_blocks = 0;
  double position(double v) const;  // v's place on the colour scale, in [0, 1]
};
// m (rows, cols) row-major; mask null or (rows, cols) of 0 / -inf.
// The scale's ends alone (map_picture's range, whatever the pooling): what sizes the legend
// before the map's size is known.
ValueRange map_range(const MatrixF& m, const MatrixF* mask, bool gradient, bool log_scale);
MapPicture map_picture(const MatrixF& m, const MatrixF* mask, bool gradient, bool log_scale, const AxisMap& rows,
                       const AxisMap& cols);

// The size of a map of rows x cols cells in at most w x h pixels: square cells, as large as fit,
// its thin side at least `least` where the box allows (a column like D or dV is drawn narrow but
// readable, a map of few rows short but not a hairline), so a square matrix never becomes a stripe.
struct MapSize {
  float w = 0, h = 0;
};
MapSize map_size(int rows, int cols, float w, float h, float least);

// dS ∘ (−logits / T) per entry (0 where masked), whose sum is dT. (heads n, m)
MatrixF dt_terms(const GradTrace& g, double temperature);

// The selected query's dS row in its parts, and where its |dS| mass sits.
struct DsRow {
  int query = 0, keys = 0;
  std::vector<double> p, centered, ds;  // P_ij, dP_ij − D_i, dS_ij (the backward's own)
  double D = 0;
  double p_dp = 0;      // Σ_j P_ij dP_ij (= D_i)
  double row_sum = 0;   // Σ_j dS_ij, summed in double: 0 up to rounding
  double mass = 0;      // Σ_j |dS_ij|
  int top = -1;         // the key of the largest weight
  double top_share = 0;      // |dS_i,top| / mass (at most ½: the top entry is minus the others' sum)
  double top_two_share = 0;  // the top two keys' share of the mass
};
DsRow ds_row(const GradTrace& g, int query);

// The temperature sweep: the same problem and dO at kBackwardSweepPoints temperatures spread
// evenly in log T over the slider's range, each the staged backward (cpu_backward), keeping for
// every row where its |dS| mass sits (top_share, top_two_share, mass of ds_row). Computed by the
// companion beside the backward up to kBackwardSweepMaxTokens (it costs that many backwards).
constexpr int kBackwardSweepPoints = 9;
constexpr int kBackwardSweepMaxTokens = 512;
struct SweepPoint {
  double temperature = 0;
  std::vector<float> top_share, top_two_share, mass;  // one per row; shares NaN where mass is 0
};
std::vector<double> sweep_temperatures();
// A point of row `row` where the top key's dS is exactly 0 while the others' is not: its weight
// rounded to 1 in fp32, so D rounded to its dP (the math gives it minus the others' sum).
bool sweep_rounded_top(const std::vector<SweepPoint>& sweep, int row);
std::vector<SweepPoint> temperature_sweep(const Problem& p, const Upstream& u,
                                          const std::atomic<bool>* cancel = nullptr);

// The companion: the backward of the run on screen for the view's dO, and the sweep.
struct BackwardResult : CompanionResult {
  std::shared_ptr<const Problem> problem;  // what it is the backward of
  std::shared_ptr<const GradTrace> grad;  // null when refused or failed (error says why)
  Message error;
  bool on_screen_run = false;  // backward_of the session's own run (else cpu_backward's run)
  double temperature = 0;
  std::vector<SweepPoint> sweep;  // empty above kBackwardSweepMaxTokens
};
class BackwardCompanion final : public Companion {
 public:
  explicit BackwardCompanion(const Upstream& u) : up_(u) {}
  std::string key() const override;
  std::shared_ptr<const CompanionResult> compute(const CompanionInput& in) const override;

 private:
  Upstream up_;
};

class BackwardView final : public View {
 public:
  struct Options {
    std::uint64_t dout_seed = 0;  // --dout-seed S
    bool sum = false;             // --loss sum
    bool seed_given = false;      // --dout-seed was given (refused with --loss, as the CLI does)
    std::string step;             // --back-step WORD: the step it opens on (back_step_word)
  };
  enum class Status { Ok, TooLarge, Computing, Failed };
  static const char* label(Lang lang) { return btr(lang, BT::Label); }
  static bool parse_flag(const std::string& flag, const FlagValue& value, Options& o);
  static void finish_options(Options&, bool, std::string&) {}
  static std::string usage();
  BackwardView() : BackwardView(Options{}) {}
  explicit BackwardView(const Options& o);
  // Refuses a --back-step the problem on screen has no step for (dcapped, dbiased, dq_rot), with what it needs.
  BackwardView(const ViewContext& ctx, const Options& o);

  std::shared_ptr<const Companion> companion() const override { return companion_; }
  // Space, ←/→ and Home step through the backward instead of the chain's steps.
  bool on_action(Action a) override;
  StepKeysHelp step_keys_help(Lang lang) const override;
  void dump(nlohmann::json& j, const Session& s) const override;
  std::string broken(const Session& s) const override;
  std::vector<std::string> texts() const override { return backward_texts(); }
  bool info_panel() const override { return false; }

  // The backward on screen (null: too large, computing or failed; status() says which).
  const GradTrace* update(const Session& s);
  const Problem& problem() const { return *problem_; }  // of the backward on screen
  const std::vector<SweepPoint>& sweep() const { return sweep_; }
  double temperature() const { return temperature_; }
  Status status() const { return status_; }
  std::string error(Lang lang) const { return error_.text(lang); }
  bool on_screen_run() const { return on_screen_run_; }

  // The steps of the backward on screen and the one shown (clamped when a problem has fewer).
  const std::vector<BackStep>& steps() const { return steps_; }
  int step() const { return step_; }
  BackStep current() const { return steps_.empty() ? BackStep::Dout : steps_[step_]; }
  void next();
  void prev();
  void home();
  void toggle_play();
  bool playing() const { return playing_; }
  void hidden() override { playing_ = false; }  // stops, as the decode view does (it had frozen and resumed)
  // Playing: one step per kBackwardStepSeconds, wrapping from the last to the first. True on change.
  bool tick(double dt);

  // dO: a seeded normal matrix or the sum loss; a change asks the worker for the backward again.
  const Upstream& upstream() const { return up_; }
  void set_random(std::uint64_t seed);
  void set_sum();

  // The dS row of the session's selected query (cached by the backward and the query).
  const DsRow& row(const Session& s);
  // The dT step's matrix of the backward on screen.
  const MatrixF& dt_matrix();
  // Bumps with every backward adopted: what the panel's pictures are keyed on.
  std::uint64_t adopted() const { return adopted_; }
  std::string tex_key[2];  // what the panel's two textures show (the forward's, the gradient's)
  std::vector<std::string> dims[2];  // their columns' labels where the columns are dimensions (index_labels)
  MapPicture picture[2];   // and how (the legend's range, the state dump)
  // Each map's scale (map_range) and what it is of: the legend's width, known before the map is
  // placed, computed again only when the matrix changes.
  std::string legend_key[2];
  ValueRange legend_range[2];
  // Whether the backward on screen (adopted() == mask_checked) masks any entry: its forward keeps
  // a mask of zeros where none is set, and hatching's swatch is shown only where a cell is hatched.
  std::uint64_t mask_checked = ~std::uint64_t{0};
  bool any_masked = false;
  // Where the panel drew each map last (the state dump's maps[i].place): the map, the right end
  // of the selected row's mark beside it, the left and right edges of its colour legend; its edge
  // labels: the left edge of the row labels' room and the top of the column labels', every how
  // many rows and columns carry one (0: none), and the column labels' lines (2: staggered).
  struct MapPlace {
    float x = 0, y = 0, w = 0, h = 0, mark_right = 0, legend_x = 0, legend_right = 0, label_x = 0, labels_top = 0;
    int row_stride = 0, col_stride = 0, col_lines = 0;
  } place[2];
  // How the panel drew the dS row last: a table of numbers, or strips (the state dump's row_table).
  bool row_table = false;

 private:
  void set_upstream(const Upstream& u);
  Upstream up_;
  std::shared_ptr<const Companion> companion_;
  std::shared_ptr<const GradTrace> grad_;
  std::shared_ptr<const Problem> problem_;
  std::vector<SweepPoint> sweep_;
  double temperature_ = 1;
  Status status_ = Status::Computing;
  Message error_;
  std::uint64_t adopted_ = 0;  // bumps with every backward adopted (the caches' key)
  bool on_screen_run_ = false;
  std::vector<BackStep> steps_;
  int step_ = 0;
  bool playing_ = false;
  double elapsed_ = 0;
  std::string open_on_;  // --back-step: taken by the first backward that has that step
  DsRow row_;
  std::uint64_t row_of_ = 0, dt_of_ = 0;
  int row_query_ = -1;
  MatrixF dt_;
};

constexpr double kBackwardStepSeconds = 1.5;

void draw_panel(BackwardView& v, Shell& app, const Layout& l);

}  // namespace attnlab::viewer
