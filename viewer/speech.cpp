// espeak-ng child process handling (see speech.h).
#include "viewer/speech.h"

#include <csignal>
#include <cstdlib>
#include <spawn.h>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

extern char** environ;

namespace attnlab::viewer {

std::optional<std::string> find_on_path(const std::string& name) {
  const char* path = std::getenv("PATH");
  if (!path) return std::nullopt;
  std::stringstream dirs(path);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    if (dir.empty()) dir = ".";
    const std::string full = dir + "/" + name;
    if (access(full.c_str(), X_OK) == 0) return full;
  }
  return std::nullopt;
}

const char* espeak_voice(Lang lang) { return lang == Lang::Zh ? "cmn" : "en"; }

Speaker::Speaker() : path_(find_on_path("espeak-ng")) {}

Speaker::~Speaker() { stop(); }

bool Speaker::speak(const std::string& text, Lang lang) {
  stop();
  if (!path_) return false;
  std::string voice = espeak_voice(lang);
  std::string exe = *path_;
  std::string body = text;
  // argv strings must stay alive until posix_spawn returns; "--" keeps a text starting with '-'
  // from being read as an option.
  std::string v_flag = "-v", dashes = "--";
  std::vector<char*> argv = {exe.data(), v_flag.data(), voice.data(), dashes.data(), body.data(), nullptr};
  pid_t pid = -1;
  if (posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), environ) != 0) return false;
  pid_ = pid;
  return true;
}

void Speaker::stop() {
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
}

bool Speaker::speaking() {
  if (pid_ <= 0) return false;
  if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
    pid_ = -1;
    return false;
  }
  return true;
}

}  // namespace attnlab::viewer
