#!/usr/bin/env python3
"""The chart's RBAC grants exactly what the node agent's and the webhook's code calls.

    rbac_check.py --source-root REPO RENDERED.yaml
    rbac_check.py --source-root REPO --print-calls

The calls are read from the sources, not from a list kept beside them: every call of the
KubeClient interface (`<client>.request("METHOD", <path expression>, ...)`) under node-agent/src
and webhook/src, and in each common/kube source whose header the component includes (the Event
recorder, event_recorder.cc, is the agent's), is found, and its path expression is evaluated symbolically: string literals,
`+`, `cond ? a : b` (both branches), constants (`kResourceSlicesPath[] = "..."`), local variables
assigned earlier in the same file, and functions that return a path expression (kube_client.cc's
`resource_claim_path` and friends). Whatever else is a value at run time (url_escape(name), a
namespace) becomes a placeholder. A call whose method is not a literal, or whose path does not
resolve to an API path with a literal group and resource, fails the test naming the file and
line: a new call cannot be added
without the test seeing it.

Each path gives (group, resource, subresource, named or collection) and the method the verb:
GET of a named object -> get, of a collection -> list (watch with ?watch=true), POST -> create,
PUT -> update, PATCH -> patch, DELETE -> delete (deletecollection on a collection).

The rendered chart's ClusterRoles and Roles of each component (label app.kubernetes.io/component:
node-agent or webhook) must grant exactly those (verb, group, resource[/subresource]) triples: a
rule the code does not use fails as much as a call without a rule. No wildcards, no
nonResourceURLs.

Objects the webhook names by a flag (NAME_FLAGS: its Secret, its two webhook configurations) are
called only when the rendered webhook Deployment passes that flag (TLS mode selfManaged): without
it those calls are not expected and must not be granted. With it, a rule naming that resource
must name exactly the flag's value (resourceNames), and get/update/patch of it must be granted by
name only. resourceNames never go with create, list, watch or deletecollection (RBAC cannot
restrict those by name: a create is authorized before its object has one), and never name a
namespaced resource in a ClusterRole (that name in every namespace).
"""
import argparse
import os
import re
import sys

import yaml

COMPONENTS = {"node-agent": "node-agent/src", "webhook": "webhook/src"}
# (component, resource) -> the flag of the component's Deployment that names the object.
NAME_FLAGS = {
    ("webhook", "secrets"): "--tls-secret-name",
    ("webhook", "mutatingwebhookconfigurations"): "--mutating-webhook-configuration",
    ("webhook", "validatingwebhookconfigurations"): "--validating-webhook-configuration",
}
CLUSTER_SCOPED = {"nodes", "namespaces", "resourceslices", "deviceclasses",
                  "mutatingwebhookconfigurations", "validatingwebhookconfigurations"}
UNNAMEABLE_VERBS = {"create", "list", "watch", "deletecollection"}
PLACEHOLDER = "\x00"

# Non-resource paths every client may GET without a grant of ours: Kubernetes' bootstrap
# ClusterRole system:public-info-viewer (kubernetes/kubernetes
# plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go) allows GET of /version (and
# /healthz, /livez, /readyz) to system:authenticated and system:unauthenticated. The agent reads
# /version for dynamic MIG's slice shape.
PUBLIC_GETS = {"/version"}

CALL_RE = re.compile(r"(?:\.|->)request\(")
STRING_RE = re.compile(r'"((?:[^"\\]|\\.)*)"')


def strip_comments(text):
    # Keeps line numbers: a comment's characters become spaces (strings are left alone).
    def blank(match):
        return re.sub(r"[^\n]", " ", match.group(0))
    return re.sub(r'//[^\n]*|/\*.*?\*/|"(?:[^"\\\n]|\\.)*"',
                  lambda m: m.group(0) if m.group(0).startswith('"') else blank(m), text, flags=re.S)


