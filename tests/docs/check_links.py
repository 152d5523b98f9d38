#!/usr/bin/env python3
"""Checks the relative links of the repository's Markdown files.

Usage: check_links.py REPO_ROOT [--max-lines FILE=N ...]

Every link `[text](target)` whose target is not a URL must name a file or
folder that exists (relative to the linking file), and a `#fragment` must be
the anchor of a heading in the target Markdown file, made as GitHub makes
it: lower case, punctuation other than `-` and `_` dropped, spaces turned
into `-`, a `-N` suffix for the N-th repeat. `--max-lines README=N` also
checks that a file stays within N lines. Prints every problem with its file
and line; exits 1 if there is any.
"""
import os
import re
import sys

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")
SKIP_DIRS = {".git", "build", "third_party", "node_modules"}


def anchor_of(heading):
    text = re.sub(r"`([^`]*)`", r"\1", heading)            # code spans keep their text
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links keep their text
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)                  # GitHub drops punctuation but - and _
    return text.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        found, seen, fenced = set(), {}, False
        with open(path, encoding="utf-8") as f:
            for line in f:
                if FENCE.match(line):
                    fenced = not fenced
                    continue
                m = None if fenced else HEADING.match(line)
                if not m:
                    continue
                base = anchor_of(m.group(2))
                n = seen.get(base, 0)
                seen[base] = n + 1
                found.add(base if n == 0 else "%s-%d" % (base, n))
        cache[path] = found
    return cache[path]


def links(path):
    fenced = False
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if FENCE.match(line):
                fenced = not fenced
                continue
            if fenced:
                continue
            line = re.sub(r"`[^`]*`", "", line)  # a link inside a code span is text
            for m in LINK.finditer(line):
                yield number, m.group(1)


def check(root, limits):
    problems = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS and not d.startswith("build"))
        for name in sorted(files):
            if not name.endswith(".md"):
                continue
            path = os.path.join(folder, name)
            shown = os.path.relpath(path, root)
            for number, target in links(path):
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                    continue
                file_part, _, fragment = target.partition("#")
                resolved = path if not file_part else os.path.normpath(os.path.join(folder, file_part))
                if not os.path.exists(resolved):
                    problems.append("%s:%d: %s: no such file" % (shown, number, target))
                    continue
                if fragment and resolved.endswith(".md") and fragment not in anchors(resolved):
                    problems.append("%s:%d: %s: no heading with the anchor #%s in %s" %
                                    (shown, number, target, fragment, os.path.relpath(resolved, root)))
    for relative, most in limits.items():
        with open(os.path.join(root, relative), encoding="utf-8") as f:
            count = sum(1 for _ in f)
        if count > most:
            problems.append("%s: %d lines, more than the %d this check allows" % (relative, count, most))
    return problems


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    root, limits, rest = argv[1], {}, argv[2:]
    while rest:
        if rest[0] != "--max-lines" or len(rest) < 2 or "=" not in rest[1]:
            print("check_links.py: expected --max-lines FILE=N, got %s" % " ".join(rest), file=sys.stderr)
            return 2
        relative, most = rest[1].rsplit("=", 1)
        limits[relative] = int(most)
        rest = rest[2:]
    problems = check(root, limits)
    for problem in problems:
        print(problem)
    if problems:
        print("%d problems" % len(problems))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
