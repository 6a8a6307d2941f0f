// Test doubles and helpers for the kubelet plugin tests: a recording ClaimPreparer, a temporary
// folder with short paths (unix socket paths are limited to 107 bytes), and a kubelet simulator
// that speaks to the plugin exactly as kubelet does, through the real unix sockets.
#pragma once

#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "kubelet/dra-health/v1alpha1/api.grpc.pb.h"
#include "kubelet/dra/v1/api.grpc.pb.h"
#include "kubelet/dra/v1beta1/api.grpc.pb.h"
#include "kubelet/pluginregistration/api.grpc.pb.h"
#include "model/claim_preparer.h"

namespace tessera::agent::testing {

namespace fs = std::filesystem;
namespace dra1 = k8s::io::kubelet::pkg::apis::dra::v1;
namespace dra1b1 = k8s::io::kubelet::pkg::apis::dra::v1beta1;

class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/tna-XXXXXX";
    if (mkdtemp(pattern) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Leaves a socket file behind with nobody listening, as a killed agent does.
inline void make_stale_socket(const fs::path& path) {
  fs::create_directories(path.parent_path());
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("socket failed");
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    close(fd);
    throw std::runtime_error("bind failed");
  }
  close(fd);
}

struct PreparerCall {
  bool prepare = true;  // false: unprepare
  ClaimRef claim;
};

// A scripted prepare answer: the devices, or (a non-empty error) a failure with `code`.
struct ScriptedPrepare {
  std::vector<PreparedDevice> devices;
  std::string error;
  StatusCode code = StatusCode::kInternal;
};

// Answers from a script keyed by claim UID and records every call. Thread-safe. An optional gate
// holds prepare of one UID until released, to observe concurrency.
class RecordingPreparer final : public ClaimPreparer {
 public:
  void script_prepare(const std::string& uid, ScriptedPrepare script) {
    std::lock_guard lock(mutex_);
    if (script.error.empty()) {
      prepare_results_.insert_or_assign(uid, PrepareResult(std::move(script.devices)));
    } else {
      prepare_results_.insert_or_assign(uid, PrepareResult(Status(script.code, script.error)));
    }
  }
  // A failed prepare of any code, even one without a message.
  void script_prepare_status(const std::string& uid, Status status) {
    std::lock_guard lock(mutex_);
    prepare_results_.insert_or_assign(uid, PrepareResult(std::move(status)));
  }
  void script_unprepare_error(const std::string& uid, std::string error,
                              StatusCode code = StatusCode::kInternal) {
    std::lock_guard lock(mutex_);
    unprepare_errors_.insert_or_assign(uid, Status(code, std::move(error)));
  }
  void throw_on(const std::string& uid) {
    std::lock_guard lock(mutex_);
    throwing_uid_ = uid;
  }
  void hold(const std::string& uid) {
    std::lock_guard lock(mutex_);
    held_uid_ = uid;
  }
  void release() {
    {
      std::lock_guard lock(mutex_);
      held_uid_.reset();
    }
    changed_.notify_all();
  }
  // True once prepare of `uid` has started (within `timeout`).
  bool wait_started(const std::string& uid, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, timeout, [&] {
      for (const PreparerCall& call : calls_)
        if (call.claim.uid == uid) return true;
      return false;
    });
  }

  PrepareResult prepare(const ClaimRef& claim) override {
    std::unique_lock lock(mutex_);
    calls_.push_back({true, claim});
    changed_.notify_all();
    if (throwing_uid_ == claim.uid) throw std::runtime_error("boom");
    // Bounded: a broken test fails instead of hanging.
    changed_.wait_for(lock, std::chrono::seconds(20), [&] { return held_uid_ != claim.uid; });
    auto it = prepare_results_.find(claim.uid);
    if (it == prepare_results_.end()) return not_found("no such claim " + claim.uid);
    return it->second;
  }
  Status unprepare(const ClaimRef& claim) override {
    std::lock_guard lock(mutex_);
    calls_.push_back({false, claim});
    auto it = unprepare_errors_.find(claim.uid);
    return it == unprepare_errors_.end() ? Status::ok() : it->second;
  }