def split_top(text, separators):
    """Splits at separators outside brackets and strings."""
    parts, depth, current, i, in_string = [], 0, "", 0, False
    while i < len(text):
        c = text[i]
        if in_string:
            current += c
            if c == "\\":
                current += text[i + 1]
                i += 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
            current += c
        elif c in "([{":
            depth += 1
            current += c
        elif c in ")]}":
            depth -= 1
            current += c
        elif depth == 0 and c in separators:
            parts.append(current)
            current = ""
        else:
            current += c
        i += 1
    parts.append(current)
    return [p.strip() for p in parts]


def call_arguments(text, start):
    """The argument text of a call whose '(' is at text[start - 1]; and the end offset."""
    depth, i, in_string = 1, start, False
    while depth:
        c = text[i]
        if in_string:
            if c == "\\":
                i += 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        i += 1
    return text[start:i - 1], i


class Resolver:
    def __init__(self, files):
        self.files = files  # path -> comment-free text
        self.functions = {}  # name -> return expression, from every file
        self.constants = {}
        for text in files.values():
            for m in re.finditer(r"std::string\s+(\w+)\([^)]*\)\s*\{\s*return\s+(.*?);\s*\}", text, re.S):
                self.functions[m.group(1)] = m.group(2)
            for m in re.finditer(r"constexpr\s+char\s+(\w+)\[\]\s*=\s*(\"[^\"]*\")\s*;", text):
                self.constants[m.group(1)] = m.group(2)

    def resolve(self, expression, path, offset, depth=0):
        """Every value the expression can have, with PLACEHOLDER for run-time parts."""
        if depth > 20:
            raise ValueError(f"too deep: {expression}")
        expression = expression.strip()
        while expression.startswith("(") and call_arguments(expression, 1)[1] == len(expression):
            expression = expression[1:-1].strip()
        ternary = split_top(expression, "?")
        if len(ternary) == 2:
            branches = split_top(ternary[1], ":")
            return self.resolve(branches[0], path, offset, depth + 1) + \
                self.resolve(branches[1], path, offset, depth + 1)
        terms = split_top(expression, "+")
        if len(terms) > 1:
            values = [""]
            for term in terms:
                values = [v + t for v in values for t in self.resolve(term, path, offset, depth + 1)]
            return values
        term = expression
        if m := re.fullmatch(r'"((?:[^"\\]|\\.)*)"', term):
            return [m.group(1)]
        if m := re.fullmatch(r"'(.)'", term):
            return [m.group(1)]
        if m := re.fullmatch(r"std::string\((.*)\)", term, re.S):
            return self.resolve(m.group(1), path, offset, depth + 1)
        # A helper of the Kubernetes client is called by its qualified name (kube::node_path).
        if m := re.fullmatch(r"(?:\w+::)*(\w+)\((.*)\)", term, re.S):
            if m.group(1) in self.functions:
                return self.resolve(self.functions[m.group(1)], path, offset, depth + 1)
            return [PLACEHOLDER]  # url_escape(...), field_selector(...): run-time values
        if re.fullmatch(r"[\w.:\->\[\]]+", term):
            unqualified = term.rsplit("::", 1)[-1]
            if unqualified in self.constants:
                return self.resolve(self.constants[unqualified], path, offset, depth + 1)
            local = self.local_definition(term, path, offset)
            if local is not None:
                return self.resolve(local[0], path, local[1], depth + 1)
            return [PLACEHOLDER]  # a parameter or member: a run-time value
        # Anything else (a JSON lookup, a method call) is a run-time value too. That is safe:
        # parse_path refuses a path whose group or resource is not made of literals.
        return [PLACEHOLDER]

    def local_definition(self, name, path, offset):
        """The nearest `[const] type name = expr;` before offset in the same file."""
        if not re.fullmatch(r"\w+", name):
            return None
        text = self.files[path][:offset]
        found = None
        for m in re.finditer(r"(?:const\s+)?(?:std::string|const\s+char\s*\*|char\s+const\s*\*|auto)\s+" +
                             name + r"\s*=\s*", text):
            found = m
        if found is None:
            return None
        end = found.end()
        depth, i, in_string = 0, end, False
        while True:
            c = self.files[path][i]
            if in_string:
                if c == "\\":
                    i += 1
                elif c == '"':
                    in_string = False
            elif c == '"':
                in_string = True
            elif c in "([{":
                depth += 1
            elif c in ")]}":
                depth -= 1
            elif c == ";" and depth == 0:
                return self.files[path][end:i], found.start()
            i += 1


