#include "views/cluster_shares.h"

#include <cstdlib>
#include <ctime>
#include <filesystem>

#include "tessera/json_access.h"
#include "views/format.h"
#include "views/shares_view.h"

namespace tessera::cli {
namespace {

using json = nlohmann::json;
using ordered = nlohmann::ordered_json;

// The claim's name for errors: "<namespace>/<name>".
struct ClaimReader {
  std::string claim;
  Status wrong(const std::string& field, const json* value, const std::string& expected) const {
    return invalid_argument("ResourceClaim " + claim + ": " + field + " is " + json_shown(value) +
                            ", not " + expected);
  }
  // A member that must be a string when present; "" when absent.
  Result<std::string> optional_string(const json& object, const char* key,
                                      const std::string& field) const {
    const json* value = json_member(object, key);
    if (!value || value->is_null()) return std::string();
    if (!value->is_string()) return wrong(field, value, "a string");
    return value->get<std::string>();
  }
  Result<std::string> required_string(const json& object, const char* key,
                                      const std::string& field) const {
    const json* value = json_member(object, key);
    if (!value || !value->is_string() || value->get_ref<const std::string&>().empty())
      return wrong(field, value, "a non-empty string");
    return value->get<std::string>();
  }
};

// The node a node-local allocation is pinned to: the one term's matchFields metadata.name In
// [<node>], as kube-scheduler writes it for a device of a slice with spec.nodeName. "" otherwise.
std::string allocated_node(const json& allocation) {
  const json* terms = json_at(allocation, "/nodeSelector/nodeSelectorTerms");
  if (!terms || !terms->is_array() || terms->size() != 1) return "";
  const json* fields = json_member((*terms)[0], "matchFields");
  if (!fields || !fields->is_array()) return "";
  for (const json& requirement : *fields) {
    const json* values = json_member(requirement, "values");
    if (json_string(requirement, "key") == "metadata.name" &&
        json_string(requirement, "operator") == "In" && values && values->is_array() &&
        values->size() == 1 && (*values)[0].is_string())
      return (*values)[0].get<std::string>();
  }
  return "";
}

// "2026-11-30T00:00:00Z" as milliseconds since the epoch; -1 when it is not that shape.
int64_t rfc3339_unix_ms(const std::string& text) {
  std::tm utc{};
  const char* end = strptime(text.c_str(), "%Y-%m-%dT%H:%M:%S", &utc);
  if (!end || *end != 'Z' || end[1] != '\0') return -1;
  return static_cast<int64_t>(timegm(&utc)) * 1000;
}

std::string dash_if_empty(const std::string& text) {
  return text.empty() ? "-" : text;
}

ordered null_if_empty(const std::string& text) {
  return text.empty() ? ordered(nullptr) : ordered(text);
}

}  // namespace

Result<std::vector<ClusterShare>> cluster_shares_from_claims(const json& items,
                                                             const std::string& driver) {
  if (!items.is_array())
    return invalid_argument("the ResourceClaim list's items are " + json_shown(&items) +
                            ", not an array");
  std::vector<ClusterShare> shares;
  for (size_t i = 0; i < items.size(); ++i) {
    const json& claim = items[i];
    ClaimReader reader{"items[" + std::to_string(i) + "]"};
    const json* metadata = json_member(claim, "metadata");
    if (!metadata || !metadata->is_object()) return reader.wrong("metadata", metadata, "an object");
    TESSERA_ASSIGN_OR_RETURN(std::string name,
                             reader.required_string(*metadata, "name", "metadata.name"));
    TESSERA_ASSIGN_OR_RETURN(std::string namespace_name,
                             reader.required_string(*metadata, "namespace", "metadata.namespace"));
    reader.claim = namespace_name + "/" + name;
    const json* allocation = json_at(claim, "/status/allocation");
    if (!allocation || allocation->is_null()) continue;  // not allocated (yet)
    const json* results = json_at(*allocation, "/devices/results");
    if (!results || results->is_null()) continue;
    if (!results->is_array())
      return reader.wrong("status.allocation.devices.results", results, "an array");

    std::vector<ClusterConsumer> consumers;
    const json* reserved = json_at(claim, "/status/reservedFor");
    if (reserved && !reserved->is_null()) {
      if (!reserved->is_array()) return reader.wrong("status.reservedFor", reserved, "an array");
      for (size_t r = 0; r < reserved->size(); ++r) {
        const std::string field = "status.reservedFor[" + std::to_string(r) + "]";
        const json& entry = (*reserved)[r];
        if (!entry.is_object()) return reader.wrong(field, &entry, "an object");
        ClusterConsumer consumer;
        for (auto [key, target] :
             {std::pair{"resource", &consumer.resource}, std::pair{"name", &consumer.name},
              std::pair{"uid", &consumer.uid}}) {
          TESSERA_ASSIGN_OR_RETURN(std::string value,
                                   reader.required_string(entry, key, field + "." + key));
          *target = std::move(value);
        }
        consumers.push_back(std::move(consumer));
      }
    }

    for (size_t r = 0; r < results->size(); ++r) {
      const std::string field = "status.allocation.devices.results[" + std::to_string(r) + "]";
      const json& result = (*results)[r];
      if (!result.is_object()) return reader.wrong(field, &result, "an object");
      TESSERA_ASSIGN_OR_RETURN(std::string result_driver,
                               reader.required_string(result, "driver", field + ".driver"));
      if (result_driver != driver) continue;
      ClusterShare share;
      share.namespace_name = namespace_name;
      share.claim = name;
      share.claim_uid = json_string(*metadata, "uid");
      share.created = json_string(*metadata, "creationTimestamp");
      share.driver = result_driver;
      share.node = allocated_node(*allocation);
      share.reserved_for = consumers;
      for (auto [key, target] :
           {std::pair{"request", &share.request}, std::pair{"pool", &share.pool},
            std::pair{"device", &share.device}}) {
        TESSERA_ASSIGN_OR_RETURN(std::string value,
                                 reader.required_string(result, key, field + "." + key));
        *target = std::move(value);
      }
      TESSERA_ASSIGN_OR_RETURN(std::string share_id,
                               reader.optional_string(result, "shareID", field + ".shareID"));
      share.share_id = std::move(share_id);
      const json* consumed = json_member(result, "consumedCapacity");
      if (consumed && !consumed->is_null()) {
        if (!consumed->is_object())
          return reader.wrong(field + ".consumedCapacity", consumed, "an object");
        for (auto [key, target] :
             {std::pair{"memory", &share.memory}, std::pair{"cores", &share.cores}}) {
          TESSERA_ASSIGN_OR_RETURN(
              std::string value,
              reader.optional_string(*consumed, key, field + ".consumedCapacity." + key));
          *target = std::move(value);
        }
      }
      shares.push_back(std::move(share));
    }
  }
  return shares;
}

Result<json> list_resource_claims(kube::KubeClient& client, const std::string& namespace_name,
                                  int chunk_size) {
  json items = json::array();
  std::string continue_token;
  const std::string path = kube::resource_claims_path(namespace_name);
  do {
    std::string query;
    if (chunk_size > 0) query = "limit=" + std::to_string(chunk_size);
    if (!continue_token.empty())
      query += (query.empty() ? "" : "&") + ("continue=" + kube::url_escape(continue_token));
    TESSERA_ASSIGN_OR_RETURN(kube::ApiResponse answer,
                             client.request("GET", query.empty() ? path : path + "?" + query));
    const json list = json::parse(answer.body, nullptr, false);
    if (list.is_discarded() || !list.is_object())
      return invalid_argument("GET " + path + ": the answer is not a JSON object");
    const json* page = json_member(list, "items");
    if (page && page->is_null()) page = nullptr;  // an empty list may say "items": null
    if (page && !page->is_array())
      return invalid_argument("GET " + path + ": items is " + json_shown(page) + ", not an array");
    if (page)
      for (const json& item : *page) items.push_back(item);
    const std::string* next = json_string_at(list, "/metadata/continue");
    // A server that hands back the token it was given would page forever.
    if (next && !next->empty() && *next == continue_token)
      return internal_error("GET " + path + ": the server answered the same continue token again");
    continue_token = next ? *next : "";
  } while (!continue_token.empty());
  return items;
}

std::string render_cluster_table(const std::vector<ClusterShare>& shares, int64_t now_unix_ms,
                                 bool wide) {
  if (shares.empty()) return "";
  std::vector<std::vector<std::string>> rows = {
      {"NAMESPACE", "CLAIM", "NODE", "DEVICE", "MEMORY", "CORES", "PODS", "AGE"}};
  if (wide) rows[0].insert(rows[0].end(), {"REQUEST", "POOL", "SHARE-ID", "CLAIM-UID"});
  for (const ClusterShare& share : shares) {
    std::string pods;
    for (const ClusterConsumer& consumer : share.reserved_for)
      pods +=
          (pods.empty() ? "" : ",") +
          (consumer.resource == "pods" ? consumer.name : consumer.resource + "/" + consumer.name);
    const int64_t created = rfc3339_unix_ms(share.created);
    std::vector<std::string> row = {
        share.namespace_name,        share.claim,
        dash_if_empty(share.node),   share.device,
        dash_if_empty(share.memory), dash_if_empty(share.cores),
        dash_if_empty(pods),         created < 0 ? "<unknown>" : format_age(now_unix_ms - created)};
    if (wide)
      row.insert(row.end(), {share.request, share.pool, dash_if_empty(share.share_id),
                             dash_if_empty(share.claim_uid)});
    rows.push_back(std::move(row));
  }
  return render_columns(rows);
}

ordered cluster_shares_json(const std::vector<ClusterShare>& shares) {
  ordered list = ordered::array();
  for (const ClusterShare& share : shares) {
    ordered consumers = ordered::array();
    for (const ClusterConsumer& consumer : share.reserved_for)
      consumers.push_back(
          {{"resource", consumer.resource}, {"name", consumer.name}, {"uid", consumer.uid}});
    ordered entry = ordered::object();
    entry["namespace"] = share.namespace_name;
    entry["claim"] = share.claim;
    entry["claim_uid"] = null_if_empty(share.claim_uid);
    entry["node"] = null_if_empty(share.node);
    entry["request"] = share.request;
    entry["driver"] = share.driver;
    entry["pool"] = share.pool;
    entry["device"] = share.device;
    entry["share_id"] = null_if_empty(share.share_id);
    entry["memory"] = null_if_empty(share.memory);
    entry["cores"] = null_if_empty(share.cores);
    entry["reserved_for"] = std::move(consumers);
    entry["created"] = null_if_empty(share.created);
    list.push_back(std::move(entry));
  }
  ordered document = ordered::object();
  document["shares"] = std::move(list);
  return document;
}

Result<std::string> render_cluster_shares(const std::vector<ClusterShare>& shares,
                                          const std::string& format, int64_t now_unix_ms) {
  if (format == "table" || format == "wide")
    return render_cluster_table(shares, now_unix_ms, format == "wide");
  if (format == "json") return cluster_shares_json(shares).dump(2) + "\n";
  if (format == "yaml") return json_to_yaml(cluster_shares_json(shares));
  return invalid_argument("-o '" + format + "' is not table, wide, json or yaml");
}

Result<kube::KubeConnection> cluster_connection(const std::string& kubeconfig_flag) {
  if (!kubeconfig_flag.empty()) return kube::kubeconfig_connection(kubeconfig_flag);
  if (const char* list = std::getenv("KUBECONFIG"); list && *list) {
    // kubectl merges the files; the first one that exists is what is read here.
    std::string paths = list;
    size_t start = 0;
    while (start <= paths.size()) {
      const size_t end = std::min(paths.find(':', start), paths.size());
      const std::string path = paths.substr(start, end - start);
      if (!path.empty() && std::filesystem::exists(path)) return kube::kubeconfig_connection(path);
      start = end + 1;
    }
    return not_found("no file of $KUBECONFIG (" + paths + ") exists");
  }
  if (const char* home = std::getenv("HOME"); home && *home) {
    const std::string path = std::string(home) + "/.kube/config";
    if (std::filesystem::exists(path)) return kube::kubeconfig_connection(path);
  }
  Result<kube::KubeConnection> in_cluster = kube::in_cluster_connection();
  if (!in_cluster.is_ok())
    return in_cluster.status().with_context(
        "no kubeconfig (--kubeconfig, $KUBECONFIG, ~/.kube/config) and not in a pod");
  return in_cluster;
}

}  // namespace tessera::cli
