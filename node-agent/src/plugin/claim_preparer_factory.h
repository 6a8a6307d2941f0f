// How tessera-node-agent gets its ClaimPreparer: defined next to the share lifecycle (the concrete
// share manager), not in plugin/. The executable is built only where that definition exists.
#pragma once

#include <memory>

#include "agent_config.h"
#include "claim_preparer.h"

namespace tessera::agent {

// Builds the preparer for this node from the agent's settings. Returns null, after writing the
// reason to stderr, when it cannot (the agent then exits non-zero). The result is called from
// several gRPC threads at once: different kubelet batches run concurrently.
std::unique_ptr<ClaimPreparer> make_claim_preparer(const AgentConfig& config);

}  // namespace tessera::agent
