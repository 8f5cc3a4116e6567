// Playback state machine (see playback.h).
#include "viewer/session/playback.h"

#include <algorithm>
#include <cmath>

namespace attnlab::viewer {

void Playback::set_playing(bool on) {
  playing_ = on;
  elapsed_ = 0;
}

void Playback::next() {
  step_ = std::min(kSteps, step_ + 1);
  elapsed_ = 0;
}

void Playback::prev() {
  step_ = std::max(1, step_ - 1);
  elapsed_ = 0;
}

void Playback::home() {
  step_ = 1;
  elapsed_ = 0;
}

void Playback::set_step(int k) {
  step_ = std::clamp(k, 1, kSteps);
  elapsed_ = 0;
}

void Playback::set_speed(double s) {
  speed_ = std::isfinite(s) ? std::clamp(s, kMinSpeed, kMaxSpeed) : 1.0;
}

bool Playback::tick(double dt) {
  if (!playing_ || !(dt > 0)) return false;
  elapsed_ += dt;
  const double period = 1.0 / speed_;
  bool changed = false;
  // A long frame (window dragged, heavy recompute) advances at most one step: skipping a stage of
  // the chain unseen would defeat the purpose of playing it.
  if (elapsed_ >= period) {
    step_ = step_ % kSteps + 1;
    elapsed_ = std::fmod(elapsed_, period);
    changed = true;
  }
  return changed;
}

}  // namespace attnlab::viewer
