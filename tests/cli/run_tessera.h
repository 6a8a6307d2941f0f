// The tessera binary run as a user runs it: arguments, environment changes, its exit status and
// what it printed on stdout and stderr (through files, so neither pipe can fill).
#pragma once

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace tessera::cli::testing {

struct Ran {
  int exit_code = -1;  // 128+N when killed by signal N
  std::string out;
  std::string err;
};

// `tessera <args...>` with `env` applied (nullopt: unset), killed by SIGALRM after 60 s.
inline Ran run_tessera(const std::vector<std::string>& args,
                       const std::map<std::string, std::optional<std::string>>& env = {}) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("tessera-ran-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string out_path = (dir / "out").string();
  const std::string err_path = (dir / "err").string();
  std::vector<std::string> argv_text = {TESSERA_BIN};
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& arg : argv_text) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    for (const auto& [name, value] : env) {
      if (value) {
        setenv(name.c_str(), value->c_str(), 1);
      } else {
        unsetenv(name.c_str());
      }
    }
    const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (out < 0 || err < 0) _exit(99);
    dup2(out, 1);
    dup2(err, 2);
    alarm(60);  // kept across exec: a tessera that hangs ends as 142
    execv(argv[0], argv.data());
    _exit(98);
  }
  Ran ran;
  int status = 0;
  if (pid > 0 && waitpid(pid, &status, 0) == pid)
    ran.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  const auto slurp = [](const std::string& path) {
    std::ifstream file(path);
    std::stringstream text;
    text << file.rdbuf();
    return text.str();
  };
  ran.out = slurp(out_path);
  ran.err = slurp(err_path);
  fs::remove_all(dir);
  return ran;
}

}  // namespace tessera::cli::testing
