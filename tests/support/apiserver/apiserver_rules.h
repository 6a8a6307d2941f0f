// kube-apiserver's validation of a resource.k8s.io/v1 ResourceSlice, ported to C++ for the test
// API server (fake_api_server.h), so that a slice the real API server refuses fails our tests
// with the message the real one returns.
//
// Ported from the Kubernetes source (kubernetes/kubernetes):
//   pkg/apis/resource/validation/validation.go: ValidateResourceSlice, ValidateResourceSliceUpdate,
//     validateResourceSliceSpec, validatePoolName, validateResourcePool, validateNodeName,
//     validateDevice, validateDeviceAttribute, validateDeviceAttributeStringValue,
//     validateDeviceAttributeVersionValue (semverRe), validateMultiAllocatableDeviceCapacity,
//     validateSingleAllocatableDeviceCapacity, validateRequestPolicy, validateValidRequestValues,
//     validateRequestPolicyValidValues, validateRequestPolicyRange,
//     validateRequestPolicyRangeStep, validateInt64Range, validateQualifiedName,
//     validateCIdentifier, validateDeviceTaint, validateLabelValue, validateMap (key paths,
//     truncateIfTooLong), validateSlice / validateSet (size short-circuit, duplicates);
//     partitionable devices, read at 009801d930e2e3c8b3671a3ec28e31a2f64865ac:
//     validateResourceSliceSpec's "only one of `sharedCounters` or `devices`" and its
//     validateSet of sharedCounters (ResourceSliceMaxCounterSets 8, unique names),
//     validateCounterSet (name required, a DNS label; counters required, validateMap with
//     ResourceSliceMaxCountersPerCounterSet 32, keys DNS labels reported at the map's path),
//     validateDevice's validateSet of consumesCounters
//     (ResourceSliceMaxDeviceCounterConsumptionsPerDevice 2, unique counterSet),
//     validateDeviceCounterConsumption (counterSet required, a DNS label; counters required, at
//     most ResourceSliceMaxCountersPerDeviceCounterConsumption 32), validateDeviceCounter (any
//     quantity); the limits as pkg/apis/resource/types.go declares them from 1.35 on. Which
//     counter set a device names, and whether it exists, is the scheduler's check (an invalid
//     pool, tests/support/allocator/allocator.h), not the API server's;
//   pkg/apis/resource/v1/defaults.go: SetDefaults_DeviceTaint (timeAdded = now, whole seconds);
//   pkg/registry/resource/resourceslice/strategy.go: dropDisabledDRADeviceTaintsFields;
//   pkg/apis/resource/types.go: ResourceSliceMaxDevices (128),
//     ResourceSliceMaxDevicesWithAdvancedFeatures (64 once any device has a taint, consumes
//     counters, or has a list-type attribute; v1.36.0 types.go L264; 1.34 and 1.35 call it
//     ResourceSliceMaxDevicesWithTaintsOrConsumesCounters, taints and counters only),
//     ResourceSliceMaxAttributesAndCapacities-
//     PerDevice (32), DeviceMaxDomainLength (63), DeviceMaxIDLength (32),
//     DeviceAttributeMaxValueLength (64), PoolNameMaxLength (253), DeviceTaintsMaxLength (16),
//     CapacityRequestPolicyDiscreteMaxOptions (10);
//   pkg/apis/core/validation/validation.go: ValidateCSIDriverName (the driver name and the domain
//     of a qualified name), ValidateDNS1123Label, ValidateDNS1123Subdomain;
//   staging/src/k8s.io/apimachinery/pkg/api/validation/objectmeta.go: ValidateObjectMetaAccessor
//     (metadata.name), NameIsDNSSubdomain;
//   staging/src/k8s.io/apimachinery/pkg/util/validation/validation.go: IsDNS1123Label,
//     IsDNS1123Subdomain, MaxLenError, RegexError;
//   staging/src/k8s.io/apimachinery/pkg/api/validate/content/{kube,identifier,errors}.go:
//     IsLabelKey (= IsQualifiedName, taint keys), IsLabelValue, IsCIdentifier;
//   staging/src/k8s.io/apimachinery/pkg/apis/meta/v1/validation/validation.go: ValidateLabelName;
//   staging/src/k8s.io/apimachinery/pkg/util/validation/field/errors.go: Error.Error / ErrorBody,
//     Invalid, Required, Forbidden, TooLong, TooMany, Duplicate, NotSupported, ToAggregate;
//   staging/src/k8s.io/apimachinery/pkg/api/errors/errors.go: NewInvalid (the 422 Status);
//   staging/src/k8s.io/apimachinery/pkg/api/resource/{quantity,amount}.go: ParseQuantity's
//     format rule, CanonicalizeBytes (how a Quantity prints in a message).
//
// Feature gates as kube-apiserver 1.36 has them by default (DRAConsumableCapacity and
// DRADeviceTaints on, DRAFractionalCapacityRange and list-type attributes off). Differences, all
// outside what the agent publishes: map entries are checked in key order (Go's map order is
// random, so a real server lists several errors of one map in any order); node selectors are
// only counted, not validated; quantities must be whole numbers (a fraction or a milli value is
// answered 400 by this server, not judged); the value printed for "exactly one value must be
// specified" with two values set is Go's %#v of a struct with pointers, which cannot be matched.
#pragma once

