// Shared by the share-lifecycle tests: a KubeClient answering GETs from a map (thread-safe: the
// objects are set up before the calls), and views of the files the share manager writes.
#pragma once

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include "share/share_manager.h"
#include "tessera/kube/kube_client.h"
#include "tessera/share_region.h"

namespace tessera::agent::testing {

namespace fs = std::filesystem;

class FakeKube : public kube::KubeClient {
 public:
  Result<kube::ApiResponse> request(const std::string& method, const std::string& path,
                                    const std::string&) override {
    ++requests;
    const auto it = objects.find(path);
    if (method != "GET" || it == objects.end())
      return not_found(method + " " + path + ": HTTP 404: not found");
    return kube::ApiResponse{200, it->second};
  }
  std::map<std::string, std::string> objects;
  std::atomic<int> requests = 0;
};

inline std::string read(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

struct LimitsView {
  std::string uuid;
  uint64_t memory;  // the limit
  uint32_t cores, cores_limit, priority, device_count;
  uint64_t memory_request;
};

inline LimitsView read_limits(const fs::path& path) {
  const std::string bytes = read(path);
  EXPECT_EQ(bytes.size(), sizeof(share::LimitsPage));
  share::LimitsPage page;
  std::memcpy(static_cast<void*>(&page), bytes.data(), sizeof page);
  EXPECT_TRUE(share::valid_limits_page(page));
  return {page.devices[0].uuid,
          page.devices[0].memory_limit.load(),
          page.devices[0].cores_request.load(),
          page.devices[0].cores_limit.load(),
          page.priority.load(),
          page.device_count.load(),
          page.requests[0].memory_request.load()};
}

// Every file under the state root and the CDI folder: relative name -> what must converge (the
// limits page by its fields, its generation excluded; the usage page by its size).
inline std::map<std::string, std::string> snapshot(const fs::path& base) {
  std::map<std::string, std::string> files;
  if (!fs::exists(base)) return files;
  for (const auto& item : fs::recursive_directory_iterator(base)) {
    if (!item.is_regular_file()) continue;
    const std::string name = fs::relative(item.path(), base).string();
    if (item.path().filename() == "limits") {
      const LimitsView v = read_limits(item.path());
      files[name] = v.uuid + "/" + std::to_string(v.memory) + "/" + std::to_string(v.cores) + "/" +
                    std::to_string(v.cores_limit) + "/" + std::to_string(v.priority) + "/" +
                    std::to_string(v.memory_request);
    } else if (item.path().filename() == "usage") {
      files[name] = std::to_string(fs::file_size(item.path()));
    } else {
      files[name] = read(item.path());
    }
  }
  return files;
}

// An agent process (forked) that prepares then unprepares `claim` and dies right after durable
// step `crash_at` (ShareManagerOptions::after_step). Returns how it ended: 42 = crashed there.
inline int run_agent_crashing_after(const ShareManagerOptions& options, kube::KubeClient& kube,
                                    const std::vector<NodeDevice>& devices, const ClaimRef& claim,
                                    int crash_at) {
  const pid_t child = fork();
  if (child < 0) return -1;
  if (child == 0) {
    ShareManagerOptions crashing = options;
    crashing.after_step = [crash_at](int step) {
      if (step == crash_at) _exit(42);
    };
    ShareManager m(crashing, kube, devices);
    if (!m.start().is_ok() || !m.prepare(claim).is_ok()) _exit(1);
    m.unprepare(claim).ignore();  // the crash, if any, is the test
    _exit(0);
  }
  int status = 0;
  if (waitpid(child, &status, 0) != child || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

// As run_agent_crashing_after, for several claims at once: one thread per claim prepares it, then
// (all prepared) one thread per claim unprepares it; the process dies right after durable step
// `crash_at` of whichever call reaches it. 42 = crashed there, 0 = every call succeeded.
inline int run_agent_crashing_after_concurrent(const ShareManagerOptions& options,
                                               kube::KubeClient& kube,
                                               const std::vector<NodeDevice>& devices,
                                               const std::vector<ClaimRef>& claims, int crash_at) {
  const pid_t child = fork();
  if (child < 0) return -1;
  if (child == 0) {
    ShareManagerOptions crashing = options;
    crashing.after_step = [crash_at](int step) {
      if (step == crash_at) _exit(42);
    };
    ShareManager m(crashing, kube, devices);
    if (!m.start().is_ok()) _exit(1);
    std::atomic<bool> failed = false;
    auto each_claim = [&](const std::function<bool(const ClaimRef&)>& call) {
      std::vector<std::thread> threads;
      for (const auto& claim : claims)
        threads.emplace_back([&, claim] {
          if (!call(claim)) failed = true;
        });
      for (auto& thread : threads) thread.join();
    };
    each_claim([&](const ClaimRef& claim) { return m.prepare(claim).is_ok(); });
    if (failed) _exit(1);
    each_claim([&](const ClaimRef& claim) { return m.unprepare(claim).is_ok(); });
    _exit(failed ? 1 : 0);
  }
  int status = 0;
  if (waitpid(child, &status, 0) != child || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

// Whether `name` is a temporary of write_file_atomically (".<file>.tmp.<pid>.<n>") of a file in
// `files`: a write in flight when the process died.
inline bool named_temporary(const std::string& name, const std::set<std::string>& files) {
  for (const auto& file : files)
    if (name.rfind("." + file + ".tmp.", 0) == 0) return true;
  return false;
}

// What a crash may leave, read from the disk alone: "" when checkpoint.json names every share
// folder and CDI spec there (an entry is written before its files and removed after them) and
// every PrepareCompleted entry's folders and spec exist; else each violation, one per line.
inline std::string crash_state_violations(const ShareManagerOptions& options) {
  Checkpoint checkpoint;
  if (const std::string text = read(options.root + "/checkpoint.json"); !text.empty()) {
    Result<Checkpoint> parsed = checkpoint_from_json(text);
    if (!parsed.is_ok()) return parsed.status().message() + "\n";
    checkpoint = std::move(parsed).value();
  }
  std::set<std::string> folders, specs;
  std::string violations;
  for (const auto& [uid, entry] : checkpoint) {
    specs.insert(cdi_spec_file_name(uid));
    for (const auto& share : entry.shares) folders.insert(share.folder_name());
    if (entry.state != ClaimState::kPrepareCompleted) continue;
    if (!fs::exists(options.cdi_dir + "/" + cdi_spec_file_name(uid)))
      violations += "completed claim " + uid + " has no CDI spec\n";
    for (const auto& share : entry.shares)
      if (!fs::exists(options.root + "/shares/" + share.folder_name() + "/limits"))
        violations +=
            "completed claim " + uid + " has no limits page in " + share.folder_name() + "\n";
  }
  std::error_code ec;
  for (const auto& item : fs::directory_iterator(options.root + "/shares", ec))
    if (!folders.count(item.path().filename().string()))
      violations += "share folder " + item.path().filename().string() + " no entry names\n";
  for (const auto& item : fs::directory_iterator(options.cdi_dir, ec))
    if (!specs.count(item.path().filename().string()) &&
        !named_temporary(item.path().filename().string(), specs))
      violations += "CDI file " + item.path().filename().string() + " no entry names\n";
  return violations;
}

}  // namespace tessera::agent::testing
