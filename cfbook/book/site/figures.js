// Fit the book's plotly figures to the page column, on a phone as on a desktop.
//
// Every page of the site runs this after its figures are drawn (Quarto's pages get it from
// scripts/quarto_post_render.py, the nbconvert fallback from its template), so it works on the
// figures as the executed notebooks store them:
// - the mode bar is hidden, so it never covers a title (drag to zoom, double-click to reset);
// - a title wider than its figure is wrapped onto more lines, the figure growing to hold them.
// The figures themselves are laid out to fit a phone's column (short titles, stacked panels);
// the site tests check that none is wider than the column or has overlapping labels.
// When done it sets data-cfbook-figures="fitted" on <html>; the site tests wait for it.
(() => {
  "use strict";
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

  const fit = async (gd) => {
    try {
      await wrapTitle(gd);
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
