// Dynamic MIG instances: created at the first prepare of a share on a dynamic MIG device
// (gpu-<minor>-mig-<profile>-<start>), destroyed at the last share's unprepare, and crash-safe.
//
// One record per instance, <root>/mig/<parent UUID>-p<profile ID>-s<start>.json, written
// atomically (files/atomic_file.h) before each step that changes the GPU:
//   kCreatingGpuInstance (with the IDs of the GPU instances that existed before) -> create GI ->
//   kCreatingComputeInstance (with its GI ID) -> create CI -> kReady (CI ID, MIG UUID).
// Release writes kDestroying before it destroys the CI, then the GI, then removes the record.
// The record lists its users (share names): a second share on the instance adopts it, and only
// the last one's release destroys it.
//
// After a crash, the next acquire of the same device finishes what the record says (a GPU
// instance at the record's profile and placement that is not one of those that existed before is
// the one this agent created; a compute instance in it likewise) and reconcile() destroys the
// instances of records no live share uses. A GPU instance no record names is never destroyed:
// Tessera did not create it.
//
// MIG mode: a prepare on a GPU whose MIG mode is off turns it on only with allow_mode_change, and
// only while no compute process runs on the GPU; otherwise a kFailedPrecondition saying so.
#pragma once

#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "mig/mig_driver.h"
#include "model/mig_device.h"
#include "tessera/status.h"

namespace tessera::agent {

enum class MigStep { kCreatingGpuInstance, kCreatingComputeInstance, kReady, kDestroying };

// What NVML has just created, before the record says so (where a crash leaves most to find).
enum class MigCreated { kGpuInstance, kComputeInstance };

struct MigRecord {
  std::string parent_uuid;
  unsigned parent_minor = 0;
  unsigned profile_id = 0;
  std::string profile;
  MigPlacement placement;
  MigStep step = MigStep::kCreatingGpuInstance;
  std::vector<unsigned> preexisting_gi_ids;  // GPU instances of the GPU before ours was created
  std::optional<unsigned> gi_id;
  std::optional<unsigned> ci_id;
  std::string uuid;
  std::set<std::string> users;  // share names
  bool operator==(const MigRecord&) const = default;
};

// The GPU instance of `state` (the record's GPU's) that the record's instance is: the one whose ID
// it names, or, where a crash left it between NVML's creation and the record of its ID, the one at
// the record's profile and placement that is not one of those that existed before. Null if none.
const MigInstance* created_instance(const MigRecord& record, const MigGpu& state);

std::string mig_record_to_json(const MigRecord& record);
// kInternal naming `source` and the field when the text is not a record.
Result<MigRecord> mig_record_from_json(const std::string& text, const std::string& source);

// What acquire() gives the share: the device with its instance's IDs, and the MIG UUID.
struct AcquiredMig {
  MigDeviceRef device;
  std::string uuid;
};

struct MigInstancesOptions {
  std::string root = "/var/lib/tessera";  // records in <root>/mig/
  bool allow_mode_change = false;         // --allow-mig-mode-change
  // Tests only: called after each durable step with its 1-based number (a crash test calls _exit
  // there), as ShareManagerOptions::after_step.
  std::function<void(int step)> after_step;
  // Tests only: called right after NVML created the GPU instance, then the compute instance, before
  // the record names it (the agent's TESSERA_TEST_KILL_AT kills the process there).
  std::function<void(MigCreated created)> after_create;
};

class MigInstances {
 public:
  MigInstances(MigInstancesOptions options, MigDriver& driver, std::vector<GpuInfo> gpus);

  // The instance of `device` (dynamic) for share `user`: adopted when a record has it, else
  // created at its placement. kInvalidArgument for a profile or placement the GPU does not have,
  // kFailedPrecondition when the placement is taken by an instance Tessera did not create or the
  // MIG mode cannot be turned on. On any error nothing this call created is left.
  Result<AcquiredMig> acquire(const MigDeviceRef& device, unsigned parent_minor,
                              const std::string& user);
  // `user` no longer uses the instance; the last user's release destroys it. Ok when no record
  // has it. An error (the instance still in use) keeps the record for the next try.
  Status release(const MigDeviceRef& device, const std::string& user);
  // Start and the reconcile loop: records whose users are not in `live_users()` lose them; a
  // record with no user left has its instance destroyed. `live_users` is asked under the lock
  // acquire() holds, so a share whose entry exists before its acquire is never taken for gone.
  // Returns one line per thing done or failed.
  std::vector<std::string> reconcile(const std::function<std::set<std::string>()>& live_users);
  std::vector<MigRecord> records() const;
  void set_gpus(std::vector<GpuInfo> gpus);

 private:
  std::string record_path(const std::string& parent_uuid, unsigned profile_id,
                          unsigned start) const;
  Status save(const MigRecord& record);
  std::optional<MigRecord> load(const std::string& path) const;
  Result<GpuInfo> gpu_of(const std::string& parent_uuid) const;
  // The record's GPU: the node's, or one made of the record's UUID and minor.
  GpuInfo parent_of(const MigRecord& record) const;
  // Carries the record from its step to kReady (creating or adopting what is missing).
  Status finish(MigRecord& record, const MigGpu& state);
  // Destroys what the record says this agent created, then removes the record.
  Status destroy(MigRecord& record);
  Status ensure_mig_mode(const GpuInfo& gpu, const MigGpu& state);
  void step();

  MigInstancesOptions options_;
  MigDriver& driver_;
  std::mutex mutex_;  // one MIG change at a time on the node (as NVIDIA's driver's node lock)
  std::vector<GpuInfo> gpus_;
  int steps_ = 0;
};

}  // namespace tessera::agent
