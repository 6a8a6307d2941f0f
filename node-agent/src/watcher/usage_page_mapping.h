// A share's usage page mapped writable by the agent, for the one write the agent makes to it:
// reclaiming the slot of a process that exited. The page is tenant-writable (mode 0666, any
// process of the share may truncate it), so every access through the mapping runs guarded: a
// SIGBUS from a page the file no longer backs ends the access with an error instead of the agent.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "tessera/share_region.h"
#include "tessera/status.h"

namespace tessera::agent {

// Runs `access` on this thread with SIGBUS turned into a false return (the access stops where it
// faulted). `access` must own nothing that needs a destructor past the faulting instruction: it
// is left by siglongjmp. True when it ran to its end. Installs the process's SIGBUS handler on
// first use (a SIGBUS outside a guarded access goes to the handler that was there before).
bool run_fault_guarded(const std::function<void()>& access);

class UsagePageMapping {
 public:
  // Maps <path> (MAP_SHARED, read-write): only a regular file, never through a symlink, at least
  // sizeof(UsagePage) bytes with a valid header (read with pread first, so an invalid file is
  // never mapped).
  static Result<UsagePageMapping> open(const std::string& path);

  UsagePageMapping(UsagePageMapping&& other) noexcept;
  UsagePageMapping& operator=(UsagePageMapping&& other) noexcept;
  UsagePageMapping(const UsagePageMapping&) = delete;
  UsagePageMapping& operator=(const UsagePageMapping&) = delete;
  ~UsagePageMapping();

  // Clears every slot whose owner word is `owner` (share::reclaim_slot, marked with `reclaimer`
  // meanwhile). The number of slots cleared, or kFailedPrecondition when the page stopped being a
  // valid page or the file was truncated under the mapping.
  Result<int> reclaim_owner(uint64_t owner, uint64_t reclaimer);

  const std::string& path() const { return path_; }

 private:
  UsagePageMapping(std::string path, share::UsagePage* page)
      : path_(std::move(path)), page_(page) {}

  std::string path_;
  share::UsagePage* page_ = nullptr;
};

}  // namespace tessera::agent
