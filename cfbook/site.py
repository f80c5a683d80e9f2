"""Turn the executed chapter notebooks into a website that works offline.

``_quarto.yml`` is the single source of the chapter list. With Quarto on PATH the site is
``quarto render``; without it, nbconvert renders the same executed notebooks into one page per
chapter with a sidebar and prev/next links, so the book can still be read (and tested) anywhere.
Either way every page loads one local ``plotly.min.js`` and nothing from a CDN.
"""

from __future__ import annotations

import html
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import nbformat
import yaml
from latex2mathml.converter import convert as latex_to_mathml
from nbconvert import HTMLExporter
from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath

__all__ = [
    "CONFIG_FILE",
    "PLOTLY_JS",
    "Book",
    "build_site",
    "chapter_title",
    "copy_plotly_js",
    "read_book",
]

CONFIG_FILE = "_quarto.yml"
PLOTLY_JS = "plotly.min.js"


@dataclass(frozen=True)
class Book:
    """What ``_quarto.yml`` says about the book: its title and chapter files, in reading order."""

    project_dir: Path
    title: str
    chapters: tuple[Path, ...]  # relative to project_dir, e.g. book/index.ipynb

    @property
    def chapter_dir(self) -> Path:
        """The folder the chapters live in (one folder, checked by :func:`read_book`)."""
        return self.project_dir / self.chapters[0].parent


def _flatten_chapters(entries: list[Any]) -> list[str]:
    # Quarto allows `- part: ...` entries with their own `chapters:` list.
    files: list[str] = []
    for entry in entries:
        if isinstance(entry, dict):
            files.extend(_flatten_chapters(entry.get("chapters") or []))
        else:
            files.append(str(entry))
    return files


def read_book(project_dir: str | Path) -> Book:
    """Parse ``<project_dir>/_quarto.yml``; errors say what is wrong with the chapter list."""
    project_dir = Path(project_dir)
    config_path = project_dir / CONFIG_FILE
    if not config_path.is_file():
        raise FileNotFoundError(f"{config_path} not found: pass the folder holding {CONFIG_FILE}")
    config = yaml.safe_load(config_path.read_text(encoding="utf-8")) or {}
    book = config.get("book") or {}
    chapters = [Path(c) for c in _flatten_chapters(book.get("chapters") or [])]
    if not chapters:
        raise ValueError(f"{config_path}: book.chapters lists no chapters")
    if chapters[0].stem != "index":
        raise ValueError(f"{config_path}: the first chapter must be index.ipynb, not {chapters[0]}")
    if len({c.parent for c in chapters}) != 1 or any(c.suffix != ".ipynb" for c in chapters):
        raise ValueError(f"{config_path}: chapters must be notebooks in one folder, got {chapters}")
    return Book(project_dir, str(book.get("title") or "cfbook"), tuple(chapters))


def chapter_title(nb: nbformat.NotebookNode, fallback: str) -> str:
    """The chapter's title as Quarto picks it: metadata title, else the first level-1 heading."""
    title = nb.metadata.get("title")
    if title:
        return str(title)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return fallback


def copy_plotly_js(dest_dir: str | Path) -> Path:
    """Copy the installed plotly package's ``plotly.min.js`` into ``dest_dir`` (no CDN needed)."""
    import plotly

    source = Path(plotly.__file__).parent / "package_data" / PLOTLY_JS
    if not source.is_file():
        raise FileNotFoundError(f"{source} missing: reinstall plotly (pip install plotly)")
    target = Path(dest_dir) / PLOTLY_JS
    target.parent.mkdir(parents=True, exist_ok=True)
    if not target.is_file() or target.stat().st_size != source.stat().st_size:
        shutil.copyfile(source, target)
    return target


