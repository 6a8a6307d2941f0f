#include "backends/mps_backend.h"

#include <signal.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
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
  spec.config.strategy = SharingStrategy::kMps;
  return spec;
}

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
  const std::string calls = doubles_.calls();
  size_t launches = 0;
  for (size_t at = calls.find("mps-control -d"); at != std::string::npos;
       at = calls.find("mps-control -d", at + 1))
    ++launches;
  EXPECT_EQ(launches, 1u) << calls;
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
