#include "views/top_view.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <optional>
#include <thread>

#include "exit_codes.h"
#include "tessera/unique_fd.h"
#include "views/device_place.h"
#include "views/format.h"
#include "views/local_node.h"

namespace tessera::cli {
namespace {

namespace v1 = tessera::node::v1;

// ---- rendering ---------------------------------------------------------------------------------

// Columns of a share line at 80 characters: name, GPU, bar, used/limit, cores, throttled, then
// the bar and the processes share what is left (more of both on a wider screen).
constexpr int kNameWidth = 14;
constexpr int kGpuWidth = 3;
constexpr int kMemoryTextWidth = 13;
constexpr int kCoresWidth = 9;
constexpr int kThrottledWidth = 4;
constexpr int kShareFixed = kNameWidth + 1 + kGpuWidth + 1 + 1 + kMemoryTextWidth + 1 +
                            kCoresWidth + 1 + kThrottledWidth + 1;
constexpr int kShareBarAt80 = 16;
constexpr int kShareBarMax = 40;
// Columns of a GPU line: index, name, bar, used/total, utilisation, shares, and the memory of
// processes of no share (OUTSIDE: the agent's out-of-band checks; "-" where not known).
constexpr int kGpuNameWidth = 16;
constexpr int kUtilWidth = 4;
constexpr int kSharesWidth = 6;
constexpr int kOutsideWidth = 7;
constexpr int kGpuFixed = kGpuWidth + 1 + kGpuNameWidth + 1 + 1 + kMemoryTextWidth + 1 +
                          kUtilWidth + 1 + kSharesWidth + 1 + kOutsideWidth;
constexpr int kGpuBarMax = 60;
// Header, summary, blank, GPU header, blank, share header.
constexpr int kFixedLines = 6;

const char* sort_name(TopSort sort) {
  switch (sort) {
    case TopSort::kCores:
      return "cores";
    case TopSort::kThrottled:
      return "throttled";
    case TopSort::kName:
      return "name";
    case TopSort::kMemory:
      break;
  }
  return "memory";
}

std::string clock_text(int64_t unix_ms) {
  const time_t seconds = static_cast<time_t>(unix_ms / 1000);
  struct tm local {};
  localtime_r(&seconds, &local);
  char text[16];
  std::strftime(text, sizeof text, "%H:%M:%S", &local);
  return text;
}

std::string percent_text(double value) {
  char text[16];
  std::snprintf(text, sizeof text, "%.0f", value);
  return text;
}

// "1 GPU", "2 shares", "3 processes".
std::string counted(size_t n, const std::string& noun) {
  const char* plural = noun.back() == 's' ? "es" : "s";
  return std::to_string(n) + " " + noun + (n == 1 ? "" : plural);
}

std::string cut(std::string line, int width) {
  if (static_cast<int>(line.size()) > width) line.resize(static_cast<size_t>(std::max(width, 0)));
  return line;
}

// `left` and `right` on one line of `width`, right-aligned when there is room.
std::string spread(const std::string& left, const std::string& right, int width) {
  const int gap = width - static_cast<int>(left.size()) - static_cast<int>(right.size());
  if (gap < 1) return cut(left, width);
  return left + std::string(static_cast<size_t>(gap), ' ') + right;
}

// What one share shows, and what it is sorted by.
struct ShareLine {
  const v1::Share* share = nullptr;
  uint64_t memory = 0;
  double cores = 0;
  double throttled = 0;
};

class Renderer {
 public:
  Renderer(const Snapshot& now, const Snapshot* before, const TopLayout& size)
      : now_(now), size_(size), width_(std::max(size.width, 1)) {
    if (before) rates_ = rates_between(before->node, now.node);
    has_rates_ = before != nullptr;
    for (const v1::Share& share : now.node.shares())
      for (const v1::ShareDevice& device : share.devices())
        share_gpu_width_ =
            std::max(share_gpu_width_,
                     static_cast<int>(place_label(find_device_place(now.node, device)).size()));
    share_bar_ = std::clamp(kShareBarAt80 + (width_ - 80) / 2, kShareBarAt80, kShareBarMax);
    process_width_ =
        std::max(1, width_ - kShareFixed - (share_gpu_width_ - kGpuWidth) - share_bar_);
    gpu_bar_ = std::clamp(width_ - kGpuFixed, 10, kGpuBarMax);
  }

