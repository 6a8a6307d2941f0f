// prepare + unprepare latency of the share manager over 1,000 claims (two shares each) against the
// local HTTPS fake API server, through the real libcurl client. Prints p50/p99 (not a test gate).
// Usage: agent_prepare_bench [claims]
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "apiserver/claim_fixture.h"
#include "apiserver/fake_api_server.h"
#include "share/fake_driver.h"
#include "share/share_manager.h"
#include "tessera/kube/http_kube_client.h"

namespace {

double percentile(std::vector<double> values, double p) {
  std::sort(values.begin(), values.end());
  return values[std::min(values.size() - 1,
                         static_cast<size_t>(p * static_cast<double>(values.size())))];
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tessera::agent;
  namespace fs = std::filesystem;
  const int claims = argc > 1 ? std::atoi(argv[1]) : 1000;
  testing::FakeApiServer server;
  std::vector<ClaimRef> refs;
  for (int i = 0; i < claims; ++i) {
    char uid[64];
    std::snprintf(uid, sizeof uid, "0f6b3f0e-7c59-4d0e-9b4e-%012d", i);
    const std::string name = "claim-" + std::to_string(i);
    server.add_claim("tenants", name,
                     testing::written_claim(name, uid,
                                            {{"a", "gpu-0", std::string(uid) + "-a", "8Gi", "30"},
                                             {"b", "gpu-0", std::string(uid) + "-b", "4Gi", "70"}})
                         .dump());
    refs.push_back({"tenants", uid, name});
  }
  const fs::path base = fs::temp_directory_path() / ("agent-bench-" + std::to_string(getpid()));
  fs::remove_all(base);
  ShareManagerOptions options;
  options.root = (base / "state").string();
  options.cdi_dir = (base / "cdi").string();
  options.node_name = "node-a";
  options.shim_path = tessera::agent::testing::write_fake_shim(base / "shim/libvgpu.so");
  options.container_driver = tessera::agent::testing::fake_container_driver(base / "driver");
  tessera::kube::HttpKubeClient kube({server.url(), server.ca_pem(), server.token(), "", "", ""});
  ShareManager manager(options, kube,
                       {{"gpu-0", "GPU-00000000-0000-0000-0000-000000000000", 0, 150ull << 30}});
  if (const tessera::Status started = manager.start(); !started.is_ok()) {
    std::fprintf(stderr, "%s\n", started.message().c_str());
    return 1;
  }
  std::vector<double> prepare_ms, repeat_ms, unprepare_ms;
  using clock = std::chrono::steady_clock;
  auto ms = [](clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); };
  for (const auto& ref : refs) {
    auto t0 = clock::now();
    const PrepareResult r = manager.prepare(ref);
    auto t1 = clock::now();
    if (!r.is_ok() || r->size() != 2) {
      std::fprintf(stderr, "prepare %s: %s\n", ref.name.c_str(), r.status().message().c_str());
      return 1;
    }
    // kubelet's retry: answered from the checkpoint
    if (!manager.prepare(ref).is_ok()) return 1;
    auto t2 = clock::now();
    prepare_ms.push_back(ms(t1 - t0));
    repeat_ms.push_back(ms(t2 - t1));
  }
  for (const auto& ref : refs) {
    auto t0 = clock::now();
    if (const tessera::Status e = manager.unprepare(ref); !e.is_ok()) {
      std::fprintf(stderr, "unprepare %s: %s\n", ref.name.c_str(), e.message().c_str());
      return 1;
    }
    unprepare_ms.push_back(ms(clock::now() - t0));
  }
  fs::remove_all(base);
  std::printf("claims %d (2 shares each), fake API over HTTPS, checkpoint grows to %d claims\n",
              claims, claims);
  std::printf("FIGURE prepare_ms p50 %.3f p99 %.3f\n", percentile(prepare_ms, 0.5),
              percentile(prepare_ms, 0.99));
  std::printf("FIGURE prepare_again_ms p50 %.3f p99 %.3f\n", percentile(repeat_ms, 0.5),
              percentile(repeat_ms, 0.99));
  std::printf("FIGURE unprepare_ms p50 %.3f p99 %.3f\n", percentile(unprepare_ms, 0.5),
              percentile(unprepare_ms, 0.99));
  return 0;
}
