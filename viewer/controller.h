// The viewer's state and the only place it talks to the lab: the problem (demo or random), the
// query, temperature, mask and backend, and the Trace the backend registry returned for them. Every
// change goes through here; a change the core refuses (InputError: bad temperature, limits, no CUDA
// device) leaves the last valid state in place and keeps the message for the UI. The controller
// never computes attention itself (it calls attnlab::run_backend); the only arithmetic on results
// is the Compare checks, max |difference| per stage. Free of SDL and ImGui, so it is unit-tested.
#pragma once

#include "core/backend.h"
#include "core/problem.h"
#include "core/stats.h"
#include "core/trace.h"
#include "viewer/options.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace attnlab::viewer {

constexpr int kTableMaxTokens = 16;  // numeric tables are drawn up to this N

// Two runs of the current problem side by side: CPU vs CUDA (the staged chain on both), or the
// staged chain vs the fused kernel on the chosen backend (works without a GPU).
struct StageCompare {
  std::string stage;        // "scores" | "scaled" | "logits" | "weights" | "output"
  double max_abs_diff = 0;  // max |b - a| over all entries (-inf == -inf counts as 0)
  double a_ms = 0, b_ms = 0;  // the stage's time in each run (0 when not timed apart)
};

struct CompareResult {
  bool done = false;
  std::string error;          // why it could not run
  std::string a_name, b_name;  // "CPU" / "CUDA", or "staged" / "fused"
  double a_total_ms = 0, b_total_ms = 0;
  std::vector<StageCompare> stages;
  double speed_up() const { return b_total_ms > 0 ? a_total_ms / b_total_ms : 0; }  // a / b
};

// max |a - b| over all entries; equal infinities count as 0, any other non-finite mismatch (or a
// shape mismatch) as +inf.
double max_abs_diff(const MatrixF& a, const MatrixF& b);

class Controller {
 public:
  // Builds the initial state from the command line. Throws InputError for a bad query, an N over
  // the backend's limit or "--backend cuda" without a device (main turns it into exit 2).
  explicit Controller(const ViewerOptions& o);

  // ---- state changes: each returns false and sets error() when refused; state is kept then ----
  bool set_temperature(double t);
  bool set_temperature_text(const std::string& text);  // typed entry: "0.5", "abc", "0", ...
  bool set_query(int q);            // no backend run: the trace holds every row
  bool move_query(int delta);       // clamped to the rows
  bool set_mask(MaskKind m);
  bool toggle_mask();
  bool set_backend(const std::string& name);  // "cpu" | "cuda"
  bool load_demo();
  bool load_random(int n, int d_k, int d_v, std::uint64_t seed);
  const CompareResult& run_compare();          // runs CPU and CUDA on the current problem
  const CompareResult& run_variant_compare();  // staged vs fused on the chosen backend
  void clear_error() { error_.clear(); }

  // ---- what the UI shows ----
  const Problem& problem() const { return problem_; }
  const Trace& trace() const { return trace_; }
  bool demo() const { return demo_; }
  int query() const { return query_; }
  int n() const { return problem_.n(); }
  const std::string& backend() const { return backend_; }  // "cpu" | "cuda" (the chosen one)
  bool cuda_ok() const { return cuda_ok_; }
  const std::string& cuda_reason() const { return cuda_reason_; }
  const std::string& error() const { return error_; }
  int max_tokens() const { return backend_ == "cuda" ? kCudaMaxTokens : kCpuMaxTokens; }
  std::string compare_unavailable_reason() const;  // empty when CPU-vs-CUDA Compare can run
  const CompareResult& last_compare() const { return compare_; }
  std::uint64_t revision() const { return revision_; }  // bumps whenever trace_ changes
  double last_run_ms() const { return last_run_ms_; }   // wall time of the last backend call
  bool stages_kept() const { return trace_.has_stages; }
  double stages_need_gb() const { return need_gb_; }
  double available_gb() const { return avail_gb_; }
  int random_n() const { return rand_n_; }
  int random_dk() const { return rand_dk_; }
  int random_dv() const { return rand_dv_; }
  std::uint64_t random_seed() const { return rand_seed_; }

  // The heatmap's matrix for step 1..4 (scores, logits, weights, output); null when not kept.
  const MatrixF* stage_matrix(int step) const;
  // Steps 2 and 3 draw masked cells as masked (the mask enters at step 2).
  bool step_shows_mask(int step) const { return (step == 2 || step == 3) && problem_.mask != MaskKind::None; }
  // Column labels of step 1..4: key tokens, or "1".."d_v" for the output. A reference, not a copy
  // (the heatmap asks every frame, and there may be 4096 tokens); valid until the problem changes.
  const std::vector<std::string>& column_labels(int step) const;
  // Bumps whenever the problem is replaced (demo / random: new tokens and shapes), not when only
  // the temperature, mask, query or backend changes; what caches of label sizes are keyed on.
  std::uint64_t problem_revision() const { return problem_revision_; }
  // describe() of the state on screen (the caveat alone when no stages were kept). Cached by
  // (revision, query, language): the panel asks for it on every frame.
  const std::string& description(Lang lang) const;
  std::optional<RowStats> stats() const;

 private:
  // Runs the backend for problem_ (and the chosen backend); on any refusal calls `undo`, which
  // puts back what the caller changed, rebuilds the trace if memory pressure had freed it, and
  // keeps the message. Returns true on success.
  bool rerun(const std::function<void()>& undo);
  // problem_ = p (demo or not, with `query` selected) through rerun, the old one moved back on
  // refusal: no copy of Q, K, V.
  bool replace_problem(Problem p, bool demo, int query);
  void run_now();

  Problem problem_;
  Trace trace_;
  Trace spare_;  // the previous trace, whose buffers the next run reuses
  bool demo_ = true;
  int query_ = kDemoDefaultQuery;
  std::string backend_ = "cpu";
  bool cuda_ok_ = false;
  std::string cuda_reason_;
  std::string error_;
  CompareResult compare_;
  std::uint64_t revision_ = 0;
  std::uint64_t problem_revision_ = 0;
  struct DescriptionCache {
    std::uint64_t revision = ~std::uint64_t{0};
    int query = -1;
    Lang lang = Lang::En;
    std::string text;
  };
  mutable DescriptionCache description_;
  // "1".."d_v", made when column_labels(4) first sees a new d_v (it depends on nothing else).
  mutable std::vector<std::string> dim_labels_;
  double last_run_ms_ = 0;
  double need_gb_ = 0, avail_gb_ = 0;
  int rand_n_ = 512, rand_dk_ = 64, rand_dv_ = 64;
  std::uint64_t rand_seed_ = 0;
};


}  // namespace attnlab::viewer
