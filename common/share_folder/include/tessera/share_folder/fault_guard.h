// Writes through a mapping of a file in a share folder run guarded: the folder is writable from
// the share's containers, so the file may be truncated under the mapping, and touching a page the
// file no longer backs raises SIGBUS. Under the guard that fault ends the access with a false
// return instead of ending the agent.
#pragma once

#include <cstddef>
#include <functional>

namespace tessera::share_folder {

// Runs `access` on this thread; a SIGBUS at an address in [begin, begin + size) stops it there
// (siglongjmp) and the call returns false. True when it ran to its end. `access` must own nothing
// that needs a destructor past a faulting instruction. Installs the process's SIGBUS handler on
// first use; a SIGBUS anywhere else goes to the handler that was there before (or the default
// action), as if no guard existed.
bool run_fault_guarded(const void* begin, size_t size, const std::function<void()>& access);

}  // namespace tessera::share_folder
