// `tessera shares [-o table|wide|json|yaml]`: the shares on this node, as `kubectl get` lists
// objects. The table has one line per GPU of a share, in a fixed column order (wide: more columns
// after them); json and yaml print the
// whole ListSharesResponse under its proto field names (every field, defaults included), and
// parse back into the same message.
#pragma once

#include <google/protobuf/message.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessera/node/v1/node_api.pb.h"
#include "tessera/status.h"
#include "views/node_source.h"

namespace CLI {
class App;
}

namespace tessera::cli {

// NAMESPACE CLAIM SHARE GPU MEMORY CORES CLASS PROCESSES AGE, columns as wide as their widest cell;
// "" when there are no shares (the caller says so on stderr, as kubectl does). A share that could
// not be read (read_error) shows "?" for its memory used and its processes: unknown, not 0.
// `wide` adds NODE POD GPU-UUID PRIORITY SOURCE after them, names not cut. Where a share sits
// inside a MIG instance, GPU reads "<index>/gi<GPU instance id>", a PROFILE column follows GPU
// ("3g.71gb"; "-" for a whole GPU), and wide adds MIG-DEVICE and MIG-UUID (GPU-UUID stays the
// physical GPU's).
std::string render_shares_table(const node::v1::ListSharesResponse& node, int64_t now_unix_ms,
                                bool wide = false);

// "share <name>: <read_error> (its usage is unknown)" for each share that could not be read whole,
// in order; what `tessera shares` warns of on stderr, whatever the format.
std::vector<std::string> unread_share_warnings(const node::v1::ListSharesResponse& node);

// A message as JSON: fields in declaration order under their proto names, every field (proto3
// defaults too; an optional value that is not known is null), 64-bit integers as numbers, enums
// by name, maps as objects.
nlohmann::ordered_json message_to_json(const google::protobuf::Message& message);
// JSON (as message_to_json writes it, or protobuf's own JSON) into `message`.
Status message_from_json(const nlohmann::ordered_json& json, google::protobuf::Message& message);
// JSON as block YAML. Strings that YAML would read as something else ("", "123", "true") are
// quoted, so yaml_to_json gives the same JSON back.
std::string json_to_yaml(const nlohmann::ordered_json& json);
Result<nlohmann::ordered_json> yaml_to_json(const std::string& yaml);

// Lines of cells as a table: each column as wide as its widest cell, three spaces between.
std::string render_columns(const std::vector<std::vector<std::string>>& rows);

// What `tessera shares -o <format>` prints ("table", "wide", "json" or "yaml").
Result<std::string> render_shares(const Snapshot& snapshot, const std::string& format,
                                  int64_t now_unix_ms);

// Registers `tessera shares` on `app`.
void add_shares_command(CLI::App& app);

}  // namespace tessera::cli
