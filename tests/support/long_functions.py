#!/usr/bin/env python3
"""Lists every function in the repository longer than the project's limit (80 lines).

    python3 tests/support/long_functions.py [--limit N] [FILE...]

Without FILEs it checks every tracked C++ (.cc, .h, .cu) and Python (.py) file (git ls-files).
A function's length runs from the first line of its signature to its closing brace (C++) or
from its `def` line to its last line (Python); a lambda or local class counts in the function
that holds it. Prints one line per function over the limit, "FILE:LINE: NAME is N lines
(limit L)", and exits 1 if there is any, 0 if none. clang-tidy's readability-function-size
(./run.sh lint) checks the same limit in C++ from the compiler's view; this script needs no
build, so it runs in the quick tier and on a machine without the toolchain.
"""

import argparse
import ast
import re
import subprocess
import sys
from pathlib import Path

LIMIT = 80
SCOPE_KEYWORDS = re.compile(r"^(template\s*<.*>\s*)?(namespace|class|struct|union|enum|extern)\b")
ACCESS = re.compile(r"^\s*(public|private|protected)\s*:(?!:)\s*")
CTOR_INIT = re.compile(r"\)\s*(noexcept\s*)?:[^:]")
CONTROL = re.compile(r"^(if|for|while|switch|catch|else|do|try)\b")


def blank_code(text):
    """The text with comments, string and character literals and preprocessor lines replaced
    by spaces, newlines kept, so that braces and line numbers are the code's own."""
    out = list(text)
    i, n = 0, len(text)
    line_start = True

    def blank(a, b):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "

    while i < n:
        c = text[i]
        if line_start and c == "#":
            j = i
            while j < n and text[j] != "\n":  # a directive, continued by a trailing backslash
                j = text.find("\n", j)
                if j < 0:
                    j = n
                elif text[j - 1] == "\\":
                    j += 1
                    continue
                break
            blank(i, j)
            i = j
            continue
        if c == "\n":
            line_start = True
            i += 1
            continue
        if not c.isspace():
            line_start = False
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            blank(i, j)
            i = j
        elif c == "R" and i + 1 < n and text[i + 1] == '"' and not (i and (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'R"([^(\s]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            blank(i, j)
            i = j
        elif c in "\"'":
            if c == "'" and i and (text[i - 1].isalnum()):  # digit separator: 1'000'000
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            blank(i, min(j + 1, n))
            i = j + 1
        else:
            i += 1
    return "".join(out)


def cxx_functions(text):
    """(name, first line, last line) of each function body that is not inside another one."""
    code = blank_code(text)
    found = []
    head_start = 0  # offset where the current declaration's head began
    i = 0
    while i < len(code):
        c = code[i]
        if c in ";}":
            head_start = i + 1
        elif c == "{":
            raw = code[head_start:i]
            flat = ACCESS.sub("", " ".join(raw.split()))
            if SCOPE_KEYWORDS.match(flat):
                head_start = i + 1  # a namespace or class: its members are looked at one by one
            elif CTOR_INIT.search(flat) and re.search(r"[\w>]$", flat):
                i = matching_brace(code, i)  # a member's brace initialiser: still the head
            else:
                end = matching_brace(code, i)
                if "(" in flat and not CONTROL.match(flat) and not flat.startswith("="):
                    offset = head_start + len(raw) - len(raw.lstrip())
                    offset += len(ACCESS.match(raw.lstrip()).group(0)) if ACCESS.match(raw.lstrip()) else 0
                    first = code.count("\n", 0, offset + len(re.match(r"\s*", code[offset:]).group(0))) + 1
                    last = code.count("\n", 0, end) + 1
                    found.append((flat.split("(")[0].split(" ")[-1] or flat[:40], first, last))
                i = end  # a function, or an initialiser, enum body or block holding none
                head_start = i + 1
        i += 1
    return found


def matching_brace(code, open_at):
    depth = 0
    for j in range(open_at, len(code)):
        if code[j] == "{":
            depth += 1
        elif code[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    return len(code) - 1


def python_functions(text, path):
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError as error:
        raise SystemExit(f"{path}: not Python: {error}")
    out = []

    def visit(node, inside):
        for child in ast.iter_child_nodes(node):
            is_def = isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if is_def and not inside:
                first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                out.append((child.name, first, child.end_lineno))
            visit(child, inside or is_def)

    visit(tree, False)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", help="files to check (default: every tracked one)")
    parser.add_argument("--limit", type=int, default=LIMIT, help="most lines a function may have")
    args = parser.parse_args()
    root = Path(__file__).resolve().parents[2]
    files = args.files or subprocess.run(
        ["git", "ls-files", "*.cc", "*.h", "*.cu", "*.py"], cwd=root, check=True,
        capture_output=True, text=True).stdout.split()
    over = 0
    for name in files:
        path = Path(name) if args.files else root / name
        text = path.read_text(errors="replace")
        funcs = python_functions(text, name) if name.endswith(".py") else cxx_functions(text)
        for func, first, last in funcs:
            lines = last - first + 1
            if lines > args.limit:
                print(f"{name}:{first}: {func} is {lines} lines (limit {args.limit})")
                over += 1
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
