// The upper layer: may include the lower one, by path and by name.
#pragma once

#include "high_detail.h"
#include "low/low.h"
#include "tessera/status.h"
