#include "dra_service_v1beta1.h"

#include "dra_batch.h"

namespace tessera::agent {

grpc::Status DraServiceV1Beta1::NodePrepareResources(
    grpc::ServerContext* /*context*/, const dra_v1beta1::NodePrepareResourcesRequest* request,
    dra_v1beta1::NodePrepareResourcesResponse* response) {
  // v1beta1 has no share_id: a kubelet that speaks only v1beta1 predates consumable capacity,
  // so the share is identified by its CDI device ids alone.
  detail::prepare_batch(preparer_, locks_, *request, response,
                        detail::fill_common_device_fields<dra_v1beta1::Device>);
  return grpc::Status::OK;
}

grpc::Status DraServiceV1Beta1::NodeUnprepareResources(
    grpc::ServerContext* /*context*/, const dra_v1beta1::NodeUnprepareResourcesRequest* request,
    dra_v1beta1::NodeUnprepareResourcesResponse* response) {
  detail::unprepare_batch(preparer_, locks_, *request, response);
  return grpc::Status::OK;
}

}  // namespace tessera::agent
