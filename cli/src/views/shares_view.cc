#include "views/shares_view.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/util/json_util.h>
#include <yaml-cpp/yaml.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "exit_codes.h"
#include "tessera/local_shares.h"
#include "tessera/vgpu_config/driver_name.h"
#include "views/cluster_shares.h"
#include "views/device_place.h"
#include "views/format.h"

namespace tessera::cli {
namespace {

namespace v1 = tessera::node::v1;
namespace pb = google::protobuf;
using json = nlohmann::ordered_json;

// Share names and claims longer than this are cut in the table (the whole name is in -o json).
constexpr int kMaxNameColumn = 40;

std::string dash_if_empty(const std::string& text) {
  return text.empty() ? "-" : text;
}

// The GPU's index when the node lists it ("0/gi1" inside a MIG instance), else the start of the
// device's UUID.
std::string gpu_column(const DevicePlace& place, const v1::ShareDevice& device) {
  if (place.gpu && (place.instance || !place.gpu->name().empty())) return place_label(place);
  return device.gpu_uuid().substr(0, 12);
}

// Used/limit, or used/request..limit for a share that may borrow above its request; "?" for the
// used figure of a share that could not be read (unknown, not 0).
std::string memory_column(const v1::Share& share, const v1::ShareDevice& device) {
  const std::string used =
      share.read_error().empty() ? format_bytes(device.memory_used_bytes()) : std::string("?");
  if (device.memory_unlimited()) return used + "/-";
  const std::string limit = format_bytes(device.memory_limit_bytes());
  if (device.has_memory_request_bytes() &&
      device.memory_request_bytes() < device.memory_limit_bytes())
    return used + "/" + format_bytes(device.memory_request_bytes()) + ".." + limit;
  return used + "/" + limit;
}

std::string cores_column(const v1::ShareDevice& device) {
  std::string text = std::to_string(device.cores_request_percent()) + "%";
  if (device.cores_limit_percent() > device.cores_request_percent())
    text += "/" + std::to_string(device.cores_limit_percent()) + "%";
  return text;
}

json field_to_json(const pb::Message& message, const pb::FieldDescriptor& field,
                   const pb::Reflection& reflection, int index) {
  const bool repeated = field.is_repeated();
  switch (field.cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_INT32:
      return repeated ? reflection.GetRepeatedInt32(message, &field, index)
                      : reflection.GetInt32(message, &field);
    case pb::FieldDescriptor::CPPTYPE_INT64:
      return repeated ? reflection.GetRepeatedInt64(message, &field, index)
                      : reflection.GetInt64(message, &field);
    case pb::FieldDescriptor::CPPTYPE_UINT32:
      return repeated ? reflection.GetRepeatedUInt32(message, &field, index)
                      : reflection.GetUInt32(message, &field);
    case pb::FieldDescriptor::CPPTYPE_UINT64:
      return repeated ? reflection.GetRepeatedUInt64(message, &field, index)
                      : reflection.GetUInt64(message, &field);
    case pb::FieldDescriptor::CPPTYPE_DOUBLE:
      return repeated ? reflection.GetRepeatedDouble(message, &field, index)
                      : reflection.GetDouble(message, &field);
    case pb::FieldDescriptor::CPPTYPE_FLOAT:
      return repeated ? reflection.GetRepeatedFloat(message, &field, index)
                      : reflection.GetFloat(message, &field);
    case pb::FieldDescriptor::CPPTYPE_BOOL:
      return repeated ? reflection.GetRepeatedBool(message, &field, index)
                      : reflection.GetBool(message, &field);
    case pb::FieldDescriptor::CPPTYPE_ENUM:
      return repeated ? reflection.GetRepeatedEnum(message, &field, index)->name()
                      : reflection.GetEnum(message, &field)->name();
    case pb::FieldDescriptor::CPPTYPE_STRING:
      return repeated ? reflection.GetRepeatedString(message, &field, index)
                      : reflection.GetString(message, &field);
    case pb::FieldDescriptor::CPPTYPE_MESSAGE:
      return message_to_json(repeated ? reflection.GetRepeatedMessage(message, &field, index)
                                      : reflection.GetMessage(message, &field));
  }
  return nullptr;
}

// How YAML reads a plain (unquoted) scalar: null, bool, integer, float or string.
json resolve_plain_scalar(const std::string& text) {
  if (text.empty() || text == "~" || text == "null" || text == "Null" || text == "NULL")
    return nullptr;
  if (text == "true" || text == "True" || text == "TRUE") return true;
  if (text == "false" || text == "False" || text == "FALSE") return false;
  const char* begin = text.c_str();
  char* end = nullptr;
  const bool digits_only = text.find_first_not_of("+-0123456789") == std::string::npos;
  if (digits_only) {
    errno = 0;
    if (text[0] != '-') {
      const unsigned long long value = std::strtoull(begin, &end, 10);
      if (*end == '\0' && errno == 0) return value;
    } else {
      const long long value = std::strtoll(begin, &end, 10);
      if (*end == '\0' && errno == 0) return value;
    }
  }
  if (text.find_first_of("0123456789") != std::string::npos &&
      text.find_first_not_of("+-.0123456789eE") == std::string::npos) {
    const double value = std::strtod(begin, &end);
    if (*end == '\0') return value;
  }
  if (text == ".inf" || text == ".nan" || text == "-.inf") return std::strtod(begin + 1, &end);
  return text;
}

void emit_yaml(YAML::Emitter& out, const json& value) {
  switch (value.type()) {
    case json::value_t::object:
      if (value.empty()) {
        out << YAML::Flow << YAML::BeginMap << YAML::EndMap;
        return;
      }
      out << YAML::BeginMap;
      for (const auto& [key, item] : value.items()) {
        out << YAML::Key << key << YAML::Value;
        emit_yaml(out, item);
      }
      out << YAML::EndMap;
      return;
    case json::value_t::array:
      if (value.empty()) {
        out << YAML::Flow << YAML::BeginSeq << YAML::EndSeq;
        return;
      }
      out << YAML::BeginSeq;
      for (const json& item : value) emit_yaml(out, item);
      out << YAML::EndSeq;
      return;
    case json::value_t::string: {
      const std::string& text = value.get_ref<const std::string&>();
      if (!resolve_plain_scalar(text).is_string()) {
        out << YAML::DoubleQuoted << text;
      } else {
        out << text;
      }
      return;
    }
    case json::value_t::null:
      out << YAML::Null;
      return;
    default:
      // Numbers and booleans as JSON writes them (doubles: the shortest text that reads back).
      out << value.dump();
      return;
  }
}

json yaml_node_to_json(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      json object = json::object();
      for (const auto& entry : node)
        object[entry.first.as<std::string>()] = yaml_node_to_json(entry.second);
      return object;
    }
    case YAML::NodeType::Sequence: {
      json array = json::array();
      for (const auto& item : node) array.push_back(yaml_node_to_json(item));
      return array;
    }
    case YAML::NodeType::Scalar:
      // "!" is the tag of a quoted scalar: always a string.
      if (node.Tag() == "!") return node.Scalar();
      return resolve_plain_scalar(node.Scalar());
    default:
      return nullptr;
  }
}

