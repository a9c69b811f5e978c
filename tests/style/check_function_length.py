#!/usr/bin/env python3
"""check_function_length.py - no function of the library (src/, ops/) or the command line
(tools/cli/) is longer than 80 lines, except
those listed with a reason in docs/style.md ("Functions over 80 lines").

A function is counted from the first line of its signature to its closing brace, both
included (a definition whose body opens with '{' alone at column 0 and ends with '}' at
column 0: the layout clang-format gives every function here). Template headers (*_kernel.h)
count like .c files; their FN(name) / FA_FN(name) spellings are reported as written.

Usage: check_function_length.py SRCROOT [--list]   (exit 0: the rule holds; 1: a function is
       too long or an exception is stale, one line each; --list prints every function over
       the limit)
"""
import os
import re
import sys

LIMIT = 80
DIRS = ("src", "ops", "tools/cli")
EXTS = (".c", ".cc", ".h")


def functions(path):
    """(name, first line, length) of every function definition in path."""
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    i = 0
    while i < len(lines):
        if lines[i].startswith("{"):
            j = i - 1  # the signature: back to the line after the previous declaration
            while j > 0 and "(" not in lines[j]:
                j -= 1
            k = j
            while k > 0:
                prev = lines[k - 1].rstrip()
                if not prev or prev.endswith((";", "}", "*/")) or prev.startswith("#"):
                    break
                k -= 1
            sig = " ".join(x.strip() for x in lines[k:i])
            m = re.search(r"((?:\w*FN\w*\()?\w+\)?)\s*\(", sig)
            name = m.group(1) if m else "?"
            e = i + 1
            while e < len(lines) and not lines[e].startswith("}"):
                e += 1
            yield name, k + 1, e - k + 1
            i = e
        i += 1


def exceptions(root):
    """{(file, function): reason} from docs/style.md's table."""
    out = {}
    path = os.path.join(root, "docs", "style.md")
    if not os.path.exists(path):
        return out
    text = open(path, encoding="utf-8").read()
    sec = text.split("## Functions over 80 lines", 1)
    if len(sec) < 2:
        return out
    for row in sec[1].split("\n## ", 1)[0].split("\n"):
        cells = [c.strip().strip("`") for c in row.strip().strip("|").split("|")]
        if len(cells) >= 3 and "/" in cells[0] and not set(cells[0]) <= set("-: "):
            out[(cells[0], cells[1])] = cells[2]
    return out


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    root = sys.argv[1]
    listing = "--list" in sys.argv[2:]
    allowed = exceptions(root)
    seen, bad, files = set(), 0, set()
    for d in DIRS:
        base = os.path.join(root, d)
        if not os.path.isdir(base):
            continue
        for dirpath, _, names in os.walk(base):
            for n in sorted(names):
                if n.endswith(EXTS):
                    files.add(os.path.relpath(os.path.join(dirpath, n), root))
    for rel in sorted(files):
        for name, line, n in functions(os.path.join(root, rel)):
            if n <= LIMIT:
                continue
            key = (rel, name)
            seen.add(key)
            if listing:
                print(f"{n:4d} {rel}:{line} {name}")
            elif key not in allowed:
                print(f"functions: {rel}:{line}: {name} is {n} lines (at most {LIMIT}; split it "
                      f"into named stages, or list it with a reason in docs/style.md)")
                bad = 1
    for key in sorted(set(allowed) - seen):
        if not listing:
            print(f"functions: docs/style.md lists {key[0]} {key[1]}, which is not over "
                  f"{LIMIT} lines (remove the stale entry)")
            bad = 1
    if not bad and not listing:
        print(f"functions: none over {LIMIT} lines in {len(files)} files "
              f"({len(allowed)} listed exceptions)")
    return bad


if __name__ == "__main__":
    sys.exit(main())
