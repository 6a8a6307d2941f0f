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
#include "tessera/status.h"

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
    return internal_error(std::string("internal error preparing the claim: ") + e.what());
  } catch (...) {
    return internal_error("internal error preparing the claim");
  }
}

inline Status guarded_unprepare(ClaimPreparer& preparer, const ClaimRef& claim) {
  try {
    return preparer.unprepare(claim);
  } catch (const std::exception& e) {
    return internal_error(std::string("internal error unpreparing the claim: ") + e.what());
  } catch (...) {
    return internal_error("internal error unpreparing the claim");
  }
}

// The per-claim `error` kubelet sees for a prepare: "" for ok, else the message (kubelet retries
// any failed claim and shows the text in the pod's events; it has no field for the code). A
// failed Status without a message still fails the claim: its code's name stands in, since an
// empty error means success to kubelet.
inline std::string prepare_claim_error(const Status& status) {
  if (status.is_ok()) return "";
  if (status.message().empty()) return std::string(status_code_name(status.code()));
  return status.message();
}

// The same for an unprepare, where kNotFound (nothing of the claim is on this node) is what
// kubelet asked for: unprepare is idempotent, so it answers success.
inline std::string unprepare_claim_error(const Status& status) {
  if (status.code() == StatusCode::kNotFound) return "";
  return prepare_claim_error(status);
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
    if (!result.is_ok()) {
      entry.set_error(prepare_claim_error(result.status()));  // a failed claim lists no devices
      return;
    }
    for (const PreparedDevice& device : *result) fill_device(device, entry.add_devices());
  });
}

template <class Request, class Response>
void unprepare_batch(ClaimPreparer& preparer, ClaimLocks& locks, const Request& request,
                     Response* response) {
  for_each_claim(locks, request, response, [&](const ClaimRef& claim, auto& entry) {
    entry.set_error(unprepare_claim_error(guarded_unprepare(preparer, claim)));
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
