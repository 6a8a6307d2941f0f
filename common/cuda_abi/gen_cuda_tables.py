#!/usr/bin/env python3
"""Generates Tessera's CUDA driver ABI tables from the CUDA toolkit headers.

cuda_proc_table.inc answers what the driver's cuGetProcAddress(name, version, flags) answers:
which exported symbol (which ABI) a caller built against a given CUDA version expects.
cuda_result_table.inc names every CUresult and gives it a short description.

Where the facts come from
  cudaTypedefs.h (and cudaProfilerTypedefs.h) declare one `PFN_<name>_v<version>` typedef per
  ABI of each driver entry point, plus `..._ptsz` / `..._ptds` typedefs for the per-thread
  default stream forms; the older ABIs sit inside `#if defined(__CUDA_API_VERSION_INTERNAL)`.
  The driver exports the k-th oldest ABI of `name` as `name` (k = 0) or `name_v{k+1}`; a
  per-thread typedef at version V is the per-thread form of the ABI current at V
  (cuStreamBeginCapture_v10010_ptsz -> cuStreamBeginCapture_v2_ptsz).

What is checked here, so that a new toolkit cannot silently produce a wrong table
  - every row's PFN typedef has the same parameter types as cuda.h's declaration of the symbol
    chosen for it (after resolving typedef aliases such as CUdeviceptr -> CUdeviceptr_v2);
    a same-signature ABI change (cuEventElapsedTime_v2) passes this check by construction;
  - every `#define name target` / `__CUDA_API_PTDS|PTSZ(target)` mapping in cuda.h names the
    newest row of `name` (this is how the overrides below were found);
  - a per-thread request never gets an older ABI than a legacy request at the same version.
That every symbol is exported by the driver is checked by a test against the stub libcuda.so.

Usage: gen_cuda_tables.py --cuda-h cuda.h --typedefs cudaTypedefs.h [--typedefs ...]
                          [--declarations cudaProfiler.h ...] --out-dir DIR [--summary]
"""

import argparse
import collections
import os
import re
import sys
from typing import Dict, List, NamedTuple, Set, Tuple

PER_THREAD_SUFFIXES = ("ptsz", "ptds")


class ProcRow(NamedTuple):
    name: str  # base name a caller passes to cuGetProcAddress
    version: int  # first CUDA version (e.g. 3020 = 3.2) whose callers expect this symbol
    per_thread: bool  # the _ptsz/_ptds form, handed out for CU_GET_PROC_ADDRESS_PER_THREAD_...
    symbol: str  # the exported driver symbol


# --- Overrides -------------------------------------------------------------------------------
# Rows the typedef rule cannot derive. Each one is also checked against cuda.h's #defines.
EXTRA_PROC_ROWS = [
    # CUDA 12.0 retired cuGraphInstantiate's (phErrorNode, logBuffer, bufferSize) ABI: cuda.h has
    # `#define cuGraphInstantiate cuGraphInstantiateWithFlags` and a 12.x driver hands out
    # cuGraphInstantiateWithFlags for "cuGraphInstantiate" at 12000+. cudaTypedefs.h has no
    # PFN_cuGraphInstantiate_v12000, so the rule alone would answer cuGraphInstantiate_v2.
    ProcRow("cuGraphInstantiate", 12000, False, "cuGraphInstantiateWithFlags"),
]

# cuda.h #defines whose target is not a driver export, so the #define check skips them.
NON_EXPORT_DEFINES = {
    # A static inline wrapper in cuda.h that sets the per-thread flag for programs built with
    # CUDA_API_PER_THREAD_DEFAULT_STREAM; the driver exports cuGetProcAddress_v2 only.
    "cuGetProcAddress_v2",
}

