// Text pieces the CLI's views share: sizes, ages, percentages, bars and fitted columns. Pure
// functions over ASCII, so a column's width in characters is its width on screen.
#pragma once

#include <cstdint>
#include <string>

namespace tessera::cli {

// Binary units as Kubernetes quantities: "512", "3.5Ki", "4Gi", "16Gi", "140Gi" (one decimal
// below 10, none above; at most 6 characters below 1 Pi).
std::string format_bytes(uint64_t bytes);
// kubectl's AGE: "45s", "3m12s", "17m", "5h2m", "3d4h", "12d"; "<unknown>" when negative.
std::string format_age(int64_t milliseconds);
// "[#####.....]" of `width` characters in all (at least 2): `fraction` (clamped to 0..1) of the
// inside filled, rounded to the nearest character.
std::string format_bar(double fraction, int width);
// `text` cut to `width` characters: the end kept after a '~' when it is too long (names differ
// at the end: tessera-run-4f2a9c -> tessera~4f2a9c).
std::string fit(const std::string& text, int width);
// `text` padded with spaces on the right (left-aligned) or left, then cut, to exactly `width`.
std::string pad_right(const std::string& text, int width);
std::string pad_left(const std::string& text, int width);

}  // namespace tessera::cli
