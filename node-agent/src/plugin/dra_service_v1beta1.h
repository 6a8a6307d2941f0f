// The kubelet DRA service, version v1beta1 (k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin), on the
// DRA socket. One ClaimPreparer call per claim, claims of a batch in order; batches arrive on
// gRPC's threads and run concurrently (never two calls for one claim: `locks`), so the preparer
// must be thread-safe. Kubelet gives each call 45 s.
#pragma once

#include "kubelet/dra/v1beta1/api.grpc.pb.h"
#include "model/claim_locks.h"
#include "model/claim_preparer.h"

namespace tessera::agent {

namespace dra_v1beta1 = k8s::io::kubelet::pkg::apis::dra::v1beta1;

class DraServiceV1Beta1 final : public dra_v1beta1::DRAPlugin::Service {
 public:
  DraServiceV1Beta1(ClaimPreparer& preparer, ClaimLocks& locks)
      : preparer_(preparer), locks_(locks) {}

  // Always OK: per-claim failures are in the response's map, one entry per requested claim UID.
  grpc::Status NodePrepareResources(grpc::ServerContext* context,
                                    const dra_v1beta1::NodePrepareResourcesRequest* request,
                                    dra_v1beta1::NodePrepareResourcesResponse* response) override;
  grpc::Status NodeUnprepareResources(
      grpc::ServerContext* context, const dra_v1beta1::NodeUnprepareResourcesRequest* request,
      dra_v1beta1::NodeUnprepareResourcesResponse* response) override;

 private:
  ClaimPreparer& preparer_;
  ClaimLocks& locks_;
};

}  // namespace tessera::agent
