#!/usr/bin/env python3
"""The docs check: what README.md and docs/*.md name in backticks exists in the tree.

Checked, in every inline code span (`...`) and, for symbols, in fenced code blocks too:

- paths: a span that is one path-like word whose first component is a top-level entry of
  the repository (src/..., include/..., docs/x.md, tools/..., tests/..., scripts/...), a
  header path as an #include writes it (axle/ops.h -> include/axle/ops.h, ops/kernels.h ->
  src/ops/kernels.h), or a bare file name with a source extension (spmd_exec.cpp: some file
  of the tree has that name). Placeholders (<family>, *) match any name, and a
  braced list (include/axle/{nn,optim}) is each of its members. Paths outside the
  repository (absolute, ~/..., and the names of files a run writes: metadata.json) are not
  paths of the tree and are not checked: only the shapes above are.
- symbols: every qualified name whose first component is `axle` or a namespace the tree
  declares (ops::kernel, lazy::record, xm::optimizer_step, Tensor::backward): its last
  component must be declared (a class, function, variable, enumerator, alias or macro;
  the op table's AXLE_OP names count as declared by src/ops/schema.h, which expands them)
  in a file of include/ or src/ that also declares the qualifier before it as a namespace
  or a class. So `backend::kernel` fails while `ops::kernel` passes.
- the layer list: a fenced block right after the line `<!-- layers: src/LAYERS -->` lists
  one layer per line, its first word the layer's name; the names, in order, must be
  src/LAYERS' layers, lowest first. docs/architecture.md must have one.

Every broken reference is printed as file:line: what, and the exit status is 1 if any.
Usage: docs_check.py REPO_ROOT
"""
import glob
import os
import re
import subprocess
import sys

DOCS = ["README.md", "docs/*.md"]
SOURCE_EXT = (".h", ".hpp", ".cpp", ".cc", ".def", ".py", ".md", ".cmake", ".sh", ".in", ".txt")
BARE_EXT = (".h", ".hpp", ".cpp", ".cc", ".def", ".py", ".cmake", ".sh")  # a bare name: a source file
LAYER_MARK = "<!-- layers: src/LAYERS -->"
SPAN = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
QUALIFIED = re.compile(r"(?<![\w.:>])((?:[A-Za-z_]\w*::)+(?:~?[A-Za-z_]\w*))")
PATHLIKE = re.compile(r"^[\w.~<>*{},/+-]+$")


# What .gitignore leaves out of the tree, for a tree without git (CI's fresh root has no git):
# directories by name anywhere, or by path from the root, and file suffixes.
IGNORED_DIRS = {".git", ".cache", "__pycache__", ".pytest_cache"}
IGNORED_TOP = ("build", "build-")
IGNORED_PATHS = {"python/build"}
IGNORED_SUFFIXES = (".pyc", ".so", ".egg-info")


def tree_files(root):
    """The source tree's files, relative to root: git's tracked and untracked-not-ignored files
    where git is there, else a walk that skips what .gitignore ignores."""
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-co", "--exclude-standard"], capture_output=True,
                             text=True, check=True).stdout.split("\n")
        return [f for f in out if f and os.path.exists(os.path.join(root, f))]
    except (OSError, subprocess.CalledProcessError):
        pass
    files = []
    for d, dirs, names in os.walk(root):
        rel = os.path.relpath(d, root)
        rel = "" if rel == "." else rel + "/"
        dirs[:] = [x for x in dirs if x not in IGNORED_DIRS and not x.endswith(IGNORED_SUFFIXES)
                   and not (rel == "" and (x == IGNORED_TOP[0] or x.startswith(IGNORED_TOP[1])))
                   and rel + x not in IGNORED_PATHS]
        files += [rel + n for n in names if not n.endswith(IGNORED_SUFFIXES) and rel + n != "python/axle/_build_info.py"]
    return files


# ---------------------------------------------------------------- declarations
DECL_KEYWORD = re.compile(r"\b(?:class|struct|union|enum(?:\s+class|\s+struct)?|namespace|using|concept)\s+"
                          r"(?:\[\[[^\]]*\]\]\s*)?([A-Za-z_]\w*)")
