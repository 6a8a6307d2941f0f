// `tessera top`: a live full-screen table of the node's GPUs and shares, as nvidia-smi and htop
// show theirs. render_top is pure (a snapshot, the one before it for rates, a size -> the lines);
// the loops around it take the terminal, the clock and the sleeper as parameters, so tests drive
// them without a terminal or time passing. With stdout not a terminal it prints plain lines.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tessera/status.h"
#include "views/node_source.h"

namespace CLI {
class App;
}

namespace tessera::cli {

enum class TopSort { kMemory, kCores, kThrottled, kName };

struct TopLayout {
  int width = 80;
  int height = 24;  // 0: as many lines as it takes (plain output)
  TopSort sort = TopSort::kMemory;
};

// The screen: a header (node, time, source), one line per GPU (memory bar, utilisation), one line
// per GPU of each share (memory used/limit with a bar, cores used/quota, throttled %, processes),
// shares sorted by `size.sort` (largest first; names A-Z), and a line for shares that could not be
// read (read_error: the first one's reason, and how many; their usage figures show as "?",
// unknown, never 0). No line is longer than size.width and, with a height, there are at most
// size.height lines: shares that do not fit are counted in a "+N more shares" line. Rates (cores
// used, throttled) need `before` (the previous snapshot); without it the agent's cores_used_percent
// is shown, and
// "-" where there is none.
std::vector<std::string> render_top(const Snapshot& now, const Snapshot* before,
                                    const TopLayout& size);
// A screen for a snapshot that could not be taken.
std::vector<std::string> render_top_error(const Status& status, const TopLayout& size);

// What the full-screen loop needs of a terminal.
class TopScreen {
 public:
  static constexpr int kSuspend = -3;  // wait_key: ^Z (SIGTSTP): the loop calls suspend()
  static constexpr int kResized = -2;  // wait_key: the terminal changed size (or must be redrawn)
  static constexpr int kStop = -1;     // wait_key: a signal asks the loop to end
  virtual ~TopScreen() = default;
  virtual TopLayout size() = 0;
  // A key pressed within `timeout_ms` (its byte), 0 when none was, kResized or kStop.
  virtual int wait_key(int64_t timeout_ms) = 0;
  virtual void draw(const std::vector<std::string>& lines) = 0;
  // Gives the terminal back, stops the process until it is continued, then takes the terminal
  // again (the loop draws at once). A screen that is no terminal has nothing to give back.
  virtual void suspend() {}
};

struct TopLoopOptions {
  int64_t interval_ms = 1000;
  TopSort sort = TopSort::kMemory;
  std::function<int64_t()> monotonic_ms;  // the loop's clock
};

// Full screen: a snapshot every interval, redrawn at once on a key or a resize. 'q' quits; 'm',
// 'c', 't', 'n' sort by memory, cores, throttled, name. Ends with kStop too; kSuspend suspends the
// screen and redraws once it is back.
void run_top_screen(const SnapshotSource& source, TopScreen& screen, const TopLoopOptions& options);

// Plain lines: `iterations` snapshots (0: until killed) `interval_ms` apart, each rendered at
// `width` with no height limit and followed by an empty line. A first snapshot, one interval
// before the first print, gives every print its rates. Fails with the first snapshot that cannot
// be taken.
Status run_top_plain(const SnapshotSource& source, int iterations, int width,
                     const TopLoopOptions& options,
                     const std::function<void(const std::string&)>& write,
                     const std::function<void(int64_t)>& sleep_ms);

// Registers `tessera top` on `app`.
void add_top_command(CLI::App& app);

}  // namespace tessera::cli
