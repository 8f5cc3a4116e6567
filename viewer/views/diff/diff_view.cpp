// The A/B difference view's logic (see diff_view.h).
#include "viewer/views/diff/diff_view.h"

#include "core/format.h"
#include "core/messages.h"
#include "core/parallel.h"
#include "engine/registry.h"
#include "viewer/session/session.h"
#include "viewer/draw/strings.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <vector>

namespace attnlab::viewer {
namespace {

std::string trim(const std::string& s) {
  const auto a = s.find_first_not_of(" \t");
  if (a == std::string::npos) return {};
  return s.substr(a, s.find_last_not_of(" \t") - a + 1);
}

bool masked_at(const float* mask, int mask_rows, int cols, int r, int c) {
  return mask && mask[static_cast<std::size_t>(r % mask_rows) * cols + c] != 0.0f;
}

void finish(DiffMap& m) {
  double sum = 0;
  int counted = 0;
  for (int r = 0; r < m.rows; ++r)
    for (int c = 0; c < m.cols; ++c) {
      const float v = m.at(r, c);
      if (std::isnan(v)) {
        ++m.masked;
        continue;
      }
      const double a = std::abs(static_cast<double>(v));
      sum += a;
      ++counted;
      if (v != 0) ++m.changed;
      if (m.arg_row < 0 || a > m.max_abs) {
        m.max_abs = a;
        m.arg_row = r;
        m.arg_col = c;
      }
    }
  m.mean_abs = counted ? sum / counted : 0;
}

}  // namespace

DiffSpec parse_diff_spec(const std::string& text) {
  DiffSpec d;
  if (trim(text).empty()) throw InputError(Msg::DiffEmpty, {});
  std::size_t start = 0;
  for (;;) {
    const std::size_t comma = text.find(',', start);
    const std::string item = trim(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    const std::size_t eq = item.find('=');
    if (eq == std::string::npos) throw InputError(Msg::DiffItem, {item});
    const std::string key = trim(item.substr(0, eq)), value = trim(item.substr(eq + 1));
    const auto bad = [&](const char* takes) { return InputError(Msg::DiffValue, {key, value, takes}); };
    const auto once = [&](bool set) {
      if (set) throw InputError(Msg::DiffKeyTwice, {key});
    };
    if (key == "mask") {
      once(d.mask.has_value());
      if (value == "none") d.mask = MaskKind::None;
      else if (value == "causal") d.mask = MaskKind::Causal;
      else throw bad("none, causal");
    } else if (key == "temperature" || key == "T") {
      once(d.temperature.has_value());
      try {
        d.temperature = parse_temperature(value);
      } catch (const InputError&) {
        throw InputError(Msg::DiffTemperature, {key, value});
      }
    } else if (key == "backend") {
      once(d.backend.has_value());
      if (value != "cpu" && value != "cuda") throw bad("cpu, cuda");
      d.backend = value;
    } else if (key == "variant") {
      once(d.variant.has_value());
      if (value == "staged") d.variant = Variant::Staged;
      else if (value == "fused") d.variant = Variant::Fused;
      else throw bad("staged, fused");
    } else if (key == "precision") {
      once(d.precision.has_value());
      if (value == "fp32") d.precision = Precision::FP32;
      else if (value == "bf16") d.precision = Precision::BF16;
      else throw bad("fp32, bf16");
    } else if (key == "query") {
      once(d.query.has_value());
      if (value.empty()) throw InputError(Msg::DiffQuery, {});
      d.query = value;
    } else {
      throw InputError(Msg::DiffKeyUnknown, {key});
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return d;
}

std::string diff_spec_text(const DiffSpec& d) {
  std::string s;
  const auto add = [&s](const std::string& kv) { s += (s.empty() ? "" : ",") + kv; };
  if (d.mask) add("mask=" + std::string(to_string(*d.mask)));
  if (d.temperature) {
    char t[64];
    const auto r = std::to_chars(t, t + sizeof t, *d.temperature);
    add("temperature=" + std::string(t, r.ptr));
  }
  if (d.backend) add("backend=" + *d.backend);
  if (d.variant) add("variant=" + std::string(to_string(*d.variant)));
  if (d.precision) add("precision=" + std::string(to_string(*d.precision)));
  if (d.query) add("query=" + *d.query);
  return s;
}

RunSetting apply_diff(RunSetting a, const DiffSpec& d, const Problem& p) {
  if (d.mask) a.mask = *d.mask;
  if (d.temperature) {
    validate_temperature(*d.temperature);
    a.temperature = *d.temperature;
  }
  if (d.backend) a.backend = *d.backend;
  if (d.variant) a.variant = *d.variant;
  if (d.precision) a.precision = *d.precision;
  if (d.query) a.query = resolve_query(p, *d.query);
  return a;
}

std::string setting_text(const RunSetting& s, const Problem& p, Lang lang, const RunSetting* from) {
  const auto mark = [from](bool differs) { return from && differs ? std::string("*") : std::string(); };
  std::string t = mark(from && from->temperature != s.temperature) + "T = " + format_number("%.6g", s.temperature);
  t += " · " + mark(from && from->mask != s.mask) +
       tr(lang, s.mask == MaskKind::None     ? S::SetMaskNone
                : s.mask == MaskKind::Causal ? S::SetMaskCausal
                                             : S::SetMaskCustom);
  t += " · " + mark(from && from->backend != s.backend) + (s.backend == "cuda" ? "CUDA" : "CPU");
  t += " · " + mark(from && from->variant != s.variant) +
       tr(lang, s.variant == Variant::Staged ? S::SetStaged : S::SetFused);
  t += " · " + mark(from && from->precision != s.precision) + std::string(to_string(s.precision));
  t += " · " + mark(from && from->query != s.query) + tr(lang, S::SetQuery) + " " +
       indexed_label(p.query_tokens(), s.query);
  return t;
}

DiffMap diff_map(const float* a, const float* b, int rows, int cols, const float* mask_a, const float* mask_b,
                 int mask_rows) {
  DiffMap m;
  m.rows = rows;
  m.cols = cols;
  m.d.resize(static_cast<std::size_t>(rows) * cols);
  // Blocks of rows on every core: the UI waits for the map (up to 16M cells).
  constexpr int kBlockRows = 64;
  const std::size_t blocks = static_cast<std::size_t>((rows + kBlockRows - 1) / kBlockRows);
  float* d = m.d.data();
  parallel_items(blocks, worker_count(blocks, 4.0 * rows * cols), [&](unsigned, std::size_t blk) {
    const int r1 = std::min(rows, static_cast<int>(blk + 1) * kBlockRows);
    for (int r = static_cast<int>(blk) * kBlockRows; r < r1; ++r)
      for (int c = 0; c < cols; ++c) {
        const std::size_t i = static_cast<std::size_t>(r) * cols + c;
        const bool both = masked_at(mask_a, mask_rows, cols, r, c) && masked_at(mask_b, mask_rows, cols, r, c);
        d[i] = both || !std::isfinite(a[i]) || !std::isfinite(b[i]) ? std::numeric_limits<float>::quiet_NaN()
                                                                     : b[i] - a[i];
      }
  });
  finish(m);
  return m;
}

DiffMap diff_rows(const float* ma, const float* mb, int cols, int qa, int qb, const float* mask_a, const float* mask_b,
                  int mask_rows) {
  const float* a = ma + static_cast<std::size_t>(qa) * cols;
  const float* b = mb + static_cast<std::size_t>(qb) * cols;
  DiffMap out;
  out.rows = 1;
  out.cols = cols;
  out.d.resize(cols);
  for (int c = 0; c < cols; ++c) {
    const bool both = masked_at(mask_a, mask_rows, cols, qa, c) && masked_at(mask_b, mask_rows, cols, qb, c);
    out.d[c] = both || !std::isfinite(a[c]) || !std::isfinite(b[c]) ? std::numeric_limits<float>::quiet_NaN()
                                                                      : b[c] - a[c];
  }
  finish(out);
  return out;
}

ValueRange symmetric_range(const DiffMap& m) {
  const double h = m.max_abs > 0 ? m.max_abs : 1.0;
  return ValueRange{-h, h};
}

std::vector<Change> top_changes(const DiffMap& m, const float* a, const float* b, int k) {
  // The k largest |B − A| (the lower index first on ties): a k-long list per block of cells kept in
  // that order, then the blocks' lists merged; no list of every changed cell (16M at 4096 tokens).
  const std::size_t keep = static_cast<std::size_t>(std::max(k, 0));
  const auto larger = [&m](int x, int y) {
    const float ax = std::abs(m.d[x]), ay = std::abs(m.d[y]);
    return ax != ay ? ax > ay : x < y;
  };
  const auto insert = [&](std::vector<int>& best, int i) {
    if (best.size() == keep && !larger(i, best.back())) return;
    best.insert(std::upper_bound(best.begin(), best.end(), i, larger), i);
    if (best.size() > keep) best.pop_back();
  };
  constexpr std::size_t kBlock = std::size_t{1} << 18;
  const std::size_t cells = m.d.size(), blocks = (cells + kBlock - 1) / kBlock;
  std::vector<std::vector<int>> parts(blocks);
  if (keep > 0)
    parallel_items(blocks, worker_count(blocks, 2.0 * static_cast<double>(cells)), [&](unsigned, std::size_t blk) {
      std::vector<int>& best = parts[blk];
      const std::size_t end = std::min(cells, (blk + 1) * kBlock);
      for (std::size_t i = blk * kBlock; i < end; ++i)
        if (!std::isnan(m.d[i]) && m.d[i] != 0) insert(best, static_cast<int>(i));
    });
  std::vector<int> best;
  for (const std::vector<int>& part : parts)
    for (int i : part) insert(best, i);
  std::vector<Change> out;
  for (int i : best) out.push_back({i / m.cols, i % m.cols, a[i], b[i], m.d[i]});
  return out;
}

std::vector<PooledCell> pool_signed(const DiffMap& m, const AxisMap& rmap, const AxisMap& cmap) {
  // One pass: the largest and the smallest value of each block, and whichever is larger in
  // magnitude (the positive one on ties); a block of masked cells only is masked.
  const int out_h = rmap.size(), out_w = cmap.size();
  std::vector<PooledCell> out(static_cast<std::size_t>(out_h) * out_w);
  parallel_items(static_cast<std::size_t>(out_h),
                      worker_count(static_cast<std::size_t>(out_h), 2.0 * static_cast<double>(m.d.size())),
                      [&](unsigned, std::size_t py) {
                        std::vector<float> hi(out_w, -std::numeric_limits<float>::infinity());
                        std::vector<float> lo(out_w, std::numeric_limits<float>::infinity());
                        for (int r = rmap.begin[py]; r < rmap.end[py]; ++r) {
                          const float* row = m.d.data() + static_cast<std::size_t>(r) * m.cols;
                          for (int px = 0; px < out_w; ++px) {
                            float h = hi[px], l = lo[px];
                            for (int c = cmap.begin[px]; c < cmap.end[px]; ++c) {
                              const float v = row[c];
                              if (std::isnan(v)) continue;
                              h = std::max(h, v);
                              l = std::min(l, v);
                            }
                            hi[px] = h;
                            lo[px] = l;
                          }
                        }
                        PooledCell* o = out.data() + py * static_cast<std::size_t>(out_w);
                        for (int px = 0; px < out_w; ++px) {
                          if (hi[px] < lo[px]) {
                            o[px].masked = true;  // nothing but NaN in the block
                          } else {
                            o[px].value = -lo[px] > hi[px] ? lo[px] : hi[px];
                          }
                        }
                      });
  return out;
}

namespace {

const MatrixF& stage_of(const Trace& t, int step) {
  switch (step) {
    case 1: return t.scores;
    case 2: return t.logits;
    case 3: return t.weights;
    default: return t.output;
  }
}

// The kept mask of a run at a step that shows it (steps 2 and 3: the mask's cells and those the
// mask mods block, a window's with mask "none" too), else null.
const MatrixF* mask_of(const Trace& t, int step) {
  return (step == 2 || step == 3) && t.mask.size() > 0 ? &t.mask : nullptr;
}

}  // namespace

std::shared_ptr<const StepDiff> step_diff(const Trace& a, const Trace& b, const RunSetting& sa, const RunSetting& sb,
                                          bool query_named, int step) {
  auto d = std::make_shared<StepDiff>();
  d->output_only = step < 4 && (!a.has_stages || !b.has_stages);
  const int s = d->output_only ? 4 : step;
  d->step = s;
  d->query = sa.query;
  const MatrixF& ma = stage_of(a, s);
  const MatrixF& mb = stage_of(b, s);
  // Only a spec that names the query compares two rows: B's query row of B's run (the same run, or
  // one with the spec's other changes too) minus A's current row of A's.
  const bool rows_differ = query_named && sa.query != sb.query;
  d->same_run = sa.same_run(sb) && !rows_differ;
  d->query_diff = rows_differ;
  const int rows = static_cast<int>(ma.rows()), cols = static_cast<int>(ma.cols());
  if (ma.size() == 0 || mb.rows() != ma.rows() || mb.cols() != ma.cols()) return nullptr;
  const MatrixF* mka = mask_of(a, s);
  const MatrixF* mkb = mask_of(b, s);
  const int mask_rows = mka ? static_cast<int>(mka->rows()) : mkb ? static_cast<int>(mkb->rows()) : 0;
  if (d->query_diff) {
    d->map = diff_rows(ma.data(), mb.data(), cols, sa.query, sb.query, mka ? mka->data() : nullptr,
                       mkb ? mkb->data() : nullptr, mask_rows);
    d->top = top_changes(d->map, ma.data() + static_cast<std::size_t>(sa.query) * cols,
                         mb.data() + static_cast<std::size_t>(sb.query) * cols, DiffView::kTop);
  } else {
    d->map = diff_map(ma.data(), mb.data(), rows, cols, mka ? mka->data() : nullptr, mkb ? mkb->data() : nullptr,
                      mask_rows);
    d->top = top_changes(d->map, ma.data(), mb.data(), DiffView::kTop);
  }
  return d;
}

std::shared_ptr<const CompanionResult> DiffCompanion::compute(const CompanionInput& in) const {
  auto out = std::make_shared<DiffResult>();
  out->spec = spec_;
  const Problem& p = *in.problem;
  try {
    RunSetting a = in.setting;
    const RunSetting b = apply_diff(a, spec_, p);
    out->b_setting = b;
    out->b_problem = in.problem;
    // B − A of the step on screen beside the run; A as Session::setting() gives it (what ran).
    const auto diff_with = [&](const Trace& bt) {
      if (!in.main) return;
      if (!in.main->backend.empty()) a.backend = in.main->backend;
      out->step_diff = step_diff(*in.main, bt, a, b, spec_.query.has_value(), in.step);
      out->diff_step = in.step;
    };
    if (a.same_run(b)) {
      out->b_same_run = true;  // only the query differs: B is A's trace, another row
      if (in.main) diff_with(*in.main);
      return out;
    }
    if (b.backend == "cuda" && !in.cuda_ok) throw NoDeviceError(Msg::NoDevice, {in.cuda_reason});
    if (b.backend == "cuda" && b.precision == Precision::BF16 && b.variant == Variant::Staged)
      throw InputError(Msg::Bf16StagedCuda, {});
    if (b.temperature != p.temperature || b.mask != p.mask) {
      // B's problem shares A's inputs; the backend validates it (once) as it runs.
      auto bp = std::make_shared<Problem>(p);
      bp->temperature = b.temperature;
      bp->mask = b.mask;
      out->b_problem = std::move(bp);
    }
    RunOptions opt;
    opt.variant = b.variant;
    opt.precision = b.precision;
    opt.keep_stages = b.variant == Variant::Staged;
    opt.cancel = in.cancel;
    auto t = std::make_shared<Trace>();
    run_backend_into(b.backend, *out->b_problem, opt, *t);
    out->b_trace = std::move(t);
    diff_with(*out->b_trace);
  } catch (const Cancelled&) {
    throw;
  } catch (const std::exception& e) {
    out->b_error = message_of(e);
    out->b_trace.reset();
  }
  return out;
}

std::shared_ptr<const Companion> diff_companion(const DiffSpec& spec) {
  return std::make_shared<const DiffCompanion>(spec);
}

const DiffResult* diff_of(const Session& s) { return s.companion<DiffResult>(); }

const Trace* b_trace_of(const Session& s) {
  const DiffResult* r = diff_of(s);
  if (!r) return nullptr;
  return r->b_same_run ? &s.trace() : r->b_trace.get();
}

void check_diff(const Session& s, const DiffSpec& d) {
  const RunSetting b = apply_diff(s.setting(), d, s.problem());  // the query, the temperature
  if (b.backend == "cuda" && !s.cuda_ok()) throw NoDeviceError(Msg::NoDevice, {s.cuda_reason()});
  if (b.backend == "cuda" && b.precision == Precision::BF16 && b.variant == Variant::Staged)
    throw InputError(Msg::Bf16StagedCuda, {});
}

DiffView::Status DiffView::update(const Session& c, int step) {
  if (c.streaming()) return status_ = Status::Streamed;
  const DiffResult* r = diff_of(c);
  if (!r) return status_ = c.companions_busy() ? Status::Computing : Status::NoSpec;
  if (!r->b_error.empty()) return status_ = Status::Failed;
  const Trace* b = b_trace_of(c);
  if (!b) return status_ = Status::Computing;
  if (c.revision() == revision_ && step == asked_step_ && c.query() == query_ && status_ == Status::Ok) return status_;
  const RunSetting sa = c.setting();
  // The worker's, when it computed this step and query beside the run; else computed here.
  std::shared_ptr<const StepDiff> d =
      r->step_diff && r->diff_step == step && r->step_diff->query == sa.query ? r->step_diff : nullptr;
  if (!d) {
    d = step_diff(c.trace(), *b, sa, r->b_setting, r->spec.query.has_value(), step);
    if (!d) return status_ = Status::Computing;
    ++computed_;
  }
  d_ = std::move(d);
  revision_ = c.revision();
  asked_step_ = step;
  query_ = c.query();
  return status_ = Status::Ok;
}

std::pair<double, double> DiffView::values(const Session& c, int row, int col) const {
  const Trace* b = b_trace_of(c);
  if (status_ != Status::Ok || !b) return {0, 0};
  const MatrixF& ma = stage_of(c.trace(), d_->step);
  if (d_->query_diff) return {ma(c.setting().query, col), stage_of(*b, d_->step)(diff_of(c)->b_setting.query, col)};
  return {ma(row, col), stage_of(*b, d_->step)(row, col)};
}

std::string DiffView::state_json(const Session& c) const {
  static constexpr const char* names[] = {"ok", "no_spec", "streamed", "computing", "failed"};
  nlohmann::json j;
  j["status"] = names[static_cast<int>(status_)];
  const DiffResult* r = diff_of(c);
  if (r) j["spec"] = diff_spec_text(r->spec);
  if (r && !r->b_error.empty()) j["b_error"] = r->b_error.en;
  if (status_ == Status::Ok) {
    j["step"] = d_->step;
    j["output_only"] = d_->output_only;
    j["query_diff"] = d_->query_diff;
    j["rows"] = d_->map.rows;
    j["cols"] = d_->map.cols;
    j["max_abs"] = d_->map.max_abs;
    j["mean_abs"] = d_->map.mean_abs;
    j["arg_row"] = d_->map.arg_row;
    j["arg_col"] = d_->map.arg_col;
    j["changed"] = d_->map.changed;
    j["masked"] = d_->map.masked;
    j["summary"] = summary;
    nlohmann::json top = nlohmann::json::array();
    for (const Change& t : d_->top) top.push_back({{"row", t.row}, {"col", t.col}, {"a", t.a}, {"b", t.b}, {"diff", t.diff}});
    j["top"] = top;
    j["b_backend"] = b_trace_of(c) ? b_trace_of(c)->backend : "";
  }
  j["panel"] = {{"x", panel.x}, {"w", panel.w}};
  j["header"] = {{"h", header.h}, {"scrolled", header.scrolled}, {"below_h", below_h}};
  j["table_narrow"] = table_narrow;
  j["map_too_small"] = map_too_small;
  j["table"] = {{"w", table_w}, {"need", table_need}};
  return j.dump();
}

const char* DiffView::label(Lang lang) { return tr(lang, S::ViewDiff); }

bool DiffView::parse_flag(const std::string& flag, const FlagValue& value, Options& o) {
  if (flag != "--diff") return false;
  o.spec = parse_diff_spec(value());
  return true;
}

std::string DiffView::usage() {
  return "  --view diff: [--diff KEY=VALUE[,KEY=VALUE...]]  (B's changes; keys: mask, temperature, backend,\n"
         "               variant, precision, query)\n";
}

DiffView::DiffView(const ViewContext& ctx, const Options& o) {
  if (!o.spec) return;
  check_diff(ctx.session, *o.spec);  // a query that is no token, CUDA without a device: exit 2
  spec_ = o.spec;
  opened_ = ctx.step_given;  // an explicit --step is where it opens, even before the change shows
  edit = *o.spec;
  companion_ = diff_companion(*o.spec);
}

bool DiffView::apply(const Session& s, const DiffSpec& d) {
  edit_error_ = Message{};
  try {
    if (d.empty()) {
      spec_.reset();
      companion_.reset();
    } else {
      check_diff(s, d);
      spec_ = d;
      companion_ = diff_companion(d);
    }
  } catch (const InputError& e) {
    edit_error_ = message_of(e);
    return false;
  }
  return true;
}

void DiffView::prepare(Session& s, int step) { s.set_step(step); }

int diff_first_step(const DiffSpec& d) {
  const bool after_scores = d.temperature || d.mask;
  return after_scores && !d.backend && !d.variant && !d.precision && !d.query ? 2 : 1;
}

int DiffView::open_at(int step) {
  if (opened_ || !spec_) return step;
  opened_ = true;
  return std::max(step, diff_first_step(*spec_));
}

void DiffView::dump(nlohmann::json& j, const Session& s) const { j["diff"] = nlohmann::json::parse(state_json(s)); }

std::string DiffView::broken(const Session&) const {
  if (status_ == Status::Ok && (step() < 1 || step() > 4)) return "the diff view shows step " + std::to_string(step());
  return {};
}

}  // namespace attnlab::viewer
