// espeak-ng child process handling (see speech.h).
#include "viewer/app/speech.h"

#include <csignal>
#include <fcntl.h>
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
    // (Built with append, not `dir = "."`: GCC 12 warns falsely on that inlined assignment.)
    const std::string full = (dir.empty() ? std::string(".") : dir).append("/").append(name);
    if (access(full.c_str(), X_OK) == 0) return full;
  }
  return std::nullopt;
}

const char* espeak_voice(Lang lang) { return lang == Lang::Zh ? "cmn" : "en"; }

Speaker::Speaker() : path_(find_on_path("espeak-ng")) {}

Speaker::~Speaker() { stop(); }

bool Speaker::speak(const std::string& text, Lang lang) {
  stop();
  problem_.clear();
  if (!path_) return false;
  std::string voice = espeak_voice(lang);
  std::string exe = *path_;
  std::string body = text;
  // argv strings must stay alive until posix_spawn returns; "--" keeps a text starting with '-'
  // from being read as an option.
  std::string v_flag = "-v", dashes = "--";
  std::vector<char*> argv = {exe.data(), v_flag.data(), voice.data(), dashes.data(), body.data(), nullptr};
  int fds[2];
  if (pipe(fds) != 0) return false;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  posix_spawn_file_actions_addclose(&actions, fds[1]);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, exe.c_str(), &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    return false;
  }
  fcntl(fds[0], F_SETFL, fcntl(fds[0], F_GETFL) | O_NONBLOCK);
  fcntl(fds[0], F_SETFD, FD_CLOEXEC);
  err_fd_ = fds[0];
  err_text_.clear();
  pid_ = pid;
  return true;
}

void Speaker::drain_stderr() {
  if (err_fd_ < 0) return;
  char buf[4096];
  for (;;) {
    const ssize_t got = read(err_fd_, buf, sizeof buf);
    if (got <= 0) break;
    if (err_text_.size() < 16384) err_text_.append(buf, static_cast<std::size_t>(got));
  }
}

void Speaker::close_stderr() {
  if (err_fd_ >= 0) close(err_fd_);
  err_fd_ = -1;
}

void Speaker::stop() {
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  close_stderr();  // stopped on purpose: what it printed is no complaint
  err_text_.clear();
}

bool Speaker::speaking() {
  if (pid_ <= 0) return false;
  drain_stderr();
  if (waitpid(pid_, nullptr, WNOHANG) != pid_) return true;
  pid_ = -1;
  drain_stderr();
  close_stderr();
  // The first non-empty line of what it printed, trimmed.
  std::istringstream lines(err_text_);
  std::string line;
  while (std::getline(lines, line)) {
    const auto b = line.find_first_not_of(" \t\r");
    if (b == std::string::npos) continue;
    problem_ = line.substr(b, 200);
    break;
  }
  err_text_.clear();
  return false;
}

}  // namespace attnlab::viewer
