// Breaks the rule: the lower layer reaches up.
#pragma once

#include "high/high.h"