  std::vector<PreparerCall> calls() const {
    std::lock_guard lock(mutex_);
    return calls_;
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, PrepareResult> prepare_results_;
  std::map<std::string, Status> unprepare_errors_;
  std::optional<std::string> throwing_uid_;
  std::optional<std::string> held_uid_;
  std::vector<PreparerCall> calls_;
};

inline std::shared_ptr<grpc::Channel> dial(const fs::path& socket) {
  return grpc::CreateChannel("unix://" + socket.native(), grpc::InsecureChannelCredentials());
}

inline void set_deadline(grpc::ClientContext& context) {
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
}

// Does what kubelet does: reads the plugin's info from the registration socket, reports the
// registration result, and calls the DRA service at the endpoint GetInfo gave.
class KubeletSimulator {
 public:
  explicit KubeletSimulator(const fs::path& registration_socket)
      : registration_(pluginregistration::Registration::NewStub(dial(registration_socket))) {}

  grpc::Status get_info(pluginregistration::PluginInfo* info) {
    grpc::ClientContext context;
    set_deadline(context);
    return registration_->GetInfo(&context, pluginregistration::InfoRequest{}, info);
  }

  grpc::Status notify(bool registered, const std::string& error) {
    grpc::ClientContext context;
    set_deadline(context);
    pluginregistration::RegistrationStatus status;
    status.set_plugin_registered(registered);
    status.set_error(error);
    pluginregistration::RegistrationStatusResponse reply;
    return registration_->NotifyRegistrationStatus(&context, status, &reply);
  }

  // GetInfo, then connects to the DRA endpoint it names.
  void connect() {
    pluginregistration::PluginInfo info;
    grpc::Status status = get_info(&info);
    if (!status.ok()) throw std::runtime_error("GetInfo failed: " + status.error_message());
    auto channel = dial(info.endpoint());
    v1_ = dra1::DRAPlugin::NewStub(channel);
    v1beta1_ = dra1b1::DRAPlugin::NewStub(channel);
    health_ = v1alpha1::DRAResourceHealth::NewStub(channel);
  }

  template <class Request>
  static Request claims_request(const std::vector<std::string>& uids) {
    Request request;
    for (const std::string& uid : uids) {
      auto* claim = request.add_claims();
      claim->set_namespace_("ns-" + uid);
      claim->set_uid(uid);
      claim->set_name("claim-" + uid);
    }
    return request;
  }

  grpc::Status prepare_v1(const std::vector<std::string>& uids,
                          dra1::NodePrepareResourcesResponse* response) {
    grpc::ClientContext context;
    set_deadline(context);
    return v1_->NodePrepareResources(
        &context, claims_request<dra1::NodePrepareResourcesRequest>(uids), response);
  }
  grpc::Status unprepare_v1(const std::vector<std::string>& uids,
                            dra1::NodeUnprepareResourcesResponse* response) {
    grpc::ClientContext context;
    set_deadline(context);
    return v1_->NodeUnprepareResources(
        &context, claims_request<dra1::NodeUnprepareResourcesRequest>(uids), response);
  }
  grpc::Status prepare_v1beta1(const std::vector<std::string>& uids,
                               dra1b1::NodePrepareResourcesResponse* response) {
    grpc::ClientContext context;
    set_deadline(context);
    return v1beta1_->NodePrepareResources(
        &context, claims_request<dra1b1::NodePrepareResourcesRequest>(uids), response);
  }
  grpc::Status unprepare_v1beta1(const std::vector<std::string>& uids,
                                 dra1b1::NodeUnprepareResourcesResponse* response) {
    grpc::ClientContext context;
    set_deadline(context);
    return v1beta1_->NodeUnprepareResources(
        &context, claims_request<dra1b1::NodeUnprepareResourcesRequest>(uids), response);
  }

  v1alpha1::DRAResourceHealth::Stub& health() { return *health_; }

 private:
  std::unique_ptr<pluginregistration::Registration::Stub> registration_;
  std::unique_ptr<dra1::DRAPlugin::Stub> v1_;
  std::unique_ptr<dra1b1::DRAPlugin::Stub> v1beta1_;
  std::unique_ptr<v1alpha1::DRAResourceHealth::Stub> health_;
};

}  // namespace tessera::agent::testing
