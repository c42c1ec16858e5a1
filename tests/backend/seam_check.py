#!/usr/bin/env python3
"""The backend seam, checked from the code (ctest `backend_seam`).

1. The places a backend is named outside its own folder, counted for every backend under
   src/backend/<name>/: lines that include its headers or call into its namespace, the
   lines of register_builtin_backends (src/backend/backend.cpp) that register it, the
   build's lines naming its third-party library (the library of its `third-party` line in
   src/LAYERS), and that line. docs/architecture.md's table between the
   `backend-edits` markers must list exactly these files, each with its count for the cpu
   backend: it is what a new backend (CUDA) edits, the rest is files it adds.
2. The test backend (tests/support/opaque_backend.*) is named by its test and the test
   build only: nothing in src/, include/, python/ or tools/ changed for it.
3. No switch over DeviceType without a default: adding a device type must not break the
   -Werror build (-Wswitch) or fall off the end of a function.
Prints each failure; exit status 1 if any.
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[2])
failures = []


def code_lines(path):
    """(number, text) of the lines that are not comments (C++ // or CMake/LAYERS #)."""
    out = []
    cmake = path.suffix in (".txt", ".cmake") or path.name == "LAYERS"
    for i, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        s = line.strip()
        if not s or s.startswith("//") or (cmake and s.startswith("#")):
            continue
        out.append((i, line))
    return out


def cpp_files(*dirs):
    for d in dirs:
        base = ROOT / d
        if base.exists():
            for p in sorted(base.rglob("*")):
                if p.suffix in (".cpp", ".h", ".cu", ".cuh") and p.is_file():
                    yield p


def rel(p):
    return p.relative_to(ROOT).as_posix()


def builtin_registration_lines(backend_cpp):
    """Lines of register_builtin_backends' body that are code."""
    text = backend_cpp.read_text().splitlines()
    start = next(i for i, l in enumerate(text) if re.match(r"void register_builtin_backends\(", l))
    body = []
    for i in range(start + 1, len(text)):
        if text[i].startswith("}"):
            break
        s = text[i].strip()
        if s and not s.startswith("//"):
            body.append((i + 1, text[i]))
    return body


def third_party_libs(layers):
    """folder -> library names of its `third-party PREFIX PATH...` lines (oneapi/dnnl/ -> dnnl)."""
    libs = {}
    for _, line in code_lines(layers):
        parts = line.split()
        if parts and parts[0] == "third-party":
            name = parts[1].rstrip("/").split("/")[-1]
            for folder in parts[2:]:
                libs.setdefault(folder.rstrip("/") + "/", []).append((name, line.strip()))
    return libs


def references(name):
    """file -> list of line numbers naming backend `name` outside src/backend/<name>/."""
    folder = f"src/backend/{name}/"
    refs = {}
    pat = re.compile(r'#include\s+"backend/' + re.escape(name) + r'/|\b' + re.escape(name) + r"::\w")
    for p in cpp_files("src", "include", "python/csrc", "tools"):
        r = rel(p)
        if r.startswith(folder):
            continue
        for n, line in code_lines(p):
            if pat.search(line):
                refs.setdefault(r, set()).add(n)
    backend_cpp = ROOT / "src/backend/backend.cpp"
    body = builtin_registration_lines(backend_cpp)
    # A line of the registration function belongs to `name` if it names it (cpu::make_backend)
    # or a variable made by such a line (put(r, DeviceType::CPU, cpu)).
    names = set()
    for n, line in body:
        if pat.search(line):
            refs.setdefault("src/backend/backend.cpp", set()).add(n)
            m = re.search(r"\b(\w+)\s*=\s*" + re.escape(name) + r"::", line)
            if m:
                names.add(m.group(1))
    for n, line in body:
        if any(re.search(r"\b" + re.escape(v) + r"\b", line) for v in names):
            refs.setdefault("src/backend/backend.cpp", set()).add(n)
    layers = ROOT / "src/LAYERS"
    for lib, layer_line in third_party_libs(layers).get(folder, []):
        for n, line in code_lines(layers):
            if line.strip() == layer_line:
                refs.setdefault("src/LAYERS", set()).add(n)
        for build in [ROOT / "CMakeLists.txt", *sorted((ROOT / "cmake").glob("*.cmake"))]:
            for n, line in code_lines(build):
                if lib.lower() in line.lower():
                    refs.setdefault(rel(build), set()).add(n)
    return refs


def documented_edits():
    doc = (ROOT / "docs/architecture.md").read_text()
    m = re.search(r"<!-- backend-edits: begin -->(.*?)<!-- backend-edits: end -->", doc, re.S)
    if not m:
        failures.append("docs/architecture.md: no <!-- backend-edits: begin/end --> table")
        return {}
    rows = {}
    for line in m.group(1).splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not cells[0].startswith("`"):
            continue
        count = re.match(r"(\d+)", cells[1])
        rows[cells[0].strip("`")] = int(count.group(1)) if count else -1
    return rows


# ---- 1. the cpu backend's places, as the docs list them
backends = sorted(p.name for p in (ROOT / "src/backend").iterdir() if p.is_dir())
cpu_refs = references("cpu")
doc = documented_edits()
counted = {f: len(lines) for f, lines in cpu_refs.items()}
for f in sorted(set(counted) | set(doc)):
    if f not in doc:
        lines = ", ".join(str(n) for n in sorted(cpu_refs[f]))
        failures.append(f"{f}: names the cpu backend outside src/backend/cpu/ (lines {lines}), "
                        "but docs/architecture.md's backend-edits table does not list it")
    elif f not in counted:
        failures.append(f"docs/architecture.md lists {f} among the places a backend is named, but it names none")
    elif counted[f] != doc[f]:
        lines = ", ".join(str(n) for n in sorted(cpu_refs[f]))
        failures.append(f"docs/architecture.md says {f} has {doc[f]} lines naming the cpu backend, "
                        f"the code has {counted[f]} (lines {lines})")
for name in backends:
    if name == "cpu":
        continue
    for f in references(name):
        if f not in doc:
            failures.append(f"{f}: names backend {name} but is not among the places docs/architecture.md lists")

# ---- 2. the test backend needed no change outside its own files and its test
allowed = {"tests/support/opaque_backend.h", "tests/support/opaque_backend.cpp",
           "tests/backend/test_opaque_backend.cpp", "tests/CMakeLists.txt", "tests/backend/seam_check.py"}
for d in ("src", "include", "python", "tools", "tests", "cmake"):
    base = ROOT / d
    for p in sorted(base.rglob("*")) if base.exists() else []:
        if not p.is_file() or p.suffix not in (".cpp", ".h", ".py", ".txt", ".cmake"):
            continue
        if rel(p) in allowed:
            continue
        text = p.read_text(errors="replace")
        if "OpaqueBackend" in text or "opaque_backend" in text:
            failures.append(f"{rel(p)}: names the opaque test backend; it must need nothing outside its own files")
test_src = (ROOT / "tests/backend/test_opaque_backend.cpp").read_text()
if "register_backend(DeviceType::XLA" not in test_src:
    failures.append("tests/backend/test_opaque_backend.cpp: expected the opaque backend's registration there")

# ---- 3. no switch over DeviceType without a default
for p in cpp_files("src", "include", "python/csrc", "tools"):
    text = p.read_text(errors="replace")
    for m in re.finditer(r"\bswitch\s*\(", text):
        brace = text.find("{", m.end())
        if brace < 0:
            continue
        depth, i = 0, brace
        while i < len(text):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    break
            i += 1
        body = text[brace:i]
        if "case DeviceType::" in body and not re.search(r"\bdefault\s*:", body):
            line = text.count("\n", 0, m.start()) + 1
            failures.append(f"{rel(p)}:{line}: switch over DeviceType without a default "
                            "(a new device type would break the -Werror build)")

for f in failures:
    print(f)
if not failures:
    print(f"backend seam ok: the cpu backend is named outside src/backend/cpu/ in {len(counted)} files "
          f"({sum(counted.values())} lines): " + ", ".join(f"{f} {n}" for f, n in sorted(counted.items())))
sys.exit(1 if failures else 0)
