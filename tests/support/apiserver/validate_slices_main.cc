// validate-slices FILE: checks ResourceSlices (one JSON object after another, as
// `tessera-node-agent --print-resource-slices` prints them) with the port of kube-apiserver's
// validation (apiserver_rules.h), for the GPU checks that read a real node's NVML. Prints one line
// per slice; exits 1 when any slice would be refused (with the API server's message), 2 when the
// file holds no slice.
#include <cstdio>
#include <fstream>
#include <istream>

#include "apiserver/apiserver_rules.h"

int main(int argc, char** argv) {
  using nlohmann::json;
  namespace apiserver = tessera::agent::testing::apiserver;
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s FILE\n", argv[0]);
    return 2;
  }
  std::ifstream file(argv[1]);
  int slices = 0, refused = 0;
  // One JSON value after another: operator>> reads one and leaves the rest of the stream.
  while (file >> std::ws && file.peek() != EOF) {
    json slice;
    try {
      file >> slice;
    } catch (const json::parse_error& error) {
      std::printf("slice %d: not JSON: %s\n", slices, error.what());
      return 1;
    }
    const auto refusal = apiserver::check_resource_slice_write(slice, nullptr);
    const std::string name = slice.value("metadata", json::object()).value("name", "");
    if (refusal) {
      ++refused;
      std::printf("slice %s: refused (HTTP %d): %s\n", name.c_str(), refusal->code,
                  refusal->status.value("message", "").c_str());
    } else {
      std::printf("slice %s: accepted, %zu devices\n", name.c_str(),
                  slice["spec"].value("devices", json::array()).size());
    }
    ++slices;
  }
  if (slices == 0) {
    std::fprintf(stderr, "%s: no ResourceSlice found\n", argv[1]);
    return 2;
  }
  return refused ? 1 : 0;
}
