#include "share/partition_hook.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "files/atomic_file.h"
#include "model/share_spec.h"
#include "tessera/cgroup/cgroup_v2.h"
#include "tessera/cgroup/driver_partition.h"
#include "tessera/json_access.h"
#include "tessera/share_region.h"

namespace tessera::agent {
namespace {

using nlohmann::json;

Result<uint64_t> parse_bytes(const std::string& name, const std::string& text) {
  uint64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end)
    return invalid_argument(name + " \"" + text + "\": not a whole number of bytes");
  return value;
}

std::string mib(uint64_t bytes) {
  return std::to_string(bytes) + " bytes (" + std::to_string(bytes >> 20) + " MiB)";
}

}  // namespace

std::optional<std::pair<uint64_t, uint64_t>> partition_bytes(uint64_t memory_request,
                                                             uint64_t memory_limit) {
  if (memory_limit == share::kUnlimited) return std::nullopt;
  const uint64_t soft =
      memory_request == share::kUnlimited ? memory_limit : std::min(memory_request, memory_limit);
  return std::make_pair(soft, memory_limit);
}

std::optional<PartitionRecord> share_partition(const ShareSpec& share) {
  const vgpu_config::ShareLimits limits = share.limits();
  const auto bytes = partition_bytes(limits.memory_request, limits.memory_limit);
  if (!bytes) return std::nullopt;
  return PartitionRecord{share.name(), "", "", share.uuid, bytes->first, bytes->second};
}

std::vector<std::string> hook_arguments(const PartitionRecord& partition,
                                        const std::string& record_dir) {
  return {kApplyMemoryLimits,
          "--share",
          partition.share,
          "--gpu",
          partition.gpu,
          "--soft",
          std::to_string(partition.soft),
          "--hard",
          std::to_string(partition.hard),
          "--record",
          record_dir};
}

Result<HookRequest> parse_hook_arguments(const std::vector<std::string>& args) {
  if (args.empty() || args[0] != kApplyMemoryLimits)
    return invalid_argument(std::string("the first argument must be ") + kApplyMemoryLimits +
                            (args.empty() ? "" : ", not \"" + args[0] + "\""));
  HookRequest request;
  std::optional<uint64_t> soft, hard;
  for (size_t i = 1; i < args.size(); i += 2) {
    const std::string& name = args[i];
    if (i + 1 >= args.size()) return invalid_argument(name + ": a value is missing");
    const std::string& value = args[i + 1];
    if (name == "--share") {
      if (!safe_name_component(value)) return invalid_argument("--share \"" + value + "\"");
      request.partition.share = value;
    } else if (name == "--gpu") {
      if (!safe_name_component(value)) return invalid_argument("--gpu \"" + value + "\"");
      request.partition.gpu = value;
    } else if (name == "--soft" || name == "--hard") {
      TESSERA_ASSIGN_OR_RETURN(uint64_t bytes, parse_bytes(name, value));
      (name == "--soft" ? soft : hard) = bytes;
    } else if (name == "--record") {
      if (value.empty() || value[0] != '/')
        return invalid_argument("--record \"" + value + "\": not an absolute path");
      request.record_dir = value;
    } else {
      return invalid_argument("unknown argument \"" + name + "\"");
    }
  }
  for (const auto& [name, missing] :
       {std::pair<const char*, bool>{"--share", request.partition.share.empty()},
        {"--gpu", request.partition.gpu.empty()},
        {"--soft", !soft},
        {"--hard", !hard},
        {"--record", request.record_dir.empty()}})
    if (missing) return invalid_argument(std::string(name) + " is missing");
  if (*soft > *hard)
    return invalid_argument("--soft " + mib(*soft) + " is above --hard " + mib(*hard));
  request.partition.soft = *soft;
  request.partition.hard = *hard;
  return request;
}

Result<OciState> parse_oci_state(const std::string& text) {
  const json state = json::parse(text, nullptr, false);
  if (!state.is_object()) return invalid_argument("the OCI state on stdin is not a JSON object");
  OciState out;
  out.id = json_string(state, "id");
  out.status = json_string(state, "status");
  out.bundle = json_string(state, "bundle");
  const json* pid = json_member(state, "pid");
  if (pid && pid->is_number_integer()) out.pid = pid->get<int>();
  if (out.id.empty()) return invalid_argument("the OCI state has no container id");
  if (!safe_name_component(out.id))
    return invalid_argument("the OCI state's container id \"" + out.id + "\" is not a name");
  if (out.pid <= 0)
    return invalid_argument("the OCI state of container " + out.id + " (status \"" + out.status +
                            "\") has no pid: run the hook as createRuntime, once the container's "
                            "process and cgroup exist");
  return out;
}

