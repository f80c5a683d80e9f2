"""The fallback website for readers without Quarto: nbconvert's lab pages plus navigation.

Each chapter becomes one page at the same place Quarto would put it (``index.html``,
``book/setup.html``, ...), with a sidebar in ``_quarto.yml`` order, previous/next links, MathML
instead of MathJax and the site's one local ``plotly.min.js``: the book reads and draws offline.
The Quarto cell options the chapters use (hidden cells, figure captions and ``@fig-``
references) are applied as Quarto applies them.
"""

from __future__ import annotations

import html
import posixpath
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jinja2
import nbformat
from latex2mathml.converter import convert as latex_to_mathml
from nbconvert import HTMLExporter
from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath

from cfbook.book.toc import Book

__all__ = ["PLOTLY_JS", "cell_options", "chapter_title", "copy_plotly_js", "render_with_nbconvert"]

PLOTLY_JS = "plotly.min.js"
# Fits each figure to the page column (Quarto's pages get it from scripts/quarto_post_render.py).
FIGURES_JS = Path(__file__).with_name("figures.js")


def copy_plotly_js(dest_dir: str | Path) -> Path:
    """Copy the installed plotly package's ``plotly.min.js`` into ``dest_dir`` (no CDN needed).

    Quarto gets the same file from the project's pre-render script, which must run without cfbook.
    """
    import plotly

    source = Path(plotly.__file__).parent / "package_data" / PLOTLY_JS
    if not source.is_file():
        raise FileNotFoundError(f"{source} missing: reinstall plotly (pip install plotly)")
    target = Path(dest_dir) / PLOTLY_JS
    target.parent.mkdir(parents=True, exist_ok=True)
    if not target.is_file() or target.stat().st_size != source.stat().st_size:
        shutil.copyfile(source, target)
    return target


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
<script data-cfbook="figures">{{ resources.cfbook.figures_js }}</script>
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
.cfbook-caption { font-family: system-ui, sans-serif; font-size: 0.9rem; color: #444; }
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


def _page(chapter: Path) -> str:
    """Where a chapter's page goes in the site, as Quarto places it."""
    return chapter.with_suffix(".html").as_posix()


def _href(target: str, page: str) -> str:
    """``target`` (a path from the site root) as a link from ``page``."""
    return posixpath.relpath(target, posixpath.dirname(page) or ".")


# Links between notebooks (`[the GPU chapter](gpu.ipynb#caching)`) point at their pages, as
# in Quarto.
_NOTEBOOK_LINK = re.compile(r'href="([^":#?]+)\.ipynb(#[^"]*)?"')


def _sidebar(book_title: str, pages: list[tuple[str, str]], current: int) -> str:
    here = pages[current][0]
    items = []
    for i, (page, title) in enumerate(pages):
        mark = ' aria-current="page"' if i == current else ""
        items.append(f'<li><a href="{_href(page, here)}"{mark}>{html.escape(title)}</a></li>')
    return (
        '<nav class="cfbook-sidebar" aria-label="Chapters">'
        f'<a class="cfbook-book-title" href="{_href(pages[0][0], here)}">'
        f"{html.escape(book_title)}</a>"
        "<ol>\n" + "\n".join(items) + "\n</ol></nav>"
    )


def _pager(pages: list[tuple[str, str]], current: int) -> str:
    here = pages[current][0]
    links = ["<span></span>", "<span></span>"]
    if current > 0:
        page, title = pages[current - 1]
        links[0] = f'<a rel="prev" href="{_href(page, here)}">&larr; {html.escape(title)}</a>'
    if current + 1 < len(pages):
        page, title = pages[current + 1]
        links[1] = f'<a rel="next" href="{_href(page, here)}">{html.escape(title)} &rarr;</a>'
    return f'<nav class="cfbook-pager" aria-label="Previous and next">{"".join(links)}</nav>'


_OPTION = re.compile(r"^#\| ([\w-]+): ?(.*)$")
_FIG_REF = re.compile(r"@(fig-[\w-]+)")


def cell_options(source: str) -> tuple[dict[str, str], str]:
    """A code cell's leading Quarto options (``#| key: value``) and the code after them."""
    lines = source.splitlines()
    options = {}
    while lines and (match := _OPTION.match(lines[0])):
        options[match[1]] = match[2].strip().strip('"')
        lines.pop(0)
    return options, "\n".join(lines)


def _figure_numbers(
    notebooks: list[nbformat.NotebookNode], pages: list[str], numbers: list[str]
) -> dict[str, tuple]:
    """``label -> (page, "Figure c.k")`` as Quarto numbers them: ``c`` the notebook's number
    (``Book.numbers``: chapters 1, 2, ..., appendices A, B, ...), ``k`` the figure within it."""
    out = {}
    for nb, page, c in zip(notebooks, pages, numbers, strict=True):
        k = 0
        for cell in nb.cells:
            label = (
                cell_options(cell.source)[0].get("label", "") if cell.cell_type == "code" else ""
            )
            if label.startswith("fig-"):
                k += 1
                out[label] = (page, f"Figure {c}.{k}")
    return out


def _as_quarto_would(nb: nbformat.NotebookNode, page: str, figures: dict[str, tuple]) -> None:
    """Apply the Quarto cell options the book uses (``include``, ``echo``, ``label`` and
    ``fig-cap``) and resolve ``@fig-`` references, so both builders show the same page."""
    kept = []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = _FIG_REF.sub(lambda m: _figure_link(m[1], page, figures), cell.source)
        elif cell.cell_type == "code":
            options, cell.source = cell_options(cell.source)
            if options.get("include") == "false":
                continue
            if options.get("echo") == "false":
                cell.metadata["transient"] = {"remove_source": True}
            label = options.get("label", "")
            if label in figures and "fig-cap" in options:
                caption = f"<b>{figures[label][1]}</b>: {html.escape(options['fig-cap'])}"
                cell.outputs.append(
                    nbformat.v4.new_output(
                        "display_data",
                        {"text/html": f'<p class="cfbook-caption" id="{label}">{caption}</p>'},
                    )
                )
        kept.append(cell)
    nb.cells = kept


def _figure_link(label: str, page: str, figures: dict[str, tuple]) -> str:
    if label not in figures:
        return f"@{label}"  # as Quarto leaves an unresolved reference (and warns)
    target, name = figures[label]
    href = f"#{label}" if target == page else f"{_href(target, page)}#{label}"
    return f"[{name}]({href})"


def render_with_nbconvert(book: Book, source_dir: Path, site_dir: Path) -> Path:
    """One HTML page per chapter of ``source_dir`` in ``site_dir``; returns the home page."""
    site_dir.mkdir(parents=True, exist_ok=True)
    copy_plotly_js(site_dir)
    notebooks = [nbformat.read(source_dir / c, as_version=4) for c in book.chapters]
    pages = [
        (_page(c), chapter_title(nb, c.stem))
        for c, nb in zip(book.chapters, notebooks, strict=True)
    ]
    exporter = _BookExporter(
        embed_images=True,  # markdown images travel inside the page, whatever folder it lands in
        template_name="lab",
        template_file="cfbook.html.j2",
        extra_loaders=[jinja2.DictLoader({"cfbook.html.j2": _TEMPLATE})],
    )
    numbers = [book.numbers[c] for c in book.chapters]
    figures = _figure_numbers(notebooks, [page for page, _ in pages], numbers)
    for i, (chapter, nb) in enumerate(zip(book.chapters, notebooks, strict=True)):
        page, title = pages[i]
        _as_quarto_would(nb, page, figures)
        resources = {
            "metadata": {"name": title, "path": str(source_dir / chapter.parent)},
            "cfbook": {
                "plotly_js": _href(PLOTLY_JS, page),
                "css": _CSS,
                "figures_js": FIGURES_JS.read_text(encoding="utf-8"),
                "sidebar": _sidebar(book.title, pages, i),
                "pager": _pager(pages, i),
            },
        }
        body, _ = exporter.from_notebook_node(nb, resources=resources)
        target = site_dir / page
        target.parent.mkdir(parents=True, exist_ok=True)
        # The chapter's notebook beside its page, linked after the links between notebooks
        # became links between pages.
        shutil.copyfile(source_dir / chapter, site_dir / chapter)
        body = _NOTEBOOK_LINK.sub(r'href="\1.html\2"', body)
        download = (
            f'<p class="cfbook-notebook"><a href="{chapter.name}" download="{chapter.name}">'
            "Download this chapter as a notebook</a></p>"
        )
        body = body.replace(
            '<main class="cfbook-main">', f'<main class="cfbook-main">{download}', 1
        )
        target.write_text(body, encoding="utf-8")
    print(f"Built {len(pages)} pages with nbconvert in {site_dir}")
    return site_dir / pages[0][0]