  std::vector<std::string> render() {
    const v1::ListSharesResponse& node = now_.node;
    std::vector<ShareLine> shares = sorted_shares();
    size_t processes = 0;
    for (const ShareLine& line : shares)
      processes += static_cast<size_t>(line.share->processes_size());

    std::vector<std::string> lines;
    lines.push_back(
        spread("tessera top - " + node.node() + " - " + clock_text(node.sampled_unix_ms()),
               "source: " + now_.source, width_));
    lines.push_back(spread(counted(static_cast<size_t>(node.gpus_size()), "GPU") + ", " +
                               counted(static_cast<size_t>(node.shares_size()), "share") + ", " +
                               counted(processes, "process"),
                           std::string("sort: ") + sort_name(size_.sort) + " (m c t n)  q: quit",
                           width_));
    lines.emplace_back();

    // Shares whose folder could not be read whole (the agent's or the local reader's): one line,
    // the first one's reason and how many there are.
    std::vector<std::string> problem_lines;
    const v1::Share* first_unread = nullptr;
    size_t unread = 0;
    for (const v1::Share& share : node.shares()) {
      if (share.read_error().empty()) continue;
      if (!first_unread) first_unread = &share;
      ++unread;
    }
    if (first_unread) {
      std::string text = first_unread->name() + ": " + first_unread->read_error();
      if (unread > 1) text = std::to_string(unread) + " shares not read whole; " + text;
      problem_lines.push_back("! " + text);
    }

    // Rows for GPUs and shares: all when they fit (or there is no height), else as many as fit
    // with a line saying how many were left out.
    // A GPU's rows: its line, then one per MIG instance.
    const int gpu_count = node.gpus_size();
    std::vector<std::vector<std::string>> gpu_blocks;
    int gpu_rows_total = 0;
    for (const v1::Gpu& gpu : node.gpus()) {
      std::vector<std::string> block = {gpu_line(gpu)};
      for (const v1::MigInstance& instance : gpu.mig_instances())
        block.push_back(instance_line(instance));
      gpu_rows_total += static_cast<int>(block.size());
      gpu_blocks.push_back(std::move(block));
    }
    int share_rows_total = 0;
    for (const ShareLine& line : shares) share_rows_total += rows_of(*line.share);
    const bool limited = size_.height > 0;
    const int available =
        limited ? size_.height - kFixedLines - static_cast<int>(problem_lines.size()) : 1 << 30;
    int gpu_budget = gpu_rows_total;
    if (gpu_rows_total + std::max(share_rows_total, 1) > available)
      gpu_budget = std::min(gpu_rows_total, std::max(1, available / 3));

    lines.push_back(gpu_header());
    if (gpu_count == 0) {
      lines.push_back("No GPUs seen (NVML unavailable and no share names one)");
      gpu_budget = 1;
    } else if (gpu_budget >= gpu_rows_total) {
      for (const auto& block : gpu_blocks) lines.insert(lines.end(), block.begin(), block.end());
    } else {
      // Whole GPUs (with their instances) while they fit beside the "+N more" line.
      int shown = 0, rows = 0;
      while (shown < gpu_count &&
             rows + static_cast<int>(gpu_blocks[shown].size()) <= gpu_budget - 1) {
        rows += static_cast<int>(gpu_blocks[shown].size());
        lines.insert(lines.end(), gpu_blocks[shown].begin(), gpu_blocks[shown].end());
        ++shown;
      }
      lines.push_back("+" + std::to_string(gpu_count - shown) + " more GPUs");
      gpu_budget = rows + 1;
    }
    lines.emplace_back();

    lines.push_back(share_header());
    int share_budget = available - gpu_budget;
    if (shares.empty()) {
      lines.push_back("No shares (`tessera run --memory 4Gi -- <command>` starts one)");
    }
    for (size_t s = 0; s < shares.size(); ++s) {
      const int rows = rows_of(*shares[s].share);
      const int reserve = s + 1 < shares.size() ? 1 : 0;
      if (limited && rows + reserve > share_budget) {
        lines.push_back("+" + std::to_string(shares.size() - s) + " more shares (sorted by " +
                        sort_name(size_.sort) + "; enlarge the window to see them)");
        break;
      }
      share_budget -= rows;
      add_share_lines(shares[s], lines);
    }
    for (std::string& line : problem_lines) lines.push_back(std::move(line));

    for (std::string& line : lines) {
      line = cut(std::move(line), width_);
      line.erase(line.find_last_not_of(' ') + 1);  // no trailing blanks (the last column pads)
    }
    if (limited && static_cast<int>(lines.size()) > size_.height)
      lines.resize(static_cast<size_t>(std::max(size_.height, 0)));
    return lines;
  }

