"""What the tests of the repository checkers (tools/check_links.py, tools/check_layers.py)
share: files written into a made-up repository, and the checker run on it."""
import os
import subprocess
import sys


def write(root, path, text):
    os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
    with open(os.path.join(root, path), "w", encoding="utf-8") as f:
        f.write(text)


def run(checker, root):
    """The checker's exit code and standard output on the repository `root`."""
    done = subprocess.run([sys.executable, checker, root], capture_output=True, text=True)
    return done.returncode, done.stdout
