// The recording doubles of the programs the hardware backends run (tests/node-agent/doubles):
// a private record file and state folder per test, handed to the doubles through the environment
// that run_command passes on.
#pragma once

#include <stdlib.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "backends/command_runner.h"

namespace tessera::agent::testing {

class RecordingDoubles {
 public:
  RecordingDoubles() {
    dir_ = std::filesystem::temp_directory_path() /
           ("agent-doubles-" + std::to_string(getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_ / "state");
    setenv("TESSERA_DOUBLE_LOG", (dir_ / "calls.log").c_str(), 1);
    setenv("TESSERA_DOUBLE_STATE", (dir_ / "state").c_str(), 1);
  }
  ~RecordingDoubles() { std::filesystem::remove_all(dir_); }

  static std::string mps_control() { return AGENT_DOUBLES_DIR "/nvidia-cuda-mps-control"; }
  static std::string nvidia_smi() { return AGENT_DOUBLES_DIR "/nvidia-smi"; }

  // Every call so far, one line each (MPS commands indented under their call).
  std::string calls() const { return read(dir_ / "calls.log"); }
  // The double nvidia-smi's view of a GPU setting ("timeslice", "compute-mode"), "" if never set.
  std::string gpu_setting(const std::string& uuid, const std::string& setting) const {
    std::string text = read(dir_ / "state" / (uuid + "." + setting));
    while (!text.empty() && text.back() == '\n') text.pop_back();
    return text;
  }
  void fail_nvidia_smi() const { std::ofstream(dir_ / "state" / "fail") << "1"; }
  // Every later call of the double takes `seconds` (a slow GPU or daemon, to widen races).
  void slow_nvidia_smi(double seconds) const { std::ofstream(dir_ / "state" / "delay") << seconds; }
  void slow_mps_start(double seconds) const {
    std::ofstream(dir_ / "state" / "mps-start-delay") << seconds;
  }
  // Every MPS daemon start from now on waits until release_mps_starts().
  void hold_mps_starts() const { std::ofstream(dir_ / "state" / "mps-start-held") << "1"; }
  void release_mps_starts() const { std::filesystem::remove(dir_ / "state" / "mps-start-held"); }
  const std::filesystem::path& dir() const { return dir_; }

  static std::string read(const std::filesystem::path& path) {
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    return text.str();
  }

 private:
  std::filesystem::path dir_;
};

// Whether this machine lets the agent give a program a private /dev/shm (root with
// CAP_SYS_ADMIN, as the agent's DaemonSet runs).
inline bool private_dev_shm_supported() {
  Command probe({"/bin/true"});
  probe.private_dev_shm = "/tmp";
  return run_checked(probe).is_ok();
}

// A new, empty cgroup v2 folder `name` at the top of this machine's cgroup v2 hierarchy, for MPS
// daemons outside "the agent's" cgroup (--mps-daemon-cgroup); "" where there is none to write
// (cgroup v1 only, no permission). The caller removes it (rmdir) once its daemons are stopped.
inline std::string writable_cgroup2(const std::string& name) {
  for (const char* mount : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}) {
    struct statfs info {};
    if (statfs(mount, &info) != 0 || info.f_type != 0x63677270) continue;  // CGROUP2_SUPER_MAGIC
    const std::string folder = std::string(mount) + "/" + name;
    std::error_code ec;
    std::filesystem::remove(folder, ec);
    if (mkdir(folder.c_str(), 0755) == 0) return folder;
  }
  return "";
}

}  // namespace tessera::agent::testing
