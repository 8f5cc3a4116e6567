// The session: the state every view shares and the only place the viewer talks to the lab. It
// holds the problem (demo, random, files or a bundle's call; of several heads, the one head shown),
// the query selection, temperature, mask, backend, precision and the chain's step, the Trace the
// backend registry returned for them, and the companion runs of the view on screen. Every setter
// answers with a catalogued Message (error(), in either language) when it refuses; the state on
// screen is kept then.
//
// Runs happen on a Worker (viewer/session/worker.h): in async mode (the interactive viewer) every
// change posts a request and the UI keeps drawing the last result (problem() and trace() are
// always the pair that was computed together) while busy() and progress() say that a newer one is
// coming; a newer request supersedes an older one. poll(), once per frame, adopts finished runs.
// In sync mode (tests, --screenshot, the redraw bench) each change waits for its run, so the state
// on return is the new one.
//
// The inputs are shared, not copied: a temperature or mask change runs the problem on screen
// again with its Q, K, V and labels (core/problem.h's shared inputs).
//
// Up to kKeepStagesMaxTokens every stage is kept (exact numbers in every cell, tables, Compare).
// Above, or when the stages would not fit in memory, the problem is streamed: the backend computes
// the pooled image of the current view (set_view) block by block, the selected rows exactly and
// the output, without any N x N matrix.
//
// Companion runs (viewer/session/companion.h): the view on screen names what it needs beside
// every run (set_companion); the worker computes it in the same job as the run and the pair is
// adopted together. Not for streamed problems (the views need every stage). The session never
// computes attention itself. Free of SDL and ImGui, so it is unit-tested.
#pragma once