#include <cstdint>
#include <ctime>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tessera::agent::testing::apiserver {

// One field.Error. `value` is the bad value already printed as Go prints it (%q for strings,
// %v for numbers and bools), or empty when the error type prints none.
struct FieldError {
  std::string type;  // "FieldValueInvalid", "FieldValueRequired", ...
  std::string field;
  std::optional<std::string> value;
  std::string detail;

  std::string body() const;   // ErrorBody(): "Invalid value: \"x\": detail"
  std::string error() const;  // Error(): "<field>: <body>"
};
using ErrorList = std::vector<FieldError>;

// Go's %q for the strings we meet (ASCII; other bytes are passed through as UTF-8).
std::string go_quote(const std::string& text);

// ToAggregate().Error(): one error alone, else "[e1, e2]", duplicates dropped.
std::string aggregate(const ErrorList& errors);

// A Quantity as the API server holds one: an integer value and the format it was written in.
enum class QuantityFormat { kDecimalSI, kBinarySI, kDecimalExponent };
struct Quantity {
  int64_t value = 0;
  QuantityFormat format = QuantityFormat::kDecimalSI;
  std::string str() const;  // Quantity.String(): canonical ("256Mi", "150755098624", "1k")
};
// A quantity as JSON carries one (string or number); nullopt when it is not a whole-number
// quantity this port models (see above).
std::optional<Quantity> parse_quantity(const nlohmann::json& value);

// The name rules, returning the messages the API server would (empty = valid).
std::vector<std::string> is_dns1123_label(const std::string& value);
std::vector<std::string> is_dns1123_subdomain(const std::string& value);
std::vector<std::string> is_label_key(const std::string& value);  // = IsQualifiedName
std::vector<std::string> is_label_value(const std::string& value);
std::vector<std::string> is_c_identifier(const std::string& value);

// ValidateResourceSlice (create) and ValidateResourceSliceUpdate (`old` = the stored object).
ErrorList validate_resource_slice(const nlohmann::json& slice);
ErrorList validate_resource_slice_update(const nlohmann::json& slice, const nlohmann::json& old);

// The defaulting the API server does as it decodes a write: a device taint without timeAdded gets
// `now` (RFC 3339, UTC, whole seconds). The stored object keeps it; a client that sends the taint
// back with that time keeps it, one that leaves it out gets a new time.
void default_resource_slice(nlohmann::json& slice, std::time_t now);
std::string rfc3339_utc(std::time_t when);
// dropDisabledDRADeviceTaintsFields (pkg/registry/resource/resourceslice/strategy.go), for a
// server whose DRADeviceTaints gate is off: the devices' taints are dropped from a write, unless
// the stored object (`old`) already has some.
void drop_disabled_device_taints(nlohmann::json& slice, const nlohmann::json* old);

// What the API server answers a create or update: nullopt = accepted, else the HTTP code and its
// Status body (400 when the body does not decode, 422 with NewInvalid's Status when invalid).
struct Refusal {
  int code = 0;
  nlohmann::json status;
};
std::optional<Refusal> check_resource_slice_write(const nlohmann::json& slice,
                                                  const nlohmann::json* old);

}  // namespace tessera::agent::testing::apiserver
