#include "enforcement/usage_page.h"

#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "tessera/share_contract.h"
#include "tessera/unique_fd.h"

namespace tessera::agent {
namespace {

constexpr size_t kPageBytes = sizeof(share::UsagePage);

// ---- SIGBUS guard: a fault on the guarded mapping of this thread jumps back; any other SIGBUS
// goes to the previous handler (or the default action), as if no guard existed.
thread_local sigjmp_buf* t_guard = nullptr;
thread_local const char* t_guard_begin = nullptr;
thread_local const char* t_guard_end = nullptr;
struct sigaction g_previous_sigbus {};

void on_sigbus(int signal, siginfo_t* info, void* context) {
  const char* address = static_cast<const char*>(info->si_addr);
  if (t_guard && address >= t_guard_begin && address < t_guard_end) siglongjmp(*t_guard, 1);
  if (g_previous_sigbus.sa_flags & SA_SIGINFO) {
    g_previous_sigbus.sa_sigaction(signal, info, context);
    return;
  }
  if (g_previous_sigbus.sa_handler != SIG_DFL && g_previous_sigbus.sa_handler != SIG_IGN) {
    g_previous_sigbus.sa_handler(signal);
    return;
  }
  ::signal(SIGBUS, SIG_DFL);
  raise(SIGBUS);
}

void install_sigbus_guard() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction action {};
    action.sa_sigaction = on_sigbus;
    action.sa_flags = SA_SIGINFO;
    sigemptyset(&action.sa_mask);
    sigaction(SIGBUS, &action, &g_previous_sigbus);
  });
}

size_t read_at(int fd, void* out, size_t size, size_t offset) {
  size_t done = 0;
  while (done < size) {
    const ssize_t got =
        pread(fd, static_cast<char*>(out) + done, size - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    done += static_cast<size_t>(got);
  }
  return done;
}

// The slot work under the guard: plain data in, plain counts out (no destructors between the
// sigsetjmp and a jump back).
struct SlotWork {
  share::UsagePage* page;
  const UsagePageRepair* repair;
  RepairOutcome outcome;
};

void apply_slots(SlotWork& work) {
  share::UsagePage& page = *work.page;
  for (const UsagePageRepair::Clear& clear : work.repair->clears) {
    if (clear.index >= share::kMaxSlots) continue;
    share::ProcessSlot& slot = page.slots[clear.index];
    // The shim's protocol (share::clear_slot), also for a free slot that holds bytes (owner 0); a
    // slot whose owner changed meanwhile is left alone.
    if (!share::clear_slot(slot, clear.owner, clear.owner)) {
      ++work.outcome.skipped;
      continue;
    }
    ++work.outcome.cleared;
  }
  for (const UsagePageRepair::SetBytes& set : work.repair->sets) {
    if (set.index >= share::kMaxSlots || set.device >= share::kMaxDevices) continue;
    share::ProcessSlot& slot = page.slots[set.index];
    uint64_t expected = set.expected;
    if (slot.owner.load(std::memory_order_seq_cst) != set.owner ||
        !slot.bytes[set.device].compare_exchange_strong(expected, set.value,
                                                        std::memory_order_seq_cst)) {
      ++work.outcome.skipped;
      continue;
    }
    ++work.outcome.set;
  }
  if (work.repair->high_water) {
    // Raised to the sound value, or lowered from one no shim writes (above kMaxSlots).
    const uint32_t sound = *work.repair->high_water;
    uint32_t high = page.slot_high_water.load(std::memory_order_seq_cst);
    while ((high < sound || high > share::kMaxSlots) &&
           !page.slot_high_water.compare_exchange_weak(high, sound, std::memory_order_seq_cst)) {
    }
  }
}

// Runs apply_slots with the SIGBUS guard on `page`; false when the mapping faulted.
bool guarded_apply(SlotWork& work) {
  install_sigbus_guard();
  sigjmp_buf jump;
  if (sigsetjmp(jump, 1) != 0) {
    t_guard = nullptr;
    return false;
  }
  t_guard_begin = reinterpret_cast<const char*>(work.page);
  t_guard_end = t_guard_begin + kPageBytes;
  t_guard = &jump;
  apply_slots(work);
  t_guard = nullptr;
  return true;
}

}  // namespace

