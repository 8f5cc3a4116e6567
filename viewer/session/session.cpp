// The session (see session.h): the requests of every change, the run of one request on the
// worker (execute), and the adoption of finished runs on the UI thread.
#include "viewer/session/session.h"

#include "core/modify.h"

#include "core/format.h"
#include "core/memory.h"
#include "core/inputs.h"
#include "cpu/cpu_backend.h"
#include "core/messages.h"
#include "engine/registry.h"
#include "viewer/draw/strings.h"
#include "viewer/session/keymap.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <utility>

namespace attnlab::viewer {

ModSettings mods_of(const Problem& p) {
  return ModSettings{p.mods.rope_theta, p.mods.alibi, p.mods.softcap, p.mods.window, p.mods.prefix};
}
std::string mods_key(const ModSettings& m) {
  char bits[80];
  std::snprintf(bits, sizeof bits, "%a|%d|%a|%d|%d", m.rope_theta, m.alibi ? 1 : 0, m.softcap, m.window, m.prefix);
  return bits;
}

void set_mods_of(Problem& p, const ModSettings& m) {
  p.mods.rope_theta = m.rope_theta;
  p.mods.alibi = m.alibi;
  p.mods.softcap = m.softcap;
  p.mods.window = m.window;
  p.mods.prefix = m.prefix;
}

void read_mod_files(Problem& p, const Source& s) {
  if (!s.bias_file.empty()) {
    const ModSettings keep = mods_of(p);
    apply_score_mod_spec(p, "bias:" + s.bias_file);
    set_mods_of(p, keep);
  }
  if (!s.documents_file.empty()) {
    const ModSettings keep = mods_of(p);
    apply_mask_mod_spec(p, "document:" + s.documents_file);
    set_mods_of(p, keep);
  }
}

namespace {

double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

Message limit_message(int n, const std::string& backend) {
  if (backend == "cuda") return message_of(Msg::LimitCuda, {std::to_string(n), std::to_string(kCudaMaxTokens)});
  return message_of(Msg::LimitCpu, {std::to_string(n), std::to_string(kCpuMaxTokens), std::to_string(kCudaMaxTokens)});
}

// A view fits a problem when its intervals lie inside the problem's rows and keys (a view the UI
// made for the previous problem does not).
bool view_fits(const PoolRequest& v, const Problem& p) {
  return !v.rows.end.empty() && !v.cols.end.empty() && v.rows.end.back() <= p.n() &&
         v.cols.end.back() <= p.m();
}

bool same_view(const PoolRequest& a, const PoolRequest& b) {
  return a.mode == b.mode && a.head == b.head && a.rows.begin == b.rows.begin && a.rows.end == b.rows.end &&
         a.cols.begin == b.cols.begin && a.cols.end == b.cols.end;
}

}  // namespace

Session::Session(const SessionOptions& o, bool async)
    : policy_(o.stages), make_backend_(o.backends), worker_([this](Job job) { return execute(std::move(job)); }) {
  cuda_ok_ = cuda_available(&cuda_reason_);
  if (o.backend == "cuda" && !cuda_ok_) throw NoDeviceError(Msg::NoDevice, {cuda_reason_});
  // bf16 keeps every stage, which only the CPU backend does in bf16: auto picks it then.
  req_.backend = o.backend == "auto" ? (cuda_ok_ && o.precision != Precision::BF16 ? "cuda" : "cpu") : o.backend;
  req_.precision = o.precision;
  req_.step = o.step;
  req_.source.d_k = o.d_k;
  req_.source.d_v = o.d_v;
  req_.source.seed = o.seed;
  req_.source.pattern = o.pattern;
  if (!o.bundle.empty()) {
    // The manifest's and the layer's refusals are core/bundle's, as the CLI prints them.
    bundle_ = read_bundle(o.bundle);
    req_.source.demo = false;
    req_.source.bundle = o.bundle;
    req_.source.layer = resolve_layer(*bundle_, o.layer);
    req_.source.head = o.head;  // out of range: bundle_problem's refusal, below
  } else if (!o.q_file.empty() || !o.k_file.empty() || !o.v_file.empty()) {
    req_.source.demo = false;
    req_.source.files = InputFiles{o.q_file, o.k_file, o.v_file, o.mask_file, o.tokens, o.tokens_file};
  } else if (o.random_n) {
    req_.source.demo = false;
    req_.source.files.mask = o.mask_file;
    req_.source.files.tokens = o.tokens;
    req_.source.files.tokens_file = o.tokens_file;
    req_.source.n = *o.random_n;
    req_.source.heads = o.heads;
    req_.source.head = o.head;
    if (req_.source.n > max_tokens()) throw error_of(limit_message(req_.source.n, req_.backend));
  } else if (!o.mask_file.empty()) {
    throw InputError(Msg::MaskFileNeedsFiles, {o.mask_file});
  } else if (!o.tokens.empty() || !o.tokens_file.empty()) {
    throw InputError(Msg::TokensNeedFiles, {});
  }
  req_.source.bias_file = o.bias_file;
  req_.source.documents_file = o.documents_file;
  Problem p = build(req_.source);
  int first = req_.source.demo ? kDemoDefaultQuery : p.n() / 2;
  if (p.n() > max_tokens()) throw error_of(limit_message(p.n(), req_.backend));
  if (o.temperature) p.temperature = *o.temperature;
  // induction comes with its causal mask unless --mask asks otherwise (the default none does not).
  // A bundle holds each call's mask (--mask is refused with --bundle).
  const bool keep_mask = (o.pattern.kind == PatternKind::Induction && o.mask == MaskKind::None) || bundle_;
  if (o.mask != MaskKind::Custom && !keep_mask) p.mask = o.mask;
  // The flags given replace what the problem brings (a bundle's RoPE); the others keep it.
  ModSettings m = mods_of(p);
  if (o.rope_given) m.rope_theta = o.mods.rope_theta;
  if (o.score_mods_given) m.alibi = o.mods.alibi, m.softcap = o.mods.softcap;
  if (o.mask_mods_given) m.window = o.mods.window, m.prefix = o.mods.prefix;
  set_mods_of(p, m);
  if (!o.query.empty()) first = resolve_query(p, o.query);
  queries_ = o.queries.empty() ? std::vector<int>{first} : parse_query_list(p, o.queries);
  validate(p);
  req_.temperature = p.temperature;
  req_.mask = p.mask;
  req_.mods = mods_of(p);
  req_.queries = queries_;
  last_source_ = req_.source;
  last_problem_ = std::make_shared<const Problem>(std::move(p));
  shown_ = last_problem_;
  // The first run's errors are the command line's: they propagate to main.
  Job job;
  job.req = req_;
  job.id = ++posted_;
  job.output_later = o.output_with_first_view;
  Result r = execute(job);
  // The first run's failures are the command line's, as the CLI reports them.
  if (r.error.id == Msg::RunDeviceFailed) throw DeviceError(r.error.args.at(0));
  if (r.error.id == Msg::RunOutOfMemory) throw std::bad_alloc();
  if (!r.error.empty()) throw error_of(r.error);
  if (o.output_with_first_view && r.streaming) owed_ = kAll;
  adopt(std::move(r));
  if (async) worker_.start();
}

Session::~Session() { worker_.stop(); }

// ---- the worker -------------------------------------------------------------------------------

Session::Result Session::execute(Job job) {
  Result r;
  {
    // The replaced trace adopt() put aside is this run's buffers.
    std::lock_guard<std::mutex> lk(recycle_mu_);
    r.trace = std::move(recycled_);
    recycled_ = Trace{};
  }
  const double t0 = now_ms();
  try {
    const Request& q = job.req;
    std::shared_ptr<const Problem> p = last_problem_;
    const bool new_source = !(q.source == last_source_);
    if (new_source) {
      Problem np = build(q.source);
      if (np.n() > max_tokens(q.backend)) throw error_of(limit_message(np.n(), q.backend));
      np.temperature = q.temperature;
      if (q.source.bundle.empty()) np.mask = q.mask;  // a bundle's call brings its own
      p = std::make_shared<const Problem>(std::move(np));
    } else if (p->temperature != q.temperature || (q.source.bundle.empty() && p->mask != q.mask)) {
      // Only the temperature or the mask changed: the new problem shares the inputs.
      auto np = std::make_shared<Problem>(*p);
      np->temperature = q.temperature;
      if (q.source.bundle.empty()) np->mask = q.mask;
      p = std::move(np);
    }
    ModSettings mods = q.mods;
    // A prefix set on a longer problem covers the new one's positions at most (the core refuses
    // P > m); adopt() hands the clamped value back to the request, and the controls show it.
    if (new_source) mods.prefix = std::min(mods.prefix, p->m());
    if (!(mods_of(*p) == mods)) {
      // Only the modifications changed: the new problem shares the inputs.
      auto np = std::make_shared<Problem>(*p);
      set_mods_of(*np, mods);
      p = std::move(np);
    }
    if (p->mask == MaskKind::Custom && p->custom_mask().size() == 0)
      throw InputError(Msg::NoCustomMask, {});
    // No validate() here: every backend validates what it runs, and a view or a row of the
    // problem on screen (a click at a million tokens) would scan its inputs again for nothing.
    if (q.precision == Precision::BF16 && q.backend == "cuda") throw InputError(Msg::Bf16StagedCuda, {});
    RunOptions opt;
    opt.precision = q.precision;
    opt.cancel = worker_.cancel_flag();
    opt.progress = worker_.progress();
    // Kept stages: scores, scaled, logits, weights (+ mask, one head) as fp32. Two traces live at
    // once while a new one is built (the old one stays on screen).
    const double need = kept_stage_bytes(size_of(*p));
    const std::optional<double> avail = host_available_bytes();
    r.need_gb = need / 1e9;
    r.avail_gb = avail.value_or(0) / 1e9;
    r.streaming = p->n() > kKeepStagesMaxTokens || p->m() > kKeepStagesMaxTokens ||
                  (avail && 2 * need >= 0.7 * *avail);
    if (r.streaming && q.precision == Precision::BF16)
      throw InputError(Msg::Bf16Streamed, {std::to_string(p->n()), std::to_string(kKeepStagesMaxTokens)});
    if (job.parts == kCompanion) {
      // Only the companions, for the problem on screen (the main run is there already).
      if (job.companion && (!r.streaming || job.companion->streams()))
        r.companion = job.companion->compute(companion_input(job, p, nullptr));
      r.problem = p;
      r.job = std::move(job);
      r.ms = now_ms() - t0;
      return r;
    }
    if (r.streaming) {
      opt.keep_stages = false;
      opt.output = (job.parts & kAll) != 0 && !job.output_later;
      if (job.view && (job.parts & (kAll | kView)) && view_fits(*job.view, *p)) opt.pool = &*job.view;
      if (job.parts & (kAll | kRow)) {
        const int first = std::clamp(q.queries.front(), 0, p->n() - 1);
        opt.rows = {first};
        for (int x : q.queries)
          if (x != first && x >= 0 && x < p->n()) opt.rows.push_back(x);
      }
      if (!opt.output && !opt.pool && opt.rows.empty()) {
        r.problem = p;
        return r;
      }
    } else if (!(job.parts & kAll)) {
      r.problem = p;  // a view or a row of a problem whose stages are all kept: nothing to run
      return r;
    }
    if (!r.streaming) opt.stages = kept_stages(policy_, q.backend, *p, q.step);
    *worker_.progress() = 0;
    backend_for(q.backend).run_into(*p, opt, r.trace);
    // The backend made the rotation (kept with p's inputs): here it is only looked up.
    if (job.parts & kAll) r.rotated = rotated_qk(*p);
    if (opt.pool) job.view = *opt.pool;  // the view the pooled stages belong to
    else job.view.reset();
    if ((job.parts & kCompanion) && job.companion && (!r.streaming || job.companion->streams()))
      r.companion = job.companion->compute(companion_input(job, p, &r.trace));
    r.problem = p;
    last_problem_ = p;
    last_source_ = q.source;
  } catch (const Cancelled&) {
    r.cancelled = true;
  } catch (const std::bad_alloc&) {
    r.error = message_of(Msg::RunOutOfMemory, {});
  } catch (const DeviceError& e) {
    r.error = message_of(Msg::RunDeviceFailed, {e.what()});
  } catch (const std::exception& e) {
    r.error = message_of(e);
  }
  r.ms = now_ms() - t0;
  r.job = std::move(job);
  return r;
}

RunSetting Session::setting_of(const Request& r) {
  RunSetting s;
  s.temperature = r.temperature;
  s.mask = r.mask;
  s.backend = r.backend;
  s.precision = r.precision;
  s.query = r.queries.front();
  return s;
}

RunSetting Session::setting() const {
  RunSetting s = setting_of(shown_req_);
  s.query = query();
  s.backend = ran_backend();  // what ran (auto may have fallen back)
  return s;
}

CompanionInput Session::companion_input(const Job& job, const std::shared_ptr<const Problem>& p,
                                        const Trace* main) const {
  CompanionInput in;
  in.problem = p;
  in.main = main;
  in.setting = setting_of(job.req);
  in.setting.query = std::clamp(in.setting.query, 0, p->n() - 1);
  in.step = job.req.step;
  in.cuda_ok = cuda_ok_;
  in.cuda_reason = cuda_reason_;
  in.cancel = worker_.cancel_flag();
  return in;
}

bool Session::companions_busy() const {
  if (!want_ || (streaming_ && !want_->streams())) return false;
  return !(companion_ && companion_key_ == want_->key());
}

void Session::set_companion(std::shared_ptr<const Companion> c) {
  if (!c) {
    if (!want_ && !companion_) return;
    // Dropped when the view is left (its memory: an fp64 chain at 4096 tokens).
    want_.reset();
    companion_.reset();
    companion_key_.clear();
    ++revision_;
    return;
  }
  const std::string key = c->key();
  if (want_ && want_->key() == key) {
    want_ = std::move(c);  // the same computation: its hints serve the later runs
    return;
  }
  want_ = std::move(c);
  companion_.reset();
  companion_key_.clear();
  ++revision_;
  if (streaming_ && !want_->streams()) return;  // the views say why there is nothing to compare
  post(kCompanion);
}

Problem Session::build(const Source& s) {
  Problem p;
  if (!s.bundle.empty()) {
    const Bundle b = read_bundle(s.bundle);
    p = bundle_problem(b, s.layer, s.head);
    // Its own ALiBi slope among the call's heads, as the CLI's --head and the heads view give it
    // (read only while ALiBi is on).
    p.mods.alibi_slopes = {standard_alibi_slopes(b.calls[static_cast<std::size_t>(s.layer)].heads)[static_cast<std::size_t>(s.head)]};
  } else if (s.demo) {
    p = demo_problem();
  } else {
    // Files, or every head from the CLI's generator (--random N --heads H); then, as the CLI
    // applies them, the labels before the mask file (a refused row names its token).
    p = !s.files.q.empty() ? problem_from_files(s.files.q, s.files.k, s.files.v)
                           : pattern_problem(s.pattern, s.n, s.d_k, s.d_v, s.seed, s.heads);
    apply_token_spec(p, s.files.tokens, s.files.tokens_file);
    if (!s.files.mask.empty()) apply_mask_spec(p, s.files.mask);
    if (s.files.q.empty() && s.heads > 1) {
      // With the files (a per-head bias is the H heads'), the head shown, with its own ALiBi slope
      // among the H and its rows of such a bias, as the CLI's --head gives them.
      read_mod_files(p, s);
      p = one_head(p, s.head);
      p.mods.alibi_slopes = {standard_alibi_slopes(s.heads)[static_cast<std::size_t>(s.head)]};
      return p;
    }
  }
  read_mod_files(p, s);
  return p;
}

bool Session::post(unsigned parts) {
  parts |= owed_;
  owed_ = 0;
  // Every selected query's row; a new problem keeps the one query its load chose.
  if (req_.source == shown_req_.source) req_.queries = queries_;
  Job job;
  job.req = req_;
  // A new main run brings its companion along (a problem on screen is never paired with the
  // companion of another).
  if ((parts & kAll) && want_) parts |= kCompanion;
  job.parts = parts;
  job.companion = want_;
  if (have_view_) job.view = view_;
  job.id = ++posted_;
  if (!worker_.async()) set_error({});
  // Sync: the run is done here; async: it is queued (a newer job supersedes it) and poll() adopts it.
  if (std::optional<Result> r = worker_.post(std::move(job))) {
    adopt(std::move(*r));
    return error_.empty();
  }
  return true;
}

bool Session::poll() {
  retired_.clear();
  std::deque<Result> done = worker_.take();
  for (Result& r : done) adopt(std::move(r));
  // A frame went by and no heatmap asked for its view: the output the first run left.
  if (owed_ && ++owed_polls_ >= 2) post(kAll);
  return !done.empty();
}

void Session::wait() {
  worker_.wait_idle();
  poll();
}

void Session::revert_request() {
  // The step stays the UI's: set_step would otherwise ask again, frame after frame.
  const int step = req_.step;
  req_ = shown_req_;
  req_.queries = queries_;
  req_.step = step;
}

Backend& Session::backend_for(const std::string& name) {
  std::unique_ptr<Backend>& b = name == "cuda" ? cuda_backend_ : cpu_backend_;
  if (!b) b = make_backend_ ? make_backend_(name) : make_backend(name);
  return *b;
}

void Session::set_step(int step) {
  if (step == req_.step) return;
  req_.step = step;
  if (streaming_ || !trace_.has_stages) return;
  if (kept_stages(policy_, req_.backend, *shown_, step) & ~present_stages(trace_)) post(kAll);
}

unsigned kept_stages(StagePolicy policy, const std::string& backend, const Problem& p, int step) {
  const int n = std::max(p.n(), p.m());
  const bool partial = (policy == StagePolicy::Step && n > kTableMaxTokens) ||
                       (policy == StagePolicy::Auto && backend == "cuda" && n > kJsonExportMaxTokens);
  if (!partial) return problem_stages(p);
  unsigned s = kStageWeights;
  if (step == 1) s |= kStageScores;
  if (step == 2) s |= kStageLogits;
  if ((step == 2 || step == 3) && (p.mask != MaskKind::None || has_mask_mods(p))) s |= kStageMask;
  return s;
}

void Session::adopt(Result r) {
  const bool latest = r.job.id == posted_;
  if (r.cancelled) return;
  if (!r.error.empty()) {
    set_error(r.error, !(r.job.req.source == shown_req_.source));  // a new input's refusal
    if (latest) revert_request();
    return;
  }
  if (r.job.parts & kAll) {
    const bool new_problem = !(r.job.req.source == shown_req_.source) || !shown_;
    if (shown_ && shown_ != r.problem) {
      retired_.push_back(shown_);
      if (retired_.size() > kRetiredMax) retired_.pop_front();
    }
    shown_ = r.problem;
    shown_req_ = r.job.req;
    if (from_bundle()) {
      // The call's own mask, which the request follows (a new layer may bring another).
      shown_req_.mask = shown_->mask;
      if (latest) req_.mask = shown_->mask;
    }
    streaming_ = r.streaming;
    need_gb_ = r.need_gb;
    avail_gb_ = r.avail_gb;
    if (new_problem) {
      ++problem_revision_;
      // The prefix as the run clamped it to the new positions.
      shown_req_.mods.prefix = shown_->mods.prefix;
      if (latest) req_.mods.prefix = shown_->mods.prefix;
      const int first = std::clamp(r.job.req.queries.front(), 0, shown_->n() - 1);
      queries_ = {first};  // the request's others (the command line's), those inside the rows
      for (int q : r.job.req.queries)
        if (q != first && q >= 0 && q < shown_->n()) queries_.push_back(q);
    }
    {
      std::lock_guard<std::mutex> lk(recycle_mu_);
      // The replaced trace's buffers serve the next run, when it has this size (a 4096-token trace
      // kept after going back to the demo would hold 300 MB for nothing).
      if (trace_.weights.size() == r.trace.weights.size() && trace_.output.size() == r.trace.output.size())
        recycled_ = std::move(trace_);
    }
    trace_ = std::move(r.trace);
    rotated_ = std::move(r.rotated);
    adopt_companion(r.job.companion, std::move(r.companion));
    shown_view_ = r.job.view.value_or(PoolRequest{});
    ++run_revision_;  // what belonged to the run before (a Compare) is not this one's
    last_run_ms_ = r.ms;
  } else if (r.job.parts == kCompanion) {
    // The companion of the state on screen only (a newer main run brings its own).
    if (r.problem != shown_ || !setting_of(r.job.req).same_run(setting_of(shown_req_))) return;
    adopt_companion(r.job.companion, std::move(r.companion));
  } else {
    if (r.problem != shown_) return;  // computed for a problem that is no longer on screen
    if (r.job.view && !r.trace.pooled.empty()) {
      trace_.pooled = std::move(r.trace.pooled);
      shown_view_ = *r.job.view;
    }
    if (!r.trace.rows.empty()) trace_.rows = std::move(r.trace.rows);
    last_run_ms_ = r.ms;
  }
  ++revision_;
  if (latest) set_error({});
}

void Session::adopt_companion(const std::shared_ptr<const Companion>& asked,
                              std::shared_ptr<const CompanionResult> result) {
  // A run that finished after its view was left (or asked for another) brings a companion nobody
  // shows: not kept.
  if (!asked || !result || !want_ || asked->key() != want_->key()) {
    companion_.reset();
    companion_key_.clear();
    return;
  }
  companion_ = std::move(result);
  companion_key_ = asked->key();
}

// ---- state changes --------------------------------------------------------------------------

bool Session::set_temperature(double t) {
  try {
    validate_temperature(t);
  } catch (const InputError& e) {
    set_error(message_of(e));
    return false;
  }
  if (t == req_.temperature) {
    set_error(Message{});  // an accepted action ends the last refusal's message
    return true;
  }
  req_.temperature = t;
  return post(kAll);
}

void Session::queue_temperature_step(bool up) {
  pending_temperature_ = viewer::step_temperature(pending_temperature_.value_or(req_.temperature), up);
}

bool Session::apply_temperature_steps() {
  if (!pending_temperature_) return true;
  const double t = *pending_temperature_;
  pending_temperature_.reset();
  return set_temperature(t);
}

bool Session::set_temperature_text(const std::string& text) {
  try {
    return set_temperature(parse_temperature(text));
  } catch (const InputError& e) {
    set_error(message_of(e));
    return false;
  }
}

bool Session::set_query(int q) {
  if (q < 0 || q >= n()) {
    set_error(message_of(Msg::QueryOutside, {std::to_string(q), std::to_string(n() - 1)}));
    return false;
  }
  set_error(Message{});
  if (q == query()) return true;
  std::vector<int> rest(queries_.begin() + 1, queries_.end());
  std::erase(rest, q);
  queries_ = {q};
  queries_.insert(queries_.end(), rest.begin(), rest.end());
  if (streaming_) return post(kRow);
  return true;
}

// The selection in its order: the first as given, the others ascending and distinct.
static std::vector<int> normalised_queries(const std::vector<int>& qs) {
  std::vector<int> rest(qs.begin() + 1, qs.end());
  std::erase(rest, qs.front());
  std::sort(rest.begin(), rest.end());
  rest.erase(std::unique(rest.begin(), rest.end()), rest.end());
  std::vector<int> out{qs.front()};
  out.insert(out.end(), rest.begin(), rest.end());
  return out;
}

std::vector<int> parse_query_list(const Problem& p, const std::string& text) {
  std::vector<int> qs;
  std::size_t at = 0;
  for (;;) {
    const std::size_t comma = text.find(',', at);
    std::string item = text.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    const auto first = item.find_first_not_of(" \t"), last = item.find_last_not_of(" \t");
    item = first == std::string::npos ? std::string{} : item.substr(first, last - first + 1);
    if (item.empty()) throw InputError(Msg::QueryListEmptyItem, {text});
    qs.push_back(resolve_query(p, item));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  qs = normalised_queries(qs);
  if (static_cast<int>(qs.size()) > kMaxQueries)
    throw InputError(Msg::QueryListTooLong, {std::to_string(kMaxQueries), std::to_string(qs.size())});
  return qs;
}

bool Session::set_queries(const std::vector<int>& qs) {
  if (qs.empty()) {
    set_error(message_of(Msg::QueryListEmptyItem, {""}));
    return false;
  }
  for (int q : qs)
    if (q < 0 || q >= n()) {
      set_error(message_of(Msg::QueryOutside, {std::to_string(q), std::to_string(n() - 1)}));
      return false;
    }
  const std::vector<int> sel = normalised_queries(qs);
  if (static_cast<int>(sel.size()) > kMaxQueries) {
    set_error(message_of(Msg::QueryListTooLong, {std::to_string(kMaxQueries), std::to_string(sel.size())}));
    return false;
  }
  set_error(Message{});
  if (sel == queries_) return true;
  queries_ = sel;
  if (streaming_) return post(kRow);
  return true;
}

bool Session::set_queries_text(const std::string& text) {
  try {
    return set_queries(parse_query_list(*shown_, text));
  } catch (const InputError& e) {
    set_error(message_of(e));
    return false;
  }
}

bool Session::toggle_query(int q) {
  std::vector<int> sel = queries_;
  if (q == query()) {
    set_error(Message{});
    return true;  // the selected query stays
  }
  if (std::find(sel.begin(), sel.end(), q) != sel.end()) std::erase(sel, q);
  else sel.push_back(q);
  return set_queries(sel);
}

bool Session::move_query(int delta) {
  return set_query(std::clamp(query() + delta, 0, n() - 1));
}

bool Session::set_mask(MaskKind m) {
  if (m == req_.mask) {
    set_error(Message{});
    return true;
  }
  if (!req_.source.bundle.empty()) {
    set_error(message_of(Msg::MaskBundleFixed, {}));
    return false;
  }
  if (m == MaskKind::Custom && !has_custom_mask()) {
    set_error(message_of(Msg::NoCustomMask, {}));
    return false;
  }
  req_.mask = m;
  return post(kAll);
}

bool Session::set_mods(const ModSettings& m) {
  if (m == req_.mods) {
    set_error(Message{});
    return true;
  }
  // Checked on the problem on screen with the new settings (its inputs shared, nothing copied):
  // the core's refusals, before any run.
  Problem check = *shown_;
  set_mods_of(check, m);
  try {
    validate(check);
  } catch (const InputError& e) {
    set_error(message_of(e));
    return false;
  }
  req_.mods = m;
  return post(kAll);
}

bool Session::set_mod_value(ModKnob knob, double value) {
  // The value checked as the CLI's spec of it (its every digit; a whole number for W and P), which
  // refuses what the settings would read as "off" and a C beyond fp32; then set as given.
  const bool real = knob == ModKnob::RopeTheta || knob == ModKnob::Softcap;
  const std::string v = real ? shortest_text(value) : std::to_string(static_cast<long long>(std::floor(value)));
  Problem scratch;
  try {
    switch (knob) {
      case ModKnob::RopeTheta: apply_rope_spec(scratch, v); break;
      case ModKnob::Softcap: apply_score_mod_spec(scratch, "softcap:" + v); break;
      case ModKnob::Window: apply_mask_mod_spec(scratch, "window:" + v); break;
      case ModKnob::Prefix: apply_mask_mod_spec(scratch, "prefix:" + v); break;
    }
  } catch (const InputError& e) {
    set_error(message_of(e));
    return false;
  }
  ModSettings m = req_.mods;
  switch (knob) {
    case ModKnob::RopeTheta: m.rope_theta = value; break;
    case ModKnob::Softcap: m.softcap = value; break;
    case ModKnob::Window: m.window = static_cast<int>(value); break;
    case ModKnob::Prefix: m.prefix = static_cast<int>(value); break;
  }
  return set_mods(m);
}

bool Session::set_mod_files(const std::string& bias, const std::string& documents) {
  req_.source.bias_file = bias;
  req_.source.documents_file = documents;
  req_.source.load = ++loads_;  // read again, even under the same names
  req_.queries = queries_;      // the same rows: the selection stays
  return post(kAll);
}

bool Session::step_shows_mask(int step) const {
  return (step == 2 || step == 3) && (shown_->mask != MaskKind::None || has_mask_mods(*shown_));
}

bool Session::toggle_mask() {
  return set_mask(req_.mask == MaskKind::None ? MaskKind::Causal : MaskKind::None);
}

bool Session::set_backend(const std::string& name) {
  if (name == req_.backend) {
    set_error(Message{});
    return true;
  }
  if (name == "cuda" && !cuda_ok_) {
    set_error(message_of(Msg::NoDevice, {cuda_reason_}));
    return false;
  }
  if (name != "cpu" && name != "cuda") {
    set_error(message_of(Msg::UnknownBackend, {name}));
    return false;
  }
  if (name == "cuda" && req_.precision == Precision::BF16) {
    set_error(message_of(Msg::Bf16StagedCuda, {}));
    return false;
  }
  if (name == "cpu" && n() > kCpuMaxTokens) {
    set_error(limit_message(n(), "cpu"));
    return false;
  }
  req_.backend = name;
  return post(kAll);
}

bool Session::set_precision(Precision p) {
  if (p == req_.precision) {
    set_error(Message{});
    return true;
  }
  if (p != Precision::FP32 && p != Precision::BF16) {
    set_error(message_of(Msg::RunPrecision, {std::string(to_string(p))}));
    return false;
  }
  if (p == Precision::BF16 && req_.backend == "cuda") {
    set_error(message_of(Msg::Bf16StagedCuda, {}));
    return false;
  }
  if (p == Precision::BF16 && streaming_) {
    set_error(message_of(Msg::Bf16Streamed, {std::to_string(n()), std::to_string(kKeepStagesMaxTokens)}));
    return false;
  }
  req_.precision = p;
  return post(kAll);
}

bool Session::load_demo() {
  req_.source.demo = true;
  req_.source.files = InputFiles{};
  req_.source.bundle.clear();
  req_.source.bias_file.clear();  // the files of another problem's shape
  req_.source.documents_file.clear();
  req_.source.layer = req_.source.head = 0;
  if (req_.mask == MaskKind::Custom) req_.mask = MaskKind::None;
  req_.queries = {kDemoDefaultQuery};
  return post(kAll);
}

bool Session::load_random(int n_tokens, int d_k, int d_v, std::uint64_t seed, int heads) {
  if (heads < 0) heads = req_.source.heads;
  if (heads < 1 || heads > kMaxRandomHeads) {
    set_error(message_of(Msg::HeadsRange, {std::to_string(kMaxRandomHeads), std::to_string(heads)}), true);
    return false;
  }
  if (n_tokens < 1 || n_tokens > max_tokens()) {
    set_error(n_tokens < 1 ? message_of(Msg::NMin, {std::to_string(n_tokens)}) : limit_message(n_tokens, req_.backend),
              true);
    return false;
  }
  for (const auto& [name, d] : {std::pair{"d_k", d_k}, std::pair{"d_v", d_v}}) {
    if (d < 1 || d > kMaxHeadDim) {
      set_error(message_of(Msg::HeadDimRange, {name, std::to_string(kMaxHeadDim), std::to_string(d)}), true);
      return false;
    }
  }
  try {
    check_pattern(req_.source.pattern, n_tokens, d_k);
    check_random_inputs(n_tokens, d_k, d_v, heads);
  } catch (const InputError& e) {
    set_error(message_of(e), true);
    return false;
  }
  const int head = req_.source.bundle.empty() && req_.source.head < heads ? req_.source.head : 0;
  Source s;
  s.demo = false;
  s.n = n_tokens;
  s.d_k = d_k;
  s.d_v = d_v;
  s.seed = seed;
  s.pattern = req_.source.pattern;
  s.heads = heads;
  s.head = head;
  req_.source = s;
  req_.queries = {n_tokens / 2};
  if (req_.mask == MaskKind::Custom) req_.mask = MaskKind::None;
  return post(kAll);
}

bool Session::load_files(const InputFiles& f) {
  if (f.q.empty() || f.k.empty() || f.v.empty()) {
    set_error(message_of(Msg::FilesTogether, {f.q.empty() ? "--q" : f.k.empty() ? "--k" : "--v"}), true);
    return false;
  }
  req_.source.demo = false;
  req_.source.files = f;
  req_.source.load = ++loads_;
  req_.source.bias_file.clear();
  req_.source.documents_file.clear();
  req_.source.bundle.clear();
  req_.source.heads = 1;
  req_.source.layer = req_.source.head = 0;
  req_.queries = {0};
  if (!f.mask.empty()) {
    req_.mask = MaskKind::Custom;
  } else if (req_.mask == MaskKind::Custom) {
    req_.mask = MaskKind::None;
  }
  return post(kAll);
}

bool Session::set_head(int head) {
  if (head < 0 || head >= heads()) {
    set_error(message_of(Msg::HeadOutside, {std::to_string(head), std::to_string(heads() - 1)}));
    return false;
  }
  set_error(Message{});
  if (head == req_.source.head) return true;
  req_.source.head = head;
  req_.queries = queries_;  // every head has the same rows: the selection stays
  return post(kAll);
}

bool Session::set_layer(int layer) {
  if (req_.source.bundle.empty() || !bundle_ || layer < 0 || layer >= layer_count()) {
    set_error(message_of(Msg::LayerOutside, {std::to_string(layer)}));
    return false;
  }
  set_error(Message{});
  if (layer == req_.source.layer) return true;
  req_.source.layer = layer;
  if (req_.source.head >= bundle_->calls[layer].heads) req_.source.head = 0;
  req_.queries = {std::min(query(), bundle_->calls[layer].n - 1)};  // the manifest knows the new n
  return post(kAll);
}

bool Session::load_bundle(int layer) {
  if (!bundle_ || layer < 0 || layer >= static_cast<int>(bundle_->calls.size())) {
    set_error(message_of(Msg::LayerOutside, {std::to_string(layer)}));
    return false;
  }
  // The random problem's settings stay, for a later Generate.
  Source& s = req_.source;
  s.demo = false;
  s.files = InputFiles{};
  s.bias_file.clear();
  s.documents_file.clear();
  s.bundle = bundle_->dir;
  s.layer = layer;
  s.head = 0;
  req_.queries = {0};
  return post(kAll);
}

int Session::layer_count() const {
  return !req_.source.bundle.empty() && bundle_ ? static_cast<int>(bundle_->calls.size()) : 1;
}

int Session::heads_of(const Source& s) const {
  if (!s.bundle.empty() && bundle_) return bundle_->calls[s.layer].heads;
  if (s.demo || !s.files.q.empty()) return 1;
  return s.heads;
}


int Session::kv_heads() const {
  const Source& s = req_.source;
  if (!s.bundle.empty() && bundle_) return bundle_->calls[s.layer].kv_heads;
  return heads();
}

int Session::kv_head_of(int head) const {
  return head / std::max(1, heads() / std::max(1, kv_heads()));
}

void Session::set_view(const PoolRequest& view) {
  if (have_view_ && same_view(view, view_)) return;
  view_ = view;
  have_view_ = true;
  // The output the first run left comes in the same pass (execute pools only a view that fits).
  if (streaming_ && (owed_ || view_fits(view, *shown_))) post(kView);
}

// ---- what the UI shows ----------------------------------------------------------------------

const MatrixF* Session::stage_matrix(int step) const {
  const MatrixF* m = nullptr;
  switch (step) {
    case 1: m = &trace_.scores; break;
    case 2: m = &trace_.logits; break;
    case 3: m = &trace_.weights; break;
    case 4: m = &trace_.output; break;
    default: return nullptr;
  }
  return m->size() > 0 ? m : nullptr;
}

const PooledGrid* Session::pooled_stage(int step) const {
  if (trace_.pooled.empty()) return nullptr;
  switch (step) {
    case 1: return &trace_.pooled.scores;
    case 2: return &trace_.pooled.logits;
    case 3: return &trace_.pooled.weights;
    default: return nullptr;
  }
}

const RowStages* Session::row_of(int q) const {
  for (const RowStages& r : trace_.rows)
    if (r.row == q && r.weights.size() == static_cast<std::size_t>(shown_->m())) return &r;
  return nullptr;
}

const std::vector<std::string>& Session::column_labels(int step) const {
  if (step == 4) return index_labels(dim_labels_, shown_->d_v());
  return shown_->key_tokens();
}

const std::string& Session::description(Lang lang) const {
  DescriptionCache& d = description_;
  if (d.revision != revision_ || d.query != query() || d.lang != lang) {
    if (trace_.has_stages) {
      d.text = describe(*shown_, trace_, query(), lang);
    } else if (const RowStages* r = query_row()) {
      d.text = describe(*shown_, r->weights.data(), r->mask.data(), query(), lang);
    } else {
      d.text = caveat(lang);
    }
    d.revision = revision_;
    d.query = query();
    d.lang = lang;
  }
  return d.text;
}

std::optional<RowStats> Session::stats_of(int q) const {
  if (q < 0 || q >= n()) return std::nullopt;
  if (stats_cache_.revision != revision_) {
    stats_cache_.revision = revision_;
    stats_cache_.rows.clear();
  }
  for (const auto& [row, st] : stats_cache_.rows)
    if (row == q) return st;
  std::optional<RowStats> st;
  if (trace_.has_stages && trace_.weights.size() > 0) st = row_stats(trace_, q);
  else if (const RowStages* r = row_of(q)) st = row_stats(r->weights.data(), r->mask.data(), shown_->m());
  if (st) stats_cache_.rows.emplace_back(q, *st);
  return st;
}

std::optional<RowStats> Session::mean_stats(int* counted) const {
  RowStats mean;
  mean.argmax = -1;
  double unmasked = 0;
  int k = 0;
  for (int q : queries_) {
    const auto st = stats_of(q);
    if (!st) continue;
    mean.max_weight += st->max_weight;
    mean.entropy += st->entropy;
    mean.perplexity += st->perplexity;
    mean.weight_sum += st->weight_sum;
    unmasked += st->unmasked;
    ++k;
  }
  if (counted) *counted = k;
  if (k == 0) return std::nullopt;
  mean.max_weight /= k;
  mean.entropy /= k;
  mean.perplexity /= k;
  mean.weight_sum /= k;
  mean.unmasked = static_cast<int>(unmasked / k);
  return mean;
}

std::string Session::reproduce_command() const {
  const Request& r = shown_req_;
  // The shortest decimal that reads back as the same double: the CLI parses it to this value.
  char t[64];
  const auto res = std::to_chars(t, t + sizeof t, shown_->temperature);
  const std::string temp(t, res.ptr);
  // A path as one shell word: as is when it holds only safe characters, else in single quotes.
  const auto word = [](const std::string& w) {
    if (!w.empty() && w.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-./,:+=@%") ==
                          std::string::npos)
      return w;
    std::string q = "'";
    for (char ch : w) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    return q + "'";
  };
  const InputFiles& f = r.source.files;
  std::string cmd;
  if (!f.q.empty()) {
    cmd = "attnlab run --q " + word(f.q) + " --k " + word(f.k) + " --v " + word(f.v);
    if (!f.tokens.empty()) cmd += " --tokens " + word(f.tokens);
    if (!f.tokens_file.empty()) cmd += " --tokens-file " + word(f.tokens_file);
  } else if (!r.source.bundle.empty()) {
    cmd = "attnlab run --bundle " + word(r.source.bundle) + " --layer " + std::to_string(r.source.layer) +
          " --head " + std::to_string(r.source.head);
  } else if (r.source.demo) {
    cmd = "attnlab demo";
  } else {
    cmd = "attnlab run --random " + std::to_string(r.source.n) + " --dk " + std::to_string(r.source.d_k) +
          " --dv " + std::to_string(r.source.d_v) + " --seed " + std::to_string(r.source.seed);
    if (r.source.pattern.kind != PatternKind::Noise) cmd += " --pattern " + pattern_name(r.source.pattern);
    if (r.source.heads > 1) cmd += " --heads " + std::to_string(r.source.heads) + " --head " + std::to_string(r.source.head);
  }
  cmd += " --query " + std::to_string(query()) + " --temperature " + temp;
  // The bundle's mask is the call's own: the CLI refuses --mask with --bundle.
  if (r.source.bundle.empty())
    cmd += " --mask " + (shown_->mask == MaskKind::Custom ? word(f.mask) : std::string(to_string(shown_->mask)));
  // The modifications, as the CLI takes them.
  const Modifications& md = shown_->mods;
  if (md.rope_theta > 0) cmd += " --rope " + format_number("%.9g", md.rope_theta);
  std::string score, maskmod;
  if (md.alibi) score += std::string(score.empty() ? "" : "+") + "alibi";
  if (!r.source.bias_file.empty()) score += std::string(score.empty() ? "" : "+") + "bias:" + r.source.bias_file;
  if (md.softcap > 0) score += std::string(score.empty() ? "" : "+") + "softcap:" + format_number("%.9g", md.softcap);
  if (md.window > 0) maskmod += "window:" + std::to_string(md.window);
  if (md.prefix > 0) maskmod += std::string(maskmod.empty() ? "" : "+") + "prefix:" + std::to_string(md.prefix);
  if (!r.source.documents_file.empty())
    maskmod += std::string(maskmod.empty() ? "" : "+") + "document:" + r.source.documents_file;
  if (!score.empty()) cmd += " --score-mod " + word(score);
  if (!maskmod.empty()) cmd += " --mask-mod " + word(maskmod);
  cmd += " --backend " + ran_backend() + " --format csv";
  if (r.precision == Precision::BF16) cmd += " --precision bf16";
  return cmd;
}

}  // namespace attnlab::viewer