# What the real driver's cuGetErrorString returns for the codes people see most; the rest get
# the first sentence of cuda.h's doc comment.
DRIVER_ERROR_STRINGS = {
    "CUDA_SUCCESS": "no error",
    "CUDA_ERROR_INVALID_VALUE": "invalid argument",
    "CUDA_ERROR_OUT_OF_MEMORY": "out of memory",
    "CUDA_ERROR_NOT_INITIALIZED": "initialization error",
    "CUDA_ERROR_DEINITIALIZED": "driver shutting down",
    "CUDA_ERROR_NO_DEVICE": "no CUDA-capable device is detected",
    "CUDA_ERROR_INVALID_DEVICE": "invalid device ordinal",
    "CUDA_ERROR_INVALID_IMAGE": "device kernel image is invalid",
    "CUDA_ERROR_INVALID_CONTEXT": "invalid device context",
    "CUDA_ERROR_INVALID_HANDLE": "invalid resource handle",
    "CUDA_ERROR_NOT_FOUND": "named symbol not found",
    "CUDA_ERROR_NOT_READY": "device not ready",
    "CUDA_ERROR_LAUNCH_FAILED": "unspecified launch failure",
    "CUDA_ERROR_NOT_SUPPORTED": "operation not supported",
    "CUDA_ERROR_UNKNOWN": "unknown error",
}


class GenerationError(Exception):
    pass


# --- C declaration parsing --------------------------------------------------------------------

PFN_TYPEDEF = re.compile(
    r"\bPFN_(cu\w+?)_v(\d+)(?:_(" + "|".join(PER_THREAD_SUFFIXES) + r"))?\)\s*\(([^;]*)\)\s*;")
FUNCTION_DECLARATION = re.compile(r"\bCUresult\s+CUDAAPI\s+(cu\w+)\s*\(([^;]*?)\)\s*;")
API_DEFINE = re.compile(
    r"^[ \t]*#[ \t]*define[ \t]+(cu\w+)[ \t]+"
    r"(?:__CUDA_API_(PTDS|PTSZ)\((cu\w+)\)|(cu\w+))[ \t]*$", re.M)
SIMPLE_TYPEDEF = re.compile(r"\btypedef\s+(?:struct\s+|enum\s+|union\s+)?(\w+)\s+(\w+)\s*;")
# Where cuda.h #undefs its name_vN mappings to declare the old ABIs under their real names.
INTERNAL_SECTION = re.compile(
    r"#\s*if\s+defined\s*\(\s*__CUDA_API_VERSION_INTERNAL\s*\)\s*#\s*undef")


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"//[^\n]*", " ", text)


def split_parameters(parameters: str) -> List[str]:
    parts, depth, current = [], 0, ""
    for char in parameters:
        depth += char == "("
        depth -= char == ")"
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    parts = [" ".join(part.split()) for part in parts]
    return [] if parts in ([""], ["void"]) else parts


def parameter_types(parameters: str, aliases: Dict[str, str]) -> Tuple[str, ...]:
    """The parameter types of a C parameter list, names dropped and typedef aliases resolved."""
    types = []
    for parameter in split_parameters(parameters):
        tokens = re.findall(r"\w+|\*|\[\s*\]", parameter)
        words = [token for token in tokens if re.match(r"\w", token)]
        # Drop the parameter name: the last identifier when there is more than one word.
        if len(words) > 1 and tokens[-1] == words[-1]:
            tokens = tokens[:-1]
        types.append(" ".join(resolve_alias(token, aliases) for token in tokens))
    return tuple(types)


def resolve_alias(token: str, aliases: Dict[str, str]) -> str:
    for _ in range(16):  # typedef chains are short; the bound only guards against cycles
        if token not in aliases:
            break
        token = aliases[token]
    return token


# --- Proc table -------------------------------------------------------------------------------


def versioned_symbol(name: str, abi_index: int) -> str:
    return name if abi_index == 0 else f"{name}_v{abi_index + 1}"