int64_t system_unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::string render_columns(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    widths.resize(std::max(widths.size(), row.size()), 0);
    for (size_t c = 0; c < row.size(); ++c) widths[c] = std::max(widths[c], row[c].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      line += row[c];
      if (c + 1 < row.size()) line += std::string(widths[c] - row[c].size() + 3, ' ');
    }
    out += line + "\n";
  }
  return out;
}

std::string render_shares_table(const v1::ListSharesResponse& node, int64_t now_unix_ms,
                                bool wide) {
  if (node.shares().empty()) return "";
  // A PROFILE column after GPU only where a share sits inside a MIG instance: a node without
  // MIG lists its shares as before.
  bool inside_mig = false;
  for (const v1::Share& share : node.shares())
    for (const v1::ShareDevice& device : share.devices())
      inside_mig = inside_mig || find_device_place(node, device).instance != nullptr;
  std::vector<std::vector<std::string>> rows = {
      {"NAMESPACE", "CLAIM", "SHARE", "GPU", "MEMORY", "CORES", "CLASS", "PROCESSES", "AGE"}};
  if (inside_mig) rows[0].insert(rows[0].begin() + 4, "PROFILE");
  if (wide) rows[0].insert(rows[0].end(), {"NODE", "POD", "GPU-UUID", "PRIORITY", "SOURCE"});
  if (wide && inside_mig) rows[0].insert(rows[0].end(), {"MIG-DEVICE", "MIG-UUID"});
  // Wide lines are for reading whole names: nothing is cut.
  const int name_width = wide ? 1 << 20 : kMaxNameColumn;
  for (const v1::Share& share : node.shares()) {
    const std::string age = share.prepared_unix_ms() > 0
                                ? format_age(now_unix_ms - share.prepared_unix_ms())
                                : std::string("<unknown>");
    const std::vector<std::string> common = {fit(dash_if_empty(share.namespace_()), name_width),
                                             fit(dash_if_empty(share.claim()), name_width),
                                             fit(share.name(), name_width)};
    const std::string processes =
        share.read_error().empty() ? std::to_string(share.processes_size()) : std::string("?");
    const std::string qos = dash_if_empty(share.qos_class());
    // GPU-UUID is the physical GPU's; inside a MIG instance, MIG-DEVICE and MIG-UUID name it.
    const auto add_row = [&](std::vector<std::string> row, const v1::ShareDevice* device) {
      const DevicePlace place = device ? find_device_place(node, *device) : DevicePlace{};
      if (inside_mig) row.insert(row.begin() + 4, place.instance ? place.instance->profile() : "-");
      const std::string gpu_uuid =
          place.instance ? place.gpu->uuid() : (device ? device->gpu_uuid() : "");
      if (wide)
        row.insert(row.end(),
                   {dash_if_empty(node.node()), dash_if_empty(share.pod()), dash_if_empty(gpu_uuid),
                    dash_if_empty(share.priority()), dash_if_empty(share.source())});
      if (wide && inside_mig)
        row.insert(row.end(), {place.instance ? place.instance->device() : "-",
                               place.instance ? dash_if_empty(place.instance->uuid()) : "-"});
      rows.push_back(std::move(row));
    };
    if (share.devices().empty()) {
      add_row({common[0], common[1], common[2], "-", "-", "-", qos, processes, age}, nullptr);
      continue;
    }
    for (const v1::ShareDevice& device : share.devices()) {
      add_row({common[0], common[1], common[2], gpu_column(find_device_place(node, device), device),
               memory_column(share, device), cores_column(device), qos, processes, age},
              &device);
    }
  }
  return render_columns(rows);
}

