#!/usr/bin/env python3
"""The test-home check (ctest `test_homes`): every src/**/*.cpp has a test home.

A source file's home is the test at its mirrored path, src/<dir>/<name>.cpp ->
tests/<dir>/test_<name>.cpp, or else the line of tests/HOMES that names it:

    src/<dir>/<name>.cpp  tests/<dir>/test_x.cpp [tests/...]  # why these cover it

Fails, listing them, on: a source file with no home; a HOMES line whose source or test file
does not exist, that has no reason after '#', or that names a file which has a mirrored test
(delete the line then); a test file directly in tests/ (move it into its layer's folder).
Usage: test_homes.py REPO_ROOT
"""
import pathlib
import sys


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    tests = root / "tests"
    errors = []
    homes = {}
    for i, raw in enumerate((tests / "HOMES").read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"tests/HOMES:{i}"
        body, _, why = line.partition("#")
        fields = body.split()
        if not why.strip():
            errors.append(f"{where}: no reason (write '# why these tests cover it')")
        if len(fields) < 2:
            errors.append(f"{where}: expected 'src/FILE.cpp tests/TEST.cpp... # why', got {line!r}")
            continue
        src, tfiles = fields[0], fields[1:]
        if src in homes:
            errors.append(f"{where}: {src} listed twice")
        homes[src] = tfiles
        if not (root / src).is_file():
            errors.append(f"{where}: {src} does not exist (delete the line)")
        for t in tfiles:
            if not (t.startswith("tests/") and (root / t).is_file()):
                errors.append(f"{where}: test file {t} does not exist")
    homeless = []
    for f in sorted((root / "src").rglob("*.cpp")):
        rel = f.relative_to(root / "src")
        src = f"src/{rel.as_posix()}"
        mirrored = tests / rel.parent / f"test_{rel.name}"
        if mirrored.is_file():
            if src in homes:
                errors.append(f"tests/HOMES: {src} has its mirrored test {mirrored.relative_to(root)}: delete its line")
        elif src not in homes:
            homeless.append(f"{src} (expected tests/{(rel.parent / ('test_' + rel.name)).as_posix()} or a line in tests/HOMES)")
    for t in sorted(tests.glob("test_*.cpp")):
        errors.append(f"tests/{t.name}: move it into the folder of the layer it tests (tests/<layer>/...)")
    if homeless:
        errors.append(f"{len(homeless)} source file(s) without a test home:\n  " + "\n  ".join(homeless))
    for e in errors:
        print(e)
    if not errors:
        print(f"test_homes: every src/**/*.cpp has a test home ({len(homes)} through tests/HOMES)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
