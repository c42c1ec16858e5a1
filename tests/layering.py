#!/usr/bin/env python3
"""The layering test: no file in src/, include/ or python/ (the extension's C++ sources,
python/csrc) includes a header of a higher layer,
and (given the objects) no layer's code calls a function defined in a higher layer.

The layers and the paths each owns are in src/LAYERS (the one place the rule is written;
the build reads it too). For every #include of a file in the tree, the including file's
layer must be at or above the included header's layer, unless the pair is listed in
src/LAYERS as a known `allow` (then it must still occur: a stale entry fails too).
A header named *_internal.h is private to its layer: only files of that layer include
it (what the layers above may use is in the layer's other headers).
No file opens the namespace of a higher layer (a namespace named after a layer belongs to
it: `namespace lazy {` in src/core), not even to forward-declare a type: that is how a
file would name a higher layer's type without including it, so the include check alone
leaves that door open. Known exceptions are src/LAYERS' `allow-namespace FILE NAMESPACE`
lines (a stale one fails too).
With objects, each symbol a layer's object files use must be defined (strongly) in that
layer or a lower one, unless listed as `allow-call FILE LAYER` (FILE `*`: any file).

Usage: layering.py REPO_ROOT                          the include check
       layering.py REPO_ROOT LAYER=OBJ,OBJ,... ...    the symbol check (cmake passes them)
"""
import collections
import os
import re
import subprocess
import sys

SCANNED = ("src", "include", "python")
EXTENSIONS = (".h", ".hpp", ".cpp", ".cc", ".def", ".inc")
INCLUDE = re.compile(r'^\s*#\s*include\s*(?:"([^"]+)"|<(axle/[^>]+)>)')
ANY_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]')
NAMESPACE = re.compile(r'\bnamespace\s+(\w+(?:\s*::\s*\w+)*)\s*\{')  # `namespace axle::lazy {` -> axle::lazy
THIRD_PARTY = {}  # header prefix -> the paths whose files may include it (src/LAYERS' third-party lines)


def read_rule(root):
    """Returns (layers in order, [(owned path, layer)], {(file, header): line number},
    {(file, layer): line number} of allow-call, {(file, namespace): line number} of allow-namespace)."""
    layers, owned, allowed, calls, namespaces = [], [], {}, {}, {}
    path = os.path.join(root, "src", "LAYERS")
    with open(path) as f:
        for n, line in enumerate(f, 1):
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            if words[0] == "allow-call":
                if len(words) != 3:
                    sys.exit(f"src/LAYERS:{n}: expected 'allow-call FILE LAYER', got: {line.strip()}")
                calls[(words[1], words[2])] = n
                continue
            if words[0] == "allow-namespace":
                if len(words) != 3:
                    sys.exit(f"src/LAYERS:{n}: expected 'allow-namespace FILE NAMESPACE', got: {line.strip()}")
                namespaces[(words[1], words[2])] = n
                continue
            if words[0] == "third-party":
                if len(words) < 3:
                    sys.exit(f"src/LAYERS:{n}: expected 'third-party PREFIX PATH...', got: {line.strip()}")
                THIRD_PARTY[words[1]] = words[2:]
                continue
            if words[0] == "allow":
                if len(words) != 3:
                    sys.exit(f"src/LAYERS:{n}: expected 'allow FILE HEADER', got: {line.strip()}")
                allowed[(words[1], words[2])] = n
                continue
            name, paths = words[0], words[1:]
            if name in layers:
                sys.exit(f"src/LAYERS:{n}: layer '{name}' listed twice")
            layers.append(name)
            owned += [(p, name) for p in paths]
    return layers, owned, allowed, calls, namespaces


def layer_of(rel, owned):
    """The layer owning the longest prefix of rel (None if none does)."""
    best = None
    for p, name in owned:
        if (rel == p or (p.endswith("/") and rel.startswith(p))) and (best is None or len(p) > len(best[0])):
            best = (p, name)
    return best[1] if best else None