 private:
  int rows_of(const v1::Share& share) const { return std::max(1, share.devices_size()); }

  const DeviceRates* rates_of(const v1::Share& share, const v1::ShareDevice& device) const {
    const auto found = rates_.find(share_device_key(share.name(), device.gpu_uuid()));
    return found == rates_.end() ? nullptr : &found->second;
  }

  // GPU time used: the rate between the two snapshots, else what the agent measured.
  std::optional<double> cores_used(const v1::Share& share, const v1::ShareDevice& device) const {
    if (const DeviceRates* rates = rates_of(share, device)) return rates->cores_used_percent;
    if (!has_rates_ && now_.source == "agent") return device.cores_used_percent();
    return std::nullopt;
  }

  std::vector<ShareLine> sorted_shares() const {
    std::vector<ShareLine> shares;
    for (const v1::Share& share : now_.node.shares()) {
      ShareLine line;
      line.share = &share;
      for (const v1::ShareDevice& device : share.devices()) {
        line.memory += device.memory_used_bytes();
        line.cores += cores_used(share, device).value_or(0);
        if (const DeviceRates* rates = rates_of(share, device))
          line.throttled = std::max(line.throttled, rates->throttled_percent);
      }
      shares.push_back(line);
    }
    const TopSort sort = size_.sort;
    std::stable_sort(shares.begin(), shares.end(), [sort](const ShareLine& a, const ShareLine& b) {
      switch (sort) {
        case TopSort::kMemory:
          if (a.memory != b.memory) return a.memory > b.memory;
          break;
        case TopSort::kCores:
          if (a.cores != b.cores) return a.cores > b.cores;
          break;
        case TopSort::kThrottled:
          if (a.throttled != b.throttled) return a.throttled > b.throttled;
          break;
        case TopSort::kName:
          break;
      }
      return a.share->name() < b.share->name();
    });
    return shares;
  }

  std::string gpu_header() const {
    return pad_right("GPU", kGpuWidth) + " " + pad_right("NAME", kGpuNameWidth) + " " +
           pad_right("MEMORY", gpu_bar_) + " " + pad_left("USED/TOTAL", kMemoryTextWidth) + " " +
           pad_left("UTIL", kUtilWidth) + " " + pad_left("SHARES", kSharesWidth) + " " +
           pad_left("OUTSIDE", kOutsideWidth);
  }

  std::string gpu_line(const v1::Gpu& gpu) const {
    const bool seen = !gpu.name().empty() || gpu.memory_total_bytes() > 0;
    std::string memory = "-";
    double fraction = 0;
    if (gpu.memory_total_bytes() > 0) {
      memory = format_bytes(gpu.memory_used_bytes()) + "/" + format_bytes(gpu.memory_total_bytes());
      fraction = static_cast<double>(gpu.memory_used_bytes()) /
                 static_cast<double>(gpu.memory_total_bytes());
    }
    const std::string name = seen ? gpu.name() : gpu.uuid();
    // NVML has no utilisation for a GPU in MIG mode (mig-facts.md §2.4): "-", not 0 %.
    const bool utilization = seen && !gpu.mig_enabled();
    return pad_right(seen ? std::to_string(gpu.index()) : "?", kGpuWidth) + " " +
           pad_right(name, kGpuNameWidth) + " " + format_bar(fraction, gpu_bar_) + " " +
           pad_left(memory, kMemoryTextWidth) + " " +
           pad_left(utilization ? percent_text(gpu.utilization_percent()) + "%" : "-", kUtilWidth) +
           " " + pad_left(std::to_string(gpu.shares()), kSharesWidth) + " " +
           pad_left(gpu.has_unaccounted_memory_bytes()
                        ? format_bytes(gpu.unaccounted_memory_bytes())
                        : "-",
                    kOutsideWidth);
  }

