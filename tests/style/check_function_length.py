#!/usr/bin/env python3
"""check_function_length.py - no function of the library (src/, ops/) or the command line
(tools/cli/) is longer than 80 lines, except
those listed with a reason in docs/style.md ("Functions over 80 lines").

A function is counted from the first line of its signature to its closing brace, both
included (a definition whose body opens with '{' alone at column 0 and ends with '}' at
column 0: the layout clang-format gives every function here). Template headers (*_kernel.h)
count like .c files; their FN(name) / FA_FN(name) spellings are reported as written.

Usage: check_function_length.py SRCROOT [--list | --self-test]
       (exit 0: the rule holds; 1: a function is too long or an exception is stale, one line
       each; --list prints every function over the limit; --self-test shows, on a copy of
       SRCROOT's sources, that an added function of 81 lines and a stale exception are
       reported and one of 80 lines is not)
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


def check(root, listing=False):
    """(status, lines): status 0 if the rule holds (or when listing), 1 otherwise."""
    allowed = exceptions(root)
    seen, bad, files, out = set(), 0, set(), []
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
                out.append(f"{n:4d} {rel}:{line} {name}")
            elif key not in allowed:
                out.append(f"functions: {rel}:{line}: {name} is {n} lines (at most {LIMIT}; "
                           f"split it into named stages, or list it with a reason in "
                           f"docs/style.md)")
                bad = 1
    for key in sorted(set(allowed) - seen):
        if not listing:
            out.append(f"functions: docs/style.md lists {key[0]} {key[1]}, which is not over "
                       f"{LIMIT} lines (remove the stale entry)")
            bad = 1
    if not bad and not listing:
        out.append(f"functions: none over {LIMIT} lines in {len(files)} files "
                   f"({len(allowed)} listed exceptions)")
    return bad, out


def c_function(name, lines):
    """A C function of exactly @p lines lines, signature to closing brace."""
    body = [f"    x += {i};" for i in range(lines - 4)]
    return "\n".join([f"static int {name}(int x)", "{"] + body + ["    return x;", "}"]) + "\n"


def self_test(root):
    """The check on a copy of @p root's sources: it passes as they are, still passes with an
    added function of exactly LIMIT lines, fails naming an added function of LIMIT + 1 lines,
    and fails on a listed exception that is no longer over the limit."""
    import shutil
    import tempfile
    failures = []
    with tempfile.TemporaryDirectory(prefix="function_length.") as tmp:
        for d in DIRS:
            if os.path.isdir(os.path.join(root, d)):
                shutil.copytree(os.path.join(root, d), os.path.join(tmp, d))
        os.makedirs(os.path.join(tmp, "docs"))
        style = os.path.join(root, "docs", "style.md")
        if os.path.exists(style):
            shutil.copy(style, os.path.join(tmp, "docs", "style.md"))
        status, out = check(tmp)
        if status:
            failures.append("the copy of the tree does not pass as it is:\n  " + "\n  ".join(out))
        added = os.path.join(tmp, "src", "function_length_self_test.c")
        with open(added, "w") as f:
            f.write(c_function("at_the_limit", LIMIT))
        status, out = check(tmp)
        if status:
            failures.append(f"a function of {LIMIT} lines was reported:\n  " + "\n  ".join(out))
        with open(added, "a") as f:
            f.write("\n" + c_function("one_line_too_long", LIMIT + 1))
        status, out = check(tmp)
        if not status or not any("one_line_too_long is %d lines" % (LIMIT + 1) in l for l in out):
            failures.append(f"a function of {LIMIT + 1} lines was not reported: " + " / ".join(out))
        else:
            print("function_length self-test: reported: " +
                  next(l for l in out if "one_line_too_long" in l))
        os.remove(added)
        path = os.path.join(tmp, "docs", "style.md")
        text = open(path, encoding="utf-8").read() if os.path.exists(path) else ""
        row = "| `src/function_length_self_test.c` | `gone` | a stale entry |\n"
        sec = text.find("## Functions over 80 lines")
        head = text.find("|---", sec) if sec >= 0 else -1
        if head >= 0:  # into the table, after its header's separator row
            i = text.index("\n", head) + 1
            text = text[:i] + row + text[i:]
        else:
            text += "\n## Functions over 80 lines\n\n| file | function | reason |\n|---|---|---|\n" + row
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        status, out = check(tmp)
        if not status or not any("lists src/function_length_self_test.c gone" in l for l in out):
            failures.append("a stale exception was not reported: " + " / ".join(out))
        else:
            print("function_length self-test: reported: " +
                  next(l for l in out if "function_length_self_test.c gone" in l))
    for f in failures:
        print("function_length self-test: FAILED: " + f)
    if not failures:
        print("function_length self-test: passed")
    return 1 if failures else 0


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    root = args[0]
    if "--self-test" in sys.argv[1:]:
        return self_test(root)
    status, out = check(root, "--list" in sys.argv[1:])
    for line in out:
        print(line)
    return status


if __name__ == "__main__":
    sys.exit(main())
