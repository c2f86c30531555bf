"""Benchmark results name the commit they ran: SPARKDEC_COMMIT, else HEAD, marked when tracked files differ."""
from __future__ import annotations

import subprocess

from sparkdec.bench.provenance import commit


def _git(repo, *args):
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


def test_commit_names_head_and_marks_a_tree_that_differs(tmp_path, monkeypatch):
    monkeypatch.delenv("SPARKDEC_COMMIT", raising=False)
    _git(tmp_path, "init", "-q")
    (tmp_path / "a.py").write_text("x = 1\n")
    _git(tmp_path, "add", "a.py")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    head = subprocess.run(["git", "-C", str(tmp_path), "rev-parse", "--short", "HEAD"], capture_output=True,
                          text=True).stdout.strip()
    monkeypatch.chdir(tmp_path)
    assert commit() == head
    (tmp_path / "a.py").write_text("x = 2\n")  # what a copied tree with an older git state looks like
    assert commit() == head + "+changes"
    monkeypatch.setenv("SPARKDEC_COMMIT", "abc1234")
    assert commit() == "abc1234"


def test_commit_outside_a_repository_is_unknown(tmp_path, monkeypatch):
    monkeypatch.delenv("SPARKDEC_COMMIT", raising=False)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    monkeypatch.chdir(tmp_path)
    assert commit() == "unknown"
