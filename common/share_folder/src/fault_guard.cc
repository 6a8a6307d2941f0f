#include "tessera/share_folder/fault_guard.h"

#include <setjmp.h>
#include <signal.h>

#include <mutex>

namespace tessera::share_folder {
namespace {

// The guarded access of this thread: a fault inside [t_begin, t_end) jumps back to t_jump.
thread_local sigjmp_buf* t_jump = nullptr;
thread_local const char* t_begin = nullptr;
thread_local const char* t_end = nullptr;
struct sigaction g_previous_sigbus {};

void on_sigbus(int signal_number, siginfo_t* info, void* context) {
  const char* address = static_cast<const char*>(info->si_addr);
  if (sigjmp_buf* jump = t_jump; jump && address >= t_begin && address < t_end) {
    t_jump = nullptr;
    siglongjmp(*jump, 1);
  }
  // Not a guarded access: what would have happened without the guard.
  if (g_previous_sigbus.sa_flags & SA_SIGINFO) {
    if (g_previous_sigbus.sa_sigaction) {
      g_previous_sigbus.sa_sigaction(signal_number, info, context);
      return;
    }
  } else if (g_previous_sigbus.sa_handler != SIG_DFL && g_previous_sigbus.sa_handler != SIG_IGN) {
    g_previous_sigbus.sa_handler(signal_number);
    return;
  }
  ::signal(SIGBUS, SIG_DFL);
  ::raise(SIGBUS);
}

void install_handler() {
  struct sigaction action {};
  action.sa_sigaction = on_sigbus;
  action.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&action.sa_mask);
  sigaction(SIGBUS, &action, &g_previous_sigbus);
}

}  // namespace

bool run_fault_guarded(const void* begin, size_t size, const std::function<void()>& access) {
  static std::once_flag installed;
  std::call_once(installed, install_handler);
  sigjmp_buf jump;
  if (sigsetjmp(jump, 1) != 0) return false;  // the handler cleared t_jump
  t_begin = static_cast<const char*>(begin);
  t_end = t_begin + size;
  t_jump = &jump;
  access();
  t_jump = nullptr;
  return true;
}

}  // namespace tessera::share_folder