  // A MIG instance under its GPU's line: " gi1 3g.71gb" ('!' first when unhealthy), its memory
  // (used as NVML reads it through the instance) and the shares inside it.
  std::string instance_line(const v1::MigInstance& instance) const {
    const std::string name = std::string(instance.healthy() ? " " : "!") + "gi" +
                             std::to_string(instance.gpu_instance_id()) + " " + instance.profile();
    std::string memory = "-";
    double fraction = 0;
    if (instance.memory_total_bytes() > 0) {
      memory = format_bytes(instance.memory_used_bytes()) + "/" +
               format_bytes(instance.memory_total_bytes());
      fraction = static_cast<double>(instance.memory_used_bytes()) /
                 static_cast<double>(instance.memory_total_bytes());
    }
    return pad_right("", kGpuWidth) + " " + pad_right(name, kGpuNameWidth) + " " +
           format_bar(fraction, gpu_bar_) + " " + pad_left(memory, kMemoryTextWidth) + " " +
           pad_left("-", kUtilWidth) + " " +
           pad_left(std::to_string(instance.shares()), kSharesWidth) + " " +
           pad_left("-", kOutsideWidth);
  }

  std::string share_header() const {
    return pad_right("SHARE", kNameWidth) + " " + pad_right("GPU", share_gpu_width_) + " " +
           pad_right("MEMORY", share_bar_) + " " + pad_left("USED/LIMIT", kMemoryTextWidth) + " " +
           pad_left("CORES", kCoresWidth) + " " + pad_left("THR", kThrottledWidth) + " " +
           pad_right("PROCESSES", process_width_);
  }

  // "2 compute-burn,sh": how many processes, then their distinct commands, as many as fit whole
  // ("+" when some did not).
  std::string processes_text(const v1::Share& share) const {
    std::string text = std::to_string(share.processes_size());
    std::vector<std::string> commands;
    for (const v1::Process& process : share.processes()) {
      std::string command =
          process.command().empty() ? "pid " + std::to_string(process.pid()) : process.command();
      if (std::find(commands.begin(), commands.end(), command) == commands.end())
        commands.push_back(std::move(command));
    }
    for (size_t i = 0; i < commands.size(); ++i) {
      const std::string next = text + (i == 0 ? " " : ",") + commands[i];
      const int room = process_width_ - (i + 1 < commands.size() ? 1 : 0);
      if (static_cast<int>(next.size()) > room) {
        // The first command is cut rather than left out: a name is better than a count.
        if (i == 0) return cut(next, process_width_);
        return cut(text + "+", process_width_);
      }
      text = next;
    }
    return text;
  }

  // The bar of a share whose usage is unknown: no fill that could be read as 0.
  std::string unknown_bar() const {
    std::string bar = format_bar(0, share_bar_);
    std::fill(bar.begin() + 1, bar.end() - 1, ' ');
    if (share_bar_ > 2) bar[static_cast<size_t>(1 + (share_bar_ - 2) / 2)] = '?';
    return bar;
  }

