// A header of high/, included by name from its own folder.
#pragma once
