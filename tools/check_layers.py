#!/usr/bin/env python3
"""Checks that every #include of the library, the models and the datasets runs in the
direction docs/design.md states: its ```layers block gives, per top folder, the folders in
the order they may depend on each other ("framework: core backend ... train": a folder of
framework/ includes only folders listed before it; "models: core nn ...": a file of
models/ includes only those). Includes of the folder's own files and of system headers
(<...>) are not checked. Prints one line per include that runs the other way (file, line,
what it includes, what the layers allow) and exits 1, or says how many it checked.
  tools/check_layers.py [ROOT]        # ROOT: the repository (default: this script's ../)
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"/]+)/')
def read_block(design, name, tool):
    """The 'key: value' lines of design.md's ```name block as (key, value) pairs; exits
    naming `tool` when there is none."""
    with open(design, encoding="utf-8") as f:
        match = re.search(rf"^```{name}\s*$(.*?)^```\s*$", f.read(), re.M | re.S)
    if not match:
        sys.exit(f"{tool}: {design} has no ```{name} block")
    return [(key.strip(), value) for key, _, value in
            (line.partition(":") for line in match.group(1).strip().splitlines())]


def read_layers(design):
    """{top folder: [its layers in order]} from the ```layers block of design.md."""
    return {top: folders.split() for top, folders in read_block(design, "layers", "check_layers")}


def allowed(layers, top, folder):
    """What a file of `folder` (a layer of top/, or top itself) may include."""
    order = layers[top]
    if top == "framework":
        return set(order[: order.index(folder)]) if folder in order else None
    return set(order)


def check(root):
    layers = read_layers(os.path.join(root, "docs", "design.md"))
    problems, checked = [], 0
    for top in layers:
        base = os.path.join(root, top)
        for directory, _, files in os.walk(base):
            for name in sorted(files):
                if not name.endswith((".h", ".cpp", ".cu")):
                    continue
                path = os.path.join(directory, name)
                rel = os.path.relpath(path, root)
                parts = os.path.relpath(path, base).split(os.sep)
                folder = parts[0] if top == "framework" and len(parts) > 1 else top
                may = allowed(layers, top, folder)
                if may is None:
                    problems.append(f"{rel}: folder framework/{folder} is not in docs/design.md's layers")
                    continue
                with open(path, encoding="utf-8", errors="replace") as f:
                    for number, line in enumerate(f, 1):
                        match = INCLUDE.match(line)
                        if not match:
                            continue
                        target = match.group(1)
                        known = target in layers["framework"] or target in layers
                        if target == folder or not known:
                            continue  # its own folder, or not a layer (a test helper, a system path)
                        checked += 1
                        if target not in may:
                            problems.append(f"{rel}:{number}: includes {target}/, but {top}"
                                            f"{'/' + folder if top == 'framework' else ''} may include only "
                                            f"{' '.join(sorted(may)) or 'nothing of the layers'} (docs/design.md)")
    return problems, checked


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    problems, checked = check(root)
    for p in problems:
        print(p)
    if problems:
        return 1
    print(f"check_layers: {checked} includes run the way docs/design.md states")
    return 0


if __name__ == "__main__":
    sys.exit(main())
