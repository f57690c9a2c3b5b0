"""The documentation site's set-up: the docs extra declares the tools docs/site/conf.py uses, README
documents the command CI runs, and the site's own checks (docs/site/gpumat_site.py) see what they
are there to see: a broken link or anchor, a page loading from outside, a public name without a
docstring. The build itself runs in CI (.ci/run) and with ``python -m sphinx`` (README.md)."""

import re
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "docs" / "site"


def _extra(name: str) -> list[str]:
    text = (ROOT / "pyproject.toml").read_text()
    section = text.split("[project.optional-dependencies]", 1)[1]
    block = re.search(rf"^{name} = \[(.*?)^\]", section, re.M | re.S).group(1)
    return [re.split(r"[<>=!~ ]", s)[0] for s in re.findall(r'"([^"]+)"', block)]


def test_the_docs_extra_declares_the_sites_tools():
    declared = {d.lower().replace("_", "-") for d in _extra("docs")}
    conf = (SITE / "conf.py").read_text()
    assert 'html_theme = "furo"' in conf and '"myst_nb"' in conf
    assert {"sphinx", "myst-nb", "furo", "nbclient", "ipykernel"} <= declared


def test_readme_documents_the_command_ci_runs():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert 'pip install ".[docs]"' in readme
    # CI installs the same extra's requirements without building gpumat a second time.
    assert '["optional-dependencies"]["docs"]' in ci
    command = re.search(r"^python -m sphinx (.*?) \. build/site", readme, re.M)
    assert command, "README.md: the site's build command"
    assert f"python3 -m sphinx {command.group(1)} . " in ci
    assert "-W" in command.group(1).split()


@pytest.fixture
def site():
    pytest.importorskip("sphinx", reason="sphinx is not installed (the docs extra)")
    sys.path.insert(0, str(SITE))
    try:
        import gpumat_site

        yield gpumat_site
    finally:
        sys.path.remove(str(SITE))


def test_link_check_sees_broken_links(site, tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.html").write_text(
        '<a href="sub/b.html#there">ok</a> <a href="https://example.org/x">out</a>'
        '<a href="#top" id="top">self</a>'
    )
    (tmp_path / "sub" / "b.html").write_text('<h1 id="there">b</h1><a href="../a.html">back</a>')
    assert site.check_links(tmp_path) == []
    (tmp_path / "c.html").write_text(
        '<a href="missing.html">x</a> <a href="sub/b.html#nowhere">y</a>'
        '<script src="https://cdn.example.org/x.js"></script> <a href="/abs.html">z</a>'
        '<a href="http://example.org">plain http</a>'
    )
    problems = "\n".join(site.check_links(tmp_path))
    assert "missing.html': no such file" in problems
    assert "no id 'nowhere'" in problems
    assert "loads from outside" in problems
    assert "absolute path" in problems
    assert "only https links" in problems


def test_docstring_check_sees_undocumented_names(site, monkeypatch):
    module = types.ModuleType("gpumat.fake_for_test", "A module docstring.")

    def documented():
        """Has one."""

    def bare():
        pass

    class Thing:
        """A class."""

        def method(self):
            pass

    for obj in (documented, bare, Thing):
        obj.__module__ = module.__name__
        setattr(module, obj.__name__, obj)
    module.__all__ = ["documented", "bare", "Thing"]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    catalogue = site.Catalogue([module.__name__])
    assert catalogue.own[module.__name__] == ["documented", "bare", "Thing"]
    assert site.undocumented(catalogue) == [
        "gpumat.fake_for_test.bare",
        "gpumat.fake_for_test.Thing.method",
    ]


def test_every_public_module_gets_an_api_page(site):
    modules = site.public_modules()
    assert {"gpumat", "gpumat.ops", "gpumat.graph.node", "gpumat.runtime.executor"} <= set(modules)
    assert not [m for m in modules if any(p.startswith("_") for p in m.split("."))]
    assert all(site.section_of(m) != "More modules" for m in modules), [
        m for m in modules if site.section_of(m) == "More modules"
    ]
    catalogue = site.Catalogue(modules)
    assert site.undocumented(catalogue) == []
    page = site.module_page(catalogue, "gpumat.runtime")
    assert "{py:obj}`gpumat.runtime.executor.Executor`" in page