def build_site(
    project_dir: str | Path,
    site_dir: str | Path,
    *,
    chapter_dir: str | Path | None = None,
    use_quarto: bool | None = None,
) -> Path:
    """Build the website from executed chapters and return the path of its ``index.html``.

    ``chapter_dir`` holds the executed notebooks (default: the chapters' own folder in the
    project). ``use_quarto=None`` uses Quarto when it is on PATH and nbconvert otherwise.
    """
    book = read_book(project_dir)
    chapter_dir = Path(chapter_dir) if chapter_dir is not None else book.chapter_dir
    site_dir = Path(site_dir).resolve()
    missing = [c.name for c in book.chapters if not (chapter_dir / c.name).is_file()]
    if missing:
        raise FileNotFoundError(f"chapters missing from {chapter_dir}: {', '.join(missing)}")
    quarto = shutil.which("quarto")
    if use_quarto and quarto is None:
        raise FileNotFoundError("use_quarto=True but `quarto` is not on PATH; install Quarto 1.7+")
    if quarto is not None and use_quarto is not False:
        return _render_with_quarto(quarto, book, chapter_dir, site_dir)
    if use_quarto is None:
        print("Quarto not found on PATH: building the site with nbconvert instead.")
    return _render_with_nbconvert(book, chapter_dir, site_dir)


def _render_with_quarto(quarto: str, book: Book, chapter_dir: Path, site_dir: Path) -> Path:
    """``quarto render`` the project, or a staged copy of it when the chapters live elsewhere."""
    if chapter_dir.resolve() == book.chapter_dir.resolve():
        copy_plotly_js(book.project_dir)
        _run_quarto(quarto, book.project_dir, site_dir)
    else:
        with tempfile.TemporaryDirectory(prefix="cfbook-quarto-") as tmp:
            stage = Path(tmp)
            shutil.copyfile(book.project_dir / CONFIG_FILE, stage / CONFIG_FILE)
            for chapter in book.chapters:
                (stage / chapter).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(chapter_dir / chapter.name, stage / chapter)
            copy_plotly_js(stage)
            _run_quarto(quarto, stage, site_dir)
    index = site_dir / "index.html"
    return index if index.is_file() else site_dir / book.chapters[0].with_suffix(".html")


def _run_quarto(quarto: str, project_dir: Path, site_dir: Path) -> None:
    print(f"Rendering the book with {quarto} into {site_dir}")
    subprocess.run(
        [quarto, "render", str(project_dir), "--output-dir", str(site_dir)], check=True
    )


# --- nbconvert fallback -------------------------------------------------------------------------

_TEMPLATE = r"""
{%- extends 'index.html.j2' -%}
{#- Offline pages: drop the CDN scripts of the lab template (require.js, MathJax, mermaid,
    widgets); math is MathML (rendered by the browser), plots use the one local plotly.min.js. -#}
{%- block html_head_js_requirejs -%}{%- endblock html_head_js_requirejs -%}
{%- block jupyter_widgets -%}{%- endblock jupyter_widgets -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{%- block extra_css -%}
<link rel="icon" href="data:,">
<script src="{{ resources.cfbook.plotly_js }}"></script>
<style type="text/css">{{ resources.cfbook.css }}</style>
{%- endblock extra_css -%}
{%- block body_header -%}
<body class="jp-Notebook" data-jp-theme-light="true" data-jp-theme-name="JupyterLab Light">
{{ resources.cfbook.sidebar }}
<main class="cfbook-main">
{%- endblock body_header -%}
{%- block body_footer -%}
{{ resources.cfbook.pager }}
</main>
</body>
{%- endblock body_footer -%}
"""

_CSS = """
body.jp-Notebook { margin: 0; padding: 0; }
.cfbook-sidebar { position: fixed; top: 0; bottom: 0; left: 0; width: 16rem; overflow-y: auto;
  padding: 1.5rem 1rem; box-sizing: border-box; background: #f6f7f9; border-right: 1px solid #ddd;
  font-family: system-ui, sans-serif; font-size: 0.95rem; }
.cfbook-sidebar .cfbook-book-title { font-weight: 700; margin-bottom: 1rem; display: block; }
.cfbook-sidebar ol { padding-left: 1.2rem; margin: 0; }
.cfbook-sidebar li { margin: 0.35rem 0; }
.cfbook-sidebar a { color: #1f4e8c; text-decoration: none; }
.cfbook-sidebar a[aria-current="page"] { font-weight: 700; color: #000; }
main.cfbook-main { margin-left: 16rem; padding: 1rem 2rem 3rem; max-width: 70rem; }
.cfbook-pager { display: flex; justify-content: space-between; margin-top: 3rem; padding-top: 1rem;
  border-top: 1px solid #ddd; font-family: system-ui, sans-serif; }
.cfbook-pager a { color: #1f4e8c; text-decoration: none; }
@media (max-width: 50rem) {
  .cfbook-sidebar { position: static; width: auto; border-right: none; }
  main.cfbook-main { margin-left: 0; }
}
"""


