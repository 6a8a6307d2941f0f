#include "mig/mig_instances.h"

#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "files/atomic_file.h"
#include "files/file_lock.h"
#include "tessera/json_access.h"
#include "tessera/log.h"

namespace tessera::agent {
namespace fs = std::filesystem;
namespace {

using nlohmann::json;

const char* step_name(MigStep step) {
  switch (step) {
    case MigStep::kCreatingGpuInstance:
      return "CreatingGpuInstance";
    case MigStep::kCreatingComputeInstance:
      return "CreatingComputeInstance";
    case MigStep::kReady:
      return "Ready";
    case MigStep::kDestroying:
      return "Destroying";
  }
  return "";
}

std::string describe(const MigRecord& record) {
  return "MIG " + record.profile + " at placement " + std::to_string(record.placement.start) + ":" +
         std::to_string(record.placement.size) + " of GPU " + record.parent_uuid;
}

std::string placements_text(const MigProfile& profile) {
  std::string text;
  for (const auto& placement : profile.placements) {
    if (!text.empty()) text += ',';
    text += std::to_string(placement.start);
  }
  return "{" + text + "}";
}

}  // namespace

const MigInstance* created_instance(const MigRecord& record, const MigGpu& state) {
  for (const auto& instance : state.instances) {
    if (record.gi_id) {
      if (instance.gi_id == *record.gi_id && instance.profile_id == record.profile_id &&
          instance.placement == record.placement)
        return &instance;
      continue;
    }
    if (instance.profile_id == record.profile_id && instance.placement == record.placement &&
        std::find(record.preexisting_gi_ids.begin(), record.preexisting_gi_ids.end(),
                  instance.gi_id) == record.preexisting_gi_ids.end())
      return &instance;
  }
  return nullptr;
}

std::string mig_record_to_json(const MigRecord& record) {
  json j = {{"parentUUID", record.parent_uuid},
            {"parentMinor", record.parent_minor},
            {"profileID", record.profile_id},
            {"profile", record.profile},
            {"placement", {{"start", record.placement.start}, {"size", record.placement.size}}},
            {"step", step_name(record.step)},
            {"preexistingGpuInstances", record.preexisting_gi_ids},
            {"users", record.users}};
  if (record.gi_id) j["gpuInstance"] = *record.gi_id;
  if (record.ci_id) j["computeInstance"] = *record.ci_id;
  if (!record.uuid.empty()) j["uuid"] = record.uuid;
  return j.dump(2) + "\n";
}

Result<MigRecord> mig_record_from_json(const std::string& text, const std::string& source) {
  const json j = json::parse(text, nullptr, false);
  auto bad = [&](const std::string& field, const json* value) {
    return internal_error(source + ": " + field + ": unexpected " + json_shown(value));
  };
  if (!j.is_object()) return bad("(the record)", &j);
  auto unsigned_at = [&](const char* pointer) -> std::optional<unsigned> {
    const json* value = json_at(j, pointer);
    if (!value || !value->is_number_unsigned() || value->get<uint64_t>() > 0xffffffffu)
      return std::nullopt;
    return value->get<unsigned>();
  };
  MigRecord record;
  const std::string* parent = json_string_at(j, "/parentUUID");
  const std::string* profile = json_string_at(j, "/profile");
  const std::string* step = json_string_at(j, "/step");
  if (!parent || parent->empty()) return bad("parentUUID", json_at(j, "/parentUUID"));
  if (!profile) return bad("profile", json_at(j, "/profile"));
  if (!step) return bad("step", json_at(j, "/step"));
  record.parent_uuid = *parent;
  record.profile = *profile;
  const auto minor = unsigned_at("/parentMinor");
  const auto profile_id = unsigned_at("/profileID");
  const auto start = unsigned_at("/placement/start");
  const auto size = unsigned_at("/placement/size");
  if (!minor) return bad("parentMinor", json_at(j, "/parentMinor"));
  if (!profile_id) return bad("profileID", json_at(j, "/profileID"));
  if (!start || !size) return bad("placement", json_at(j, "/placement"));
  record.parent_minor = *minor;
  record.profile_id = *profile_id;
  record.placement = {*start, *size};
  bool known = false;
  for (MigStep candidate : {MigStep::kCreatingGpuInstance, MigStep::kCreatingComputeInstance,
                            MigStep::kReady, MigStep::kDestroying})
    if (*step == step_name(candidate)) {
      record.step = candidate;
      known = true;
    }
  if (!known) return bad("step", json_at(j, "/step"));
  const json* preexisting = json_at(j, "/preexistingGpuInstances");
  const json* users = json_at(j, "/users");
  if (!preexisting || !preexisting->is_array()) return bad("preexistingGpuInstances", preexisting);
  if (!users || !users->is_array()) return bad("users", users);
  for (const json& id : *preexisting) {
    if (!id.is_number_unsigned()) return bad("preexistingGpuInstances[]", &id);
    record.preexisting_gi_ids.push_back(id.get<unsigned>());
  }
  for (const json& user : *users) {
    if (!user.is_string()) return bad("users[]", &user);
    record.users.insert(user.get<std::string>());
  }
  if (j.contains("gpuInstance")) {
    record.gi_id = unsigned_at("/gpuInstance");
    if (!record.gi_id) return bad("gpuInstance", json_at(j, "/gpuInstance"));
  }
  if (j.contains("computeInstance")) {
    record.ci_id = unsigned_at("/computeInstance");
    if (!record.ci_id) return bad("computeInstance", json_at(j, "/computeInstance"));
  }
  if (const std::string* uuid = json_string_at(j, "/uuid")) record.uuid = *uuid;
  return record;
}

MigInstances::MigInstances(MigInstancesOptions options, MigDriver& driver,
                           std::vector<GpuInfo> gpus)
    : options_(std::move(options)), driver_(driver), gpus_(std::move(gpus)) {}

void MigInstances::set_gpus(std::vector<GpuInfo> gpus) {
  std::lock_guard lock(mutex_);
  gpus_ = std::move(gpus);
}

void MigInstances::step() {
  ++steps_;
  if (options_.after_step) options_.after_step(steps_);
}

std::string MigInstances::record_path(const std::string& parent_uuid, unsigned profile_id,
                                      unsigned start) const {
  return options_.root + "/mig/" + parent_uuid + "-p" + std::to_string(profile_id) + "-s" +
         std::to_string(start) + ".json";
}

Status MigInstances::save(const MigRecord& record) {
  std::error_code ec;
  fs::create_directories(options_.root + "/mig", ec);
  if (ec) return internal_error("cannot create " + options_.root + "/mig: " + ec.message());
  TESSERA_RETURN_IF_ERROR(write_file_atomically(
      record_path(record.parent_uuid, record.profile_id, record.placement.start),
      mig_record_to_json(record), 0600));
  step();
  return Status::ok();
}

std::optional<MigRecord> MigInstances::load(const std::string& path) const {
  const std::optional<std::string> text = read_file(path);
  if (!text) return std::nullopt;
  Result<MigRecord> record = mig_record_from_json(*text, path);
  if (!record.is_ok()) {
    log::warn("MIG record unreadable: left alone", {{"error", record.status().message()}});
    return std::nullopt;
  }
  return *record;
}

Result<GpuInfo> MigInstances::gpu_of(const std::string& parent_uuid) const {
  for (const auto& gpu : gpus_)
    if (gpu.uuid == parent_uuid) return gpu;
  return not_found("GPU " + parent_uuid + " is not one of this node's");
}

GpuInfo MigInstances::parent_of(const MigRecord& record) const {
  Result<GpuInfo> listed = gpu_of(record.parent_uuid);
  if (listed.is_ok()) return *listed;
  // Before the node's GPUs are known (the reconcile at start) or after the GPU left the list:
  // its UUID and minor are what finding and destroying its instances need.
  GpuInfo gpu;
  gpu.uuid = record.parent_uuid;
  gpu.minor = record.parent_minor;
  return gpu;
}

Status MigInstances::ensure_mig_mode(const GpuInfo& gpu, const MigGpu& state) {
  if (!state.capable)
    return failed_precondition("GPU " + gpu.uuid + " (" + gpu.product_name + ") cannot do MIG");
  if (state.enabled) return Status::ok();
  if (!options_.allow_mode_change)
    return failed_precondition("MIG mode is off on GPU " + gpu.uuid +
                               " and this node does not change it (--allow-mig-mode-change "
                               "is not set)");
  TESSERA_ASSIGN_OR_RETURN(const std::vector<unsigned> pids, driver_.compute_pids(gpu.uuid));
  if (!pids.empty()) {
    std::string list;
    for (unsigned pid : pids) {
      if (!list.empty()) list += ',';
      list += std::to_string(pid);
    }
    return failed_precondition("MIG mode of GPU " + gpu.uuid +
                               " cannot be turned on while processes run on it (pids " + list +
                               ")");
  }
  TESSERA_RETURN_IF_ERROR(
      driver_.set_mig_mode(gpu.uuid, true).with_context("turning MIG mode on for GPU " + gpu.uuid));
  log::info("MIG mode turned on", {{"gpu", gpu.uuid}});
  return Status::ok();
}

Status MigInstances::finish(MigRecord& record, const MigGpu& state) {
  if (record.step == MigStep::kCreatingGpuInstance) {
    if (const MigInstance* found = created_instance(record, state)) {
      record.gi_id = found->gi_id;  // created before a crash: adopted
    } else {
      TESSERA_ASSIGN_OR_RETURN(
          const unsigned gi,
          driver_.create_gpu_instance(record.parent_uuid, record.profile_id, record.placement),
          with_context("creating the GPU instance of " + describe(record)));
      if (options_.after_create) options_.after_create(MigCreated::kGpuInstance);
      record.gi_id = gi;
    }
    record.step = MigStep::kCreatingComputeInstance;
    TESSERA_RETURN_IF_ERROR(save(record));
  }
  if (record.step == MigStep::kCreatingComputeInstance) {
    const MigInstance* found = created_instance(record, state);
    if (found && found->ci_id) {
      record.ci_id = found->ci_id;
      record.uuid = found->uuid;
    } else {
      TESSERA_ASSIGN_OR_RETURN(
          const CreatedComputeInstance created,
          driver_.create_compute_instance(record.parent_uuid, *record.gi_id),
          with_context("creating the compute instance of " + describe(record)));
      if (options_.after_create) options_.after_create(MigCreated::kComputeInstance);
      record.ci_id = created.ci_id;
      record.uuid = created.uuid;
    }
    record.step = MigStep::kReady;
    TESSERA_RETURN_IF_ERROR(save(record));
  }
  return Status::ok();
}

Status MigInstances::destroy(MigRecord& record) {
  if (record.step != MigStep::kDestroying) {
    // A record that never got its GPU instance's ID may still have one (a crash right after the
    // create): found the way finish() would adopt it.
    if (!record.gi_id) {
      TESSERA_ASSIGN_OR_RETURN(const MigGpu state, driver_.inspect(parent_of(record)));
      if (const MigInstance* found = created_instance(record, state)) {
        record.gi_id = found->gi_id;
        record.ci_id = found->ci_id;
      }
    }
    record.step = MigStep::kDestroying;
    TESSERA_RETURN_IF_ERROR(save(record));
  }
  if (record.gi_id) {
    // The compute instance first (a GPU instance with one cannot be destroyed). One the record
    // does not name yet (created just before a crash) is found by inspecting the GPU.
    std::optional<unsigned> ci = record.ci_id;
    if (!ci) {
      TESSERA_ASSIGN_OR_RETURN(const MigGpu state, driver_.inspect(parent_of(record)));
      for (const auto& instance : state.instances)
        if (instance.gi_id == *record.gi_id) ci = instance.ci_id;
    }
    if (ci) {
      const Status gone = driver_.destroy_compute_instance(record.parent_uuid, *record.gi_id, *ci);
      if (!gone.is_ok() && gone.code() != StatusCode::kNotFound)
        return gone.with_context("destroying the compute instance of " + describe(record));
    }
    const Status gone = driver_.destroy_gpu_instance(record.parent_uuid, *record.gi_id);
    if (!gone.is_ok() && gone.code() != StatusCode::kNotFound)
      return gone.with_context("destroying the GPU instance of " + describe(record));
  }
  const std::string path =
      record_path(record.parent_uuid, record.profile_id, record.placement.start);
  std::error_code ec;
  fs::remove(path, ec);
  if (ec) return internal_error("cannot remove " + path + ": " + ec.message());
  step();
  log::info("MIG instance destroyed", {{"instance", describe(record)}});
  return Status::ok();
}

Result<AcquiredMig> MigInstances::acquire(const MigDeviceRef& device, unsigned parent_minor,
                                          const std::string& user) {
  std::lock_guard lock(mutex_);
  TESSERA_ASSIGN_OR_RETURN(FileLock node_lock, FileLock::acquire(options_.root + "/mig.lock"));
  TESSERA_ASSIGN_OR_RETURN(const GpuInfo gpu, gpu_of(device.parent_uuid));
  TESSERA_ASSIGN_OR_RETURN(MigGpu state, driver_.inspect(gpu),
                           with_context("reading the MIG state of GPU " + gpu.uuid));
  const MigProfile* profile = state.profile_by_id(device.profile_id);
  if (!state.capable)
    return failed_precondition("GPU " + gpu.uuid + " (" + gpu.product_name + ") cannot do MIG");
  if (!profile || profile->name != device.profile)
    return invalid_argument("MIG profile " + device.profile + " (ID " +
                            std::to_string(device.profile_id) + ") is not one of GPU " + gpu.uuid +
                            "'s");
  if (std::find(profile->placements.begin(), profile->placements.end(), device.placement) ==
      profile->placements.end())
    return invalid_argument("MIG placement " + std::to_string(device.placement.start) + ":" +
                            std::to_string(device.placement.size) + " is not one of profile " +
                            profile->name + "'s on GPU " + gpu.uuid + " (starts " +
                            placements_text(*profile) + ")");

  const std::string path =
      record_path(device.parent_uuid, device.profile_id, device.placement.start);
  std::optional<MigRecord> record = load(path);
  if (record && record->step == MigStep::kDestroying) {
    // A release that did not finish: done first, then created afresh.
    TESSERA_RETURN_IF_ERROR(destroy(*record));
    record.reset();
    TESSERA_ASSIGN_OR_RETURN(state, driver_.inspect(gpu));
  }
  if (record && record->step == MigStep::kReady && !created_instance(*record, state)) {
    // Destroyed behind Tessera's back (nvidia-smi mig -dgi): created again below.
    log::warn("MIG instance of a record is gone: creating it again",
              {{"instance", describe(*record)}});
    record->step = MigStep::kCreatingGpuInstance;
    record->gi_id.reset();
    record->ci_id.reset();
    record->uuid.clear();
  }
  bool created_here = false;
  if (!record) {
    TESSERA_RETURN_IF_ERROR(ensure_mig_mode(gpu, state));
    if (!state.enabled) {
      TESSERA_ASSIGN_OR_RETURN(state, driver_.inspect(gpu));
    }
    for (const auto& instance : state.instances)
      if (instance.placement.overlaps(device.placement))
        return failed_precondition("MIG placement " + std::to_string(device.placement.start) + ":" +
                                   std::to_string(device.placement.size) + " of GPU " + gpu.uuid +
                                   " overlaps GPU instance " + std::to_string(instance.gi_id) +
                                   " at " + std::to_string(instance.placement.start) + ":" +
                                   std::to_string(instance.placement.size) +
                                   ", which Tessera did not create");
    record = MigRecord{};
    record->parent_uuid = device.parent_uuid;
    record->parent_minor = parent_minor;
    record->profile_id = device.profile_id;
    record->profile = device.profile;
    record->placement = device.placement;
    for (const auto& instance : state.instances)
      record->preexisting_gi_ids.push_back(instance.gi_id);
    created_here = true;
  } else if (record->step != MigStep::kReady) {
    TESSERA_RETURN_IF_ERROR(ensure_mig_mode(gpu, state));
  }
  const bool new_user = record->users.insert(user).second;
  if (record->step != MigStep::kReady) {
    TESSERA_RETURN_IF_ERROR(save(*record));
    if (Status done = finish(*record, state); !done.is_ok()) {
      // Nothing half-created: what this attempt made is destroyed, and the record goes with it
      // unless other shares use the instance.
      if (created_here || record->users.size() == 1) {
        if (Status undone = destroy(*record); !undone.is_ok())
          return done.with_context("(and undoing it failed: " + undone.message() + ")");
      }
      return done;
    }
    log::info("MIG instance created", {{"instance", describe(*record)},
                                       {"uuid", record->uuid},
                                       {"gpu_instance", std::to_string(*record->gi_id)}});
  } else if (new_user) {
    TESSERA_RETURN_IF_ERROR(save(*record));
  }
  AcquiredMig acquired{device, record->uuid};
  acquired.device.gi_id = record->gi_id;
  acquired.device.ci_id = record->ci_id;
  return acquired;
}

Status MigInstances::release(const MigDeviceRef& device, const std::string& user) {
  std::lock_guard lock(mutex_);
  TESSERA_ASSIGN_OR_RETURN(FileLock node_lock, FileLock::acquire(options_.root + "/mig.lock"));
  std::optional<MigRecord> record =
      load(record_path(device.parent_uuid, device.profile_id, device.placement.start));
  if (!record) return Status::ok();
  if (record->users.erase(user) == 0 && !record->users.empty()) return Status::ok();
  if (!record->users.empty()) return save(*record);
  return destroy(*record);
}

std::vector<std::string> MigInstances::reconcile(
    const std::function<std::set<std::string>()>& live) {
  std::lock_guard lock(mutex_);
  std::vector<std::string> lines;
  Result<FileLock> node_lock = FileLock::acquire(options_.root + "/mig.lock");
  if (!node_lock.is_ok()) return {"MIG reconcile skipped: " + node_lock.status().message()};
  const std::set<std::string> live_users = live();
  std::error_code ec;
  std::vector<std::string> paths;
  for (const auto& item : fs::directory_iterator(options_.root + "/mig", ec))
    if (item.path().extension() == ".json") paths.push_back(item.path().string());
  std::sort(paths.begin(), paths.end());
  for (const std::string& path : paths) {
    std::optional<MigRecord> record = load(path);
    if (!record) continue;
    std::set<std::string> users;
    for (const auto& user : record->users)
      if (live_users.count(user)) users.insert(user);
    if (!users.empty()) {
      if (users != record->users) {
        record->users = users;
        if (Status saved = save(*record); !saved.is_ok()) lines.push_back(saved.message());
      }
      continue;
    }
    record->users.clear();
    const Status gone = destroy(*record);
    lines.push_back(describe(*record) + (gone.is_ok() ? ": no share uses it: destroyed"
                                                      : ": destroy failed: " + gone.message()));
  }
  return lines;
}

std::vector<MigRecord> MigInstances::records() const {
  std::vector<MigRecord> all;
  std::error_code ec;
  for (const auto& item : fs::directory_iterator(options_.root + "/mig", ec))
    if (item.path().extension() == ".json")
      if (auto record = load(item.path().string())) all.push_back(*record);
  return all;
}

}  // namespace tessera::agent