NAMESPACE = re.compile(r"\bnamespace\s+([A-Za-z_]\w*(?:::[A-Za-z_]\w*)*)\s*\{")
CLASS = re.compile(r"\b(?:class|struct|union|enum(?:\s+class|\s+struct)?)\s+(?:\[\[[^\]]*\]\]\s*)?([A-Za-z_]\w*)")
# A declarator at the start of a line: type words, then the (unqualified or Class::) name, then
# ( [ = ; { , : a function, variable, field or definition. A call (x = f(), ops::f()) is not one.
NOT_TYPES = {"return", "if", "while", "for", "switch", "else", "case", "throw", "new", "delete", "co_return",
             "goto", "do", "sizeof", "typedef"}
DECLARATOR = re.compile(r"^\s*(?:template\s*<[^>]*>\s*)?((?:[\w:<>,*&()]+\s+)+?)[*&]*\s*"
                        r"(?:[A-Za-z_]\w*::)*(~?[A-Za-z_]\w*)\s*(?:\(|\[|=(?!=)|;|\{|,|:(?!:))")
ENUM_BODY = re.compile(r"\benum(?:\s+class|\s+struct)?\s+\w+\s*(?::\s*[\w:]+)?\s*\{([^}]*)\}", re.S)
DEFINE = re.compile(r"^\s*#\s*define\s+([A-Za-z_]\w*)", re.M)
OP_ENTRY = re.compile(r"^\s*AXLE_OP\(\s*(\w+)\s*,", re.M)
COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


def declarations(root, files):
    """{file: (declared names, namespace components, class names)} for include/ and src/."""
    table = {}
    for f in files:
        if not (f.startswith("include/") or f.startswith("src/")) or not f.endswith((".h", ".hpp", ".cpp", ".def")):
            continue
        with open(os.path.join(root, f), errors="replace") as fh:
            text = COMMENT.sub("", fh.read())
        names, spaces, classes = set(), set(), set()
        names.update(m.group(1) for m in DECL_KEYWORD.finditer(text))
        names.update(DEFINE.findall(text))
        for m in NAMESPACE.finditer(text):
            spaces.update(m.group(1).split("::"))
        classes.update(CLASS.findall(text))
        for body in ENUM_BODY.findall(text):
            for item in body.split(","):
                w = item.split("=")[0].strip()
                if re.fullmatch(r"[A-Za-z_]\w*", w):
                    names.add(w)
        for line in text.split("\n"):
            m = DECLARATOR.match(line)
            if m and not (set(m.group(1).split()) & NOT_TYPES):
                names.add(m.group(2))
        table[f] = (names, spaces, classes)
    # The op table's names: OpKind::Name and attr::Name are generated by schema.h from ops.def.
    opdef = os.path.join(root, "src/ops/ops.def")
    if os.path.exists(opdef) and "src/ops/schema.h" in table:
        with open(opdef) as fh:
            ops = set(OP_ENTRY.findall(fh.read()))
        names, spaces, classes = table["src/ops/schema.h"]
        names |= ops
        classes |= ops
    return table


def axle_namespaces(table):
    spaces = set()
    for names, sp, classes in table.values():
        spaces |= sp
    return spaces - {"std"}


def symbol_exists(parts, table):
    name, qual = parts[-1], parts[-2]
    if name.startswith("operator"):
        return True  # operators are not named by a plain identifier; not checked
    for names, spaces, classes in table.values():
        if name in names and (qual in spaces or qual in classes):
            return True
    return False


# ---------------------------------------------------------------- paths
def expand_braces(word):
    m = re.search(r"\{([^{}]*)\}", word)
    if not m:
        return [word]
    out = []
    for alt in m.group(1).split(","):
        out += expand_braces(word[:m.start()] + alt + word[m.end():])
    return out


def path_exists(root, rel, files, dirs):
    pattern = re.sub(r"<[^>]*>", "*", rel.rstrip("/"))
    if "*" in pattern:
        return bool(glob.glob(os.path.join(root, pattern)))
    return pattern in files or pattern in dirs


