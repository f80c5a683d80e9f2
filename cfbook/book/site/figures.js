// Fit the book's plotly figures to the page column, on a phone as on a desktop.
//
// Every page of the site runs this after its figures are drawn (Quarto's pages get it from
// scripts/quarto_post_render.py, the nbconvert fallback from its template), so it works on the
// figures as the executed notebooks store them:
// - the mode bar is hidden, so it never covers a title (drag to zoom, double-click to reset);
// - a title wider than its figure is wrapped onto more lines, the figure growing to hold them;
// - a figure whose titles or labels still overlap or run out of it at the column's width is
//   drawn wider and scrolls sideways inside its own box, instead of overlapping.
// When done it sets data-cfbook-figures="fitted" on <html>; the site tests wait for it.
(() => {
  "use strict";
  const WIDTHS = [480, 600, 720, 840]; // the widths tried, in turn, for a crowded figure
  const TEXT = ".g-gtitle .gtitle, .annotation-text-g, .g-xtitle text, .g-ytitle text, .legend .bg";

  const texts = (gd, selector = TEXT) =>
    Array.from(gd.querySelectorAll(selector))
      .map((el) => [el, el.getBoundingClientRect()])
      .filter(([el, box]) => box.width > 0 && box.height > 0 && (el.textContent.trim() || el.matches(".bg")));

  const overlap = (a, b) =>
    Math.min(a.right, b.right) - Math.max(a.left, b.left) > 2 &&
    Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > 2;

  // Whether any title or label runs out of the figure or overlaps another one.
  const crowded = (gd, selector = TEXT) => {
    const svg = gd.querySelector(".main-svg");
    if (!svg) return false;
    const edge = svg.getBoundingClientRect();
    const boxes = texts(gd, selector);
    if (boxes.some(([, b]) => b.left < edge.left - 1 || b.right > edge.right + 1 || b.top < edge.top - 1)) {
      return true;
    }
    return boxes.some(([a, ab], i) =>
      boxes.slice(i + 1).some(([b, bb]) => !a.contains(b) && !b.contains(a) && overlap(ab, bb)),
    );
  };

  // The figure's height, and the box around it that the notebook output fixed to that height.
  const grow = (gd, extra) => {
    const height = gd._fullLayout.height + extra;
    gd.style.height = `${height}px`;
    if (gd.parentElement && gd.parentElement.style.height) gd.parentElement.style.height = "auto";
    return height;
  };

  // Break a plain title that is wider than its figure into lines that fit.
  const wrapTitle = async (gd) => {
    const layout = gd._fullLayout;
    const title = gd.querySelector(".g-gtitle .gtitle");
    const text = layout.title && layout.title.text;
    if (!title || !text || /<(?!br)/i.test(text)) return;
    const width = title.getBoundingClientRect().width;
    const room = layout.width - 2 * Math.max(layout.margin.l, 10);
    if (width <= room) return;
    const perLine = Math.max(12, Math.floor((room / width) * text.replace(/<br>/gi, " ").length));
    const lines = [];
    for (const word of text.replace(/<br>/gi, " ").split(/\s+/)) {
      const last = lines.length - 1;
      if (last >= 0 && (lines[last] + " " + word).length <= perLine) lines[last] += " " + word;
      else lines.push(word);
    }
    const extra = Math.ceil((lines.length - 1 - (text.match(/<br>/gi) || []).length) * layout.title.font.size * 1.3);
    if (extra <= 0) return;
    await window.Plotly.relayout(gd, {
      "title.text": lines.join("<br>"),
      "title.yref": "container",
      "title.y": 1,
      "title.yanchor": "top",
      "margin.t": layout.margin.t + extra,
      height: grow(gd, extra),
    });
    // Plotly anchors a title of several lines by its first: move it down to start in the figure.
    const top = gd.querySelector(".main-svg").getBoundingClientRect().top;
    const below = top + 4 - gd.querySelector(".g-gtitle .gtitle").getBoundingClientRect().top;
    if (below > 0) {
      await window.Plotly.relayout(gd, { "title.y": 1 - below / gd._fullLayout.height });
    }
  };

  // Draw a crowded figure wider, inside a box of the column's width that scrolls sideways.
  const widen = async (gd, selector = TEXT) => {
    const box = gd.parentElement;
    for (const width of WIDTHS) {
      if (!crowded(gd, selector)) return;
      if (width <= gd.getBoundingClientRect().width) continue;
      box.style.overflowX = "auto";
      box.style.overflowY = "hidden";
      box.style.height = "auto";
      gd.style.minWidth = `${width}px`;
      await window.Plotly.relayout(gd, { width });
    }
  };

  const fit = async (gd) => {
    try {
      // Labels first: a figure drawn wider for them may have room for its title too.
      await widen(gd, TEXT.replace(".g-gtitle .gtitle, ", ""));
      await wrapTitle(gd);
      await widen(gd);
    } catch (error) {
      console.warn("cfbook: could not fit a figure", gd.id, error);
    }
  };

  const fitAll = async () => {
    if (window.Plotly) {
      await Promise.all(Array.from(document.querySelectorAll(".js-plotly-plot"), fit));
    }
    document.documentElement.dataset.cfbookFigures = "fitted";
  };

  // No mode bar: the figures are read, not edited, and on a phone it sits on the titles.
  const style = document.createElement("style");
  style.textContent = ".js-plotly-plot .modebar-container { display: none !important; }";
  document.head.append(style);

  if (document.readyState === "complete") fitAll();
  else window.addEventListener("load", fitAll);
})();