def parse_path(value):
    """'/apis/g/v/namespaces/x/res/name/sub?q' -> (group, resource, subresource, named, query)."""
    path, _, query = value.partition("?")
    segments = path.split("/")
    if segments[:3] == ["", "api", "v1"]:
        group, rest = "", segments[3:]
    elif len(segments) >= 4 and segments[1] == "apis":
        group, rest = segments[2], segments[4:]
    else:
        raise ValueError(f"not an API path: {value!r}")
    if len(rest) >= 3 and rest[0] == "namespaces":
        rest = rest[2:]
    if PLACEHOLDER in group or (rest and PLACEHOLDER in rest[0]) or (len(rest) == 3 and PLACEHOLDER in rest[2]):
        raise ValueError(f"the group or resource is not fixed: {value!r}")
    if not rest or not re.fullmatch(r"[a-z0-9]+", rest[0]) or len(rest) > 3:
        raise ValueError(f"not an API path: {value!r}")
    resource = rest[0]
    named = len(rest) >= 2
    subresource = rest[2] if len(rest) == 3 else ""
    return group, resource, subresource, named, query


def verb_for(method, named, query):
    if method == "GET":
        if named:
            return "get"
        return "watch" if re.search(r"(^|&)watch=(true|1)", query) else "list"
    return {"POST": "create", "PUT": "update", "PATCH": "patch",
            "DELETE": "delete" if named else "deletecollection"}.get(method)


KUBE_LIBRARY = "common/kube"


def calls_in(source_root, folder):
    """{(verb, group, resource[/sub]): [file:line, ...]} of the KubeClient calls under folder,
    and of the common/kube sources whose header the folder's code includes (the Event recorder:
    its calls are the component's that uses it)."""
    files = {}
    for directory, _, names in os.walk(os.path.join(source_root, folder)):
        for name in names:
            if name.endswith((".cc", ".h")):
                path = os.path.join(directory, name)
                files[path] = strip_comments(open(path, encoding="utf-8").read())
    # Path helpers live in the Kubernetes client (common/kube), which the webhook links too.
    for helper in ("common/kube/src/kube_client.cc", "common/kube/include/tessera/kube/kube_client.h"):
        path = os.path.join(source_root, helper)
        files.setdefault(path, strip_comments(open(path, encoding="utf-8").read()))
    scanned = [os.path.join(source_root, folder)]
    library_src = os.path.join(source_root, KUBE_LIBRARY, "src")
    for name in sorted(os.listdir(library_src)):
        stem = name[:-3] if name.endswith(".cc") else None
        header = f'#include "tessera/kube/{stem}.h"'
        if stem and any(header in text for text in list(files.values())):
            path = os.path.join(library_src, name)
            files.setdefault(path, strip_comments(open(path, encoding="utf-8").read()))
            scanned.append(path)
    resolver = Resolver(files)
    calls, problems = {}, []
    for path, text in sorted(files.items()):
        if not any(path.startswith(prefix) for prefix in scanned):
            continue
        for m in CALL_RE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            where = f"{os.path.relpath(path, source_root)}:{line}"
            arguments, _ = call_arguments(text, m.end())
            parts = split_top(arguments, ",")
            # The declaration and definition of request() itself take typed parameters.
            if parts and re.match(r"(const\s+)?std::string", parts[0]):
                continue
            method = re.fullmatch(r'"([A-Z]+)"', parts[0]) if parts else None
            if not method or len(parts) < 2:
                problems.append(f"{where}: the method of request({arguments}) is not a literal")
                continue
            try:
                for value in resolver.resolve(parts[1], path, m.start()):
                    if method.group(1) == "GET" and value in PUBLIC_GETS:
                        continue
                    group, resource, sub, named, query = parse_path(value)
                    verb = verb_for(method.group(1), named, query)
                    if verb is None:
                        raise ValueError(f"unknown method {method.group(1)}")
                    key = (verb, group, resource + (f"/{sub}" if sub else ""))
                    calls.setdefault(key, []).append(where)
            except ValueError as error:
                problems.append(f"{where}: request({arguments.strip()}): {error}")
    return calls, problems


