// The share's counters summed over its live process slots (the figures `tessera run --verbose`
// prints and the meter reads). Pure reads of a mapped usage page.
#pragma once

#include <cstdint>

#include "tessera/share_region.h"

namespace tessera::vgpu::compute {

// Total launches of the share's live slots.
uint64_t share_launches(const share::UsagePage& usage);
// Total time the share's launching threads waited at the compute gate.
uint64_t share_throttled_ns(const share::UsagePage& usage);

}  // namespace tessera::vgpu::compute