def derive_proc_rows(typedef_texts: List[str], aliases: Dict[str, str]):
    """Applies the naming rule; returns rows and each row's typedef parameter types."""
    legacy_versions: Dict[str, Set[int]] = collections.defaultdict(set)
    per_thread: Dict[str, Dict[int, str]] = collections.defaultdict(dict)
    signatures: Dict[Tuple[str, int, bool], Tuple[str, ...]] = {}
    for text in typedef_texts:
        for match in PFN_TYPEDEF.finditer(text):
            name, version, suffix = match[1], int(match[2]), match[3]
            if suffix:
                per_thread[name][version] = suffix
            else:
                legacy_versions[name].add(version)
            signatures[(name, version, bool(suffix))] = parameter_types(match[4], aliases)

    rows = []
    for name in sorted(set(legacy_versions) | set(per_thread)):
        versions = sorted(legacy_versions[name])
        for abi_index, version in enumerate(versions):
            rows.append(ProcRow(name, version, False, versioned_symbol(name, abi_index)))
        for version, suffix in per_thread[name].items():
            current = [index for index, legacy in enumerate(versions) if legacy <= version]
            if not current:
                raise GenerationError(
                    f"PFN_{name}_v{version}_{suffix} has no legacy ABI at or before {version}")
            symbol = f"{versioned_symbol(name, current[-1])}_{suffix}"
            rows.append(ProcRow(name, version, True, symbol))
    return rows, signatures


def internal_section_start(cuda_h: str) -> int:
    match = INTERNAL_SECTION.search(cuda_h)
    if not match:
        raise GenerationError(
            "cuda.h: no `#if defined(__CUDA_API_VERSION_INTERNAL)` block of #undefs")
    return match.start()


def parse_declarations(cuda_h: str, other_headers: List[str], defines: Dict[str, str],
                       aliases: Dict[str, str]):
    """Parameter types of every CUresult function the headers declare, keyed by exported symbol."""
    internal_start = internal_section_start(cuda_h)
    declarations: Dict[str, Set[Tuple[str, ...]]] = collections.defaultdict(set)
    for match in FUNCTION_DECLARATION.finditer(cuda_h):
        written = match[1]
        # Before the internal section a declared name is renamed by its #define (cuMemAlloc is
        # cuMemAlloc_v2); inside it the mappings are #undef'd and names are literal.
        symbol = written if match.start() > internal_start else defines.get(written, written)
        declarations[symbol].add(parameter_types(match[2], aliases))
    for text in other_headers:
        for match in FUNCTION_DECLARATION.finditer(text):
            declarations[match[1]].add(parameter_types(match[2], aliases))
    return declarations


def parse_api_defines(cuda_h: str):
    """cuda.h's `#define name target` API mappings, before its internal section."""
    head = cuda_h[:internal_section_start(cuda_h)]
    mappings = []  # (name, target, per-thread suffix or None)
    for match in API_DEFINE.finditer(head):
        name, per_thread_kind = match[1], match[2]
        target = match[3] or match[4]
        suffix = per_thread_kind.lower() if per_thread_kind else None
        mappings.append((name, target, suffix))
    return mappings


def check_signatures(rows, signatures, declarations):
    for row in rows:
        declared_symbol = re.sub(r"_(ptsz|ptds)$", "", row.symbol)
        expected = signatures[(row.name, row.version, row.per_thread)]
        if expected not in declarations.get(declared_symbol, set()):
            raise GenerationError(
                f"{row.name} v{row.version}{' per-thread' if row.per_thread else ''} -> "
                f"{row.symbol}: PFN parameters {expected} match no cuda.h declaration of "
                f"{declared_symbol} {sorted(declarations.get(declared_symbol, []))}; "
                "add an explicit override to EXTRA_PROC_ROWS")


def check_defines(rows, mappings):
    newest: Dict[Tuple[str, bool], ProcRow] = {}
    for row in sorted(rows, key=lambda r: r.version):
        newest[(row.name, row.per_thread)] = row
    per_thread_symbols = {row.symbol for row in rows if row.per_thread}
    base_names = {row.name for row in rows}
    for name, target, suffix in mappings:
        if name in NON_EXPORT_DEFINES:
            continue
        if name == target:
            # `#define cuStreamGetCtx __CUDA_API_PTSZ(cuStreamGetCtx)` only says that this ABI
            # has a per-thread form. It does not say the ABI is the newest: cuda.h keeps
            # cuStreamGetCtx on the old ABI for source compatibility while cuGetProcAddress
            # hands out cuStreamGetCtx_v2 from 12050 (PFN_cuStreamGetCtx_v12050 has its
            # signature, which check_signatures confirms).
            if suffix and f"{target}_{suffix}" not in per_thread_symbols:
                raise GenerationError(f"cuda.h has per-thread {target}_{suffix}; no row gives it")
            continue
        legacy = newest.get((name, False))
        if name not in base_names or legacy.symbol != target:
            raise GenerationError(
                f"cuda.h maps {name} -> {target} but the newest row gives "
                f"{legacy.symbol if legacy else None}; add an override to EXTRA_PROC_ROWS")
        if suffix:
            threaded = newest.get((name, True))
            if threaded is None or threaded.symbol != f"{target}_{suffix}":
                raise GenerationError(
                    f"cuda.h maps per-thread {name} -> {target}_{suffix} but the newest "
                    f"per-thread row gives {threaded.symbol if threaded else None}")


