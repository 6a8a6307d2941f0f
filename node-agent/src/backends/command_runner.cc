#include "backends/command_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

extern char** environ;

namespace tessera::agent {
namespace {

std::vector<std::string> merged_environment(const std::vector<std::string>& extra) {
  std::vector<std::string> result;
  auto name_of = [](const std::string& entry) { return entry.substr(0, entry.find('=')); };
  for (char** entry = environ; entry && *entry; ++entry) {
    const std::string text = *entry;
    bool replaced = false;
    for (const auto& item : extra) replaced = replaced || name_of(item) == name_of(text);
    if (!replaced) result.push_back(text);
  }
  result.insert(result.end(), extra.begin(), extra.end());
  return result;
}

enum class ChildStage : int { kRedirect, kSession, kCgroup, kPrivateShm, kExec };

// In a child, before exec (async-signal-safe calls only): joins the cgroup namespace of pid 1 when
// it differs from this process's (a cgroup namespace hides, and forbids moves to, cgroups outside
// its root; with hostPID pid 1 is the host's init), then writes `pid` ("0": the caller itself) to
// <cgroup>/cgroup.procs. 0 or an errno value.
int enter_cgroup(const char* cgroup, const char* pid) {
  struct stat own {};
  struct stat host {};
  if (stat("/proc/self/ns/cgroup", &own) == 0 && stat("/proc/1/ns/cgroup", &host) == 0 &&
      own.st_ino != host.st_ino) {
    const int ns = open("/proc/1/ns/cgroup", O_RDONLY | O_CLOEXEC);
    if (ns < 0 || setns(ns, CLONE_NEWCGROUP) != 0) return errno;
    close(ns);
  }
  char procs[4096];
  const size_t length = strlen(cgroup);
  constexpr char kProcs[] = "/cgroup.procs";
  if (length + sizeof kProcs > sizeof procs) return ENAMETOOLONG;
  memcpy(procs, cgroup, length);
  memcpy(procs + length, kProcs, sizeof kProcs);
  const int fd = open(procs, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  const size_t size = strlen(pid);
  const int error = write(fd, pid, size) == static_cast<ssize_t>(size) ? 0 : errno;
  close(fd);
  return error;
}

// In the child, before exec: only async-signal-safe calls. Reports errno through `status_fd`.
[[noreturn]] void exec_child(const Command& command, char* const* argv, char* const* envp,
                             int stdin_fd, int output_fd, int status_fd) {
  auto fail = [status_fd](ChildStage stage, int code) {
    const int report[2] = {static_cast<int>(stage), code};
    (void)!write(status_fd, report, sizeof report);
    _exit(127);
  };
  if (dup2(stdin_fd, STDIN_FILENO) < 0 || dup2(output_fd, STDOUT_FILENO) < 0 ||
      dup2(output_fd, STDERR_FILENO) < 0)
    fail(ChildStage::kRedirect, errno);
  if (command.new_session && setsid() < 0) fail(ChildStage::kSession, errno);
  if (!command.cgroup.empty()) {
    if (const int error = enter_cgroup(command.cgroup.c_str(), "0"); error != 0)  // 0: itself
      fail(ChildStage::kCgroup, error);
  }
  if (!command.private_dev_shm.empty()) {
    if (unshare(CLONE_NEWNS) != 0) fail(ChildStage::kPrivateShm, errno);
    if (mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) != 0)
      fail(ChildStage::kPrivateShm, errno);
    if (mount(command.private_dev_shm.c_str(), "/dev/shm", nullptr, MS_BIND, nullptr) != 0)
      fail(ChildStage::kPrivateShm, errno);
  }
  // The agent blocks SIGTERM/SIGINT for sigwait; the programs it runs must not inherit that.
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  execvpe(argv[0], argv, envp);
  fail(ChildStage::kExec, errno);
  _exit(127);
}

}  // namespace

std::string describe(const Command& command) {
  std::string text;
  for (const auto& arg : command.argv) text += (text.empty() ? "" : " ") + arg;
  return text;
}

Status command_status(const Command& command, const Result<CommandResult>& result) {
  if (!result.is_ok()) return result.status().with_context(describe(command));
  if (result->ok()) return Status::ok();
  std::string text = describe(command) + ": ";
  if (result->timed_out)
    return unavailable(text + "did not finish within " + std::to_string(command.timeout.count()) +
                       " ms");
  text += "exit " + std::to_string(result->exit_code);
  std::string output = result->output;
  while (!output.empty() && (output.back() == '\n' || output.back() == ' ')) output.pop_back();
  if (const auto newline = output.rfind('\n'); newline != std::string::npos)
    output = output.substr(newline + 1);
  if (!output.empty()) text += ": " + output;
  return internal_error(text);
}

Status move_to_cgroup(int pid, const std::string& cgroup) {
  if (pid <= 0) return invalid_argument("no process to move into cgroup " + cgroup);
  const std::string text = std::to_string(pid);
  int report[2];
  if (pipe2(report, O_CLOEXEC) != 0)
    return internal_error(std::string("pipe: ") + std::strerror(errno));
  // A child joins the host's cgroup namespace, so the agent's own namespaces stay as they are.
  const pid_t child = fork();
  if (child == 0) {
    const int error = enter_cgroup(cgroup.c_str(), text.c_str());
    (void)!write(report[1], &error, sizeof error);
    _exit(error == 0 ? 0 : 1);
  }
  close(report[1]);
  if (child < 0) {
    close(report[0]);
    return internal_error(std::string("fork: ") + std::strerror(errno));
  }
  int error = 0;
  const bool reported = read(report[0], &error, sizeof error) == static_cast<ssize_t>(sizeof error);
  close(report[0]);
  waitpid(child, nullptr, 0);
  if (!reported) return internal_error("moving pid " + text + " into cgroup " + cgroup + " failed");
  if (error != 0)
    return failed_precondition(
        "cannot move pid " + text + " into cgroup " + cgroup +
        " (needs a writable cgroup v2 folder and CAP_SYS_ADMIN): " + std::strerror(error));
  return Status::ok();
}

Status run_checked(const Command& command) {
  return command_status(command, run_command(command));
}

Result<CommandResult> run_command(const Command& command) {
  CommandResult result;
  if (command.argv.empty()) return invalid_argument("no program given");
  std::vector<std::string> env_strings = merged_environment(command.env);
  std::vector<char*> argv, envp;
  for (const auto& arg : command.argv) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  for (auto& entry : env_strings) envp.push_back(entry.data());
  envp.push_back(nullptr);

  int input_pipe[2], output_pipe[2] = {-1, -1}, status_pipe[2];
  if (pipe2(input_pipe, O_CLOEXEC) != 0)
    return internal_error(std::string("pipe: ") + std::strerror(errno));
  int output_fd = -1;
  if (command.output_file.empty()) {
    if (pipe2(output_pipe, O_CLOEXEC) != 0) output_pipe[0] = output_pipe[1] = -1;
    output_fd = output_pipe[1];
  } else {
    output_fd = open(command.output_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  }
  if (output_fd < 0 || pipe2(status_pipe, O_CLOEXEC) != 0) {
    Status error = internal_error("cannot open output: " + std::string(std::strerror(errno)));
    for (int fd : {input_pipe[0], input_pipe[1], output_pipe[0], output_pipe[1], output_fd})
      if (fd >= 0) close(fd);
    return error;
  }
  const pid_t pid = fork();
  if (pid == 0)
    exec_child(command, argv.data(), envp.data(), input_pipe[0], output_fd, status_pipe[1]);
  close(input_pipe[0]);
  close(status_pipe[1]);
  if (command.output_file.empty()) {
    close(output_pipe[1]);
  } else {
    close(output_fd);
  }
  if (pid < 0) {
    Status error = internal_error(std::string("fork: ") + std::strerror(errno));
    close(input_pipe[1]);
    close(status_pipe[0]);
    if (output_pipe[0] >= 0) close(output_pipe[0]);
    return error;
  }
  // stdin: small inputs (control commands) fit the pipe buffer; a program that exits without
  // reading gets EPIPE, which is ignored.
  static const bool sigpipe_ignored = [] { return signal(SIGPIPE, SIG_IGN) != SIG_ERR; }();
  (void)sigpipe_ignored;
  if (!command.input.empty())
    (void)!write(input_pipe[1], command.input.data(), command.input.size());
  close(input_pipe[1]);

  int child_report[2] = {0, 0};  // stage, errno
  const bool exec_failed = read(status_pipe[0], child_report, sizeof child_report) ==
                           static_cast<ssize_t>(sizeof child_report);
  close(status_pipe[0]);

  const auto deadline = std::chrono::steady_clock::now() + command.timeout;
  int status = 0;
  bool exited = false;
  while (!exited) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid) {
      exited = true;
      break;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      result.timed_out = true;
      break;
    }
    // Drain output while waiting; without a pipe, poll the child every 5 ms.
    if (output_pipe[0] >= 0) {
      pollfd fd{output_pipe[0], POLLIN, 0};
      if (poll(&fd, 1, static_cast<int>(std::min<long>(left.count(), 5))) > 0) {
        char buffer[4096];
        const ssize_t n = read(output_pipe[0], buffer, sizeof buffer);
        if (n > 0) result.output.append(buffer, static_cast<size_t>(n));
        if (n == 0) {  // EOF: every writer closed; wait for the exit itself
          close(output_pipe[0]);
          output_pipe[0] = -1;
        }
      }
    } else {
      usleep(5000);
    }
  }
  if (output_pipe[0] >= 0) {
    // What is left without blocking: a daemon child may still hold the write end.
    fcntl(output_pipe[0], F_SETFL, O_NONBLOCK);
    char buffer[4096];
    ssize_t n;
    while ((n = read(output_pipe[0], buffer, sizeof buffer)) > 0)
      result.output.append(buffer, static_cast<size_t>(n));
    close(output_pipe[0]);
  }
  if (exec_failed) {
    const auto stage = static_cast<ChildStage>(child_report[0]);
    if (stage == ChildStage::kRedirect)
      return internal_error(std::string("cannot run ") + command.argv[0] + ": " +
                            std::strerror(child_report[1]));
    const std::string why = std::strerror(child_report[1]);
    switch (stage) {
      case ChildStage::kSession:
        return internal_error(std::string("cannot start a session for ") + command.argv[0] + ": " +
                              why);
      case ChildStage::kCgroup:
        return failed_precondition(
            "cannot move it into cgroup " + command.cgroup +
            " (needs a writable cgroup v2 folder and CAP_SYS_ADMIN): " + why);
      case ChildStage::kPrivateShm:
        return failed_precondition("cannot give it a private /dev/shm from " +
                                   command.private_dev_shm + " (needs CAP_SYS_ADMIN): " + why);
      default:
        return failed_precondition(std::string("cannot run ") + command.argv[0] + ": " + why);
    }
  }
  if (!result.timed_out)
    result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

}  // namespace tessera::agent