#include "core/backend.h"
#include "core/bundle.h"
#include "core/messages.h"
#include "core/modify.h"
#include "core/patterns.h"
#include "core/problem.h"
#include "core/stats.h"
#include "core/trace.h"
#include "viewer/session/companion.h"
#include "viewer/session/options.h"
#include "viewer/session/worker.h"

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace attnlab::viewer {

// Files a problem is read from (the viewer's --q/--k/--v, --mask FILE, --tokens, --tokens-file,
// or its Load fields), read by core/inputs.h as the CLI reads them. Empty q: not from files.
struct InputFiles {
  std::string q, k, v;
  std::string mask;                 // a mask file (0 / -inf), or empty
  std::string tokens, tokens_file;  // labels: a comma list or a file (at most one)
  bool operator==(const InputFiles&) const = default;
};

// Where the problem comes from, and which of its heads is shown.
struct Source {
  bool demo = true;  // the demo, unless files.q or bundle is set; else random (n, d_k, d_v, seed)
  int n = 512, d_k = 64, d_v = 64;
  std::uint64_t seed = 0;
  Pattern pattern;  // the random problem's structure; Generate keeps it
  int heads = 1;    // random: heads generated together (the CLI's --heads)
  InputFiles files;
  std::string bundle;  // a bundle's directory: its call `layer`
  int layer = 0;
  // Modifications' files: an additive bias (n, m) and one document id per position (read with the
  // inputs, as --score-mod bias:FILE and --mask-mod document:FILE read them).
  std::string bias_file, documents_file;
  int head = 0;        // the head shown (random with heads > 1, or the bundle's call)
  // Bumped by every Load: the files are read again even when their names are the same (a file
  // edited since is the new one, or refused with why).
  std::uint64_t load = 0;
  bool operator==(const Source&) const = default;
};

// The stages a run of `p` on `backend` brings back when it keeps them (RunOptions::stages), with
// step 1..4 on screen, under --stages `policy`: every stage, or the weights (the statistics, the
// row chart and the description read them) with the step's own matrix and, at the steps that show
// it, the mask.
unsigned kept_stages(StagePolicy policy, const std::string& backend, const Problem& p, int step);

// The settings part of p's modifications, and p with them set (a bias, documents and the ALiBi
// slopes stay: they are read only while ALiBi is on, and switched back on it finds them again).
ModSettings mods_of(const Problem& p);
void set_mods_of(Problem& p, const ModSettings& m);
// The source's modification files (a bias, document ids) read into p as the CLI reads them; p's
// settings stay.
void read_mod_files(Problem& p, const Source& s);
// The settings as text, the doubles as their exact bits: what the views' caches are keyed on.
std::string mods_key(const ModSettings& m);

// "3, 7, 9" (indices or tokens, as --query takes them) for `p`: the first stays first, the others
// ascending and distinct. InputError for an empty item, a query outside, or more than kMaxQueries.
std::vector<int> parse_query_list(const Problem& p, const std::string& text);

class Session {
 public:
  // Builds the initial state from the command line and runs it (synchronously, whatever the
  // mode). Throws InputError for a bad query, an N over the backend's limit or "--backend cuda"
  // without a device (main turns it into exit 2).
  explicit Session(const SessionOptions& o, bool async = false);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // ---- state changes: false and error() when refused; the state on screen is kept then. In
  // async mode a refusal that only the run can find (memory) arrives later, through poll() ----
  bool set_temperature(double t);
  bool set_temperature_text(const std::string& text);  // typed entry: "0.5", "abc", "0", ...
  // The [ and ] keys: one step (keymap.h step_temperature) from the temperature asked for last —
  // the slider's or the entry's, or the steps queued since the last apply_temperature_steps — not
  // from the one on screen, which an older run may still show. Queued, so that held keys cost one
  // run per frame; apply_temperature_steps (once per frame) asks for it.
  void queue_temperature_step(bool up);
  bool apply_temperature_steps();
  bool set_query(int q);            // no backend run (streamed problems: the exact row only)
  bool move_query(int delta);       // clamped to the rows
  // Several queries: the selected one (query()) first, then the others in increasing order.
  // set_queries replaces the selection (the first becomes query()); toggle_query adds a query to
  // it or takes one out (the selected query itself stays); a plain set_query keeps the others.
  // Refused (error(), selection unchanged) for a row outside, or more than kMaxQueries.
  bool set_queries(const std::vector<int>& qs);
  bool set_queries_text(const std::string& text);  // "3, 7, 9" or tokens, as --query takes them
  bool toggle_query(int q);
  const std::vector<int>& queries() const { return queries_; }
  bool set_mask(MaskKind m);
  bool toggle_mask();
  // RoPE, ALiBi, soft-capping, a window, a prefix (core/modifications.h): refused with the core's
  // catalogued message (θ, C, W or P out of range, RoPE with an odd d_k, a row left without a
  // key) before any run.
  bool set_mods(const ModSettings& m);
  // One setting's value as a slider gives it (typed with Ctrl+click, too): θ, C, W or P of a
  // modification that is on. A value the settings would read as "off" (θ or C <= 0, W or P < 1)
  // is refused with the CLI's line for the same spec (--rope 0, softcap:0, window:0, prefix:0),
  // as any other value the core refuses; the settings stay.
  enum class ModKnob { RopeTheta, Softcap, Window, Prefix };
  bool set_mod_value(ModKnob knob, double value);
  const ModSettings& requested_mods() const { return req_.mods; }
  // The modifications' files (an additive bias, one document id per position; empty: none), read
  // with the problem on screen's inputs again (Load reads them again even when the names are the
  // same). A file that cannot be read or does not fit the problem is refused with the CLI's
  // message and the state on screen stays.
  bool set_mod_files(const std::string& bias, const std::string& documents);
  // The chain's step on screen (1..4), which decides the stages a run brings back (kept_stages):
  // a step whose matrix the trace on screen lacks starts a run; otherwise nothing happens. The
  // views of the chain's steps call it on every frame.
  void set_step(int step);
  bool set_backend(const std::string& name);  // "cpu" | "cuda"
  // The run's precision (fp32 | bf16): every view shows that pipeline's stages. bf16 keeps every
  // stage, so it is refused for streamed problems, and on CUDA (whose bf16 is the fused kernel).
  bool set_precision(Precision p);
  // The companion runs of the view on screen (null: none). One of another key is computed for the
  // state on screen (and beside every later run) on the worker; one of the same key replaces the
  // one asked for without a run; none drops the result on screen. Where the session streams, only
  // a companion that streams() is computed.
  void set_companion(std::shared_ptr<const Companion> c);
  bool load_demo();
  // heads: how many heads to generate (-1: as many as now); the head shown stays when it exists.
  bool load_random(int n, int d_k, int d_v, std::uint64_t seed, int heads = -1);
  // The head the chain and walk views show (random problems of several heads, bundles) and the
  // bundle's call; each re-runs the backend, like any change. set_layer keeps the head when the
  // new layer has it, else shows head 0.
  bool set_head(int head);
  bool set_layer(int layer);
  // Back to the bundle of --bundle (after the demo, a random problem or files), at `layer`.
  bool load_bundle(int layer);
  // Q, K, V (and a mask file, labels) from files; the CLI's messages for bad files, shapes or a
  // fully masked row, and the last valid state stays. A mask file selects the custom mask.
  bool load_files(const InputFiles& f);
  // The heatmap's pixels (streamed problems): pixel rows / columns and the source interval each
  // covers, and the pooling. A new view is computed in the background; a no-op when unchanged.
  void set_view(const PoolRequest& view);
  void clear_error() { set_error({}); }

  // ---- the worker ----
  bool poll();  // adopts finished runs; true when what is on screen changed
  void wait();  // until nothing is queued or running, then poll()
  bool busy() const { return worker_.busy() || owed_ != 0; }  // a run is queued, in flight or owed
  float progress() const { return worker_.progress_value(); }  // of the run in flight, 0..1
  bool async() const { return worker_.async(); }

  // ---- what the UI shows: the last finished run and the problem it was computed for ----
  const Problem& problem() const { return *shown_; }
  const std::shared_ptr<const Problem>& shared_problem() const { return shown_; }
  const Trace& trace() const { return trace_; }
  bool demo() const {
    return shown_req_.source.demo && shown_req_.source.files.q.empty() && shown_req_.source.bundle.empty();
  }
  // The problem on screen is one call of a bundle (bundle(): its manifest).
  bool from_bundle() const { return !shown_req_.source.bundle.empty(); }
  const Bundle* bundle() const { return bundle_ ? &*bundle_ : nullptr; }
  // The source of the problem on screen, and the one asked for.
  const Source& shown_source() const { return shown_req_.source; }
  const Source& source() const { return req_.source; }
  // The requested layer and head (the pickers follow them at once), the heads of that layer
  // (random: --heads; bundle: the call's heads; else 1), and the key/value head a query head reads
  // (grouped-query bundles; h itself otherwise).
  int layer() const { return req_.source.layer; }
  int layer_count() const;
  int head() const { return req_.source.head; }
  int heads() const { return heads_of(req_.source); }
  int kv_heads() const;
  int kv_head_of(int head) const;
  // The layer and head of the problem on screen, and the heads of its source.
  int shown_layer() const { return shown_req_.source.layer; }
  int shown_head() const { return shown_req_.source.head; }
  int shown_heads() const { return heads_of(shown_req_.source); }
  // The heads of a source: a bundle call's, a random problem's --heads, else 1.
  int heads_of(const Source& s) const;
  // The problem on screen was read from files (these).
  bool from_files() const { return !shown_req_.source.files.q.empty(); }
  const InputFiles& files() const { return shown_req_.source.files; }
  // A custom mask is loaded (a mask file), so the mask can be switched back to it.
  bool has_custom_mask() const {
    return !req_.source.files.mask.empty() || (from_bundle() && shown_->mask == MaskKind::Custom);
  }
  int query() const { return queries_.front(); }
  int n() const { return shown_->n(); }
  // The requested state (the controls follow it at once, the picture when its run is done).
  const std::string& backend() const { return req_.backend; }  // "cpu" | "cuda" (the chosen one)
  // The backend the trace on screen ran on (the request's before any run finished).
  const std::string& ran_backend() const { return trace_.backend.empty() ? shown_req_.backend : trace_.backend; }
  double requested_temperature() const { return req_.temperature; }
  Precision requested_precision() const { return req_.precision; }
  Precision precision() const { return shown_req_.precision; }  // of the run on screen
  // The run on screen as a setting (variant staged: the chain the viewer runs; the backend that ran).
  RunSetting setting() const;
  MaskKind requested_mask() const { return req_.mask; }
  bool cuda_ok() const { return cuda_ok_; }
  const std::string& cuda_reason() const { return cuda_reason_; }
  const std::string& error() const { return error_.en; }  // in English, as the CLI says it
  // The refusal in the UI language (the core's catalogue, core/messages.h).
  std::string error_text(Lang lang) const { return error_.text(lang); }
  const Message& error_message() const { return error_; }
  // The refusal on screen is of a new input (Generate, Load, a bundle's call, files that do not
  // read): the controls show it beside the button that asked.
  bool input_refused() const { return error_input_ && !error_.empty(); }
  int max_tokens() const { return max_tokens(req_.backend); }
  static int max_tokens(const std::string& backend) {
    return backend == "cuda" ? kCudaMaxTokens : kCpuMaxTokens;
  }
  std::uint64_t revision() const { return revision_; }  // bumps whenever what is on screen changes
  // Bumps whenever a run of the whole chain is adopted (not for a view, a row or a companion): what
  // belongs to one run (a Compare) is keyed on it.
  std::uint64_t run_revision() const { return run_revision_; }
  double last_run_ms() const { return last_run_ms_; }   // wall time of the last backend call
  bool stages_kept() const { return trace_.has_stages; }
  // Every stage is on screen (not only the step's: --stages step or auto on CUDA).
  bool all_stages_kept() const { return trace_.has_stages && present_stages(trace_) == problem_stages(*shown_); }
  // The matrix of step 1..3 is on its way: the stages are kept, but the trace on screen was run
  // for another step (set_step has asked for a run that brings it).
  bool stage_pending(int step) const {
    return !streaming_ && trace_.has_stages && step >= 1 && step <= 3 && stage_matrix(step) == nullptr;
  }
  StagePolicy stage_policy() const { return policy_; }
  // True when the problem on screen is streamed: pooled views and the exact query row instead of
  // kept stages.
  bool streaming() const { return streaming_; }
  double stages_need_gb() const { return need_gb_; }
  double available_gb() const { return avail_gb_; }
  int random_n() const { return req_.source.n; }
  int random_dk() const { return req_.source.d_k; }
  int random_dv() const { return req_.source.d_v; }
  std::uint64_t random_seed() const { return req_.source.seed; }
  const Pattern& random_pattern() const { return req_.source.pattern; }
  int random_heads() const { return req_.source.heads; }

  // RoPE's Q and K of the problem on screen as every backend multiplies them (core's rotated_qk,
  // taken on the worker with the run, so a streamed problem has them too: n x d_k and m x d_k, no
  // N x N matrix); null without RoPE.
  const RotatedQK* rotated() const { return rotated_.get(); }
  // The heatmap's matrix for step 1..4 (scores, logits, weights, output); null when not kept.
  const MatrixF* stage_matrix(int step) const;
  // Streamed problems: the pooled image of step 1..3 for pooled_view(); null when there is none.
  const PooledGrid* pooled_stage(int step) const;
  const PoolRequest& pooled_view() const { return shown_view_; }
  // The exact stages of the query's row (streamed problems), or null while it is computed.
  const RowStages* query_row() const { return row_of(query()); }
  // The same of any selected query.
  const RowStages* row_of(int q) const;
  // Steps 2 and 3 draw masked cells as masked (the mask enters at step 2).
  bool step_shows_mask(int step) const;
  // Column labels of step 1..4: key tokens, or "0".."d_v-1" for the output (dimensions count from
  // 0, as rows and keys do everywhere in the viewer). A reference, not a copy
  // (the heatmap asks every frame, and there may be 65536 tokens); valid until the problem changes.
  const std::vector<std::string>& column_labels(int step) const;
  // Bumps whenever the problem is replaced (demo / random: new tokens and shapes), not when only
  // the temperature, mask, query or backend changes; what caches of label sizes are keyed on.
  std::uint64_t problem_revision() const { return problem_revision_; }
  // describe() of the state on screen (the caveat alone when no row is known). Cached by
  // (revision, query, language): the panel asks for it on every frame.
  const std::string& description(Lang lang) const;
  std::optional<RowStats> stats() const { return stats_of(query()); }
  // The statistics of any row whose weights are on screen (kept stages, or a selected query's
  // exact row when streamed).
  std::optional<RowStats> stats_of(int q) const;
  // The mean over the selected queries whose rows are on screen (max weight, entropy, unmasked
  // keys rounded down, perplexity, weight sum; argmax -1: a mean has none), and how many entered it.
  std::optional<RowStats> mean_stats(int* counted = nullptr) const;
  // The `attnlab` command that computes exactly the problem on screen (source, query,
  // temperature, mask, backend, precision when bf16), printing every stage as CSV. A head is named:
  // --bundle DIR --layer L --head H, or --random N --heads H --head h.
  std::string reproduce_command() const;

  // ---- the companion runs on screen (belonging to problem() and trace()) ----
  // The result of the companion asked for, when it is on screen and of type T (else null: none
  // asked for, not computed yet, or the view's companion changed since).
  template <class T>
  const T* companion() const {
    return want_ && companion_ && companion_key_ == want_->key() ? dynamic_cast<const T*>(companion_.get())
                                                                  : nullptr;
  }
  bool companions_busy() const;  // a companion asked for but not on screen yet

 private:
  // Everything a run depends on.
  struct Request {
    Source source;
    double temperature = 1;
    MaskKind mask = MaskKind::None;
    ModSettings mods;
    std::string backend = "cpu";
    std::vector<int> queries{0};  // the selected query first, then the others (never empty)
    Precision precision = Precision::FP32;
    int step = 1;  // the chain's step on screen: which stages come back (kept_stages)
  };
  // kCompanion: only the companion, for the problem on screen.
  enum Part : unsigned { kAll = 1, kView = 2, kRow = 4, kCompanion = 8 };
  struct Job {
    Request req;
    unsigned parts = kAll;
    std::optional<PoolRequest> view;
    std::uint64_t id = 0;
    std::shared_ptr<const Companion> companion;  // computed beside the run when parts has kCompanion
    bool output_later = false;  // a streamed kAll run: the rows only (SessionOptions::output_with_first_view)
  };
  struct Result {
    Job job;
    std::shared_ptr<const Problem> problem;
    Trace trace;
    bool streaming = false;
    bool cancelled = false;
    Message error;
    double ms = 0, need_gb = 0, avail_gb = 0;
    std::shared_ptr<const CompanionResult> companion;  // of job.companion, when computed
    std::shared_ptr<const RotatedQK> rotated;           // of problem, with RoPE (kAll runs)
  };

  // Posts what the requested state needs; in sync mode waits and returns whether it was adopted
  // without a refusal.
  bool post(unsigned parts);
  Result execute(Job job);  // on the worker (or inline for the first run)
  static Problem build(const Source& s);  // demo, random, files or bundle: one head
  void adopt(Result r);
  void revert_request();  // the controls back to what is on screen (after a refusal)
  static RunSetting setting_of(const Request& r);
  // On the worker: what `job`'s companion is computed from (the main run's trace, or null when the
  // companion alone is computed for the trace on screen).
  CompanionInput companion_input(const Job& job, const std::shared_ptr<const Problem>& p, const Trace* main) const;
  // With a run: the companion `asked` gave, kept when it is still the one asked for.
  void adopt_companion(const std::shared_ptr<const Companion>& asked, std::shared_ptr<const CompanionResult> result);
  // The worker's backend of that name ("cpu" | "cuda"), made on first use and kept: the CUDA
  // backend keeps its device buffers and page-locked staging between runs of one size.
  Backend& backend_for(const std::string& name);

  StagePolicy policy_ = StagePolicy::Auto;  // --stages, fixed at start
  Request req_;        // requested (controls)
  Request shown_req_;  // what trace_ was computed for
  std::shared_ptr<const Problem> shown_;
  // The problems adopt replaced since the last poll(): a panel holds `const Problem&` for its whole
  // draw, and where a run finishes inside a request (the synchronous worker of screenshots, tests
  // and the UI fuzzer) the replaced problem must outlive that draw. poll() (the next frame) lets
  // them go; at most kRetiredMax are kept.
  static constexpr std::size_t kRetiredMax = 8;
  std::deque<std::shared_ptr<const Problem>> retired_;
  Trace trace_;
  std::shared_ptr<const RotatedQK> rotated_;  // of shown_ (rotated())
  std::vector<int> queries_{kDemoDefaultQuery};  // the selected query first, then the others, ascending
  bool streaming_ = false;
  PoolRequest view_;        // the latest view the UI asked for
  bool have_view_ = false;
  PoolRequest shown_view_;  // the view trace_.pooled was computed for
  bool cuda_ok_ = false;
  std::string cuda_reason_;
  Message error_;
  bool error_input_ = false;  // error_ refused a new input
  void set_error(Message m, bool input = false) {
    error_ = std::move(m);
    error_input_ = input;
  }
  std::optional<Bundle> bundle_;  // the manifest of --bundle (read once, at start)
  std::optional<double> pending_temperature_;  // queue_temperature_step's, until applied
  std::uint64_t loads_ = 0;  // load_files calls (Source::load)
  std::uint64_t revision_ = 0;
  std::uint64_t run_revision_ = 0;
  std::uint64_t problem_revision_ = 0;
  std::uint64_t posted_ = 0;  // id of the newest job
  // The parts the first run left to the first view (SessionOptions::output_with_first_view): the
  // next post() takes them, and poll() posts them itself at its second call.
  unsigned owed_ = 0;
  int owed_polls_ = 0;
  struct DescriptionCache {
    std::uint64_t revision = ~std::uint64_t{0};
    int query = -1;
    Lang lang = Lang::En;
    std::string text;
  };
  mutable DescriptionCache description_;
  // stats_of's rows for the trace on screen (revision): the panels ask for every selected query's
  // statistics on every frame, each an O(m) pass over its row.
  struct StatsCache {
    std::uint64_t revision = ~std::uint64_t{0};
    std::vector<std::pair<int, RowStats>> rows;
  };
  mutable StatsCache stats_cache_;
  // "0".."d_v-1", made when column_labels(4) first sees a new d_v (it depends on nothing else).
  mutable std::vector<std::string> dim_labels_;
  double last_run_ms_ = 0;
  double need_gb_ = 0, avail_gb_ = 0;
  // The companion asked for (the view shown) and the result on screen, with the key it was
  // computed for.
  std::shared_ptr<const Companion> want_;
  std::shared_ptr<const CompanionResult> companion_;
  std::string companion_key_;

  // A replaced trace whose buffers the next run reuses: put by adopt (UI thread), taken by
  // execute (the worker).
  std::mutex recycle_mu_;
  Trace recycled_;
  // The worker's own (the constructor's before the worker starts): the problem of the last
  // successful run and its source. A run builds on it: regenerates only when the source changed,
  // shares its inputs when only the temperature or mask did, shares it for a view or a row.
  std::shared_ptr<const Problem> last_problem_;
  Source last_source_;
  // backend_for's, used by one thread at a time (the constructor's first run, then the worker),
  // made by SessionOptions::backends when given.
  std::function<std::unique_ptr<Backend>(const std::string&)> make_backend_;
  std::unique_ptr<Backend> cpu_backend_, cuda_backend_;
  // Last: its thread runs execute() on the members above, so it stops before they are destroyed.
  Worker<Job, Result> worker_;
};

}  // namespace attnlab::viewer
