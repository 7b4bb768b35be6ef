"""tools/check_links.py on a small made-up repository: the links that resolve pass, and
each kind of broken link (a missing file, a path outside the repository, a missing
anchor, an anchor on a file that is not Markdown) is reported with its file and line.
The check of the real README and docs is the CTest entry docs_links."""
import os
import tempfile

from checker_tree import run as run_checker, write

SOURCE = os.environ.get("DPT_SOURCE_DIR", os.path.join(os.path.dirname(__file__), ".."))
CHECKER = os.path.join(SOURCE, "tools", "check_links.py")

README = """# Project

See [the guide](docs/guide.md), [its second part](docs/guide.md#part-two-the-rest),
[a repeated heading](docs/guide.md#notes-1), [a file](tools/run.sh), [a folder](tools/)
and [here](#project). [Outside](https://example.com/x.md#nowhere) is not fetched.
`[in code](missing.md)` and links in fenced code are not links:

```
[fenced](missing.md)
```
"""

GUIDE = """# Guide

## Part two: the rest

## Notes

## Notes

Back to the [README](../README.md#project); ![a figure](figures/a.png).
"""


def run(root):
    return run_checker(CHECKER, root)


def main():
    with tempfile.TemporaryDirectory() as root:
        write(root, "README.md", README)
        write(root, "docs/guide.md", GUIDE)
        write(root, "docs/figures/a.png", "")
        write(root, "tools/run.sh", "")
        code, out = run(root)
        assert code == 0, out
        assert "8 links in 2 files resolve" in out, out

        write(root, "docs/broken.md", "\n".join([
            "[gone](missing.md)",
            "[up](../../etc/passwd)",
            "[no anchor](guide.md#part-three)",
            "[anchor on a script](../tools/run.sh#top)",
            "[self](#nothing-here)",
        ]) + "\n")
        code, out = run(root)
        assert code == 1, out
        expected = [
            "docs/broken.md:1: (missing.md): docs/missing.md does not exist",
            "docs/broken.md:2: (../../etc/passwd): ../../etc/passwd lies outside the repository",
            "docs/broken.md:3: (guide.md#part-three): no heading with id 'part-three' in docs/guide.md",
            "docs/broken.md:4: (../tools/run.sh#top): #top on tools/run.sh, which is not a Markdown file",
            "docs/broken.md:5: (#nothing-here): no heading with id 'nothing-here' in docs/broken.md",
            "check_links: 5 of 13 links broken",
        ]
        for line in expected:
            assert line in out, f"missing {line!r} in:\n{out}"
    print("test_check_links: ok")


if __name__ == "__main__":
    main()
