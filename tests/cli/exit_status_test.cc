// One exit-status table for every `tessera` command (cli/src/exit_codes.h,
// docs/cli.md#exit-status): for each command, the binary run for a success, a usage error and a
// failure. The viewing commands: 0, 2 (a bad flag or value: CLI11's parse errors), 1 (one line on
// stderr). `tessera run`: the command's own status, 125 for a bad flag as for any failure of
// tessera itself, 126, 127 and 128+N (check_run_safety.py produces each in its situation too).
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "exit_codes.h"
#include "run_tessera.h"
#include "tessera/version.h"

namespace tessera::cli {
namespace {

namespace fs = std::filesystem;
using testing::Ran;
using testing::run_tessera;

class ExitStatus : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("cli-exit-" + std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(empty_root());
    fs::create_directories(dir_ / "xdg" / "tessera");
    // A share root that cannot be listed: a symbolic link to itself (ELOOP), root or not.
    fs::create_symlink(dir_ / "loop", dir_ / "loop");
    fs::create_symlink(dir_ / "loop", dir_ / "xdg" / "tessera" / "shares");
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string empty_root() const { return (dir_ / "empty").string(); }
  std::string unlistable_root() const { return (dir_ / "loop").string(); }
  std::string no_socket() const { return (dir_ / "no-agent.sock").string(); }

  fs::path dir_;
};

TEST_F(ExitStatus, NoCommandOrAnUnknownOneIsAUsageError) {
  EXPECT_EQ(run_tessera({}).exit_code, kExitUsage);
  const Ran unknown = run_tessera({"bogus"});
  EXPECT_EQ(unknown.exit_code, kExitUsage);
  EXPECT_EQ(unknown.err,
            "tessera: unknown command \"bogus\" (commands: run, version, shares, top, events)\n");
  EXPECT_EQ(run_tessera({"--bogus", "shares"}).exit_code, kExitUsage);
  EXPECT_EQ(run_tessera({"--help"}).exit_code, kExitOk);
}

TEST_F(ExitStatus, VersionPrintsTheBuildsVersionAndNeverFails) {
  const std::string expected = std::string("tessera ") + kVersion;
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--version"}, std::vector<std::string>{"version"}}) {
    const Ran ran = run_tessera(args);
    EXPECT_EQ(ran.exit_code, kExitOk);
    EXPECT_EQ(ran.out.rfind(expected, 0), 0u) << ran.out;
    if (*kGitCommit != '\0') {
      EXPECT_NE(ran.out.find(kGitCommit), std::string::npos) << ran.out;
    }
  }
  const Ran json_out = run_tessera({"version", "-o", "json"});
  EXPECT_EQ(json_out.exit_code, kExitOk);
  const nlohmann::json document = nlohmann::json::parse(json_out.out);
  EXPECT_EQ(document["version"], kVersion);
  EXPECT_EQ(run_tessera({"version", "-o", "bogus"}).exit_code, kExitUsage);
  EXPECT_EQ(run_tessera({"version", "extra"}).exit_code, kExitUsage);
  // There is no failure of `tessera version`: it reads nothing.
}

TEST_F(ExitStatus, Shares) {
  const Ran ok = run_tessera({"shares", "--share-root", empty_root()});
  EXPECT_EQ(ok.exit_code, kExitOk) << ok.err;
  EXPECT_NE(ok.err.find("No shares found"), std::string::npos) << ok.err;
  EXPECT_EQ(run_tessera({"shares", "--bogus"}).exit_code, kExitUsage);
  EXPECT_EQ(run_tessera({"shares", "-o", "xml"}).exit_code, kExitUsage);
  EXPECT_EQ(run_tessera({"shares", "-n"}).exit_code, kExitUsage);
  EXPECT_EQ(run_tessera({"shares", "-n", "a", "-A"}).exit_code, kExitUsage);
  EXPECT_EQ(run_tessera({"shares", "--cluster", "--local"}).exit_code, kExitUsage);
  EXPECT_EQ(run_tessera({"shares", "--kubeconfig", "x"}).exit_code, kExitUsage);
  const Ran failed = run_tessera({"shares", "--share-root", unlistable_root()});
  EXPECT_EQ(failed.exit_code, kExitFailed);
  EXPECT_NE(failed.err.find("tessera shares: cannot list the share folder"), std::string::npos)
      << failed.err;
  const Ran no_cluster =
      run_tessera({"shares", "--cluster"}, {{"KUBECONFIG", std::nullopt},
                                            {"HOME", dir_.string()},
                                            {"KUBERNETES_SERVICE_HOST", std::nullopt}});
  EXPECT_EQ(no_cluster.exit_code, kExitFailed);
  EXPECT_NE(no_cluster.err.find("no kubeconfig"), std::string::npos) << no_cluster.err;
}

TEST_F(ExitStatus, Top) {
  const Ran ok = run_tessera({"top", "--once", "-d", "0.1", "--share-root", empty_root()});
  EXPECT_EQ(ok.exit_code, kExitOk) << ok.err;
  EXPECT_NE(ok.out.find("SHARE"), std::string::npos) << ok.out;
  EXPECT_EQ(run_tessera({"top", "--sort", "bogus"}).exit_code, kExitUsage);
  EXPECT_EQ(run_tessera({"top", "-n", "0"}).exit_code, kExitUsage);
  EXPECT_EQ(run_tessera({"top", "--namespace", "a", "-A"}).exit_code, kExitUsage);
  const Ran failed = run_tessera({"top", "--once", "-d", "0.1", "--share-root", unlistable_root()});
  EXPECT_EQ(failed.exit_code, kExitFailed);
  EXPECT_NE(failed.err.find("tessera top: cannot list the share folder"), std::string::npos)
      << failed.err;
}

TEST_F(ExitStatus, Events) {
  // No agent: the local shares, which keep no history; done.
  const Ran ok = run_tessera({"events", "--socket", no_socket()},
                             {{"XDG_RUNTIME_DIR", (dir_ / "empty").string()}});
  EXPECT_EQ(ok.exit_code, kExitOk) << ok.err;
  EXPECT_EQ(run_tessera({"events", "-o", "xml"}).exit_code, kExitUsage);
  EXPECT_EQ(run_tessera({"events", "--bogus"}).exit_code, kExitUsage);
  const Ran failed = run_tessera({"events", "--socket", no_socket()},
                                 {{"XDG_RUNTIME_DIR", (dir_ / "xdg").string()}});
  EXPECT_EQ(failed.exit_code, kExitFailed);
  EXPECT_NE(failed.err.find("cannot read the local shares"), std::string::npos) << failed.err;
}

TEST_F(ExitStatus, RunIsItsCommandsOwnAnd125WhenTesseraFails) {
  const std::map<std::string, std::optional<std::string>> gpu = {
      {"LD_LIBRARY_PATH", SIMGPU_LIB_DIR},
      {"SIMGPU_STATE", (dir_ / "simgpu.state").string()},
      {"SIMGPU_DEVICES", "name=NVIDIA H200,memory=16Gi,sms=132,cc=9.0"},
      {"XDG_RUNTIME_DIR", (dir_ / "empty").string()},
      {"TESSERA_MEMORY_LIMIT", std::nullopt},
      {"TESSERA_CORES_LIMIT", std::nullopt},
      {"TESSERA_SHARE_DIR", std::nullopt}};
  const Ran ok = run_tessera({"run", "--memory", "1Gi", "--", "/bin/true"}, gpu);
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_EQ(run_tessera({"run", "--memory", "1Gi", "--", "/bin/sh", "-c", "exit 3"}, gpu).exit_code,
            3);
  EXPECT_EQ(run_tessera({"run", "--memory", "1Gi", "--", "/bin/sh", "-c", "kill -TERM $$"}, gpu)
                .exit_code,
            kKilledBySignalBase + SIGTERM);
  EXPECT_EQ(
      run_tessera({"run", "--memory", "1Gi", "--", (dir_ / "missing").string()}, gpu).exit_code,
      kCommandNotFound);
  // Usage errors are tessera's own failure (125), as podman run and docker run report them.
  EXPECT_EQ(run_tessera({"run", "--bogus", "--", "/bin/true"}, gpu).exit_code, kRunFailed);
  EXPECT_EQ(run_tessera({"run"}, gpu).exit_code, kRunFailed);
  EXPECT_EQ(run_tessera({"run", "--memory", "", "--", "/bin/true"}, gpu).exit_code, kRunFailed);
  const Ran failed = run_tessera(
      {"run", "--memory", "1Gi", "--libvgpu", (dir_ / "no-libvgpu.so").string(), "--", "/bin/true"},
      gpu);
  EXPECT_EQ(failed.exit_code, kRunFailed);
  EXPECT_NE(failed.err.find("no-libvgpu.so"), std::string::npos) << failed.err;
}

}  // namespace
}  // namespace tessera::cli
