"""tools/check_layers.py on a small made-up repository: includes that run the stated way
pass (downward, within a folder, system headers, test helpers); one that runs upward, one
from datasets/ into the library beyond its line, and a framework folder the layers do not
name are each reported with file and line. The check of the real tree is the CTest entry
design_layers."""
import os
import tempfile

from checker_tree import run as run_checker, write

SOURCE = os.environ.get("DPT_SOURCE_DIR", os.path.join(os.path.dirname(__file__), ".."))
CHECKER = os.path.join(SOURCE, "tools", "check_layers.py")

DESIGN = """# Design

```layers
framework: core ops nn datasets models train
datasets: core
models: core nn
```
"""


def run(root):
    return run_checker(CHECKER, root)


def main():
    with tempfile.TemporaryDirectory() as root:
        write(root, "docs/design.md", DESIGN)
        write(root, "framework/core/tensor.h", "#include <vector>\n")
        write(root, "framework/ops/conv.cpp", '#include "ops/conv.h"\n#include "core/tensor.h"\n')
        write(root, "framework/nn/layers.h", '#include "ops/conv.h"\n#include "core/tensor.h"\n')
        write(root, "framework/train/trainer.cpp", '#include "nn/layers.h"\n#include "datasets/mnist.h"\n')
        write(root, "datasets/mnist.cpp", '#include "core/tensor.h"\n#include "gtest_helper/x.h"\n')
        write(root, "models/mlp.cpp", '#include "nn/layers.h"\n')
        code, out = run(root)
        assert code == 0, out
        assert "check_layers: 7 includes run the way docs/design.md states" in out, out

        write(root, "framework/ops/relu.cpp", '#include "core/tensor.h"\n\n#include "nn/layers.h"\n')
        write(root, "datasets/cifar.cpp", '#include "ops/conv.h"\n')
        write(root, "framework/extra/x.cpp", '#include "core/tensor.h"\n')
        code, out = run(root)
        assert code == 1, out
        expected = [
            "framework/ops/relu.cpp:3: includes nn/, but framework/ops may include only core (docs/design.md)",
            "datasets/cifar.cpp:1: includes ops/, but datasets may include only core (docs/design.md)",
            "framework/extra/x.cpp: folder framework/extra is not in docs/design.md's layers",
        ]
        for line in expected:
            assert line in out, f"missing {line!r} in:\n{out}"
        assert len(out.strip().splitlines()) == len(expected), out
    print("test_check_layers: ok")


if __name__ == "__main__":
    main()
