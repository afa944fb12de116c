#!/usr/bin/env bash
# Every relative link of the repository's markdown points at something that
# exists (make test runs this first, beside test/check-version.sh): a file
# or directory of the tree, and for a link with a #fragment into a markdown
# file, one of that file's headings as GitHub names its anchor (lower case,
# punctuation but - and _ dropped, spaces to -, a repeated heading -1, -2,
# ...). Links inside code blocks and code spans are not links. Prints one
# "... ok" / "... FAILED" line per file and each broken link; exits 1 if
# any is broken.
set -euo pipefail
cd "$(dirname "$0")/.."

exec /usr/bin/python3 - "$@" <<'EOF'
import os
import re
import subprocess
import sys

files = sys.argv[1:] or subprocess.run(
    ["git", "ls-files", "*.md"], check=True, capture_output=True, text=True
).stdout.split()

FENCE = re.compile(r"^ {0,3}(```+|~~~+)")


def prose(text):
    """The file's lines outside fenced code blocks, as (line number, line)."""
    fence = None
    for n, line in enumerate(text.split("\n"), 1):
        m = FENCE.match(line)
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            continue
        if m:
            fence = m.group(1)
            continue
        yield n, line


def anchor(heading):
    """GitHub's anchor of a heading's text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)  # \w: letters, digits and _, Unicode too
    return text.replace(" ", "-")


anchors_of = {}


def anchors(path):
    if path not in anchors_of:
        seen, names = {}, set()
        with open(path, encoding="utf-8") as f:
            for _, line in prose(f.read()):
                m = re.match(r"^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$", line)
                if not m:
                    continue
                a = anchor(m.group(1))
                n = seen.get(a, 0)
                seen[a] = n + 1
                names.add(a if n == 0 else f"{a}-{n}")
        anchors_of[path] = names
    return anchors_of[path]


LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
failed = 0
for md in files:
    with open(md, encoding="utf-8") as f:
        text = f.read()
    broken = []
    for n, line in prose(text):
        line = re.sub(r"(`+).*?\1", "", line)  # code spans
        for m in LINK.finditer(line):
            target = m.group(1)
            if not target or re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):
                continue  # an absolute URL (https:, mailto:)
            path, _, frag = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(md), path)) if path else md
            if not os.path.exists(dest):
                broken.append(f"{md}:{n}: {target}: no such file")
            elif frag and dest.endswith(".md") and frag.lower() not in anchors(dest):
                broken.append(f"{md}:{n}: {target}: no heading with that anchor in {dest}")
    if broken:
        failed = 1
        print(f"docs: {md}'s links ... FAILED")
        for b in broken:
            print("  " + b)
    else:
        print(f"docs: {md}'s links ... ok")
sys.exit(failed)
EOF
