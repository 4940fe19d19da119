"""Handling kprof's report page (formats/report/) in a Page of cdp.py: where
a heat map's cells are, and dragging over them as a user does. Shared by the
report's browser tests and scripts/screenshots.py."""


def heat_geometry(page, canvas):
    """Scrolls heat map `canvas` (its element id) into view and returns its
    place and cell size: x, y (viewport pixels), cw, ch, rows, columns. The
    geometry is that of the source the canvas draws, found by its id."""
    page.eval(f"document.getElementById('{canvas}').scrollIntoView({{block: 'center'}})")
    return page.eval(f"""(() => {{ const c = document.getElementById('{canvas}'), r = c.getBoundingClientRect();
        const s = state.model.recordings[state.recording < 0 ? 1 : state.recording].sources
            .find((x) => '{canvas}'.startsWith('heatmap-' + x.kind));
        return {{x: r.left, y: r.top, cw: c.width / s.columns, ch: c.height / s.heatRows, rows: s.heatRows,
                 columns: s.columns}}; }})()""")


def cell_point(g, cell):
    """The viewport point at the middle of cell `cell` (column major)."""
    c, r = divmod(cell, g["rows"])
    return g["x"] + (c + 0.5) * g["cw"], g["y"] + (r + 0.5) * g["ch"]


def drag_cells(page, g, a, b, modifiers=0):
    """Drags from cell a to cell b (modifiers: 8 = Shift, a second range)."""
    x0, y0 = cell_point(g, a)
    x1, y1 = cell_point(g, b)
    page.drag(x0, y0, x1, y1, steps=8, modifiers=modifiers)
