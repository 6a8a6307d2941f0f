#include "views/events.h"

#include <signal.h>

#include <cstdio>
#include <ctime>
#include <iostream>
#include <map>
#include <thread>

#include <CLI/CLI.hpp>

#include "exit_codes.h"
#include "tessera/node_events/snapshot_events.h"
#include "views/agent_client.h"
#include "views/shares_view.h"

namespace tessera::cli {

namespace v1 = tessera::node::v1;

namespace {

std::string time_text(int64_t unix_ms) {
  const std::time_t seconds = static_cast<std::time_t>(unix_ms / 1000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[40];
  const size_t length = std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &utc);
  std::snprintf(text + length, sizeof text - length, ".%03dZ",
                static_cast<int>(unix_ms % 1000 < 0 ? 0 : unix_ms % 1000));
  return text;
}

std::string subject(const v1::Event& event) {
  std::string text;
  if (!event.claim().empty()) text = event.namespace_() + "/" + event.claim();
  if (!event.share().empty()) text += (text.empty() ? "" : " ") + ("share " + event.share());
  if (!event.pod().empty()) text += " pod " + event.pod();
  if (text.empty() && !event.gpu_uuid().empty()) text = event.gpu_uuid();
  return text.empty() ? "-" : text;
}

// Prints what the agent streams; stops when asked.
Status events_from_agent(const AgentClient& client, const EventsOptions& options, std::ostream& out,
                         const std::atomic<bool>& stop) {
  const auto print = [&](const v1::Event& event) {
    if (options.namespaces.accepts(event.namespace_()))
      out << format_event(event, options.output) << '\n' << std::flush;
    return true;
  };
  // Without --follow: what the agent remembers, and the stream ends.
  if (!options.follow) return client.watch_recent(print, stop);
  return client.watch_events(true, print, stop);
}

Status events_from_local(const EventsOptions& options, const LocalSnapshot& local,
                         std::ostream& out, std::ostream& err, const std::atomic<bool>& stop) {
  if (!local) return unavailable("this build of tessera cannot read the local shares");
  TESSERA_ASSIGN_OR_RETURN(v1::ListSharesResponse first, local(),
                           with_context("cannot read the local shares"));
  if (!options.follow) {
    err << "tessera events: the local shares keep no history; --follow shows what happens to them "
           "from now on\n";
    return Status::ok();
  }
  v1::ListSharesResponse last = std::move(first);
  uint64_t sequence = 0;
  auto next = std::chrono::steady_clock::now();
  while (!stop.load()) {
    next += options.local_interval;
    while (!stop.load() && std::chrono::steady_clock::now() < next)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (stop.load()) break;
    Result<v1::ListSharesResponse> now = local();
    if (!now.is_ok()) {
      err << "tessera events: " << now.status().message() << '\n';
      continue;
    }
    for (v1::Event& event : tessera::node_events::snapshot_events(last, *now)) {
      event.set_sequence(++sequence);
      if (options.namespaces.accepts(event.namespace_()))
        out << format_event(event, options.output) << '\n' << std::flush;
    }
    last = std::move(now).value();
  }
  return Status::ok();
}

std::atomic<bool> g_interrupted{false};
void on_stop_signal(int) {
  g_interrupted.store(true);
}

}  // namespace

std::string format_event(const v1::Event& event, const std::string& output) {
  // The JSON of `tessera shares -o json` (numbers as numbers, every field), on one line.
  if (output == "json") return message_to_json(event).dump();
  if (output == "yaml") {
    std::string document = "---\n" + json_to_yaml(message_to_json(event));
    document.pop_back();  // the caller ends the line
    return document;
  }
  std::string line = time_text(event.unix_ms()) + "  " +
                     tessera::node_events::event_kind_name(event.kind()) + "  " + subject(event) +
                     "  " + event.message();
  if (output != "wide") return line;
  std::map<std::string, std::string> fields(event.fields().begin(), event.fields().end());
  for (const auto& [key, value] : fields) line += "  " + key + "=" + value;
  return std::to_string(event.sequence()) + "  " + line;
}

Status run_events(const EventsOptions& options, const LocalSnapshot& local, std::ostream& out,
                  std::ostream& err, const std::atomic<bool>& stop) {
  if (options.output != "text" && options.output != "wide" && options.output != "json" &&
      options.output != "yaml")
    return invalid_argument("-o " + options.output + ": must be text, wide, json or yaml");
  const std::string socket = api_socket_path(options.socket);
  Result<AgentClient> client = AgentClient::connect(socket);
  if (client.is_ok()) return events_from_agent(*client, options, out, stop);
  // Without an agent here (no socket, or one nobody listens on): the local shares. A socket this
  // user may not open is an agent that is there: said, not papered over with the local shares.
  if (client.status().code() == StatusCode::kFailedPrecondition) return client.status();
  err << "tessera events: " << client.status().message() << "; showing the local tessera run "
      << "shares\n";
  return events_from_local(options, local, out, err, stop);
}

void add_events_command(CLI::App& app, LocalSnapshot local) {
  auto options = std::make_shared<EventsOptions>();
  CLI::App* command =
      app.add_subcommand("events",
                         "What happened to this machine's GPU shares: prepared, unprepared, denied "
                         "allocations, throttling, findings, GPU health");
  command->add_flag("-f,--follow", options->follow, "Keep printing new events until interrupted");
  command
      ->add_option("-o,--output", options->output,
                   "text (one line each), wide (with sequence and fields), json (one object per "
                   "line) or yaml (one document per event)")
      ->check(CLI::IsMember({"text", "wide", "json", "yaml"}))
      ->capture_default_str();
  command->add_option("--socket,--agent-socket", options->socket,
                      std::string("The node agent's local API socket (default: $TESSERA_API_SOCKET "
                                  "or ") +
                          kDefaultApiSocket + ")");
  add_namespace_options(*command, options->namespaces);
  command->callback([options, local] {
    signal(SIGINT, on_stop_signal);
    signal(SIGTERM, on_stop_signal);
    const Status status = run_events(*options, local, std::cout, std::cerr, g_interrupted);
    if (!status.is_ok()) {
      std::fprintf(stderr, "tessera events: %s\n", status.message().c_str());
      std::exit(kExitFailed);
    }
    std::exit(kExitOk);
  });
}

}  // namespace tessera::cli
