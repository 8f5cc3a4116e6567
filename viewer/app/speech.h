// Speak: reads the description aloud through espeak-ng (Debian package espeak-ng), started with
// posix_spawnp so the UI never blocks; voice "cmn" (Mandarin) for Chinese, "en" for English.
// When espeak-ng is not on PATH the button is disabled and says so. espeak-ng's stderr goes to a
// pipe, not the viewer's terminal: it exits 0 even when no sound device could be opened, so what
// it printed is the only sign that nothing was heard, and the button shows it. POSIX only, no SDL.
#pragma once

#include "core/types.h"

#include <optional>
#include <string>
#include <sys/types.h>

namespace attnlab::viewer {

// Full path of an executable `name` found in $PATH, or nothing.
std::optional<std::string> find_on_path(const std::string& name);

// The espeak-ng voice for a UI language.
const char* espeak_voice(Lang lang);

class Speaker {
 public:
  Speaker();
  ~Speaker();
  Speaker(const Speaker&) = delete;
  Speaker& operator=(const Speaker&) = delete;

  bool available() const { return path_.has_value(); }
  // Stops any speech in progress, then starts reading `text`. False when it could not start.
  bool speak(const std::string& text, Lang lang);
  void stop();
  // True while the child runs (reaps it once it has finished).
  bool speaking();
  // The first line espeak-ng wrote to stderr in the last finished run ("ALSA lib ... cannot find
  // card", "cannot open audio device", a voice error), or empty: why nothing may have been heard.
  const std::string& problem() const { return problem_; }

 private:
  void drain_stderr();  // reads what the child wrote so far (the pipe never fills)
  void close_stderr();

  std::optional<std::string> path_;
  pid_t pid_ = -1;
  int err_fd_ = -1;      // read end of the child's stderr
  std::string err_text_;  // what it wrote in this run
  std::string problem_;
};

}  // namespace attnlab::viewer