  void add_share_lines(const ShareLine& line, std::vector<std::string>& lines) const {
    const v1::Share& share = *line.share;
    const std::string name = pad_right(share.name(), kNameWidth);
    const bool known = share.read_error().empty();
    const std::string processes = known ? processes_text(share) : std::string("?");
    if (share.devices().empty()) {
      lines.push_back(name + " " + pad_right("-", share_gpu_width_) + " " +
                      (known ? format_bar(0, share_bar_) : unknown_bar()) + " " +
                      pad_left("-", kMemoryTextWidth) + " " + pad_left("-", kCoresWidth) + " " +
                      pad_left("-", kThrottledWidth) + " " + processes);
      return;
    }
    bool first = true;
    for (const v1::ShareDevice& device : share.devices()) {
      const DevicePlace place = find_device_place(now_.node, device);
      const v1::Gpu* gpu = place.gpu;
      const bool gpu_seen =
          gpu && (place.instance || !gpu->name().empty() || gpu->memory_total_bytes() > 0);
      // Inside a MIG instance the share's part is of the instance's memory, not the GPU's.
      const uint64_t place_total = place.instance ? place.instance->memory_total_bytes()
                                                  : (gpu ? gpu->memory_total_bytes() : 0);
      double fraction = 0;
      std::string limit = "-";
      if (!device.memory_unlimited()) {
        limit = format_bytes(device.memory_limit_bytes());
        fraction = device.memory_limit_bytes() == 0
                       ? (device.memory_used_bytes() > 0 ? 1.0 : 0.0)
                       : static_cast<double>(device.memory_used_bytes()) /
                             static_cast<double>(device.memory_limit_bytes());
      } else if (place_total > 0) {
        // No limit: the bar is the share's part of the whole GPU (or MIG instance).
        fraction =
            static_cast<double>(device.memory_used_bytes()) / static_cast<double>(place_total);
      }
      // A share that could not be read: its limits are known, what it uses is not ("?").
      const std::optional<double> used = known ? cores_used(share, device) : std::nullopt;
      const DeviceRates* rates = known ? rates_of(share, device) : nullptr;
      const std::string cores = (used ? percent_text(*used) : std::string(known ? "-" : "?")) +
                                "/" + std::to_string(device.cores_request_percent()) + "%";
      const std::string throttled =
          rates ? percent_text(rates->throttled_percent) + "%" : std::string(known ? "-" : "?");
      const std::string memory =
          (known ? format_bytes(device.memory_used_bytes()) : std::string("?")) + "/" + limit;
      lines.push_back((first ? name : std::string(kNameWidth, ' ')) + " " +
                      pad_right(gpu_seen ? place_label(place) : "?", share_gpu_width_) + " " +
                      (known ? format_bar(fraction, share_bar_) : unknown_bar()) + " " +
                      pad_left(memory, kMemoryTextWidth) + " " + pad_left(cores, kCoresWidth) +
                      " " + pad_left(throttled, kThrottledWidth) + " " +
                      (first ? processes : std::string()));
      first = false;
    }
  }

  const Snapshot& now_;
  const TopLayout& size_;
  const int width_;
  std::map<std::string, DeviceRates> rates_;
  bool has_rates_ = false;
  int share_bar_ = kShareBarAt80;
  int process_width_ = 1;
  int gpu_bar_ = 10;
  // The share lines' GPU column: wider where a share sits inside a MIG instance ("0/gi12").
  int share_gpu_width_ = kGpuWidth;
};

// ---- the terminal ------------------------------------------------------------------------------

// Set by the signal handlers, acted on by the loop (wait_key and suspend): a handler only sets its
// flag and writes a byte to the self-pipe, so a signal that lands just before poll still wakes it.
volatile sig_atomic_t g_stop_signal = 0;
volatile sig_atomic_t g_resized = 0;
volatile sig_atomic_t g_suspend = 0;    // SIGTSTP (^Z): give the terminal back, then stop
volatile sig_atomic_t g_continued = 0;  // SIGCONT: take the terminal again and redraw
volatile sig_atomic_t g_wake_fd = -1;   // the self-pipe's write end while a screen lives

void wake_loop() {
  const int saved_errno = errno;
  if (const int fd = g_wake_fd; fd >= 0) {
    const char byte = 0;
    [[maybe_unused]] const ssize_t ignored = ::write(fd, &byte, 1);  // full pipe: already awake
  }
  errno = saved_errno;
}
void on_stop_signal(int signal_number) {
  g_stop_signal = signal_number;
  wake_loop();
}
void on_resize(int) {
  g_resized = 1;
  wake_loop();
}
void on_suspend(int) {
  g_suspend = 1;
  wake_loop();
}
void on_continue(int) {
  g_continued = 1;
  wake_loop();
}

void write_all(int fd, const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

// The real terminal, for as long as it lives: keys unbuffered and not echoed, the alternate
// screen, the cursor hidden, signal handlers that end the loop; everything restored when it goes
// (after 'q', SIGINT, SIGTERM or SIGHUP alike). ^Z gives the terminal back before the process
// stops, as top, htop and less do, and SIGCONT takes it again (also after a SIGSTOP from outside,
// which left no chance to give it back).
class AnsiScreen : public TopScreen {
 public:
  AnsiScreen() {
    g_stop_signal = 0;
    g_resized = 0;
    g_suspend = 0;
    g_continued = 0;
    int ends[2] = {-1, -1};
    if (::pipe2(ends, O_CLOEXEC | O_NONBLOCK) == 0) {
      wake_read_.reset(ends[0]);
      wake_write_.reset(ends[1]);
      g_wake_fd = wake_write_.get();
    }
    struct sigaction action {};
    sigemptyset(&action.sa_mask);
    action.sa_handler = on_stop_signal;  // no SA_RESTART: poll returns at once with EINTR
    for (size_t i = 0; i < kStopSignals.size(); ++i)
      ::sigaction(kStopSignals[i], &action, &saved_actions_[i]);
    action.sa_handler = on_resize;
    ::sigaction(SIGWINCH, &action, &saved_winch_);
    action.sa_handler = on_suspend;
    ::sigaction(SIGTSTP, &action, &saved_tstp_);
    action.sa_handler = on_continue;
    ::sigaction(SIGCONT, &action, &saved_cont_);
    keys_ = ::isatty(STDIN_FILENO) != 0;
    enter();
  }
  ~AnsiScreen() override {
    leave();
    for (size_t i = 0; i < kStopSignals.size(); ++i)
      ::sigaction(kStopSignals[i], &saved_actions_[i], nullptr);
    ::sigaction(SIGWINCH, &saved_winch_, nullptr);
    ::sigaction(SIGTSTP, &saved_tstp_, nullptr);
    ::sigaction(SIGCONT, &saved_cont_, nullptr);
    g_wake_fd = -1;
  }
  AnsiScreen(const AnsiScreen&) = delete;
  AnsiScreen& operator=(const AnsiScreen&) = delete;

  TopLayout size() override {
    TopLayout layout;
    struct winsize window {};
    if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &window) == 0 && window.ws_col > 0 &&
        window.ws_row > 0) {
      layout.width = window.ws_col;
      layout.height = window.ws_row;
    }
    return layout;
  }