def check_path(word, root, files, dirs, basenames, top):
    """None when `word` is not a path of the tree's shape; else True / False (exists)."""
    if not PATHLIKE.match(word) or word.startswith(("/", "~", ".")) or "//" in word:
        return None
    results = []
    for w in expand_braces(word):
        first = w.split("/", 1)[0]
        if "/" in w and first in top:
            results.append(path_exists(root, w, files, dirs))
        elif "/" in w and first == "axle":  # an #include path of a public header
            results.append(path_exists(root, "include/" + w, files, dirs))
        elif "/" in w and os.path.isdir(os.path.join(root, "src", first)):  # a src/ include path
            results.append(path_exists(root, "src/" + w, files, dirs))
        elif "/" not in w and w.endswith(BARE_EXT) and re.fullmatch(r"[\w.<>*+-]+", w):
            pat = re.sub(r"<[^>]*>", "*", w)
            results.append(any(glob.fnmatch.fnmatch(b, pat) for b in basenames) if "*" in pat else w in basenames)
        elif "/" not in w and w in top and w.endswith(SOURCE_EXT):  # README.md, CMakeLists.txt
            results.append(True)
        else:
            return None  # not of a tree path's shape (a run's output, a URL, prose): not checked
    return all(results)


# ---------------------------------------------------------------- the layer list
def layers_of(root):
    layers = []
    with open(os.path.join(root, "src", "LAYERS")) as f:
        for line in f:
            words = line.split("#", 1)[0].split()
            if words and not words[0].startswith("allow") and words[0] != "third-party":
                layers.append(words[0])
    return layers


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")
    files = tree_files(root)
    file_set = set(files)
    dirs = set()
    for f in files:
        parts = f.split("/")
        for i in range(1, len(parts)):
            dirs.add("/".join(parts[:i]))
    basenames = {os.path.basename(f) for f in files}
    top = {f.split("/", 1)[0] for f in files}
    table = declarations(root, files)
    spaces = axle_namespaces(table) | {"axle"}
    layers = layers_of(root)
    problems, checked = [], {"paths": 0, "symbols": 0, "layer lists": 0}
    docs = []
    for pat in DOCS:
        docs += sorted(glob.glob(os.path.join(root, pat)))
    for doc in docs:
        rel = os.path.relpath(doc, root)
        with open(doc) as fh:
            lines = fh.read().split("\n")
        fenced, layer_block, after_mark = False, None, False
        for n, line in enumerate(lines, 1):
            if line.strip().startswith("```"):
                if not fenced and after_mark:
                    layer_block = (n, [])
                elif fenced and layer_block is not None:
                    got = [w for w in layer_block[1]]
                    checked["layer lists"] += 1
                    if got != layers:
                        problems.append(f"{rel}:{layer_block[0]}: layer list {' '.join(got)} differs from "
                                        f"src/LAYERS (lowest first): {' '.join(layers)}")
                    layer_block = None
                fenced, after_mark = not fenced, False
                continue
            if line.strip() == LAYER_MARK:
                after_mark = True
                continue
            if fenced and layer_block is not None:
                if line.split():
                    layer_block[1].append(line.split()[0])
                continue
            spans = SPAN.findall(line) if not fenced else [line]
            for span in spans:
                for q in QUALIFIED.findall(span):
                    parts = q.split("::")
                    if parts[0] not in spaces:
                        continue
                    checked["symbols"] += 1
                    if not symbol_exists(parts, table):
                        problems.append(f"{rel}:{n}: symbol `{q}`: no `{parts[-1]}` declared in include/ or src/ "
                                        f"in a namespace or class `{parts[-2]}`")
                if fenced:
                    continue
                word = span.strip()
                ok = check_path(word, root, file_set, dirs, basenames, top)
                if ok is None:
                    continue
                checked["paths"] += 1
                if not ok:
                    problems.append(f"{rel}:{n}: path `{word}` does not exist in the tree")
    arch = os.path.join(root, "docs", "architecture.md")
    with open(arch) as fh:
        if LAYER_MARK not in fh.read():
            problems.append(f"docs/architecture.md:1: no layer list marked `{LAYER_MARK}`")
    for p in problems:
        print(p)
    print(f"docs_check: {len(docs)} files, {checked['paths']} paths, {checked['symbols']} symbols, "
          f"{checked['layer lists']} layer lists checked; {len(problems)} broken")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
