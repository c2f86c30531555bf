"""The commit a benchmark result names: SPARKDEC_COMMIT, else git's HEAD, marked when the tree differs from it."""
from __future__ import annotations

import os
import subprocess


def commit() -> str:
    """SPARKDEC_COMMIT if set (a copied tree is told its commit), else the short HEAD hash plus "+changes" when
    tracked files differ from it: a copied tree whose git state is older than its files then says so instead of
    naming a commit it does not run."""
    if os.environ.get("SPARKDEC_COMMIT"):
        return os.environ["SPARKDEC_COMMIT"]
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True).stdout.strip()
    except OSError:
        return "unknown"
    return (head or "unknown") + ("+changes" if head and dirty else "")