  int wait_key(int64_t timeout_ms) override {
    if (const int event = pending_event()) return event;
    std::array<pollfd, 2> fds = {pollfd{wake_read_.get(), POLLIN, 0},
                                 pollfd{STDIN_FILENO, POLLIN, 0}};
    const int timeout = static_cast<int>(std::clamp<int64_t>(timeout_ms, 0, 60'000));
    // Without a self-pipe (pipe2 failed) a signal still ends poll with EINTR.
    pollfd* first = wake_read_ ? &fds[0] : &fds[1];
    const nfds_t count = (wake_read_ ? 1 : 0) + (keys_ ? 1 : 0);
    const int ready = ::poll(count > 0 ? first : nullptr, count, timeout);
    if (wake_read_ && (fds[0].revents & POLLIN)) drain_wake_pipe();
    if (const int event = pending_event()) return event;
    if (ready <= 0 || !keys_ || (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) == 0) return 0;
    unsigned char key = 0;
    const ssize_t n = ::read(STDIN_FILENO, &key, 1);
    if (n == 0 || (n < 0 && errno != EINTR && errno != EAGAIN)) keys_ = false;  // input closed
    return n == 1 ? key : 0;
  }

  void draw(const std::vector<std::string>& lines) override {
    std::string frame = "\x1b[H";
    for (size_t i = 0; i < lines.size(); ++i) {
      frame += lines[i];
      frame += "\x1b[K";
      // No newline after the last line: on the bottom row it would scroll the screen.
      if (i + 1 < lines.size()) frame += "\r\n";
    }
    frame += "\x1b[J";
    write_all(STDOUT_FILENO, frame);
  }

  // ^Z: the terminal as it was, then stopped with SIGTSTP's own action (the shell sees a stopped
  // job); once continued (fg, bg, SIGCONT), the handler back and the terminal taken again.
  void suspend() override {
    leave();
    struct sigaction default_action {};
    sigemptyset(&default_action.sa_mask);
    default_action.sa_handler = SIG_DFL;
    struct sigaction ours {};
    ::sigaction(SIGTSTP, &default_action, &ours);
    sigset_t tstp;
    sigemptyset(&tstp);
    sigaddset(&tstp, SIGTSTP);
    ::sigprocmask(SIG_UNBLOCK, &tstp, nullptr);
    ::raise(SIGTSTP);  // returns once continued
    ::sigaction(SIGTSTP, &ours, nullptr);
    g_suspend = 0;
    g_continued = 0;  // this resume is handled here
    drain_wake_pipe();
    enter();
  }

 private:
  // An event a signal flagged, acted on here (never in the handler); 0 when none.
  int pending_event() {
    if (g_stop_signal) return kStop;
    if (g_suspend) return kSuspend;
    if (g_continued) {
      // Continued without our ^Z (a SIGSTOP from outside): whoever had the terminal meanwhile
      // may have reset it.
      g_continued = 0;
      enter();
      return kResized;
    }
    if (g_resized) {
      g_resized = 0;
      return kResized;
    }
    return 0;
  }

  void drain_wake_pipe() {
    char bytes[64];
    while (::read(wake_read_.get(), bytes, sizeof bytes) > 0) {
    }
  }

  // Keys unbuffered and not echoed, the alternate screen, the cursor hidden. The terminal's own
  // settings are taken when this screen does not hold it (the shell may have changed them while
  // the process was stopped), kept when it does (continued after a SIGSTOP from outside).
  void enter() {
    if (keys_ && !raw_ && ::tcgetattr(STDIN_FILENO, &saved_termios_) == 0) have_saved_ = true;
    if (have_saved_) {
      termios raw = saved_termios_;
      raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);  // ISIG stays: ^C is SIGINT, ^Z SIGTSTP
      raw.c_cc[VMIN] = 0;
      raw.c_cc[VTIME] = 0;
      if (::tcsetattr(STDIN_FILENO, TCSAFLUSH, &raw) == 0) raw_ = true;
    }
    write_all(STDOUT_FILENO, "\x1b[?1049h\x1b[?25l");
  }

  void leave() {
    write_all(STDOUT_FILENO, "\x1b[?25h\x1b[?1049l");
    if (raw_) ::tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved_termios_);
    raw_ = false;
  }

