"""tools/check_size.py on a small made-up repository: a framework/ within the budget of
its docs/design.md passes and says its count; one line more fails with one line naming the
count, the excess and the largest folders; a design.md without a budget is an error. The
check of the real tree is the CTest entry line_budget."""
import os
import tempfile

from checker_tree import run as run_checker, write

SOURCE = os.environ.get("DPT_SOURCE_DIR", os.path.join(os.path.dirname(__file__), ".."))
CHECKER = os.path.join(SOURCE, "tools", "check_size.py")

DESIGN = """# Design

```budget
framework: 10
```
"""


def main():
    with tempfile.TemporaryDirectory() as root:
        write(root, "docs/design.md", DESIGN)
        write(root, "framework/core/tensor.h", "// one\n#pragma once\n\n")  # 3 lines, a blank one too
        write(root, "framework/comm/group.cpp", "a\nb\nc\nd\n")
        write(root, "framework/comm/group.h", "x\ny\n")
        write(root, "framework/version.txt", "1\n")
        code, out = run_checker(CHECKER, root)
        assert code == 0, out
        assert out.strip() == "check_size: framework/: 10 lines of 10", out

        write(root, "framework/comm/group.h", "x\ny\nz\n")
        code, out = run_checker(CHECKER, root)
        assert code == 1, out
        expected = ("framework/: 11 lines, 1 over the budget of 10 in docs/design.md "
                    "(largest folders: comm 7, core 3, . 1)")
        assert out.strip() == expected, out

        write(root, "docs/design.md", "# Design\n")
        code, out = run_checker(CHECKER, root)
        assert code == 1 and out == "", out
    print("test_check_size: ok")


if __name__ == "__main__":
    main()
