#include "dra_service_v1.h"

#include "dra_batch.h"

namespace tessera::agent {

grpc::Status DraServiceV1::NodePrepareResources(grpc::ServerContext* /*context*/,
                                                const dra_v1::NodePrepareResourcesRequest* request,
                                                dra_v1::NodePrepareResourcesResponse* response) {
  detail::prepare_batch(preparer_, locks_, *request, response,
                        [](const PreparedDevice& from, dra_v1::Device* to) {
                          detail::fill_common_device_fields(from, to);
                          // Absent (not "") when the allocation has no share: a whole device.
                          if (!from.share_id.empty()) to->set_share_id(from.share_id);
                        });
  return grpc::Status::OK;
}

grpc::Status DraServiceV1::NodeUnprepareResources(
    grpc::ServerContext* /*context*/, const dra_v1::NodeUnprepareResourcesRequest* request,
    dra_v1::NodeUnprepareResourcesResponse* response) {
  detail::unprepare_batch(preparer_, locks_, *request, response);
  return grpc::Status::OK;
}

}  // namespace tessera::agent