  static constexpr std::array<int, 3> kStopSignals = {SIGINT, SIGTERM, SIGHUP};
  std::array<struct sigaction, 3> saved_actions_{};
  struct sigaction saved_winch_ {};
  struct sigaction saved_tstp_ {};
  struct sigaction saved_cont_ {};
  termios saved_termios_{};
  UniqueFd wake_read_, wake_write_;
  bool have_saved_ = false;  // saved_termios_ holds the terminal's own settings
  bool raw_ = false;         // the terminal is in this screen's mode
  bool keys_ = false;
};

int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::optional<TopSort> parse_sort(const std::string& text) {
  if (text == "memory") return TopSort::kMemory;
  if (text == "cores") return TopSort::kCores;
  if (text == "throttled") return TopSort::kThrottled;
  if (text == "name") return TopSort::kName;
  return std::nullopt;
}

}  // namespace

std::vector<std::string> render_top(const Snapshot& now, const Snapshot* before,
                                    const TopLayout& size) {
  return Renderer(now, before, size).render();
}

std::vector<std::string> render_top_error(const Status& status, const TopLayout& size) {
  const int width = std::max(size.width, 1);
  std::vector<std::string> lines = {cut("tessera top", width), "",
                                    cut("cannot read the node: " + status.message(), width),
                                    cut("(retrying every interval; q quits)", width)};
  if (size.height > 0 && static_cast<int>(lines.size()) > size.height)
    lines.resize(static_cast<size_t>(size.height));
  return lines;
}

void run_top_screen(const SnapshotSource& source, TopScreen& screen,
                    const TopLoopOptions& options) {
  const auto clock = options.monotonic_ms ? options.monotonic_ms : steady_ms;
  TopSort sort = options.sort;
  std::optional<Snapshot> now, before;
  Status error;
  int64_t next_sample = clock();
  for (;;) {
    if (clock() >= next_sample) {
      Result<Snapshot> taken = source();
      if (taken.is_ok()) {
        before = std::move(now);
        now = std::move(taken).value();
        error = Status::ok();
      } else {
        error = taken.status();
      }
      next_sample = clock() + options.interval_ms;
    }
    TopLayout layout = screen.size();
    layout.sort = sort;
    screen.draw(error.is_ok() && now ? render_top(*now, before ? &*before : nullptr, layout)
                                     : render_top_error(error, layout));
    const int key = screen.wait_key(std::max<int64_t>(0, next_sample - clock()));
    switch (key) {
      case TopScreen::kStop:
      case 'q':
      case 'Q':
        return;
      case TopScreen::kSuspend:
        screen.suspend();  // returns once continued: drawn again at once
        break;
      case 'm':
        sort = TopSort::kMemory;
        break;
      case 'c':
        sort = TopSort::kCores;
        break;
      case 't':
        sort = TopSort::kThrottled;
        break;
      case 'n':
        sort = TopSort::kName;
        break;
      default:
        break;  // a timeout, a resize or another key: draw again
    }
  }
}

