#include "backends/mps_backend.h"

#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>

#include "backend_doubles.h"
#include "backends/command_runner.h"

namespace tessera::agent {
namespace {

namespace fs = std::filesystem;
using testing::RecordingDoubles;

constexpr char kGpu0[] = "GPU-00000000-0000-0000-0000-000000000000";

ShareSpec share(const std::string& share_id, uint64_t memory, uint32_t cores) {
  ShareSpec spec;
  spec.claim_uid = "0f6b3f0e-7c59-4d0e-9b4e-2f7a5d1c9e01";
  spec.pool = "node-a";
  spec.device = "gpu-0";
  spec.share_id = share_id;
  spec.uuid = kGpu0;
  spec.memory_bytes = memory;
  spec.cores = cores;
  spec.config.strategy = vgpu_config::SharingStrategy::kMps;
  return spec;
}

// Fields of /proc/<pid>/stat after the command name: [0] is field 3 (state), [1] ppid, [2] pgrp,
// [3] session, [19] start time. Empty when the process is gone.
std::vector<std::string> stat_fields(int pid) {
  const std::string stat = RecordingDoubles::read("/proc/" + std::to_string(pid) + "/stat");
  std::vector<std::string> fields;
  if (const auto close = stat.rfind(')'); close != std::string::npos) {
    std::istringstream words(stat.substr(close + 1));
    for (std::string word; words >> word;) fields.push_back(word);
  }
  return fields;
}

// Alive and not a zombie.
bool alive(int pid) {
  const auto fields = stat_fields(pid);
  return !fields.empty() && fields[0] != "Z" && fields[0] != "X";
}

size_t launches(const std::string& calls) {
  size_t count = 0;
  for (size_t at = calls.find("mps-control -d"); at != std::string::npos;
       at = calls.find("mps-control -d", at + 1))
    ++count;
  return count;
}

// A program started in its own process group (a tenant's process, not the agent's), killed and
// reaped when the test ends.
class Spawned {
 public:
  Spawned(const std::vector<std::string>& args, const std::vector<std::string>& env) {
    std::vector<char*> argv, envp;
    std::vector<std::string> args_copy = args, env_copy = env;
    for (auto& arg : args_copy) argv.push_back(arg.data());
    argv.push_back(nullptr);
    for (auto& entry : env_copy) envp.push_back(entry.data());
    envp.push_back(nullptr);
    posix_spawnattr_t attributes;
    posix_spawnattr_init(&attributes);
    posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attributes, 0);
    if (posix_spawn(&pid_, argv[0], nullptr, &attributes, argv.data(), envp.data()) != 0) pid_ = -1;
    posix_spawnattr_destroy(&attributes);
  }
  ~Spawned() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  Spawned(const Spawned&) = delete;
  Spawned& operator=(const Spawned&) = delete;
  pid_t pid() const { return pid_; }
  bool running() const { return pid_ > 0 && waitpid(pid_, nullptr, WNOHANG) == 0; }

 private:
  pid_t pid_ = -1;
};

class MpsBackendTest : public ::testing::Test {
 protected:
  static MpsOptions options_for(const RecordingDoubles& doubles) {
    MpsOptions options;
    options.control = RecordingDoubles::mps_control();
    options.root = (doubles.dir() / "mps").string();
    options.private_dev_shm = testing::private_dev_shm_supported();
    options.timeout = std::chrono::milliseconds(5000);
    return options;
  }
  ~MpsBackendTest() override {
    for (const auto& name : backend_.share_folders()) backend_.stop(name).ignore();
  }