def check_per_thread_coverage(rows):
    """A per-thread request falls back to the legacy row only before the first per-thread row,
    so from then on every legacy ABI needs its per-thread twin, or a per-thread caller would get
    an older ABI than it was built against."""
    by_name = collections.defaultdict(list)
    for row in rows:
        by_name[row.name].append(row)
    for name, name_rows in by_name.items():
        threaded = {row.version for row in name_rows if row.per_thread}
        if not threaded:
            continue
        for row in name_rows:
            if not row.per_thread and row.version >= min(threaded) and row.version not in threaded:
                raise GenerationError(f"{name}: legacy ABI at {row.version} ({row.symbol}) has no "
                                      "per-thread form")


def check_unique(rows):
    keys = collections.Counter((row.name, row.version, row.per_thread) for row in rows)
    symbols = collections.Counter((row.name, row.symbol) for row in rows)
    duplicates = [key for key, count in keys.items() if count > 1]
    duplicates += [key for key, count in symbols.items() if count > 1]
    if duplicates:
        raise GenerationError(f"duplicate proc rows: {duplicates}")


def build_proc_table(cuda_h: str, typedef_texts: List[str], declaration_texts: List[str]):
    aliases = {}
    for text in [cuda_h] + typedef_texts + declaration_texts:
        for match in SIMPLE_TYPEDEF.finditer(text):
            if match[1] != match[2]:
                aliases[match[2]] = match[1]
    derived, signatures = derive_proc_rows(typedef_texts, aliases)
    if not derived:
        raise GenerationError("no PFN_cu*_v<version> typedefs found")
    mappings = parse_api_defines(cuda_h)
    declarations = parse_declarations(cuda_h, declaration_texts, {n: t for n, t, _ in mappings},
                                      aliases)
    check_signatures(derived, signatures, declarations)

    rows = derived + EXTRA_PROC_ROWS
    check_unique(rows)
    check_defines(rows, mappings)
    check_per_thread_coverage(rows)
    # Byte order of names, as the C++ side's std::string_view comparison sees it.
    rows.sort(key=lambda r: (r.name.encode(), r.version, r.per_thread))
    return rows


# --- Result table -----------------------------------------------------------------------------

CURESULT_ENUM = re.compile(r"typedef\s+enum\s+cudaError_enum\s*\{(.*?)\}\s*CUresult\s*;", re.S)
ENUMERATOR = re.compile(r"\b(CUDA_\w+)\s*=\s*(\d+)")
DOC_COMMENT_BEFORE = re.compile(r"/\*\*((?:(?!\*/).)*)\*/\s*$", re.S)


def first_sentence(comment: str) -> str:
    lines = [re.sub(r"^\s*\*?", "", line).strip() for line in comment.splitlines()]
    text = " ".join(line for line in lines if line)
    text = text.replace("\\deprecated", " ")
    text = re.sub(r"::(?=\w)", "", text)  # Doxygen links: ::cuInit() -> cuInit()
    text = re.sub(r"\\[a-z]+\s+", "", text)  # other Doxygen commands (\p, \c, \ref ...)
    text = " ".join(text.split())
    return re.split(r"(?<=[.!?])\s+(?=[A-Z])", text, maxsplit=1)[0]