def flag_values(rendered, component):
    """{flag: value} of the --flag=value arguments of the component's Deployment or DaemonSet."""
    values = {}
    for document in yaml.safe_load_all(open(rendered, encoding="utf-8")):
        if not document or document.get("kind") not in ("Deployment", "DaemonSet"):
            continue
        if document.get("metadata", {}).get("labels", {}).get("app.kubernetes.io/component") != component:
            continue
        for container in document["spec"]["template"]["spec"].get("containers", []):
            for argument in container.get("args", []):
                flag, equals, value = str(argument).partition("=")
                if equals:
                    values[flag] = value
    return values


def granted(rendered, component, flags):
    rules, problems = set(), []
    for document in yaml.safe_load_all(open(rendered, encoding="utf-8")):
        if not document or document.get("kind") not in ("ClusterRole", "Role"):
            continue
        labels = document.get("metadata", {}).get("labels", {})
        if labels.get("app.kubernetes.io/component") != component:
            continue
        name = document["metadata"]["name"]
        where = f"{document['kind']} {name}"
        for rule in document.get("rules") or []:
            if rule.get("nonResourceURLs"):
                problems.append(f"{where}: nonResourceURLs are not used")
            names = rule.get("resourceNames") or []
            for group in rule.get("apiGroups", []):
                for resource in rule.get("resources", []):
                    flag = NAME_FLAGS.get((component, resource))
                    for verb in rule.get("verbs", []):
                        if "*" in (group, resource, verb):
                            problems.append(f"{where}: a wildcard in {rule}")
                        rules.add((verb, group, resource))
                        if names and verb in UNNAMEABLE_VERBS:
                            problems.append(f"{where}: resourceNames cannot restrict {verb} of {resource}")
                        if not names and flag and verb not in UNNAMEABLE_VERBS:
                            problems.append(f"{where}: grants {verb} of every {resource}; the code "
                                            f"needs only the one named by {flag} (resourceNames)")
                    if names and document["kind"] == "ClusterRole" and resource not in CLUSTER_SCOPED:
                        problems.append(f"{where}: resourceNames {names} of {resource} in every "
                                        "namespace; name a namespaced object in a Role")
                    if names and (not flag or names != [flags.get(flag)]):
                        problems.append(f"{where}: resourceNames {names} of {resource}, but the "
                                        f"{component} is given {flag}={flags.get(flag) if flag else None}")
    return rules, problems


def expected_calls(calls, component, flags):
    """The calls a rendering needs: those on flag-named objects only when the flag is passed."""
    return {t: w for t, w in calls.items()
            if not (NAME_FLAGS.get((component, t[2])) and NAME_FLAGS[(component, t[2])] not in flags)}


def show(triple):
    verb, group, resource = triple
    return f"{verb} {group or 'core'}/{resource}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source-root", required=True)
    parser.add_argument("--print-calls", action="store_true")
    parser.add_argument("rendered", nargs="?")
    args = parser.parse_args()

    failures = []
    for component, folder in COMPONENTS.items():
        calls, problems = calls_in(args.source_root, folder)
        failures += problems
        if not calls:
            failures.append(f"{component}: no API call found under {folder}: the search is broken")
        if args.print_calls:
            for triple in sorted(calls):
                print(f"{component}: {show(triple)}  ({', '.join(calls[triple])})")
            continue
        flags = flag_values(args.rendered, component)
        calls = expected_calls(calls, component, flags)
        rules, problems = granted(args.rendered, component, flags)
        failures += problems
        for triple in sorted(set(calls) - rules):
            failures.append(f"{component}: the code calls {show(triple)} ({', '.join(calls[triple])}) "
                            "but no rule grants it")
        for triple in sorted(rules - set(calls)):
            failures.append(f"{component}: a rule grants {show(triple)}, which the code never calls")
        if not failures:
            print(f"{component}: {len(rules)} grants, each called: "
                  + ", ".join(show(t) for t in sorted(rules)))
    for line in failures:
        print(line)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
