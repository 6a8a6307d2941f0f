// A folder no rule names.
#pragma once
