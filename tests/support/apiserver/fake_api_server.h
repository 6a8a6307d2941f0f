// A local HTTPS Kubernetes API server for the node agent's tests: cpp-httplib with a self-signed
// certificate made here with OpenSSL (SAN IP:127.0.0.1), listening on 127.0.0.1 port 0. It serves
// ResourceClaims (GET and LIST, limit/continue) and Nodes as the API server returns them, stores
// ResourceSlices (with resourceVersion) after kube-apiserver's own validation (apiserver_rules.h: a
// refused create or update is answered 422 with the API server's Status, an undecodable one 400),
// records every write, checks the bearer token, and can fail the next N requests with 503. A
// device taint written without timeAdded gets the server's time, as kube-apiserver's defaulting
// does (set_time() fixes that time for a test); with device_taints_gate off it drops them, as a
// server without DRADeviceTaints does. Every answer is what kube-apiserver stores after its
// write-back (apiserver/write_back.h): canonical quantities, defaults, the server's uid,
// resourceVersion, generation, creationTimestamp and managedFields; a claim added is stored as
// created and then given its status by a status update, as is a claim whose reservedFor changes;
// the Node is stored as kubelet registered it. core/v1 Events are created, patched, read and listed
// (with a field selector) under kube-apiserver's Event rules (apiserver/event_rules.h). A slice
// update without a resourceVersion is unconditional, as kube-apiserver's ResourceSlice strategy
// allows; a stale one is a 409.
//
// Compiled once (fake_api_server.cc, in tessera_test_apiserver): this header names neither
// cpp-httplib nor OpenSSL.
#pragma once

#include <atomic>
#include <ctime>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tessera/kube/http_kube_client.h"

namespace tessera::agent::testing {

struct RecordedWrite {
  std::string method;
  std::string path;
  nlohmann::json body;
};

class FakeApiServer {
 public:
  explicit FakeApiServer(std::string token = "test-token");
  ~FakeApiServer();
  FakeApiServer(const FakeApiServer&) = delete;
  FakeApiServer& operator=(const FakeApiServer&) = delete;

  std::string url() const;
  const std::string& ca_pem() const;
  const std::string& token() const;
  // How a client reaches this server: its URL, CA and token.
  kube::KubeConnection connection() const;
  // A claim as the API server holds it once created and given its status (the scheduler's
  // allocation, status.reservedFor) by a status update. A body that is not a ResourceClaim is
  // served as given (tests of what the agent does with a garbled answer).
  void add_claim(const std::string& ns, const std::string& name, const std::string& json);
  // The claim deleted (a GET answers 404 from now on).
  void delete_claim(const std::string& ns, const std::string& name);
  // What the scheduler's status update does when another pod shares the claim: status.reservedFor
  // replaced (pods: {name, uid} each) through the status write-back (a new resourceVersion, the
  // same generation, kube-scheduler's managedFields entry). False when there is no claim, or it
  // is one served as given.
  bool set_reserved_pods(const std::string& ns, const std::string& name,
                         const std::vector<std::pair<std::string, std::string>>& pods);
  void fail_next(int n);
  int requests();
  // Consistent GETs of one ResourceClaim so far (a prepare does one; an answer from the
  // checkpoint none; the agent's periodic re-reads are claim_cache_gets).
  int claim_gets(const std::string& ns, const std::string& name);
  // GETs of it with resourceVersion=0 (served from the watch cache: the agent's periodic reads).
  int claim_cache_gets(const std::string& ns, const std::string& name);
  std::vector<RecordedWrite> take_writes();
  std::map<std::string, nlohmann::json> stored_slices();
  // The time the server stamps on a taint without timeAdded and on a status update (0: the real
  // time).
  void set_time(std::time_t when);
  // The core/v1 Events stored in namespace `ns`, in name order, as a GET answers them.
  std::vector<nlohmann::json> stored_events(const std::string& ns);
  // What the Event TTL does (--event-ttl): the Event is gone, a PATCH of it answers 404.
  void delete_event(const std::string& ns, const std::string& name);
  // What someone else's `kubectl delete resourceslice` does (not recorded as the agent's write).
  void delete_slices();
  // Another driver's slice created (validated and stored as a create is; not recorded as the
  // agent's write): "" or the server's refusal. remove_slice: deleted by its driver.
  std::string add_slice(const nlohmann::json& slice);
  bool remove_slice(const std::string& name);
  // The Node's status replaced while the server runs (kubelet's status update: a device plugin
  // registering or going away).
  void set_node_status(const nlohmann::json& status);
  // The core/v1 Events stored in every namespace, by namespace and name.
  std::vector<nlohmann::json> stored_events();

  // Secrets and admission webhook configurations (the webhook's own serving certificate):
  // GET/POST/PUT of /api/v1/namespaces/<ns>/secrets, GET/PATCH of
  // /apis/admissionregistration.k8s.io/v1/<resource>/<name>, under write_back.h's rules.
  // A configuration as `kubectl apply` (helm) would have created it; `resource` is
  // "mutatingwebhookconfigurations" or "validatingwebhookconfigurations".
  void add_webhook_configuration(const std::string& resource, const nlohmann::json& object);
  nlohmann::json webhook_configuration(const std::string& resource, const std::string& name);
  // The stored Secret (null when none); put_secret stores one as created by someone else.
  nlohmann::json secret(const std::string& ns, const std::string& name);
  void put_secret(const std::string& ns, const nlohmann::json& object);
  // Holds each of the next `count` Secret GETs until all `count` arrived, then answers them
  // together: racing replicas read the same state, so their writes race (0: no hold).
  void hold_secret_reads(int count);

  // kube-apiserver's DRADeviceTaints gate (on by default from 1.36, off before): off, the taints
  // of a write are dropped unless the stored slice already has some.
  std::atomic<bool> device_taints_gate{true};
  // The Node kubelet registered: its name, the uid the server gave it, and the status it posted
  // (capacity, allocatable, ...; null: none). The GET answers it as the server stored it.
  std::string node_name = "node-a";
  std::string node_uid = "3d7c0b8e-node-uid";
  nlohmann::json node_status;
  std::optional<std::string> node_body;  // set: the Node GET answers this, as given (garbled)
  std::map<std::string, nlohmann::json> slices;  // guarded by the server's lock while serving
  std::vector<RecordedWrite> writes;
  std::string last_list_query;
  std::vector<std::string> claim_list_requests;  // every ResourceClaim LIST: path and query

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tessera::agent::testing
