"""What a newcomer meets first: the build line, README's links, progress bars, git status."""

import io
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import gpumat
from gpumat.datasets import progress_bar_wanted

ROOT = Path(__file__).resolve().parents[2]


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_progress_bars_only_when_stdout_is_a_terminal(monkeypatch):
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    assert not progress_bar_wanted(True)
    monkeypatch.setattr(sys, "stdout", _Tty())
    assert progress_bar_wanted(True)
    assert not progress_bar_wanted(False)


def test_python_m_gpumat_prints_the_build_line():
    proc = subprocess.run(
        [sys.executable, "-P", "-m", "gpumat"], capture_output=True, text=True, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1
    info = gpumat.build_info()
    if info["cuda"]:
        assert "built with CUDA for compute capabilities " + " ".join(info["cuda_arch"]) in lines[0]
    else:
        assert "built WITHOUT CUDA" in lines[0]


def test_readme_links_stay_inside_the_repository():
    text = (ROOT / "README.md").read_text()
    assert "../" not in text
    for target in re.findall(r"\]\(([^)#]+)\)", text):
        if "://" not in target:
            assert (ROOT / target).exists(), target


@pytest.mark.skipif(
    shutil.which("git") is None or not (ROOT / ".git").exists(), reason="not a git checkout"
)
def test_plot_files_in_the_repository_root_are_ignored():
    for name in ("mnist.png", "curves.pdf", "loss.svg"):
        proc = subprocess.run(["git", "check-ignore", "-q", name], cwd=ROOT, capture_output=True)
        assert proc.returncode == 0, (name, proc.stderr)