Status run_apply_memory_limits(const HookRequest& request, const OciState& state,
                               const HookEnvironment& environment) {
  const PartitionRecord& wanted = request.partition;
  const std::string what = "GPU " + wanted.gpu + ", container " + state.id + " (pid " +
                           std::to_string(state.pid) + "), soft " + mib(wanted.soft) + ", hard " +
                           mib(wanted.hard);
  TESSERA_ASSIGN_OR_RETURN(std::vector<cgroup::Mount> mounts,
                           cgroup::cgroup2_mounts(environment.mountinfo), with_context(what));
  if (mounts.empty())
    return failed_precondition(what + ": no cgroup v2 hierarchy is mounted (" +
                               environment.mountinfo + ")");
  TESSERA_ASSIGN_OR_RETURN(std::string path,
                           cgroup::process_cgroup(state.pid, environment.proc_root),
                           with_context(what + ": the container's cgroup"));
  TESSERA_ASSIGN_OR_RETURN(std::string directory, cgroup::directory_of(mounts, path),
                           with_context(what + ": the container's cgroup"));
  const std::string where = what + ", cgroup " + directory;
  TESSERA_ASSIGN_OR_RETURN(nvml::Session session, nvml::Session::open(environment.nvml_library),
                           with_context(where));
  if (Status supported = cgroup::driver_partitions_supported(session); !supported.is_ok())
    return supported.with_context(where);
  if (Status applied =
          cgroup::apply_partitions(session, directory, {{wanted.gpu, wanted.soft, wanted.hard}});
      !applied.is_ok())
    return applied.with_context("container " + state.id + ", soft " + mib(wanted.soft) + ", hard " +
                                mib(wanted.hard));
  PartitionRecord record = wanted;
  record.container_id = state.id;
  record.cgroup = directory;
  std::error_code ec;
  std::filesystem::create_directories(request.record_dir, ec);
  Status recorded = ec ? internal_error("cannot create " + request.record_dir + ": " + ec.message())
                       : write_file_atomically(partition_record_path(request.record_dir, record),
                                               partition_record_json(record));
  if (!recorded.is_ok()) {
    (void)cgroup::clear_partitions(session, directory, {wanted.gpu});
    return recorded.with_context(where + ": the partition was undone");
  }
  return Status::ok();
}

std::string partition_record_path(const std::string& claim_record_dir,
                                  const PartitionRecord& record) {
  return claim_record_dir + "/" + record.share + "." + record.container_id + "." + record.gpu +
         ".json";
}

std::string partition_record_json(const PartitionRecord& record) {
  return json{{"share", record.share},   {"container", record.container_id},
              {"cgroup", record.cgroup}, {"gpu", record.gpu},
              {"soft", record.soft},     {"hard", record.hard}}
             .dump() +
         "\n";
}

Result<PartitionRecord> parse_partition_record(const std::string& text) {
  const json record = json::parse(text, nullptr, false);
  if (!record.is_object()) return invalid_argument("not a JSON object");
  PartitionRecord out;
  out.share = json_string(record, "share");
  out.container_id = json_string(record, "container");
  out.cgroup = json_string(record, "cgroup");
  out.gpu = json_string(record, "gpu");
  const json* soft = json_member(record, "soft");
  const json* hard = json_member(record, "hard");
  if (out.share.empty() || out.container_id.empty() || out.cgroup.empty() || out.gpu.empty() ||
      !soft || !soft->is_number_unsigned() || !hard || !hard->is_number_unsigned())
    return invalid_argument("a field is missing or of the wrong type");
  out.soft = soft->get<uint64_t>();
  out.hard = hard->get<uint64_t>();
  return out;
}

std::vector<PartitionRecord> read_partition_records(const std::string& claim_record_dir,
                                                    std::vector<std::string>* problems) {
  std::vector<PartitionRecord> records;
  std::error_code ec;
  std::vector<std::filesystem::path> files;
  for (const auto& item : std::filesystem::directory_iterator(claim_record_dir, ec))
    if (item.path().extension() == ".json" && item.is_regular_file(ec))
      files.push_back(item.path());
  std::sort(files.begin(), files.end());
  for (const auto& file : files) {
    std::ifstream in(file);
    std::stringstream text;
    text << in.rdbuf();
    Result<PartitionRecord> record = parse_partition_record(text.str());
    if (record.is_ok())
      records.push_back(std::move(record).value());
    else if (problems)
      problems->push_back(file.string() + ": " + record.status().message());
  }
  return records;
}

}  // namespace tessera::agent