def build_result_table(cuda_h: str):
    enum = CURESULT_ENUM.search(cuda_h)
    if not enum:
        raise GenerationError("cuda.h: CUresult enum not found")
    body = enum[1]
    results, seen_values = [], {}
    for match in ENUMERATOR.finditer(body):
        name, value = match[1], int(match[2])
        if value in seen_values:
            raise GenerationError(f"{name} repeats the value of {seen_values[value]}")
        seen_values[value] = name
        comment = DOC_COMMENT_BEFORE.search(body[:match.start()])
        description = DRIVER_ERROR_STRINGS.get(name) or (first_sentence(comment[1])
                                                         if comment else "") or name
        results.append((name, value, description))
    missing = set(DRIVER_ERROR_STRINGS) - set(seen_values.values())
    if missing:
        raise GenerationError(f"DRIVER_ERROR_STRINGS names unknown codes: {sorted(missing)}")
    return results


# --- Output -----------------------------------------------------------------------------------


def c_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


HEADER = "// Generated by common/cuda_abi/gen_cuda_tables.py from {sources}. Do not edit.\n"


def render_proc_table(rows, sources: str) -> str:
    lines = [HEADER.format(sources=sources),
             "// TESSERA_PROC_ENTRY(name, introduced_at_version, per_thread, exported_symbol)\n"]
    for row in rows:
        lines.append(f"TESSERA_PROC_ENTRY({c_string(row.name)}, {row.version}, "
                     f"{int(row.per_thread)}, {c_string(row.symbol)})\n")
    return "".join(lines)


def render_result_table(results, sources: str) -> str:
    lines = [HEADER.format(sources=sources), "// TESSERA_CU_RESULT(enumerator, description)\n"]
    for name, _, description in results:
        lines.append(f"TESSERA_CU_RESULT({name}, {c_string(description)})\n")
    return "".join(lines)


def write_if_changed(path: str, content: str):
    """Leaves an unchanged file alone so its dependents are not rebuilt."""
    try:
        with open(path, encoding="utf-8") as existing:
            if existing.read() == content:
                return
    except FileNotFoundError:
        pass
    with open(path + ".tmp", "w", encoding="utf-8") as out:
        out.write(content)
    os.replace(path + ".tmp", path)


def main(argv) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cuda-h", required=True, help="path of the toolkit's cuda.h")
    parser.add_argument("--typedefs", action="append", required=True,
                        help="cudaTypedefs.h or another PFN header; repeatable")
    parser.add_argument("--declarations", action="append", default=[],
                        help="a header declaring functions a PFN header covers beyond cuda.h "
                        "(cudaProfiler.h); repeatable")
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--summary", action="store_true", help="print row counts")
    args = parser.parse_args(argv)

    def read(path):
        with open(path, encoding="utf-8", errors="replace") as source:
            return strip_comments(source.read())

    with open(args.cuda_h, encoding="utf-8", errors="replace") as source:
        cuda_h_raw = source.read()  # keeps comments: the CUresult descriptions live there
    try:
        rows = build_proc_table(strip_comments(cuda_h_raw), [read(p) for p in args.typedefs],
                                [read(p) for p in args.declarations])
        results = build_result_table(cuda_h_raw)
    except GenerationError as error:
        print(f"gen_cuda_tables.py: {error}", file=sys.stderr)
        return 1

    inputs = [args.cuda_h] + args.typedefs + args.declarations
    sources = ", ".join(os.path.basename(p) for p in inputs)
    os.makedirs(args.out_dir, exist_ok=True)
    write_if_changed(os.path.join(args.out_dir, "cuda_proc_table.inc"),
                     render_proc_table(rows, sources))
    write_if_changed(os.path.join(args.out_dir, "cuda_result_table.inc"),
                     render_result_table(results, sources))
    if args.summary:
        per_thread = sum(row.per_thread for row in rows)
        print(f"{len(rows)} proc rows ({len(rows) - per_thread} legacy, {per_thread} per-thread, "
              f"{len(EXTRA_PROC_ROWS)} override), {len({r.name for r in rows})} names; "
              f"{len(results)} CUresults ({len(DRIVER_ERROR_STRINGS)} with driver strings)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
