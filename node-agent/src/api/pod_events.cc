#include "api/pod_events.h"

#include <string_view>

#include "model/finding.h"

namespace tessera::agent {

namespace v1 = tessera::node::v1;

namespace {

// What EnforcementHandler appends to a finding it acted on with a signal that was sent.
constexpr std::string_view kKilled = ": killed (SIGKILL)";

// kube-apiserver takes longer messages from core/v1 clients, but events.k8s.io/v1 caps a note at
// 1024 bytes and kubectl prints them on one line: the sentence that matters comes first.
std::string capped(std::string message) {
  constexpr size_t kMax = 1024;
  if (message.size() > kMax) message.resize(kMax);
  return message;
}

std::string field(const v1::Event& event, const char* name) {
  const auto it = event.fields().find(name);
  return it == event.fields().end() ? "" : it->second;
}

std::string where(const v1::Event& event) {
  return "share " + event.share() + (event.gpu_uuid().empty() ? "" : " on GPU " + event.gpu_uuid());
}

}  // namespace

std::optional<PodEventText> pod_event_text(const v1::Event& event) {
  if (event.kind() == v1::Event::ALLOCATION_DENIED) {
    if (event.share().empty()) return std::nullopt;
    // No figures: an identical message is what makes a repeat count up one Event.
    return PodEventText{kube::kEventTypeWarning, kReasonMemoryRefused,
                        "GPU memory allocation refused: it would take the " + where(event) +
                            " past its memory limit"};
  }
  if (event.kind() != v1::Event::FINDING || event.share().empty()) return std::nullopt;
  if (!std::string_view(event.message()).ends_with(kKilled)) return std::nullopt;
  const std::string kind = field(event, "finding");
  const std::string pid = std::to_string(event.host_pid());
  if (kind == finding_kind_name(FindingKind::kReclaimEviction))
    return PodEventText{
        kube::kEventTypeWarning, kReasonEvicted,
        capped("Process " + pid + " of the " + where(event) +
               " evicted to give back GPU memory its share borrowed: " + event.message())};
  for (FindingKind killed : {FindingKind::kOverMemoryLimit, FindingKind::kOverCoresLimit,
                             FindingKind::kUnshimmedProcess})
    if (kind == finding_kind_name(killed))
      return PodEventText{
          kube::kEventTypeWarning, kReasonQuotaKill,
          capped("Process " + pid + " of the " + where(event) + " killed: " + event.message())};
  return std::nullopt;
}

std::vector<kube::ObjectReference> share_event_objects(const Checkpoint& checkpoint,
                                                       const std::string& share) {
  for (const auto& [claim_uid, claim] : checkpoint) {
    bool holds = false;
    for (const ShareSpec& spec : claim.shares)
      holds = holds || spec.name() == share || spec.folder_name() == share;
    if (!holds) continue;
    std::vector<kube::ObjectReference> objects;
    for (const PodRef& pod : claim.pods)
      objects.push_back({"v1", "Pod", claim.namespace_name, pod.name, pod.uid, ""});
    if (objects.empty())
      objects.push_back(
          {"resource.k8s.io/v1", "ResourceClaim", claim.namespace_name, claim.name, claim_uid, ""});
    return objects;
  }
  return {};
}

std::optional<PodEventText> reclaim_event_text(const v1::Event& event) {
  const std::optional<PodEventText> evicted = pod_event_text(event);
  const std::string requester = field(event, "reclaimed_for");
  if (!evicted || evicted->reason != kReasonEvicted || requester.empty()) return std::nullopt;
  return PodEventText{kube::kEventTypeNormal, kReasonReclaim,
                      "GPU memory reclaimed for the share " + requester +
                          (event.gpu_uuid().empty() ? "" : " on GPU " + event.gpu_uuid()) +
                          ": process " + std::to_string(event.host_pid()) + " of the share " +
                          event.share() + ", which held memory above its request, evicted"};
}

void PodEvents::observe(const v1::Event& event) {
  if (const std::optional<PodEventText> text = pod_event_text(event))
    for (const kube::ObjectReference& object : objects_(event.share()))
      recorder_.record(object, text->type, text->reason, text->message);
  if (const std::optional<PodEventText> text = reclaim_event_text(event))
    for (const kube::ObjectReference& object : objects_(field(event, "reclaimed_for")))
      recorder_.record(object, text->type, text->reason, text->message);
}

}  // namespace tessera::agent
