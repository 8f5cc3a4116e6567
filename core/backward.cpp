// The upstream gradient of the backward pass (core/backward.h): the options' specs read into an
// Upstream, its checks against a problem, the random dO and the one-line texts.
#include "core/backward.h"

#include "core/format.h"
#include "core/io.h"
#include "core/messages.h"

#include <cmath>
#include <random>

namespace attnlab {
namespace {

// Mixed into --dout-seed: "gradient" in ASCII. Without it, dO of seed S would be the first numbers
// of Q of --seed S (the same generator), and equal to Q when d_v = d_k.
constexpr std::uint64_t kDoutStream = 0x6772616469656e74ull;

}  // namespace

Upstream upstream_random(std::uint64_t seed) {
  Upstream u;
  u.kind = UpstreamKind::Random;
  u.seed = seed;
  return u;
}

Upstream upstream_file(const std::string& path) {
  Upstream u;
  u.kind = UpstreamKind::File;
  u.file = path;
  u.data = read_matrix(path);
  return u;
}

Upstream parse_loss(const std::string& spec) {
  Upstream u;
  if (spec == "sum") {
    u.kind = UpstreamKind::Sum;
    return u;
  }
  if (spec == "mse" || spec == "mse:")
    throw InputError(Msg::LossMseTarget, {});
  if (spec.rfind("mse:", 0) == 0) {
    u.kind = UpstreamKind::Mse;
    u.file = spec.substr(4);
    u.data = read_matrix(u.file);
    return u;
  }
  throw InputError(Msg::LossUnknown, {spec});
}

void validate_upstream(const Problem& p, const Upstream& u) {
  if (u.kind != UpstreamKind::File && u.kind != UpstreamKind::Mse) return;
  const bool dout = u.kind == UpstreamKind::File;
  const Eigen::Index rows = static_cast<Eigen::Index>(p.heads) * p.n(), cols = p.d_v();
  if (u.data.rows() != rows || u.data.cols() != cols)
    throw InputError(dout ? Msg::DoutShape : Msg::TargetShape,
                     {u.file, std::to_string(u.data.rows()), std::to_string(u.data.cols()), std::to_string(rows),
                      std::to_string(cols), std::to_string(p.heads), std::to_string(p.n())});
  for (Eigen::Index r = 0; r < rows; ++r)
    for (Eigen::Index c = 0; c < cols; ++c)
      if (!std::isfinite(u.data(r, c)))
        throw InputError(dout ? Msg::DoutNotFinite : Msg::TargetNotFinite,
                         {u.file, format_number("%g", u.data(r, c)), std::to_string(r), std::to_string(c)});
}

MatrixF random_dout(Eigen::Index rows, Eigen::Index cols, std::uint64_t seed) {
  std::mt19937_64 gen(seed ^ kDoutStream);
  MatrixF d;
  fill_standard_normal(d, rows, cols, gen);
  return d;
}

Upstream row_upstream(const Problem& p, const Upstream& u, int head, int query) {
  const Eigen::Index row = static_cast<Eigen::Index>(head) * p.n() + query;
  Upstream r;  // u's data is the whole problem's: only its row is taken
  r.kind = u.kind;
  r.seed = u.seed;
  r.file = u.file;
  switch (u.kind) {
    case UpstreamKind::Random: {
      const std::vector<float> x =
          standard_normal_range(std::mt19937_64(u.seed ^ kDoutStream), row * p.d_v(), p.d_v());
      r.kind = UpstreamKind::File;
      r.data = Eigen::Map<const MatrixF>(x.data(), 1, p.d_v());
      break;
    }
    case UpstreamKind::File:
    case UpstreamKind::Mse:
      r.data = u.data.row(row);
      break;
    case UpstreamKind::Sum:
      break;
  }
  return r;
}

std::string upstream_text(const Upstream& u, Lang lang) {
  const bool zh = lang == Lang::Zh;
  switch (u.kind) {
    case UpstreamKind::Random:
      return zh ? "上游梯度 dO：标准正态随机数（--dout-seed " + std::to_string(u.seed) + "）"
                : "upstream gradient dO: standard normal (--dout-seed " + std::to_string(u.seed) + ")";
    case UpstreamKind::File:
      return zh ? "上游梯度 dO：来自 " + u.file : "upstream gradient dO: from " + u.file;
    case UpstreamKind::Sum:
      return zh ? "损失 L = Σ O（dO 全为 1）" : "loss L = Σ O (dO = 1 everywhere)";
    case UpstreamKind::Mse:
      return zh ? "损失 L = ½ Σ (O − Y)²，目标 Y 来自 " + u.file + "（dO = O − Y）"
                : "loss L = ½ Σ (O − Y)², target Y from " + u.file + " (dO = O − Y)";
  }
  return {};
}

std::string upstream_kind_name(UpstreamKind k) {
  switch (k) {
    case UpstreamKind::Random: return "random";
    case UpstreamKind::File: return "file";
    case UpstreamKind::Sum: return "sum";
    case UpstreamKind::Mse: return "mse";
  }
  return {};
}

}  // namespace attnlab
