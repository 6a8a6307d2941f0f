// Load on the webhook over TLS on loopback with wrk (Debian's, 4.1): the server in this process
// (an in-memory API behind it: the template is created once, then known), wrk paced by its Lua
// delay() to about the asked rate, one run for a GPU pod (a patch and a template per request) and
// one for a pod without GPUs. Prints p50/p99, the rate and the errors (transport errors, non-200
// answers and answers that are not the expected allow); exits 1 if there was any error or no
// answer at all. Rate and latency are printed, never judged (the 3 s CTest run must not depend on
// the machine's speed); a request counts as an error only when unanswered after 10 s, the time
// kube-apiserver waits for the chart's webhook (wrk's own default, 2 s, would be a latency bound).
//
//   webhook_load_bench [seconds=30] [rate=1000] [connections=8]   (rate 0: as fast as it goes)
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "fake_kube.h"
#include "review_fixture.h"
#include "server/webhook_server.h"
#include "test_certificates.h"

namespace {

using namespace tessera::webhook;

// The chart's webhook timeoutSeconds (charts/tessera/values.yaml): an answer later than this is
// one kube-apiserver would not have waited for.
constexpr int kRequestTimeoutS = 10;

constexpr char kScript[] = R"lua(
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local file = io.open(os.getenv("WEBHOOK_BENCH_BODY"), "r")
wrk.body = file:read("*a")
file:close()
local pause = tonumber(os.getenv("WEBHOOK_BENCH_DELAY_MS"))
local expect = os.getenv("WEBHOOK_BENCH_EXPECT")
local threads = {}

function setup(thread)
  table.insert(threads, thread)
end

function init(args)
  bad = 0
end

function delay()
  return pause
end

function response(status, headers, body)
  if status ~= 200 or not string.find(body, expect, 1, true) then
    bad = bad + 1
  end
end

function done(summary, latency, requests)
  local wrong = 0
  for _, thread in ipairs(threads) do
    wrong = wrong + thread:get("bad")
  end
  local e = summary.errors
  local transport = e.connect + e.read + e.write + e.timeout
  io.write(string.format(
      "RESULT requests=%d seconds=%.1f rate=%.0f p50_ms=%.3f p99_ms=%.3f max_ms=%.3f " ..
      "transport_errors=%d non_200=%d wrong_answers=%d\n",
      summary.requests, summary.duration / 1e6, summary.requests / (summary.duration / 1e6),
      latency:percentile(50) / 1000, latency:percentile(99) / 1000, latency.max / 1000,
      transport, e.status, wrong))
end
)lua";

int run_wrk(const std::string& name, const std::string& body_file, const std::string& expect,
            int port, int seconds, int rate, int connections) {
  // Each connection waits `delay` after each answer, so connections / (delay + latency + wrk's own
  // turn) per second: one wrk thread per connection, as wrk paces a thread's connections unevenly;
  // the rate reached is printed, not assumed.
  const int delay_ms = rate <= 0 ? 0 : std::max(0, connections * 1000 / rate - 1);
  const std::string script = std::filesystem::path(body_file).parent_path() / "bench.lua";
  tessera::webhook::testing::write_file(script, kScript);
  const std::string command =
      "WEBHOOK_BENCH_BODY=" + body_file + " WEBHOOK_BENCH_DELAY_MS=" + std::to_string(delay_ms) +
      " WEBHOOK_BENCH_EXPECT='" + expect + "' wrk --latency -t" + std::to_string(connections) +
      " -c" + std::to_string(connections) + " -d" + std::to_string(seconds) + "s --timeout " +
      std::to_string(kRequestTimeoutS) + "s -s " + script +
      " https://127.0.0.1:" + std::to_string(port) + "/mutate 2>&1";
  FILE* wrk = popen(command.c_str(), "r");
  if (!wrk) return 1;
  std::string output;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof(buffer), wrk)) output.append(buffer, n);
  const int status = pclose(wrk);
  // The line done() writes: "RESULT requests=... transport_errors=N non_200=N wrong_answers=N".
  const size_t start = output.find("RESULT ");
  if (status != 0 || start == std::string::npos) {
    std::printf("%s: wrk failed (status %d):\n%s\n", name.c_str(), status, output.c_str());
    return 1;
  }
  const std::string line = output.substr(start + 7, output.find('\n', start) - start - 7);
  std::printf("%s: %s\n", name.c_str(), line.c_str());
  std::fflush(stdout);
  for (const char* errors : {" transport_errors=0", " non_200=0", " wrong_answers=0"})
    if (line.find(errors) == std::string::npos) return 1;
  if (line.rfind("requests=0 ", 0) == 0) {
    std::printf("%s: FAIL: no request answered\n", name.c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int seconds = argc > 1 ? std::atoi(argv[1]) : 30;
  const int rate = argc > 2 ? std::atoi(argv[2]) : 1000;
  const int connections = argc > 3 ? std::atoi(argv[3]) : 8;
  std::string pattern = std::filesystem::temp_directory_path() / "webhook-bench-XXXXXX";
  const std::string dir = mkdtemp(pattern.data());
  const tessera::webhook::testing::TestPki pki;
  pki.rotate(dir + "/tls.crt", dir + "/tls.key", 1);

  WebhookOptions options;
  options.listen = "127.0.0.1:0";
  options.tls_cert_file = dir + "/tls.crt";
  options.tls_private_key_file = dir + "/tls.key";
  options.shutdown_delay = std::chrono::milliseconds(0);
  tessera::webhook::testing::FakeKube api;
  WebhookServer server(options, api, [] { return std::chrono::steady_clock::now(); });
  if (!server.start().is_ok()) return 1;
  std::thread serving([&] { server.serve(); });

  auto compact = [&](const char* golden, const std::string& file) {
    tessera::webhook::testing::write_file(file, tessera::webhook::testing::golden(golden).dump());
    return file;
  };
  std::printf(
      "wrk over TLS on loopback, %d s per run, asked %d requests/s (0: unpaced), %d connections\n",
      seconds, rate, connections);
  int failed = 0;
  failed |= run_wrk("gpu pod (shorthand -> patch + template)",
                    compact("pod_shorthand.json", dir + "/gpu.json"), "\"patchType\":\"JSONPatch\"",
                    server.port(), seconds, rate, connections);
  failed |= run_wrk("pod without GPUs", compact("pod_no_gpu.json", dir + "/plain.json"),
                    "\"allowed\":true", server.port(), seconds, rate, connections);
  std::printf("templates: created %zu, known %zu; API requests %zu\n",
              server.templates().counts().created, server.templates().counts().cached,
              api.request_count());
  server.stop();
  serving.join();
  std::filesystem::remove_all(dir);
  return failed;
}