std::vector<std::string> unread_share_warnings(const v1::ListSharesResponse& node) {
  std::vector<std::string> warnings;
  for (const v1::Share& share : node.shares())
    if (!share.read_error().empty())
      warnings.push_back("share " + share.name() + ": " + share.read_error() +
                         " (its usage is unknown)");
  return warnings;
}

json message_to_json(const pb::Message& message) {
  json object = json::object();
  const pb::Descriptor& descriptor = *message.GetDescriptor();
  const pb::Reflection& reflection = *message.GetReflection();
  for (int f = 0; f < descriptor.field_count(); ++f) {
    const pb::FieldDescriptor& field = *descriptor.field(f);
    if (field.is_map()) {
      json map = json::object();
      for (int i = 0; i < reflection.FieldSize(message, &field); ++i) {
        const pb::Message& entry = reflection.GetRepeatedMessage(message, &field, i);
        const json key =
            field_to_json(entry, *entry.GetDescriptor()->map_key(), *entry.GetReflection(), -1);
        map[key.is_string() ? key.get<std::string>() : key.dump()] =
            field_to_json(entry, *entry.GetDescriptor()->map_value(), *entry.GetReflection(), -1);
      }
      object[field.name()] = std::move(map);
    } else if (field.is_repeated()) {
      json array = json::array();
      for (int i = 0; i < reflection.FieldSize(message, &field); ++i)
        array.push_back(field_to_json(message, field, reflection, i));
      object[field.name()] = std::move(array);
    } else if (field.has_presence() && field.cpp_type() != pb::FieldDescriptor::CPPTYPE_MESSAGE &&
               !reflection.HasField(message, &field)) {
      object[field.name()] = nullptr;  // an optional value not known, never its default
    } else {
      object[field.name()] = field_to_json(message, field, reflection, -1);
    }
  }
  return object;
}

Status message_from_json(const json& value, pb::Message& message) {
  message.Clear();
  const pb::util::Status parsed =
      pb::util::JsonStringToMessage(value.dump(), &message, pb::util::JsonParseOptions());
  if (!parsed.ok())
    return invalid_argument("not a " + message.GetTypeName() + ": " +
                            std::string(parsed.message()));
  return Status::ok();
}

std::string json_to_yaml(const json& value) {
  YAML::Emitter out;
  emit_yaml(out, value);
  return std::string(out.c_str()) + "\n";
}

Result<json> yaml_to_json(const std::string& yaml) {
  try {
    return yaml_node_to_json(YAML::Load(yaml));
  } catch (const YAML::Exception& error) {
    return invalid_argument(std::string("not YAML: ") + error.what());
  }
}

Result<std::string> render_shares(const Snapshot& snapshot, const std::string& format,
                                  int64_t now_unix_ms) {
  if (format == "table" || format == "wide")
    return render_shares_table(snapshot.node, now_unix_ms, format == "wide");
  if (format == "json") return message_to_json(snapshot.node).dump(2) + "\n";
  if (format == "yaml") return json_to_yaml(message_to_json(snapshot.node));
  return invalid_argument("-o '" + format + "' is not table, wide, json or yaml");
}

