#!/usr/bin/env python3
"""The layering test: no file in src/ or include/ includes a header of a higher layer.

The layers and the paths each owns are in src/LAYERS (the one place the rule is written;
the build reads it too). For every #include of a file in the tree, the including file's
layer must be at or above the included header's layer, unless the pair is listed in
src/LAYERS as a known `allow` (then it must still occur: a stale entry fails too).

Usage: layering.py REPO_ROOT
"""
import os
import re
import sys

SCANNED = ("src", "include")
EXTENSIONS = (".h", ".hpp", ".cpp", ".cc", ".def", ".inc")
INCLUDE = re.compile(r'^\s*#\s*include\s*(?:"([^"]+)"|<(axle/[^>]+)>)')


def read_rule(root):
    """Returns (layers in order, [(owned path, layer)], {(file, header): line number})."""
    layers, owned, allowed = [], [], {}
    path = os.path.join(root, "src", "LAYERS")
    with open(path) as f:
        for n, line in enumerate(f, 1):
            words = line.split("#", 1)[0].split()
            if not words:
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
    return layers, owned, allowed


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
    layers, owned, allowed = read_rule(root)
    rank = {name: i for i, name in enumerate(layers)}
    errors, used, files, edges = [], set(), 0, 0
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
    print(f"layering: {files} files, {edges} includes within the tree, {len(layers)} layers, "
          f"{len(used)} known upward includes allowed by src/LAYERS")
    for e in errors:
        print(e)
    if errors:
        print(f"FAILED: {len(errors)} problem(s); the layers, lowest first: {' < '.join(layers)} (src/LAYERS)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
