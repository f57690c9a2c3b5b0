"""What a newcomer meets first: the build line, the docs' links, README's test commands, progress
bars, git status."""

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


# Every markdown doc a reader follows links in: README, the guides, the benchmarks' notes.
LINKED_DOCS = [
    "README.md",
    *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "docs").glob("*.md")),
    "benchmarks/README.md",
    "benchmarks/results/README.md",
    "benchmarks/sgemm/NOTES.md",
]
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def heading_anchors(text: str) -> set[str]:
    """GitHub's anchors of a markdown file's headings: lower case, punctuation dropped, spaces
    to hyphens (fenced code is not searched for headings)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    anchors = set()
    for title in re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-")
        anchors.add(slug)
    return anchors


@pytest.mark.parametrize("doc", LINKED_DOCS)
def test_doc_links_resolve_inside_the_repository(doc):
    path = ROOT / doc
    problems = []
    for target in _LINK.findall(path.read_text()):
        if "://" in target or target.startswith("mailto:"):
            if not target.startswith("https://"):
                problems.append(f"{target}: only public https URLs may leave the repository")
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if file_part.startswith("/") or not dest.is_relative_to(ROOT):
            problems.append(f"{target}: points outside the repository")
        elif not dest.exists():
            problems.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in heading_anchors(dest.read_text()):
            problems.append(f"{target}: no heading #{anchor} in {dest.name}")
    assert not problems, f"{doc}: " + "; ".join(problems)


def test_link_check_sees_broken_links(tmp_path):
    assert "data-parallel-training" in heading_anchors("## Data-parallel training\n")
    assert "the-dlsys-course-gpumatdlsys" in heading_anchors("## The dlsys course: `gpumat.dlsys`")
    assert _LINK.findall("[a](docs/x.md#y) ![img](z.png) [b](https://e.org)") == [
        "docs/x.md#y",
        "https://e.org",
    ]


def test_readme_test_commands_are_what_ci_runs():
    """README's two set-up commands are exactly the ones .ci/run runs on a fresh clone."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Run the tests", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S).group(1)
    assert block.splitlines() == ['pip install ".[test]"', "pytest"]
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert 'python3 -m pip install ".[test]"' in ci
    assert "pytest" in ci


@pytest.mark.skipif(
    shutil.which("git") is None or not (ROOT / ".git").exists(), reason="not a git checkout"
)
def test_plot_files_in_the_repository_root_are_ignored():
    for name in ("mnist.png", "curves.pdf", "loss.svg"):
        proc = subprocess.run(["git", "check-ignore", "-q", name], cwd=ROOT, capture_output=True)
        assert proc.returncode == 0, (name, proc.stderr)


def test_gpu_check_script_names_files_that_exist():
    """scripts/gpu_check.sh runs only on a lent GPU: a test file it names that has moved would go
    unnoticed until then."""
    script = (ROOT / "scripts" / "gpu_check.sh").read_text()
    named = set(re.findall(r"\$REPO/((?:tests|examples|benchmarks)/[\w/.-]+\.py)", script))
    assert named, "the pattern no longer finds the script's files"
    missing = sorted(p for p in named if not (ROOT / p).is_file())
    assert not missing, f"gpu_check.sh names files that do not exist: {missing}"


def test_every_package_is_installed():
    """pyproject.toml lists its packages by hand: a new subpackage left out works from a checkout
    and is missing from the installed gpumat (``pip install .``)."""
    import tomllib

    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for p in (ROOT / "gpumat").rglob("__init__.py")
        if "__pycache__" not in p.parts
    }
    assert found == listed, {
        "not listed": sorted(found - listed),
        "not found": sorted(listed - found),
    }
