// Prepare latency when one backend step is slow: claims with one MPS share each, prepared through
// the real kubelet plugin (DRA v1 over its unix socket, as kubelet calls it) against the local
// HTTPS fake API server, while the recording nvidia-cuda-mps-control double takes --delay-ms to
// start each daemon. First some claims one at a time (the serial figure: what every claim cost
// while one lock covered the whole prepare), then --claims claims in concurrent kubelet calls.
// Prints both. With --max-wall-fraction, fails unless the concurrent wall time is below that
// fraction of what the same claims cost one at a time, both measured in this run (the CTest passes
// 0.5, so its verdict does not depend on the machine's speed); --max-wall-s adds an absolute bound,
// for manual runs only. docs/node-agent.md has the figures.
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <latch>
#include <numeric>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "apiserver/claim_fixture.h"
#include "apiserver/fake_api_server.h"
#include "backends/mps_backend.h"
#include "plugin/plugin_server.h"
#include "plugin/test_support.h"
#include "share/fake_driver.h"
#include "share/share_manager.h"
#include "tessera/kube/http_kube_client.h"

namespace {

using namespace tessera::agent;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double percentile(std::vector<double> values, double p) {
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1,
                         static_cast<size_t>(p * static_cast<double>(values.size())))];
}

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string uid_of(const std::string& phase, int i) {
  char uid[64];
  std::snprintf(uid, sizeof uid, "0f6b3f0e-7c59-4d0e-9b4e-%s%011d", phase.c_str(), i);
  return uid;
}

// One kubelet call preparing `uid`; "" or why it failed. Its latency goes to `ms`.
std::string prepare_one(testing::KubeletSimulator& kubelet, const std::string& uid, double& ms) {
  const auto start = Clock::now();
  testing::dra1::NodePrepareResourcesResponse response;
  const grpc::Status status = kubelet.prepare_v1({uid}, &response);
  ms = seconds_since(start) * 1000;
  if (!status.ok()) return "NodePrepareResources: " + status.error_message();
  const auto& claim = response.claims().at(uid);
  if (!claim.error().empty()) return claim.error();
  if (claim.devices_size() != 1) return "expected one device";
  return "";
}