def resolve(root, including, header):
    """The repository path an #include names: next to the including file, then include/,
    then src/ (axle's include path); None for a header outside the tree."""
    for base in (os.path.dirname(including), "include", "src"):
        rel = os.path.normpath(os.path.join(base, header))
        if os.path.isfile(os.path.join(root, rel)):
            return rel
    return None


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    layers, owned, allowed, calls, namespaces = read_rule(root)
    rank = {name: i for i, name in enumerate(layers)}
    if len(sys.argv) > 2:
        return check_symbols(layers, rank, calls, sys.argv[2:])
    errors, used, used_ns, files, edges = [], set(), set(), 0, 0
    for top in SCANNED:
        for d, _, names in sorted(os.walk(os.path.join(root, top))):
            for fname in sorted(names):
                if not fname.endswith(EXTENSIONS):
                    continue
                rel = os.path.relpath(os.path.join(d, fname), root)
                mine = layer_of(rel, owned)
                files += 1
                if mine is None:
                    errors.append(f"{rel}: no layer owns this file; give its directory a line in src/LAYERS")
                    continue
                with open(os.path.join(root, rel), errors="replace") as f:
                    for n, line in enumerate(f, 1):
                        for ns in NAMESPACE.finditer(line.split("//", 1)[0]):
                            for name in re.split(r"\s*::\s*", ns.group(1)):
                                if name not in rank or rank[name] <= rank[mine]:
                                    continue
                                if (rel, name) in namespaces:
                                    used_ns.add((rel, name))
                                    continue
                                errors.append(f"{rel}:{n}: layer {mine} opens namespace {name} of layer {name}, "
                                              "which is above it (opening it, if only to forward-declare a type, names what this layer "
                                              "must not know; hold an interface of this layer that the higher "
                                              "one implements, as TensorImpl::device_state)")
                        t = ANY_INCLUDE.match(line)
                        for prefix, paths in THIRD_PARTY.items():
                            if t and t.group(1).startswith(prefix) and not any(rel.startswith(p) for p in paths):
                                errors.append(f"{rel}:{n}: includes {t.group(1)}, a third-party header that only "
                                              f"{', '.join(paths)} may include (src/LAYERS: third-party {prefix})")
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        header = m.group(1) or m.group(2)
                        target = resolve(root, rel, header)
                        if target is None:
                            continue  # a system or third-party header
                        theirs = layer_of(target, owned)
                        edges += 1
                        if theirs is None:
                            errors.append(f"{rel}:{n}: includes {header}, which no layer owns; add it to src/LAYERS")
                        elif target.endswith("_internal.h") and theirs != mine:
                            errors.append(f"{rel}:{n}: layer {mine} includes {header}, a header private to "
                                          f"layer {theirs} (*_internal.h); use that layer's narrower headers")
                        elif rank[theirs] > rank[mine]:
                            if (rel, header) in allowed:
                                used.add((rel, header))
                                continue
                            errors.append(f"{rel}:{n}: layer {mine} includes {header} of layer {theirs}, "
                                          "which is above it")
    for (rel, header), n in sorted(allowed.items(), key=lambda kv: kv[1]):
        if (rel, header) not in used:
            errors.append(f"src/LAYERS:{n}: stale 'allow {rel} {header}': that upward include is gone; "
                          "delete the line")
    for (rel, name), n in sorted(namespaces.items(), key=lambda kv: kv[1]):
        if (rel, name) not in used_ns:
            errors.append(f"src/LAYERS:{n}: stale 'allow-namespace {rel} {name}': {rel} no longer opens "
                          "that namespace; delete the line")
    print(f"layering: {files} files, {edges} includes within the tree, {len(layers)} layers, "
          f"{len(used)} known upward includes and {len(used_ns)} known namespaces of a higher layer "
          "allowed by src/LAYERS")
    for e in errors:
        print(e)
    if errors:
        print(f"FAILED: {len(errors)} problem(s); the layers, lowest first: {' < '.join(layers)} (src/LAYERS)")
    return 1 if errors else 0


def nm(objs):
    """{object: (strong definitions, undefined symbols)}, demangled, from one nm run."""
    out = subprocess.run(["nm", "-C", "-A", *objs], capture_output=True, text=True, check=True).stdout
    table = {obj: (set(), set()) for obj in objs}
    for line in out.splitlines():
        obj, _, rest = line.partition(":")  # -A: "object:address type name"
        if obj not in table:
            continue
        defined, used = table[obj]
        rest = rest.strip()
        if rest.startswith("U "):  # "U name" (a demangled name may hold spaces)
            used.add(rest[2:])
            continue
        parts = rest.split(None, 2)  # "address type name"
        if len(parts) == 3 and parts[1] in ("T", "D", "B", "R"):
            defined.add(parts[2])
    return table


def check_symbols(layers, rank, calls, args):
    home, uses = {}, collections.defaultdict(set)  # symbol -> lowest defining layer; (layer, obj) -> used
    for arg in args:
        layer, objs = arg.split("=", 1)
        if layer not in rank:
            sys.exit(f"unknown layer {layer}")
        for obj, (defined, used) in nm([o for o in objs.split(",") if o]).items():
            for sym in defined:
                if sym not in home or rank[layer] < rank[home[sym]]:
                    home[sym] = layer
            uses[(layer, obj)] |= used
    errors, used_allows, count = [], set(), 0
    for (layer, obj), syms in sorted(uses.items()):
        # .../CMakeFiles/axle_ops.dir/src/ops/conv.cpp.o -> src/ops/conv.cpp
        src = os.path.normpath(re.sub(r"\.o(bj)?$", "", obj.split(".dir/", 1)[-1]))
        for sym in sorted(syms):
            theirs = home.get(sym)
            if theirs is None:
                continue  # defined outside axle (the C++ library, oneDNN, Gloo, ...)
            count += 1
            if rank[theirs] <= rank[layer]:
                continue
            for key in ((src, theirs), ("*", theirs)):
                if key in calls:
                    used_allows.add(key)
                    break
            else:
                errors.append(f"{src}: layer {layer} calls {sym}, defined in layer {theirs}, which is above it")
    for key, n in sorted(calls.items(), key=lambda kv: kv[1]):
        if key not in used_allows:
            errors.append(f"src/LAYERS:{n}: stale 'allow-call {key[0]} {key[1]}': no such call up; delete the line")
    print(f"layering (symbols): {sum(len(a.split('=', 1)[1].split(',')) for a in args)} objects, {count} uses of "
          f"axle's own symbols, {len(used_allows)} known calls up allowed by src/LAYERS")
    for e in errors:
        print(e)
    if errors:
        print(f"FAILED: {len(errors)} problem(s); the layers, lowest first: {' < '.join(layers)} (src/LAYERS)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
