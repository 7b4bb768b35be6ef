#!/usr/bin/env python3
"""Checks that every relative link and #anchor in the project's Markdown (README.md,
CHANGELOG.md, docs/**/*.md) resolves inside the repository: the file or folder exists,
lies under the repository root, and a #anchor names a heading of the Markdown file it
points to (GitHub's heading ids). Links to other sites (http:, https:, mailto:) are not
fetched. Prints one line per broken link and exits 1, or says how many links it checked.
  tools/check_links.py [ROOT]        # ROOT: the repository (default: this script's ../)
"""
import os
import re
import sys

# [text](target) and ![alt](target), the target up to a space (a title may follow) or ')'.
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
# [label]: target (a reference definition).
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s{0,3}(```|~~~)")
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # http:, https:, mailto:, ...


def prose_lines(text):
    """(line number, line) outside fenced code blocks, with inline code spans blanked."""
    fence = None
    for number, line in enumerate(text.splitlines(), 1):
        match = FENCE.match(line)
        if match:
            if fence is None:
                fence = match.group(1)
            elif match.group(1) == fence:
                fence = None
            continue
        if fence is None:
            yield number, re.sub(r"(`+)(.+?)\1", lambda m: " " * len(m.group(0)), line)


def slug(heading):
    """GitHub's id for a heading: its text without markup, lower case, punctuation other
    than '-' and '_' dropped, spaces made '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text stays
    text = text.replace("`", "")
    text = re.sub(r"<[^>]+>", "", text)  # inline HTML
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    """Every heading id of a Markdown file; repeated ones get -1, -2, ... as on GitHub."""
    seen = {}
    ids = set()
    fence = None
    with open(path, encoding="utf-8") as f:
        for line in f.read().splitlines():
            match = FENCE.match(line)
            if match:
                if fence is None:
                    fence = match.group(1)
                elif match.group(1) == fence:
                    fence = None
                continue
            heading = HEADING.match(line) if fence is None else None
            if not heading:
                continue
            base = slug(heading.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            ids.add(base if count == 0 else f"{base}-{count}")
    return ids


def markdown_files(root):
    files = [os.path.join(root, name) for name in ("README.md", "CHANGELOG.md")]
    for folder, _, names in os.walk(os.path.join(root, "docs")):
        files += [os.path.join(folder, name) for name in names if name.endswith(".md")]
    return sorted(f for f in files if os.path.isfile(f))


def check_link(root, source, target, anchor_cache):
    """None if `target`, written in `source`, resolves; else why not."""
    path, _, anchor = target.partition("#")
    if path:
        resolved = os.path.realpath(os.path.join(os.path.dirname(source), path))
        if os.path.commonpath([resolved, root]) != root:
            return f"{path} lies outside the repository"
        if not os.path.exists(resolved):
            return f"{os.path.relpath(resolved, root)} does not exist"
    else:
        resolved = source
    if anchor:
        if not resolved.endswith(".md") or os.path.isdir(resolved):
            return f"#{anchor} on {os.path.relpath(resolved, root)}, which is not a Markdown file"
        if resolved not in anchor_cache:
            anchor_cache[resolved] = anchors(resolved)
        if anchor not in anchor_cache[resolved]:
            return f"no heading with id '{anchor}' in {os.path.relpath(resolved, root)}"
    return None


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.realpath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, ".."))
    files = markdown_files(root)
    if not files:
        print(f"check_links: no README.md, CHANGELOG.md or docs/*.md under {root}")
        return 1
    anchor_cache = {}
    broken = 0
    checked = 0
    for source in files:
        with open(source, encoding="utf-8") as f:
            text = f.read()
        for number, line in prose_lines(text):
            targets = INLINE_LINK.findall(line)
            reference = REFERENCE.match(line)
            if reference:
                targets.append(reference.group(1))
            for target in targets:
                if not target or EXTERNAL.match(target):
                    continue
                checked += 1
                problem = check_link(root, source, target, anchor_cache)
                if problem:
                    broken += 1
                    print(f"{os.path.relpath(source, root)}:{number}: ({target}): {problem}")
    if broken:
        print(f"check_links: {broken} of {checked} links broken")
        return 1
    print(f"check_links: {checked} links in {len(files)} files resolve")
    return 0


if __name__ == "__main__":
    sys.exit(main())