UsagePageSnapshot read_usage_page(const std::string& folder) {
  UsagePageSnapshot snapshot;
  const std::string path = folder + "/usage";
  const int opened = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (opened < 0) {
    if (errno == ENOENT) return snapshot;
    snapshot.state = UsagePageState::kNotRegular;
    snapshot.problem =
        errno == ELOOP ? "the usage page is a symlink"
                       : std::string("the usage page cannot be opened: ") + std::strerror(errno);
    return snapshot;
  }
  const UniqueFd fd(opened);
  struct stat info {};
  if (fstat(fd.get(), &info) != 0 || !S_ISREG(info.st_mode)) {
    snapshot.state = UsagePageState::kNotRegular;
    snapshot.problem = "the usage page is not a regular file";
    return snapshot;
  }
  snapshot.size = static_cast<uint64_t>(info.st_size);
  // Private, aligned storage: the atomics of the layout are read as plain words here.
  std::vector<share::UsagePage> buffer(1);
  std::memset(static_cast<void*>(buffer.data()), 0, kPageBytes);
  const size_t got = read_at(fd.get(), buffer.data(), kPageBytes, 0);
  const share::UsagePage& page = buffer[0];
  if (got < kPageBytes) {
    snapshot.state = UsagePageState::kShort;
    snapshot.problem = "the usage page is " + std::to_string(snapshot.size) + " bytes, not " +
                       std::to_string(kPageBytes) + " (truncated)";
    return snapshot;
  }
  snapshot.high_water = page.slot_high_water.load(std::memory_order_relaxed);
  if (!share::valid_usage_page(page)) {
    snapshot.state = UsagePageState::kBadHeader;
    snapshot.problem = "the usage page's header is not a shim's (magic " +
                       std::to_string(page.magic) + ", version " + std::to_string(page.version) +
                       ", struct_size " + std::to_string(page.struct_size) + ", max_slots " +
                       std::to_string(page.max_slots) + ")";
  } else {
    snapshot.state = UsagePageState::kValid;
  }
  for (uint32_t i = 0; i < share::kMaxSlots; ++i) {
    const share::ProcessSlot& slot = page.slots[i];
    SlotSnapshot one;
    one.index = i;
    one.owner = slot.owner.load(std::memory_order_relaxed);
    bool any = one.owner != 0;
    for (uint32_t d = 0; d < share::kMaxDevices; ++d) {
      one.bytes[d] = slot.bytes[d].load(std::memory_order_relaxed);
      any = any || one.bytes[d] != 0;
    }
    if (any) snapshot.slots.push_back(one);
  }
  return snapshot;
}

Result<RepairOutcome> repair_usage_page(const std::string& folder, const UsagePageRepair& repair) {
  const std::string path = folder + "/usage";
  if (repair.recreate) {
    // Whatever a tenant put at the name goes (never followed: remove() takes a symlink itself),
    // and a fresh page is created the shim's way (link of an initialised file).
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
    if (ec) return internal_error("cannot remove " + path + ": " + ec.message());
    if (const int error = share::create_usage_page(folder.c_str()); error != 0)
      return internal_error("cannot create " + path + ": " + std::strerror(error));
    return RepairOutcome{};
  }
  const int opened = open(path.c_str(), O_RDWR | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (opened < 0) return internal_error("cannot open " + path + ": " + std::strerror(errno));
  const UniqueFd fd(opened);
  struct stat info {};
  if (fstat(fd.get(), &info) != 0 || !S_ISREG(info.st_mode))
    return failed_precondition(path + " is no longer a regular file");
  if (static_cast<size_t>(info.st_size) < kPageBytes) {
    if (!repair.extend) return failed_precondition(path + " was truncated meanwhile");
    if (ftruncate(fd.get(), static_cast<off_t>(kPageBytes)) != 0)
      return internal_error("cannot extend " + path + ": " + std::strerror(errno));
  }
  if (repair.rewrite_header || repair.extend) {
    // magic, version, struct_size, max_slots: the 16 bytes before slot_high_water.
    const uint32_t header[] = {share::kUsageMagic, share::kVersion,
                               static_cast<uint32_t>(kPageBytes), share::kMaxSlots};
    static_assert(sizeof(header) == offsetof(share::UsagePage, slot_high_water));
    if (pwrite(fd.get(), header, sizeof(header), 0) != static_cast<ssize_t>(sizeof(header)))
      return internal_error("cannot write the header of " + path + ": " + std::strerror(errno));
  }
  RepairOutcome outcome;
  if (repair.clears.empty() && repair.sets.empty() && !repair.high_water) return outcome;
  if (fstat(fd.get(), &info) != 0 || static_cast<size_t>(info.st_size) < kPageBytes)
    return failed_precondition(path + " was truncated meanwhile");
  void* memory = mmap(nullptr, kPageBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (memory == MAP_FAILED)
    return internal_error("cannot map " + path + ": " + std::strerror(errno));
  SlotWork work{static_cast<share::UsagePage*>(memory), &repair, {}};
  const bool whole = guarded_apply(work);
  munmap(memory, kPageBytes);
  if (!whole) return failed_precondition(path + " was truncated during the repair");
  return work.outcome;
}

}  // namespace tessera::agent
