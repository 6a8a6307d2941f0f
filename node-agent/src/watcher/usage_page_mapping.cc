#include "watcher/usage_page_mapping.h"

#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <mutex>
#include <utility>

#include "usage/share_processes.h"

namespace tessera::agent {
namespace {

thread_local sigjmp_buf* t_fault_jump = nullptr;
struct sigaction g_previous_sigbus {};

void on_sigbus(int signal_number, siginfo_t* info, void* context) {
  if (sigjmp_buf* jump = t_fault_jump) {
    t_fault_jump = nullptr;
    siglongjmp(*jump, 1);
  }
  // Not a guarded access: what would have happened without us. Returning re-runs the faulting
  // instruction under the restored disposition.
  if (g_previous_sigbus.sa_flags & SA_SIGINFO) {
    if (g_previous_sigbus.sa_sigaction)
      g_previous_sigbus.sa_sigaction(signal_number, info, context);
    return;
  }
  if (g_previous_sigbus.sa_handler == SIG_DFL || g_previous_sigbus.sa_handler == SIG_IGN) {
    struct sigaction fallback {};
    fallback.sa_handler = SIG_DFL;
    sigemptyset(&fallback.sa_mask);
    sigaction(SIGBUS, &fallback, nullptr);
    return;
  }
  g_previous_sigbus.sa_handler(signal_number);
}

void install_sigbus_handler() {
  struct sigaction action {};
  action.sa_sigaction = on_sigbus;
  action.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&action.sa_mask);
  sigaction(SIGBUS, &action, &g_previous_sigbus);
}

}  // namespace

bool run_fault_guarded(const std::function<void()>& access) {
  static std::once_flag installed;
  std::call_once(installed, install_sigbus_handler);
  sigjmp_buf jump;
  if (sigsetjmp(jump, 1) != 0) return false;  // the handler cleared t_fault_jump
  t_fault_jump = &jump;
  access();
  t_fault_jump = nullptr;
  return true;
}

Result<UsagePageMapping> UsagePageMapping::open(const std::string& path) {
  Result<UniqueFd> opened = open_regular(path, O_RDWR, sizeof(share::UsagePage));
  if (!opened.is_ok()) return opened.status();
  const UniqueFd fd = std::move(opened).value();
  // The header through pread first: a file that is no usage page is never mapped.
  share::UsagePage header_copy;
  constexpr size_t kHeader = offsetof(share::UsagePage, slots);
  if (pread(fd.get(), &header_copy, kHeader, 0) != static_cast<ssize_t>(kHeader) ||
      !share::valid_usage_page(header_copy)) {
    return failed_precondition(path + " is not a usage page (bad header)");
  }
  void* mapped =
      mmap(nullptr, sizeof(share::UsagePage), PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (mapped == MAP_FAILED)
    return internal_error("cannot map " + path + ": " + std::strerror(errno));
  return UsagePageMapping(path, static_cast<share::UsagePage*>(mapped));
}

UsagePageMapping::UsagePageMapping(UsagePageMapping&& other) noexcept
    : path_(std::move(other.path_)), page_(std::exchange(other.page_, nullptr)) {}

UsagePageMapping& UsagePageMapping::operator=(UsagePageMapping&& other) noexcept {
  if (this != &other) {
    if (page_) munmap(page_, sizeof(share::UsagePage));
    path_ = std::move(other.path_);
    page_ = std::exchange(other.page_, nullptr);
  }
  return *this;
}

UsagePageMapping::~UsagePageMapping() {
  if (page_) munmap(page_, sizeof(share::UsagePage));
}

Result<int> UsagePageMapping::reclaim_owner(uint64_t owner, uint64_t reclaimer) {
  if (!page_) return failed_precondition("no usage page mapped");
  share::UsagePage* page = page_;
  int cleared = 0;
  bool valid = true;
  const bool completed = run_fault_guarded([page, owner, reclaimer, &cleared, &valid] {
    if (!share::valid_usage_page(*page)) {
      valid = false;
      return;
    }
    uint32_t high = page->slot_high_water.load(std::memory_order_acquire);
    if (high > share::kMaxSlots) high = share::kMaxSlots;
    for (uint32_t i = 0; i < high; ++i) {
      share::ProcessSlot& slot = page->slots[i];
      if (slot.owner.load(std::memory_order_acquire) != owner) continue;
      if (share::reclaim_slot(slot, owner, reclaimer)) ++cleared;
    }
  });
  if (!completed) return failed_precondition(path_ + " was truncated under its mapping");
  if (!valid) return failed_precondition(path_ + " no longer has a valid usage page header");
  return cleared;
}

}  // namespace tessera::agent
