// `tessera shares --cluster`: the shares of every node, from the API server. A share is an
// allocation result of Tessera's driver in a ResourceClaim's status (status.allocation.devices.
// results[] whose driver is vgpu.tessera.dev): the node from the allocation's nodeSelector (the
// scheduler pins a node-local device with matchFields metadata.name In [<node>]), the device, the
// capacity the scheduler took from it (results[].consumedCapacity: memory and cores, as stored),
// and the pods the claim is reserved for (status.reservedFor). So "which node holds my share" has
// an answer without a shell on any node. Claims not yet allocated, or allocated by other drivers,
// are not listed.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessera/kube/http_kube_client.h"
#include "tessera/kube/kube_client.h"
#include "tessera/status.h"

namespace tessera::cli {

struct ClusterConsumer {  // an entry of status.reservedFor
  std::string resource;   // "pods"
  std::string name;
  std::string uid;
};

struct ClusterShare {
  std::string namespace_name;
  std::string claim;
  std::string claim_uid;
  std::string node;  // "" when the allocation names no single node
  std::string request;
  std::string driver;
  std::string pool;
  std::string device;
  std::string share_id;  // results[].shareID ("" when the server stores none)
  std::string memory;    // consumedCapacity.memory as stored ("8Gi"); "" when not there
  std::string cores;     // consumedCapacity.cores ("30"); "" when not there
  std::vector<ClusterConsumer> reserved_for;
  std::string created;  // metadata.creationTimestamp (RFC 3339)
};

// One ClusterShare per allocation result of `driver` in the items of a ResourceClaimList (as
// kube-apiserver answers a list), in the list's order. A claim whose fields are not what the API
// server stores is an error naming the claim, the field and the value.
Result<std::vector<ClusterShare>> cluster_shares_from_claims(const nlohmann::json& items,
                                                             const std::string& driver);

// Every ResourceClaim of `namespace_name` (every namespace when empty), as the items of the list,
// read in pages of `chunk_size` (limit/continue, as kubectl --chunk-size; 0: one request).
Result<nlohmann::json> list_resource_claims(kube::KubeClient& client,
                                            const std::string& namespace_name, int chunk_size);

// NAMESPACE CLAIM NODE DEVICE MEMORY CORES PODS AGE (wide: REQUEST POOL SHARE-ID CLAIM-UID after
// them); "" when there are none.
std::string render_cluster_table(const std::vector<ClusterShare>& shares, int64_t now_unix_ms,
                                 bool wide);
// {"shares": [{"namespace", "claim", "claim_uid", "node", "request", "driver", "pool", "device",
// "share_id", "memory", "cores", "reserved_for": [{"resource", "name", "uid"}], "created"}]}: every
// field always there, in this order; what is not known is null.
nlohmann::ordered_json cluster_shares_json(const std::vector<ClusterShare>& shares);
// "table", "wide", "json" or "yaml" (the JSON document as YAML).
Result<std::string> render_cluster_shares(const std::vector<ClusterShare>& shares,
                                          const std::string& format, int64_t now_unix_ms);

// How the CLI reaches the API server, as kubectl does: --kubeconfig, else the first file
// $KUBECONFIG names, else ~/.kube/config when it exists, else the pod's service account
// (in-cluster).
Result<kube::KubeConnection> cluster_connection(const std::string& kubeconfig_flag);

}  // namespace tessera::cli
