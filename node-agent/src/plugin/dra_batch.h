// The batch logic both DRA versions share (internal to plugin/): every claim of a kubelet request
// becomes one ClaimPreparer call, in request order, and every requested claim UID gets an entry
// in the response; a failed claim carries its error there and never fails the batch (a non-OK
// gRPC status would fail every claim of it). The v1 and v1beta1 messages are distinct generated
// types of the same shape, hence templates; `fill_device` is where the versions differ.
#pragma once

#include <exception>
#include <string>

#include "model/claim_locks.h"
#include "model/claim_preparer.h"

namespace tessera::agent::detail {

template <class Claim>
ClaimRef to_claim_ref(const Claim& claim) {
  return ClaimRef{claim.namespace_(), claim.uid(), claim.name()};
}

// The preparer must not throw; if it does anyway, the claim fails and the agent lives on.
inline PrepareResult guarded_prepare(ClaimPreparer& preparer, const ClaimRef& claim) {
  try {
    return preparer.prepare(claim);
  } catch (const std::exception& e) {
    return PrepareResult{{}, std::string("internal error preparing the claim: ") + e.what()};
  } catch (...) {
    return PrepareResult{{}, "internal error preparing the claim"};
  }
}

inline std::string guarded_unprepare(ClaimPreparer& preparer, const ClaimRef& claim) {
  try {
    return preparer.unprepare(claim);
  } catch (const std::exception& e) {
    return std::string("internal error unpreparing the claim: ") + e.what();
  } catch (...) {
    return "internal error unpreparing the claim";
  }
}

inline constexpr const char* kNoUidError = "claim has no uid";

// Calls `handle(claim_ref, entry)` once per claim UID of the request, in request order, holding
// the claim's lock (claim_locks.h). A claim UID repeated within one batch is handled once: the map
// holds one entry per UID anyway. A claim without a UID gets kNoUidError and no call.
template <class Request, class Response, class Handle>
void for_each_claim(ClaimLocks& locks, const Request& request, Response* response, Handle handle) {
  auto& entries = *response->mutable_claims();
  for (const auto& claim : request.claims()) {
    if (entries.find(claim.uid()) != entries.end()) continue;
    auto& entry = entries[claim.uid()];
    if (claim.uid().empty()) {
      entry.set_error(kNoUidError);
      continue;
    }
    ClaimLocks::Guard guard = locks.lock(claim.uid());
    handle(to_claim_ref(claim), entry);
  }
}

template <class Request, class Response, class FillDevice>
void prepare_batch(ClaimPreparer& preparer, ClaimLocks& locks, const Request& request,
                   Response* response, FillDevice fill_device) {
  for_each_claim(locks, request, response, [&](const ClaimRef& claim, auto& entry) {
    PrepareResult result = guarded_prepare(preparer, claim);
    if (!result.error.empty()) {
      entry.set_error(result.error);  // a failed claim lists no devices
      return;
    }
    for (const PreparedDevice& device : result.devices) fill_device(device, entry.add_devices());
  });
}

template <class Request, class Response>
void unprepare_batch(ClaimPreparer& preparer, ClaimLocks& locks, const Request& request,
                     Response* response) {
  for_each_claim(locks, request, response, [&](const ClaimRef& claim, auto& entry) {
    entry.set_error(guarded_unprepare(preparer, claim));
  });
}

// The fields both versions have.
template <class Device>
void fill_common_device_fields(const PreparedDevice& from, Device* to) {
  for (const std::string& name : from.request_names) to->add_request_names(name);
  to->set_pool_name(from.pool_name);
  to->set_device_name(from.device_name);
  for (const std::string& id : from.cdi_device_ids) to->add_cdi_device_ids(id);
}

}  // namespace tessera::agent::detail
