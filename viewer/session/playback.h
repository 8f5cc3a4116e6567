// The chain's step playback, free of SDL: four steps (1 raw scores QK^T, 2 logits = (scaled + mask)
// / T, 3 softmax weights, 4 output = weights V), play/pause with a speed in steps per second.
// Manual steps clamp at 1 and 4; playing wraps from step 4 back to step 1 so the animation repeats
// until paused. Time enters only through tick(dt), so tests drive it deterministically.
#pragma once

namespace attnlab::viewer {

constexpr int kSteps = 4;
constexpr double kMinSpeed = 0.25;  // steps per second
constexpr double kMaxSpeed = 4.0;

// How long the window's loop waits for an event before it draws again, in ms: 250 while a view
// times something (View::measuring: its runs keep the cores), 16 while the steps play or a run is
// computed, 50 otherwise. An event ends the wait at once, so input is never slowed.
constexpr int frame_wait_ms(bool measuring, bool playing, bool busy) {
  return measuring ? 250 : playing || busy ? 16 : 50;
}

class Playback {
 public:
  int step() const { return step_; }
  bool playing() const { return playing_; }
  double speed() const { return speed_; }

  void toggle_play() { set_playing(!playing_); }
  void set_playing(bool on);
  void next();           // step + 1, clamped at 4
  void prev();           // step - 1, clamped at 1
  void home();           // back to step 1 (playing state unchanged)
  void set_step(int k);  // clamped to 1..4
  void set_speed(double steps_per_second);  // clamped to [kMinSpeed, kMaxSpeed]
  // Advances time by dt seconds; returns true when the step changed.
  bool tick(double dt);

 private:
  int step_ = 1;
  bool playing_ = false;
  double speed_ = 1.0;
  double elapsed_ = 0;  // seconds since the last step change while playing
};

}  // namespace attnlab::viewer
