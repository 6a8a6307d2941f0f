#include "kube/template_writer.h"

#include <utility>

#include "tessera/json_access.h"

namespace tessera::webhook {

using nlohmann::json;

TemplateWriter::TemplateWriter(kube::KubeClient& api, std::chrono::seconds ttl, SteadyClock clock)
    : api_(api), ttl_(ttl), clock_(std::move(clock)) {}

Status TemplateWriter::ensure(const json& claim_template) {
  const std::string* namespace_name = json_string_at(claim_template, "/metadata/namespace");
  const std::string* template_name = json_string_at(claim_template, "/metadata/name");
  const json* spec = json_member(claim_template, "spec");
  if (!namespace_name || namespace_name->empty() || !template_name || template_name->empty() ||
      !spec)
    return invalid_argument("not a ResourceClaimTemplate to create (metadata.namespace " +
                            json_shown(json_at(claim_template, "/metadata/namespace")) +
                            ", metadata.name " +
                            json_shown(json_at(claim_template, "/metadata/name")) + ", spec " +
                            (spec ? "set" : "missing") + ")");
  const std::string& name = *template_name;
  const std::string key = *namespace_name + "/" + name;
  {
    std::lock_guard lock(mutex_);
    if (const auto it = known_.find(key); it != known_.end() && clock_() < it->second) {
      ++counts_.cached;
      return Status::ok();
    }
  }
  const std::string collection =
      "/apis/resource.k8s.io/v1/namespaces/" + *namespace_name + "/resourceclaimtemplates";
  const Result<kube::ApiResponse> created = api_.request("POST", collection, claim_template.dump());
  Status result;
  bool existed = false;
  if (!created.is_ok() && created.status().code() == StatusCode::kAlreadyExists) {
    // Someone (another replica, an earlier pod) made it: it must be the same request.
    const Result<kube::ApiResponse> current = api_.request("GET", collection + "/" + name);
    if (!current.is_ok()) {
      result = unavailable(current.status().message());
    } else {
      const json existing = json::parse(current->body, nullptr, /*allow_exceptions=*/false);
      const json* existing_spec = json_member(existing, "spec");
      if (!existing_spec || *existing_spec != *spec)
        result = already_exists("ResourceClaimTemplate " + key +
                                " exists with another spec; delete it or rename it");
      existed = result.is_ok();
    }
  } else if (!created.is_ok()) {
    result = unavailable(created.status().message());
  }
  std::lock_guard lock(mutex_);
  if (!result.is_ok()) {
    ++counts_.failed;
    return result;
  }
  ++(existed ? counts_.existed : counts_.created);
  known_[key] = clock_() + ttl_;
  return Status::ok();
}

TemplateWriter::Counts TemplateWriter::counts() const {
  std::lock_guard lock(mutex_);
  return counts_;
}

}  // namespace tessera::webhook