namespace {

// `tessera shares --cluster`: every node's shares, from the API server.
int run_cluster_shares(const std::string& kubeconfig, const NamespaceFilter& namespaces,
                       int chunk_size, const std::string& output) {
  Result<kube::KubeConnection> connection = cluster_connection(kubeconfig);
  if (!connection.is_ok()) {
    std::fprintf(stderr, "tessera shares: %s\n", connection.status().message().c_str());
    return kExitFailed;
  }
  kube::RetryPolicy retry;
  retry.attempts = 3;
  retry.timeout = std::chrono::seconds(15);
  kube::HttpKubeClient client(std::move(connection).value(), retry);
  const Result<nlohmann::json> claims = list_resource_claims(client, namespaces.name, chunk_size);
  if (!claims.is_ok()) {
    std::fprintf(stderr, "tessera shares: listing ResourceClaims: %s\n",
                 claims.status().message().c_str());
    return kExitFailed;
  }
  const Result<std::vector<ClusterShare>> shares =
      cluster_shares_from_claims(*claims, vgpu_config::kDriverName);
  if (!shares.is_ok()) {
    std::fprintf(stderr, "tessera shares: %s\n", shares.status().message().c_str());
    return kExitFailed;
  }
  const Result<std::string> text = render_cluster_shares(*shares, output, system_unix_ms());
  if (!text.is_ok()) {
    std::fprintf(stderr, "tessera shares: %s\n", text.status().message().c_str());
    return kExitFailed;
  }
  if (text->empty()) {
    std::fprintf(
        stderr, "No shares found in %s.\n",
        namespaces.name.empty() ? "the cluster" : ("namespace " + namespaces.name).c_str());
    return kExitOk;
  }
  std::fputs(text->c_str(), stdout);
  return kExitOk;
}

}  // namespace

void add_shares_command(CLI::App& app) {
  struct Options {
    std::string output = "table";
    SourceOptions source;
    bool cluster = false;
    std::string kubeconfig;
    int chunk_size = 500;
  };
  auto options = std::make_shared<Options>();
  CLI::App* command = app.add_subcommand(
      "shares",
      "List the GPU shares on this node (the agent's, or the `tessera run` shares here), or with "
      "--cluster those of every node, from the API server");
  command->add_option("-o,--output", options->output, "Output format: table, wide, json or yaml")
      ->check(CLI::IsMember({"table", "wide", "json", "yaml"}));
  add_source_options(*command, options->source);
  CLI::Option* cluster = command->add_flag(
      "--cluster", options->cluster,
      "Every node's shares: the ResourceClaims allocated by Tessera's driver, from the API server");
  command
      ->add_option("--kubeconfig", options->kubeconfig,
                   "With --cluster: the kubeconfig (default: $KUBECONFIG, ~/.kube/config, else "
                   "the pod's service account)")
      ->needs(cluster);
  command
      ->add_option("--chunk-size", options->chunk_size,
                   "With --cluster: ResourceClaims per list request (0: all in one)")
      ->check(CLI::NonNegativeNumber)
      ->needs(cluster);
  for (const char* node_only : {"--local", "--socket", "--share-root", "--share-dir"})
    cluster->excludes(command->get_option(node_only));
  // Exit statuses by std::exit: main.cc reports anything CLI11 throws as a usage error.
  command->callback([options] {
    if (options->cluster)
      std::exit(run_cluster_shares(options->kubeconfig, options->source.namespaces,
                                   options->chunk_size, options->output));
    const Result<Snapshot> snapshot =
        make_snapshot_source(options->source, default_agent_lister())();
    if (!snapshot.is_ok()) {
      std::fprintf(stderr, "tessera shares: %s\n", snapshot.status().message().c_str());
      std::exit(kExitFailed);
    }
    // Table or not, on stderr (as kubectl's warnings): stdout stays what -o asked for.
    for (const std::string& warning : unread_share_warnings(snapshot->node))
      std::fprintf(stderr, "tessera shares: warning: %s\n", warning.c_str());
    const Result<std::string> text = render_shares(*snapshot, options->output, system_unix_ms());
    if (!text.is_ok()) {
      std::fprintf(stderr, "tessera shares: %s\n", text.status().message().c_str());
      std::exit(kExitFailed);
    }
    if (text->empty()) {
      const std::string where =
          snapshot->source == "agent"
              ? std::string("the node agent has none")
              : "no `tessera run` shares in " + (options->source.local.share_root.empty()
                                                     ? share::local_share_root()
                                                     : options->source.local.share_root);
      const std::string in_namespace = options->source.namespaces.name.empty()
                                           ? std::string()
                                           : " in namespace " + options->source.namespaces.name;
      std::fprintf(stderr, "No shares found%s on this node (%s).\n", in_namespace.c_str(),
                   where.c_str());
      return;
    }
    std::fputs(text->c_str(), stdout);
  });
}

}  // namespace tessera::cli