std::string unprepare_all(testing::KubeletSimulator& kubelet,
                          const std::vector<std::string>& uids) {
  testing::dra1::NodeUnprepareResourcesResponse response;
  const grpc::Status status = kubelet.unprepare_v1(uids, &response);
  if (!status.ok()) return "NodeUnprepareResources: " + status.error_message();
  for (const auto& uid : uids)
    if (const auto& error = response.claims().at(uid).error(); !error.empty()) return error;
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"prepare latency with a slow backend step, serial and concurrent"};
  int claims = 32, serial_claims = 32, delay_ms = 1000;
  double max_wall_s = 0, max_wall_fraction = 0;
  app.add_option("--claims", claims, "claims prepared concurrently")->check(CLI::Range(1, 1000));
  app.add_option("--serial-claims", serial_claims, "claims prepared one at a time first")
      ->check(CLI::Range(1, 1000));
  app.add_option("--delay-ms", delay_ms, "how long each MPS daemon start takes")
      ->check(CLI::Range(0, 60000));
  app.add_option("--max-wall-fraction", max_wall_fraction,
                 "fail unless the concurrent wall time is below this fraction of the serial "
                 "estimate (both measured in this run)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--max-wall-s", max_wall_s,
                 "fail unless the concurrent wall time is below this (manual runs: an absolute "
                 "bound depends on the machine)");
  CLI11_PARSE(app, argc, argv);

  testing::TempDir dir;  // short: unix socket paths are limited to 107 bytes
  fs::create_directories(dir.path() / "doubles");
  setenv("TESSERA_DOUBLE_LOG", (dir.path() / "doubles" / "calls.log").c_str(), 1);
  setenv("TESSERA_DOUBLE_STATE", (dir.path() / "doubles").c_str(), 1);
  std::ofstream(dir.path() / "doubles" / "mps-start-delay") << delay_ms / 1000.0;

  testing::FakeApiServer server;
  std::vector<std::string> serial_uids, concurrent_uids;
  auto add = [&](const std::string& uid) {
    // KubeletSimulator names claim <uid> "claim-<uid>" in namespace "ns-<uid>".
    nlohmann::json claim = testing::written_claim(
        "claim-" + uid, uid, {{"gpu", "gpu-0", uid.substr(24), "1Gi", "10"}},
        nlohmann::json::array(
            {testing::opaque_config("FromClass", {{"apiVersion", "vgpu.tessera.dev/v1alpha1"},
                                                  {"kind", "VgpuConfig"},
                                                  {"sharing", {{"strategy", "MPS"}}}})}));
    claim["metadata"]["namespace"] = "ns-" + uid;
    server.add_claim("ns-" + uid, "claim-" + uid, claim.dump());
  };
  for (int i = 0; i < serial_claims; ++i) add(serial_uids.emplace_back(uid_of("1", i)));
  for (int i = 0; i < claims; ++i) add(concurrent_uids.emplace_back(uid_of("2", i)));

  MpsOptions mps_options;
  mps_options.control = AGENT_DOUBLES_DIR "/nvidia-cuda-mps-control";
  mps_options.root = (dir.path() / "mps").string();
  mps_options.private_dev_shm = false;  // the double needs none; the bench runs unprivileged
  mps_options.timeout = std::chrono::milliseconds(delay_ms + 20000);
  MpsBackend mps(mps_options);
  ShareManagerOptions options;
  options.root = (dir.path() / "state").string();
  options.cdi_dir = (dir.path() / "cdi").string();
  options.node_name = "node-a";
  options.shim_path = tessera::agent::testing::write_fake_shim(dir.path() / "shim/libvgpu.so");
  options.container_driver = tessera::agent::testing::fake_container_driver(dir.path() / "driver");
  options.mps = &mps;
  tessera::kube::HttpKubeClient kube({server.url(), server.ca_pem(), server.token(), "", "", ""});
  ShareManager manager(options, kube,
                       {{"gpu-0", "GPU-00000000-0000-0000-0000-000000000000", 0, 150ull << 30}});
  if (const tessera::Status started = manager.start(); !started.is_ok()) {
    std::fprintf(stderr, "%s\n", started.message().c_str());
    return 1;
  }
  PluginServerOptions plugin_options;
  plugin_options.registry_dir = dir.path() / "registry";
  plugin_options.plugins_dir = dir.path() / "plugins";
  plugin_options.log = [](std::string_view) {};
  PluginServer plugin(plugin_options, manager);
  if (const tessera::Status started = plugin.start(); !started.is_ok()) {
    std::fprintf(stderr, "%s\n", started.message().c_str());
    return 1;
  }
  testing::KubeletSimulator kubelet(plugin.registration_socket());
  kubelet.connect();

  // Serial: one kubelet call at a time, as every prepare ran while one lock covered it.
  std::vector<double> serial_ms(serial_uids.size());
  for (size_t i = 0; i < serial_uids.size(); ++i)
    if (auto e = prepare_one(kubelet, serial_uids[i], serial_ms[i]); !e.empty()) {
      std::fprintf(stderr, "serial prepare %s: %s\n", serial_uids[i].c_str(), e.c_str());
      return 1;
    }
  if (auto e = unprepare_all(kubelet, serial_uids); !e.empty()) {
    std::fprintf(stderr, "unprepare: %s\n", e.c_str());
    return 1;
  }

  // Concurrent: every claim in its own kubelet call, all sent at once.
  std::vector<double> concurrent_ms(concurrent_uids.size());
  std::vector<std::string> errors(concurrent_uids.size());
  std::latch go(static_cast<std::ptrdiff_t>(concurrent_uids.size()) + 1);
  std::vector<std::thread> calls;
  for (size_t i = 0; i < concurrent_uids.size(); ++i)
    calls.emplace_back([&, i] {
      go.arrive_and_wait();
      errors[i] = prepare_one(kubelet, concurrent_uids[i], concurrent_ms[i]);
    });
  go.arrive_and_wait();
  const auto start = Clock::now();
  for (auto& call : calls) call.join();
  const double wall_s = seconds_since(start);
  for (size_t i = 0; i < errors.size(); ++i)
    if (!errors[i].empty()) {
      std::fprintf(stderr, "prepare %s: %s\n", concurrent_uids[i].c_str(), errors[i].c_str());
      return 1;
    }
  const auto unprepare_start = Clock::now();
  if (auto e = unprepare_all(kubelet, concurrent_uids); !e.empty()) {
    std::fprintf(stderr, "unprepare: %s\n", e.c_str());
    return 1;
  }
  const double unprepare_s = seconds_since(unprepare_start);
  plugin.stop();

  const double serial_sum_s = std::accumulate(serial_ms.begin(), serial_ms.end(), 0.0) / 1000;
  // What the concurrent batch would have cost one at a time: the serial mean per claim.
  const double serial_estimate_s = serial_sum_s / serial_uids.size() * concurrent_uids.size();
  std::printf(
      "MPS daemon start %d ms each (recording double), one share per claim, kubelet DRA v1 "
      "over the plugin socket, fake API over HTTPS\n",
      delay_ms);
  std::printf("FIGURE serial_prepare_ms p50 %.1f p99 %.1f (%zu claims one at a time, sum %.2f s)\n",
              percentile(serial_ms, 0.5), percentile(serial_ms, 0.99), serial_uids.size(),
              serial_sum_s);
  std::printf("FIGURE concurrent_prepare_ms p50 %.1f p99 %.1f (%zu claims in concurrent calls)\n",
              percentile(concurrent_ms, 0.5), percentile(concurrent_ms, 0.99),
              concurrent_uids.size());
  std::printf("FIGURE concurrent_wall_s %.2f (one at a time: %.2f s)\n", wall_s, serial_estimate_s);
  std::printf("FIGURE concurrent_wall_fraction %.3f (of the serial estimate)\n",
              wall_s / serial_estimate_s);
  std::printf("FIGURE unprepare_wall_s %.2f (%zu claims, one batch)\n", unprepare_s,
              concurrent_uids.size());
  int failures = 0;
  if (max_wall_fraction > 0 && wall_s >= max_wall_fraction * serial_estimate_s) {
    std::fprintf(
        stderr,
        "FAIL: concurrent wall time %.2f s is not below %.2f of the %.2f s the same claims "
        "cost one at a time\n",
        wall_s, max_wall_fraction, serial_estimate_s);
    ++failures;
  }
  if (max_wall_s > 0 && wall_s >= max_wall_s) {
    std::fprintf(stderr, "FAIL: concurrent wall time %.2f s is not below %.2f s\n", wall_s,
                 max_wall_s);
    ++failures;
  }
  return failures == 0 ? 0 : 1;
}