def _mathml(tex: str, display: str) -> str:
    try:
        return latex_to_mathml(tex, display=display)
    except Exception:  # latex2mathml rejects some TeX: show the source rather than fail the build
        return f'<code class="cfbook-tex">{html.escape(tex)}</code>'


class _MathMLRenderer(IPythonRenderer):
    """Markdown renderer that turns TeX into MathML, so pages need no MathJax from a CDN."""

    def block_math(self, body: str) -> str:
        return _mathml(body, "block")

    def inline_math(self, body: str) -> str:
        return _mathml(body, "inline")

    def latex_environment(self, name: str, body: str) -> str:
        return _mathml(f"\\begin{{{name}}}{body}\\end{{{name}}}", "block")


class _BookExporter(HTMLExporter):
    """The lab HTML exporter with MathML math and the book's page template."""

    @jinja2.pass_context
    def _markdown2html(self, context: jinja2.runtime.Context, source: str) -> str:
        cell = context.get("cell", {})
        renderer = _MathMLRenderer(
            escape=False,
            attachments=cell.get("attachments", {}),
            embed_images=self.embed_images,
            path=context.get("resources", {}).get("metadata", {}).get("path", ""),
            anchor_link_text=self.anchor_link_text,
            exclude_anchor_links=self.exclude_anchor_links,
        )
        return MarkdownWithMath(renderer=renderer).render(source)

    def default_filters(self) -> Iterator[tuple[str, Any]]:
        yield from super().default_filters()
        yield ("markdown2html", self._markdown2html)


def _page_name(chapter: Path) -> str:
    return f"{chapter.stem}.html"


def _sidebar(book_title: str, pages: list[tuple[str, str]], current: int) -> str:
    items = []
    for i, (href, title) in enumerate(pages):
        mark = ' aria-current="page"' if i == current else ""
        items.append(f'<li><a href="{href}"{mark}>{html.escape(title)}</a></li>')
    return (
        '<nav class="cfbook-sidebar" aria-label="Chapters">'
        f'<a class="cfbook-book-title" href="index.html">{html.escape(book_title)}</a>'
        "<ol>\n" + "\n".join(items) + "\n</ol></nav>"
    )


def _pager(pages: list[tuple[str, str]], current: int) -> str:
    links = ["<span></span>", "<span></span>"]
    if current > 0:
        href, title = pages[current - 1]
        links[0] = f'<a rel="prev" href="{href}">&larr; {html.escape(title)}</a>'
    if current + 1 < len(pages):
        href, title = pages[current + 1]
        links[1] = f'<a rel="next" href="{href}">{html.escape(title)} &rarr;</a>'
    return f'<nav class="cfbook-pager" aria-label="Previous and next">{"".join(links)}</nav>'


def _render_with_nbconvert(book: Book, chapter_dir: Path, site_dir: Path) -> Path:
    """One HTML page per chapter, in _quarto.yml's order, sharing one local plotly.min.js."""
    site_dir.mkdir(parents=True, exist_ok=True)
    copy_plotly_js(site_dir)
    notebooks = [nbformat.read(chapter_dir / c.name, as_version=4) for c in book.chapters]
    pages = [
        (_page_name(c), chapter_title(nb, c.stem))
        for c, nb in zip(book.chapters, notebooks, strict=True)
    ]
    exporter = _BookExporter(
        embed_images=True,  # markdown images travel inside the page, whatever folder it lands in
        template_name="lab",
        template_file="cfbook.html.j2",
        extra_loaders=[jinja2.DictLoader({"cfbook.html.j2": _TEMPLATE})],
    )
    for i, nb in enumerate(notebooks):
        resources = {
            "metadata": {"name": pages[i][1], "path": str(chapter_dir)},
            "cfbook": {
                "plotly_js": PLOTLY_JS,
                "css": _CSS,
                "sidebar": _sidebar(book.title, pages, i),
                "pager": _pager(pages, i),
            },
        }
        body, _ = exporter.from_notebook_node(nb, resources=resources)
        (site_dir / pages[i][0]).write_text(body, encoding="utf-8")
    print(f"Built {len(pages)} pages with nbconvert in {site_dir}")
    return site_dir / "index.html"
