// -n/--namespace and -A/--all-namespaces of the viewing commands. Unlike kubectl's (the context's
// namespace), the default is every namespace: a node tool shows everything on the node's GPUs, and
// `tessera run` shares and GPU events have no namespace at all.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

namespace tessera::cli {

struct NamespaceFilter {
  std::string name;  // -n: only shares (claims, events) of this namespace; empty: all
  bool all = false;  // -A: every namespace (the default, said explicitly)
  bool accepts(const std::string& namespace_name) const {
    return name.empty() || namespace_name == name;
  }
};

// -n/--namespace (only --namespace when `short_flag` is false: `tessera top -n` is its iteration
// count, as top's) and -A/--all-namespaces, which exclude each other, on `command`.
inline void add_namespace_options(CLI::App& command, NamespaceFilter& filter,
                                  bool short_flag = true) {
  CLI::Option* name = command.add_option(short_flag ? "-n,--namespace" : "--namespace", filter.name,
                                         "Only this namespace (default: every one)");
  CLI::Option* all = command.add_flag("-A,--all-namespaces", filter.all,
                                      "Every namespace (the default; excludes --namespace)");
  name->excludes(all);
  name->check([](const std::string& value) {
    return value.empty() ? std::string("an empty namespace: name one, or use -A") : std::string();
  });
}

}  // namespace tessera::cli