Status run_top_plain(const SnapshotSource& source, int iterations, int width,
                     const TopLoopOptions& options,
                     const std::function<void(const std::string&)>& write,
                     const std::function<void(int64_t)>& sleep_ms) {
  const auto clock = options.monotonic_ms ? options.monotonic_ms : steady_ms;
  TopLayout layout;
  layout.width = width;
  layout.height = 0;
  layout.sort = options.sort;
  // One snapshot an interval before the first print, so every print has rates (cores used,
  // throttled), as vmstat's and iostat's reports after their first do.
  int64_t started = clock();
  TESSERA_ASSIGN_OR_RETURN(Snapshot first, source());
  Snapshot before = std::move(first);
  for (int i = 0; iterations == 0 || i < iterations; ++i) {
    sleep_ms(std::max<int64_t>(0, started + options.interval_ms - clock()));
    started = clock();
    TESSERA_ASSIGN_OR_RETURN(Snapshot now, source());
    std::string text;
    for (const std::string& line : render_top(now, &before, layout)) text += line + "\n";
    write(text + "\n");
    before = std::move(now);
  }
  return Status::ok();
}

void add_top_command(CLI::App& app) {
  struct Options {
    bool once = false;
    int iterations = 0;
    double interval_s = 1.0;
    std::string sort = "memory";
    SourceOptions source;
  };
  auto options = std::make_shared<Options>();
  CLI::App* command = app.add_subcommand(
      "top",
      "Live usage of the node's GPUs and shares (q quits); plain lines when not on a "
      "terminal");
  command->add_flag("--once", options->once, "Print one snapshot as plain lines and exit");
  command
      ->add_option("-n,--iterations", options->iterations,
                   "Print this many snapshots as plain lines, one per interval, and exit")
      ->check(CLI::PositiveNumber);
  command->add_option("-d,--interval", options->interval_s, "Seconds between snapshots")
      ->check(CLI::Range(0.1, 3600.0));
  command->add_option("--sort", options->sort, "Sort shares by memory, cores, throttled or name")
      ->check(CLI::IsMember({"memory", "cores", "throttled", "name"}));
  // -n is the iteration count, as top's: the namespace is --namespace only.
  add_source_options(*command, options->source, /*short_namespace=*/false);
  // Exit statuses by std::exit: main.cc reports anything CLI11 throws as a usage error.
  command->callback([options] {
    const SnapshotSource source = make_snapshot_source(options->source, default_agent_lister());
    TopLoopOptions loop;
    loop.interval_ms = static_cast<int64_t>(std::llround(options->interval_s * 1000.0));
    loop.sort = parse_sort(options->sort).value_or(TopSort::kMemory);
    const int iterations = options->once ? 1 : options->iterations;
    if (iterations == 0 && ::isatty(STDOUT_FILENO)) {
      {
        AnsiScreen screen;
        run_top_screen(source, screen, loop);
      }  // the terminal is restored here
      // Ended as asked (q, ^C, SIGTERM, SIGHUP): done, as `tessera events --follow` is.
      std::exit(kExitOk);
    }
    int width = 80;
    if (const char* columns = std::getenv("COLUMNS"); columns && std::atoi(columns) > 80)
      width = std::atoi(columns);
    const Status done = run_top_plain(
        source, iterations, width, loop,
        [](const std::string& text) {
          std::fputs(text.c_str(), stdout);
          std::fflush(stdout);
        },
        [](int64_t ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); });
    if (!done.is_ok()) {
      std::fprintf(stderr, "tessera top: %s\n", done.message().c_str());
      std::exit(kExitFailed);
    }
  });
}

}  // namespace tessera::cli