  RecordingDoubles doubles_;
  MpsOptions options_ = options_for(doubles_);
  MpsBackend backend_{options_};
  const ShareSpec a_ = share("a", 8ull << 30, 30);
  const ShareSpec b_ = share("b", 4ull << 30, 70);
};

TEST_F(MpsBackendTest, OneDaemonPerShareWithItsOwnLimits) {
  MpsBackend& backend = backend_;
  ASSERT_EQ(backend.start(a_).message(), "");
  ASSERT_EQ(backend.start(b_).message(), "");

  const MpsDaemonState state_a = backend.inspect(a_.name());
  const MpsDaemonState state_b = backend.inspect(b_.name());
  ASSERT_TRUE(state_a.running);
  ASSERT_TRUE(state_b.running);
  EXPECT_NE(state_a.pid, state_b.pid);
  EXPECT_EQ(state_a.active_thread_percentage, 30.0);
  EXPECT_EQ(state_b.active_thread_percentage, 70.0);

  // Each daemon was started with its own pipe and log folders and only the share's GPU, and got
  // the share's limits before any client could connect.
  const std::string calls = doubles_.calls();
  const std::string pipe_a = backend.pipe_dir(a_.name());
  EXPECT_NE(calls.find("mps-control -d pipe=" + pipe_a + " log=" + backend.log_dir(a_.name()) +
                       " devices=" + kGpu0 + "\n"),
            std::string::npos)
      << calls;
  EXPECT_NE(calls.find("mps-control  pipe=" + pipe_a + " log=" + backend.log_dir(a_.name()) +
                       " devices=" + kGpu0 +
                       "\n  set_default_active_thread_percentage 30\n"
                       "  set_default_device_pinned_mem_limit " +
                       kGpu0 + " 8192M\n"),
            std::string::npos)
      << calls;
  EXPECT_NE(calls.find("  set_default_device_pinned_mem_limit " + std::string(kGpu0) + " 4096M\n"),
            std::string::npos);

  if (!options_.private_dev_shm) GTEST_SKIP() << "no CAP_SYS_ADMIN: private /dev/shm not checked";
  // Each daemon saw its share's shm folder as /dev/shm.
  EXPECT_EQ(RecordingDoubles::read(backend.shm_dir(a_.name()) + "/tessera-double-mps-daemon"),
            pipe_a + "\n");
  EXPECT_EQ(RecordingDoubles::read(backend.shm_dir(b_.name()) + "/tessera-double-mps-daemon"),
            backend.pipe_dir(b_.name()) + "\n");
  // Never the agent's own /dev/shm. (The file may be there from another run on this machine:
  // what matters is that neither of these daemons wrote it.)
  if (fs::exists("/dev/shm/tessera-double-mps-daemon")) {
    const std::string global = RecordingDoubles::read("/dev/shm/tessera-double-mps-daemon");
    EXPECT_NE(global, pipe_a + "\n");
    EXPECT_NE(global, backend.pipe_dir(b_.name()) + "\n");
  }
}

TEST_F(MpsBackendTest, StartIsIdempotent) {
  ASSERT_EQ(backend_.start(a_).message(), "");
  const int pid = backend_.inspect(a_.name()).pid;
  ASSERT_EQ(backend_.start(a_).message(), "");
  EXPECT_EQ(backend_.inspect(a_.name()).pid, pid);
  EXPECT_EQ(launches(doubles_.calls()), 1u) << doubles_.calls();
}

TEST_F(MpsBackendTest, StopQuitsTheDaemonAndRemovesTheFolders) {
  ASSERT_EQ(backend_.start(a_).message(), "");
  const int pid = backend_.inspect(a_.name()).pid;
  ASSERT_GT(pid, 0);
  ASSERT_EQ(backend_.stop(a_.name()).message(), "");
  EXPECT_NE(doubles_.calls().find("  quit \n"), std::string::npos) << doubles_.calls();
  EXPECT_FALSE(backend_.inspect(a_.name()).running);
  EXPECT_FALSE(fs::exists(backend_.folder(a_.name())));
  EXPECT_EQ(backend_.stop(a_.name()).message(), "");  // nothing left: still fine
}

TEST_F(MpsBackendTest, ADeadDaemonIsStartedAgain) {
  ASSERT_EQ(backend_.start(a_).message(), "");
  const int pid = backend_.inspect(a_.name()).pid;
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  for (int i = 0; i < 200 && backend_.inspect(a_.name()).running; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_FALSE(backend_.inspect(a_.name()).running);
  ASSERT_EQ(backend_.start(a_).message(), "");
  const MpsDaemonState state = backend_.inspect(a_.name());
  EXPECT_TRUE(state.running);
  EXPECT_NE(state.pid, pid);
  EXPECT_EQ(state.active_thread_percentage, 30.0);
}

// The pid file lives in the pipe folder, which tenants mount read-write: a pid written there by a
// tenant (another share's daemon) is never taken for this share's daemon, nor killed, and the
// share's own daemon is still found (by its environment) and stopped.
TEST_F(MpsBackendTest, APidFileWrittenByATenantIsNotTrusted) {
  ASSERT_EQ(backend_.start(a_).message(), "");
  ASSERT_EQ(backend_.start(b_).message(), "");
  const int daemon_a = backend_.inspect(a_.name()).pid;
  const int daemon_b = backend_.inspect(b_.name()).pid;
  std::ofstream(backend_.pipe_dir(a_.name()) + "/nvidia-cuda-mps-control.pid") << daemon_b << "\n";
  EXPECT_EQ(backend_.inspect(a_.name()).pid, daemon_a);
  fs::remove(backend_.pipe_dir(a_.name()) + "/nvidia-cuda-mps-control.pid");
  EXPECT_EQ(backend_.inspect(a_.name()).pid, daemon_a);
  // A FIFO in its place: read without waiting for a writer.
  ASSERT_EQ(mkfifo((backend_.pipe_dir(a_.name()) + "/nvidia-cuda-mps-control.pid").c_str(), 0666),
            0);
  EXPECT_EQ(backend_.inspect(a_.name()).pid, daemon_a);
  ASSERT_EQ(backend_.stop(a_.name()).message(), "");
  EXPECT_FALSE(backend_.inspect(a_.name()).running);
  EXPECT_EQ(backend_.inspect(b_.name()).pid, daemon_b);
}

// The agent's container is killed (SIGKILL to its whole process group, as a liveness failure, an
// OOM kill or a rolling update ends it) while a client uses the share's daemon: the daemon, in its
// own session (and, where this machine has a writable cgroup v2, its own cgroup outside the
// agent's), and its client keep running, and the next agent adopts the daemon from its record: the
// same pid, no second start, the limits still read.
TEST_F(MpsBackendTest, TheDaemonOutlivesAKilledAgentAndTheNextOneAdoptsIt) {
  const std::string daemons_cgroup =
      testing::writable_cgroup2("tessera-mps-test-" + std::to_string(getpid()));
  options_.daemon_cgroup = daemons_cgroup;
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t agent = fork();
  ASSERT_GE(agent, 0);
  if (agent == 0) {  // the first agent: its own process group, as a container's processes
    setpgid(0, 0);
    MpsBackend first(options_);
    const Status started = first.start(a_);
    const int pid = started.is_ok() ? first.daemon_pid(a_.name()) : 0;
    (void)!write(ready[1], &pid, sizeof pid);
    pause();
    _exit(0);
  }
  close(ready[1]);
  int daemon = 0;
  ASSERT_EQ(read(ready[0], &daemon, sizeof daemon), static_cast<ssize_t>(sizeof daemon));
  close(ready[0]);
  ASSERT_GT(daemon, 0) << doubles_.calls();
  // Not the agent's: another parent, another process group, another session.
  const auto daemon_stat = stat_fields(daemon);
  ASSERT_GE(daemon_stat.size(), 4u);
  EXPECT_NE(daemon_stat[1], std::to_string(agent));
  EXPECT_NE(daemon_stat[2], std::to_string(agent));
  EXPECT_NE(daemon_stat[3], stat_fields(agent)[3]);
  if (!daemons_cgroup.empty()) {
    const std::string in = RecordingDoubles::read("/proc/" + std::to_string(daemon) + "/cgroup");
    EXPECT_NE(in.find(fs::path(daemons_cgroup).filename().string() + "/" + a_.name() + "\n"),
              std::string::npos)
        << in;
  }
  // A client of the daemon (in a tenant's pod): runs while the daemon it reached runs.
  const std::string pipe = backend_.pipe_dir(a_.name());
  Spawned client({"/bin/sh", "-c",
                  "d=$(cat \"$CUDA_MPS_PIPE_DIRECTORY/.control\"); echo $d >\"$0\"; "
                  "while kill -0 $d 2>/dev/null; do sleep 0.02; done; exit 3",
                  (doubles_.dir() / "client-daemon").string()},
                 {"CUDA_MPS_PIPE_DIRECTORY=" + pipe, "PATH=/usr/bin:/bin"});
  ASSERT_GT(client.pid(), 0);
  while (RecordingDoubles::read(doubles_.dir() / "client-daemon").empty() && client.running())
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(RecordingDoubles::read(doubles_.dir() / "client-daemon"),
            std::to_string(daemon) + "\n");

  ASSERT_EQ(kill(-agent, SIGKILL), 0);  // the whole container
  int status = 0;
  ASSERT_EQ(waitpid(agent, &status, 0), agent);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_TRUE(alive(daemon));
  EXPECT_TRUE(client.running());

  // The next agent adopts it.
  MpsBackend next(options_);
  EXPECT_EQ(next.inspect(a_.name()).pid, daemon);
  ASSERT_EQ(next.start(a_).message(), "");
  EXPECT_EQ(next.reconcile("", a_).size(), 0u);  // nothing to repair
  const MpsDaemonState state = next.inspect(a_.name());
  EXPECT_EQ(state.pid, daemon);
  EXPECT_EQ(state.active_thread_percentage, 30.0);
  EXPECT_EQ(launches(doubles_.calls()), 1u) << doubles_.calls();
  EXPECT_TRUE(client.running());

  // Unprepare stops it, which ends its client; its cgroup goes with it.
  ASSERT_EQ(next.stop(a_.name()).message(), "");
  EXPECT_FALSE(alive(daemon));
  int client_status = 0;
  ASSERT_EQ(waitpid(client.pid(), &client_status, 0), client.pid());
  EXPECT_EQ(WEXITSTATUS(client_status), 3);
  if (!daemons_cgroup.empty()) {
    EXPECT_FALSE(fs::exists(daemons_cgroup + "/" + a_.name()));
    EXPECT_EQ(rmdir(daemons_cgroup.c_str()), 0) << std::strerror(errno);
  }
}

// The first upgrade: a daemon an older agent (or one without --mps-daemon-cgroup) started in its
// own cgroup and never recorded. The next agent's reconcile adopts it: the same process, moved with
// the MPS server it spawned into <daemon_cgroup>/<share>, and recorded; the pass after is clean.
TEST_F(MpsBackendTest, ADaemonStartedOutsideItsCgroupIsMovedIntoItAndRecorded) {
  const std::string daemons_cgroup =
      testing::writable_cgroup2("tessera-mps-adopt-" + std::to_string(getpid()));
  if (daemons_cgroup.empty()) GTEST_SKIP() << "no writable cgroup v2 on this machine";
  ASSERT_EQ(backend_.start(a_).message(), "");  // no daemon cgroup
  const int daemon = backend_.daemon_pid(a_.name());
  fs::remove(backend_.record_path(a_.name()));  // an agent that kept no record
  // (The double's daemon spawns no MPS server; the children it has, if any, move with it.)
  options_.daemon_cgroup = daemons_cgroup;
  MpsBackend next(options_);
  const std::vector<DriftItem> drift = next.reconcile("", a_);
  ASSERT_EQ(drift.size(), 1u);
  EXPECT_EQ(drift[0].problem, "MPS daemon outside " + next.cgroup(a_.name()));
  EXPECT_EQ(drift[0].action, "moved into it") << drift[0].error;
  const std::string members = RecordingDoubles::read(next.cgroup(a_.name()) + "/cgroup.procs");
  EXPECT_NE(members.find(std::to_string(daemon) + "\n"), std::string::npos) << members;
  std::istringstream record(RecordingDoubles::read(next.record_path(a_.name())));
  int recorded = 0;
  ASSERT_TRUE(record >> recorded);
  EXPECT_EQ(recorded, daemon);
  EXPECT_EQ(next.inspect(a_.name()).pid, daemon);
  EXPECT_TRUE(next.reconcile("", a_).empty());
  EXPECT_EQ(launches(doubles_.calls()), 1u);
  ASSERT_EQ(next.stop(a_.name()).message(), "");
  EXPECT_FALSE(fs::exists(next.cgroup(a_.name())));
  EXPECT_EQ(rmdir(daemons_cgroup.c_str()), 0) << std::strerror(errno);
}

// An MPS server outlives its daemon (the daemon was killed): stop kills what is left in the
// share's cgroup (cgroup.kill) and removes the cgroup.
TEST_F(MpsBackendTest, StopKillsWhatIsLeftInTheDaemonsCgroup) {
  const std::string daemons_cgroup =
      testing::writable_cgroup2("tessera-mps-left-" + std::to_string(getpid()));
  if (daemons_cgroup.empty()) GTEST_SKIP() << "no writable cgroup v2 on this machine";
  options_.daemon_cgroup = daemons_cgroup;
  MpsBackend backend(options_);
  ASSERT_EQ(backend.start(a_).message(), "");
  const int daemon = backend.daemon_pid(a_.name());
  const std::string cgroup = backend.cgroup(a_.name());
  // A stand-in for the MPS server the daemon spawned: in the daemon's cgroup.
  Spawned server({"/bin/sleep", "600"}, {});
  ASSERT_GT(server.pid(), 0);
  std::ofstream(cgroup + "/cgroup.procs") << server.pid() << "\n";
  ASSERT_NE(RecordingDoubles::read(cgroup + "/cgroup.procs").find(std::to_string(server.pid())),
            std::string::npos);
  ASSERT_EQ(kill(daemon, SIGKILL), 0);
  while (alive(daemon)) std::this_thread::sleep_for(std::chrono::milliseconds(5));

  ASSERT_EQ(backend.stop(a_.name()).message(), "");
  EXPECT_FALSE(server.running());  // killed with the cgroup (and reaped by running())
  EXPECT_FALSE(fs::exists(cgroup));
  EXPECT_FALSE(fs::exists(backend.folder(a_.name())));
  EXPECT_EQ(rmdir(daemons_cgroup.c_str()), 0) << std::strerror(errno);
}

// The recorded daemon died and the kernel gave its pid to another program, here one that even
// looks like the daemon (the control program's name, the share's pipe folder in its environment):
// it is not taken for the daemon (its start time is not the recorded one), neither stopped nor
// sent commands, and the share gets a daemon of its own again.
TEST_F(MpsBackendTest, AProcessThatReusedTheDaemonsPidIsNotAdopted) {
  ASSERT_EQ(backend_.start(a_).message(), "");
  const int daemon = backend_.inspect(a_.name()).pid;
  std::istringstream record(RecordingDoubles::read(backend_.record_path(a_.name())));
  int recorded_pid = 0;
  std::string recorded_start, boot;
  ASSERT_TRUE(record >> recorded_pid >> recorded_start >> boot);
  EXPECT_EQ(recorded_pid, daemon);
  EXPECT_EQ(recorded_start, stat_fields(daemon)[19]);

  ASSERT_EQ(kill(daemon, SIGKILL), 0);
  while (alive(daemon)) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const fs::path look_alike = doubles_.dir() / "nvidia-cuda-mps-control";
  fs::create_symlink("/bin/sleep", look_alike);
  Spawned impostor({look_alike.string(), "600"},
                   {"CUDA_MPS_PIPE_DIRECTORY=" + backend_.pipe_dir(a_.name())});
  ASSERT_GT(impostor.pid(), 0);
  while (stat_fields(impostor.pid()).empty() ||
         RecordingDoubles::read("/proc/" + std::to_string(impostor.pid()) + "/comm") !=
             "nvidia-cuda-mps\n")
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // until it has exec'd
  // The recorded pid is now the impostor's (as if the kernel had reused it).
  std::ofstream(backend_.record_path(a_.name()))
      << impostor.pid() << " " << recorded_start << " " << boot << "\n";

  EXPECT_FALSE(backend_.inspect(a_.name()).running);
  const std::vector<DriftItem> drift = backend_.reconcile("", a_);
  ASSERT_EQ(drift.size(), 1u);
  EXPECT_EQ(drift[0].problem, "MPS daemon not running");
  EXPECT_EQ(drift[0].action, "restarted") << drift[0].error;
  const int restarted = backend_.inspect(a_.name()).pid;
  EXPECT_NE(restarted, 0);
  EXPECT_NE(restarted, impostor.pid());
  EXPECT_EQ(launches(doubles_.calls()), 2u);
  ASSERT_EQ(backend_.stop(a_.name()).message(), "");
  EXPECT_FALSE(alive(restarted));
  EXPECT_TRUE(impostor.running());  // never signalled
}

// A daemon whose share folder is gone (removed by hand, a wiped state folder) is found by its
// environment and stopped by the orphan pass; it answers no control command any more (its pipe
// folder is gone), so it gets SIGTERM.
TEST_F(MpsBackendTest, ADaemonWhoseShareFolderIsGoneIsStopped) {
  ASSERT_EQ(backend_.start(a_).message(), "");
  ASSERT_EQ(backend_.start(b_).message(), "");
  const int daemon_a = backend_.inspect(a_.name()).pid;
  const int daemon_b = backend_.inspect(b_.name()).pid;
  fs::remove_all(backend_.folder(a_.name()));
  ASSERT_TRUE(alive(daemon_a));
  std::vector<std::string> reserved;
  const std::vector<DriftItem> drift =
      backend_.remove_orphans({b_}, [&reserved](const std::string& name) {
        reserved.push_back(name);
        return OrphanReservation([] {});
      });
  ASSERT_EQ(drift.size(), 1u);
  EXPECT_EQ(drift[0].subject, "share " + a_.name());
  EXPECT_EQ(drift[0].problem,
            "MPS daemon (pid " + std::to_string(daemon_a) + ") without a share folder");
  EXPECT_EQ(drift[0].action, "stopped") << drift[0].error;
  EXPECT_EQ(reserved, std::vector<std::string>{a_.name()});
  EXPECT_FALSE(alive(daemon_a));
  EXPECT_EQ(backend_.inspect(b_.name()).pid, daemon_b);  // the named share's daemon stays
}

TEST_F(MpsBackendTest, AMissingProgramIsAClearError) {
  options_.control = "/nonexistent/nvidia-cuda-mps-control";
  MpsBackend backend(options_);
  const Status started = backend.start(a_);
  EXPECT_EQ(started.message(), "cannot start the MPS daemon of share " + a_.name() +
                                   ": /nonexistent/nvidia-cuda-mps-control -d: cannot run "
                                   "/nonexistent/nvidia-cuda-mps-control: No such file or "
                                   "directory");
  // Not a transient failure: the node needs the program (or the flag fixed).
  EXPECT_EQ(started.code(), StatusCode::kFailedPrecondition);
}

TEST_F(MpsBackendTest, ZeroCoresStillGetsOnePercent) {
  EXPECT_EQ(MpsBackend::thread_percentage(share("z", 1ull << 30, 0)), 1u);
  ShareSpec unlimited = share("u", 1ull << 30, 0);
  unlimited.cores.reset();
  EXPECT_EQ(MpsBackend::thread_percentage(unlimited), 100u);
}

TEST(CommandRunner, CapturesOutputExitStatusAndTimeouts) {
  const Command echoing({"/bin/sh", "-c", "cat; echo err >&2; exit 3"}, {"X=1"}, "in\n");
  const Result<CommandResult> echo = run_command(echoing);
  ASSERT_TRUE(echo.is_ok()) << echo.status().message();  // it ran
  EXPECT_EQ(echo->exit_code, 3);
  EXPECT_EQ(echo->output, "in\nerr\n");
  const Status exit_status = command_status(echoing, echo);
  EXPECT_EQ(exit_status.code(), StatusCode::kInternal);
  EXPECT_EQ(exit_status.message(), "/bin/sh -c cat; echo err >&2; exit 3: exit 3: err");
  const Result<CommandResult> env =
      run_command(Command({"/bin/sh", "-c", "echo $TESSERA_X"}, {"TESSERA_X=from-agent"}));
  ASSERT_TRUE(env.is_ok());
  EXPECT_EQ(env->output, "from-agent\n");
  const Command slow({"/bin/sleep", "5"}, {}, "", std::chrono::milliseconds(100));
  const Result<CommandResult> timed_out = run_command(slow);
  ASSERT_TRUE(timed_out.is_ok());
  EXPECT_TRUE(timed_out->timed_out);
  const Status late = command_status(slow, timed_out);
  EXPECT_EQ(late.message(), "/bin/sleep 5: did not finish within 100 ms");
  EXPECT_EQ(late.code(), StatusCode::kUnavailable);  // retrying may help
}

TEST(CommandRunner, AProgramThatCannotRunIsAnError) {
  const Command missing({"/nonexistent/program"});
  const Result<CommandResult> result = run_command(missing);
  ASSERT_FALSE(result.is_ok());
  EXPECT_EQ(result.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(result.status().message(),
            "cannot run /nonexistent/program: No such file or directory");
  EXPECT_EQ(run_checked(missing).message(),
            "/nonexistent/program: cannot run /nonexistent/program: No such file or directory");
  EXPECT_EQ(run_command(Command(std::vector<std::string>{})).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_TRUE(run_checked(Command({"/bin/true"})).is_ok());
}

}  // namespace
}  // namespace tessera::agent
