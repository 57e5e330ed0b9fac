"""Fitting a figure's texts inside it, measured once: a legend beside the axes gets the room it
needs, a title wraps to the figure's width, group labels under bars never run together, point
labels sit next to their own point, and a log axis has readable ticks across its range.

Every measurement is of the text as matplotlib will draw it (``get_window_extent`` with the
figure's renderer), taken after the figure's content is in place and before it is saved: no
layout engine, no second drawing.

Light module: matplotlib is imported inside functions (or by the caller).
"""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.legend import Legend
    from matplotlib.text import Text
    from matplotlib.transforms import Bbox

PAD = 6.0  # pixels kept free between a text and the figure's edge or another text
GROUP_GAP = 10.0  # pixels at least between two group labels side by side
MIN_AXES_WIDTH = 0.4  # the axes keep at least this share of the figure's width


def renderer(fig: Figure) -> Any:
    """The renderer the figure will be drawn with (measures text without drawing)."""
    return fig.canvas.get_renderer()  # type: ignore[attr-defined]


def extent(artist: Any, fig: Figure) -> Bbox:
    """An artist's box in display pixels, as it will be drawn."""
    return artist.get_window_extent(renderer(fig))


def overlap(a: Bbox, b: Bbox, gap: float = 0.0) -> bool:
    """Whether two boxes come closer than ``gap`` pixels."""
    return not (
        a.x1 + gap <= b.x0 or b.x1 + gap <= a.x0 or a.y1 + gap <= b.y0 or b.y1 + gap <= a.y0
    )


def inside(box: Bbox, fig: Figure, pad: float = 1.0) -> bool:
    """Whether a box lies within the figure, ``pad`` pixels from its edges."""
    w, h = fig.bbox.width, fig.bbox.height
    return box.x0 >= pad and box.y0 >= pad and box.x1 <= w - pad and box.y1 <= h - pad


def legend_beside(fig: Figure, ax: Axes, legend: Legend) -> None:
    """Narrow the axes so that ``legend`` (anchored at the axes' right edge) ends inside the
    figure, and wrap the title to the new width."""
    lowest = fig.subplotpars.left + MIN_AXES_WIDTH
    for attempt in range(3):  # a second pass corrects for the legend's own padding
        spill = extent(legend, fig).x1 - (fig.bbox.width - PAD)
        right = fig.subplotpars.right - spill / fig.bbox.width
        if right < lowest and attempt == 0:  # too wide: long names in two lines
            for text in legend.get_texts():
                text.set_text(_two_lines(text.get_text()))
            continue
        fig.subplots_adjust(right=max(lowest, min(right, 0.97)))
    title(fig, ax)


def title(fig: Figure, ax: Axes) -> None:
    """Wrap the axes' title at spaces until it fits over the figure's width (it is centred on
    the axes); the axes move down when it takes more than two lines."""
    text = ax.title
    words = text.get_text()
    if not words:
        return
    box = extent(text, fig)
    centre = (box.x0 + box.x1) / 2
    room = 2 * min(centre, fig.bbox.width - centre) - 2 * PAD
    if box.width <= room:
        return
    lines = words.split("\n")
    chars = max(len(line) for line in lines)
    for limit in range(chars - 1, 9, -1):
        wrapped = "\n".join(
            textwrap.fill(line, limit, break_long_words=False, break_on_hyphens=False)
            for line in lines
        )
        text.set_text(wrapped)
        if extent(text, fig).width <= room:
            break
    count = text.get_text().count("\n") + 1
    if count > 2:
        line = extent(text, fig).height / count
        top = 1.0 - (count * line + 2 * PAD) / fig.bbox.height
        fig.subplots_adjust(top=min(fig.subplotpars.top, top))


_BREAKS = re.compile(r"(?<=[-_ /.])")


def _two_lines(name: str) -> str:
    """``name`` cut in two lines at the separator nearest its middle (as it is when it has
    none)."""
    cuts = [m.start() for m in _BREAKS.finditer(name) if 0 < m.start() < len(name)]
    if not cuts:
        return name
    at = min(cuts, key=lambda c: abs(c - len(name) / 2))
    return f"{name[:at].rstrip()}\n{name[at:].lstrip()}"


def group_labels(fig: Figure, ax: Axes, texts: Sequence[Any], below: float) -> None:
    """Group labels under the axes (annotations ``below`` points under the x axis), made to
    fit side by side: as they are, else those that collide in two lines, else all in two
    lines, else smaller, else on two alternating rows. The x axis' label moves under them and
    the bottom margin grows to hold it. A label is never cut short."""
    if not texts:
        return
    names = [t.get_text() for t in texts]
    crowded = _crowded(fig, texts, names, 10.0, 1, below)
    if crowded:
        some = [_two_lines(n) if i in crowded else n for i, n in enumerate(names)]
        split = [_two_lines(n) for n in names]
        for shown, size, rows in ((some, 10, 1), (split, 10, 1), (split, 8, 1), (split, 8, 2)):
            if not _crowded(fig, texts, shown, size, rows, below):
                break
    _below(fig, ax, texts)


def _crowded(
    fig: Figure, texts: Sequence[Any], shown: list[str], size: float, rows: int, below: float
) -> set[int]:
    """Set the labels' texts, size and rows; the labels that meet another or an edge."""
    for t, name in zip(texts, shown, strict=True):
        t.set_text(name)
        t.set_fontsize(size)
        t.xyann = (0.0, -below)
    if rows > 1:
        drop = max(extent(t, fig).height for t in texts) * 72.0 / fig.dpi + 2
        for t in texts[1::2]:
            t.xyann = (0.0, -below - drop)
    boxes = [extent(t, fig) for t in texts]
    bad = {i for i, b in enumerate(boxes) if b.x0 < PAD / 2 or b.x1 > fig.bbox.width - PAD / 2}
    for i, a in enumerate(boxes):
        for j in range(i + 1, len(boxes)):
            if overlap(a, boxes[j], GROUP_GAP):
                bad |= {i, j}
    return bad


def _below(fig: Figure, ax: Axes, texts: Sequence[Any]) -> None:
    """Move the x axis' label under the group labels, and grow the bottom margin to hold it."""
    lowest = min(extent(t, fig).y0 for t in texts)
    xlabel = _xlabel(ax, fig)
    if xlabel.y1 > lowest - 2:
        ax.xaxis.labelpad += (xlabel.y1 - lowest + 2) * 72.0 / fig.dpi
    floor = min(lowest, _xlabel(ax, fig).y0)
    if floor < PAD:
        fig.subplots_adjust(bottom=fig.subplotpars.bottom + (PAD - floor) / fig.bbox.height)


def _xlabel(ax: Axes, fig: Figure) -> Bbox:
    """The x axis label's box where it will be drawn (the axis places it as it would when
    drawn: under its tick labels, ``labelpad`` points lower)."""
    ax.xaxis.get_tightbbox(renderer(fig))
    return extent(ax.xaxis.label, fig)


# distances of a point's label from the point (points), nearest first; far ones get a leader
_DISTANCES = (4.0, 9.0, 18.0, 30.0, 45.0)
MOST_SEARCHED = 60  # more points than this are labelled to their right without a search
Box = tuple[float, float, float, float]  # x0, y0, x1, y1 in display pixels
# a place for a label: offset from its point (points) and the text's alignment there
Place = tuple[float, float, str, str]


def _places() -> list[Place]:
    """Right, left, above and below (the text centred, or starting or ending at the point),
    then the corners; each at every distance, nearest first."""
    out: list[Place] = []
    for d in _DISTANCES:
        c = d * 0.7
        out += [(d, 0, "left", "center"), (-d, 0, "right", "center")]
        for y, va in ((d, "bottom"), (-d, "top")):
            out += [(0, y, "center", va), (-3, y, "left", va), (3, y, "right", va)]
        out += [(c, c, "left", "bottom"), (-c, c, "right", "bottom")]
        out += [(c, -c, "left", "top"), (-c, -c, "right", "top")]
    return out


def point_labels(
    ax: Axes,
    xy: Sequence[tuple[float, float]],
    names: Sequence[str],
    avoid: Sequence[Bbox] = (),
    fontsize: float = 7.0,
    marker_pt: float = 4.0,
) -> list[Text]:
    """Label each point (data coordinates) with its name, next to it: of the places around
    the point, the nearest one that stays inside the axes and overlaps no other label, marker
    or box in ``avoid``, and that is nearer its own point than any other; far ones get a
    leader line. The most crowded points choose first, then each label moves if a better
    place is left. The axes' limits are frozen first (the labels are placed for them)."""
    fig = ax.figure
    ax.set_xlim(ax.get_xlim())
    ax.set_ylim(ax.get_ylim())
    scale = fig.dpi / 72.0
    pts = [(float(x), float(y)) for x, y in ax.transData.transform(list(xy))]
    r = marker_pt * scale
    frame = ax.get_window_extent(renderer(fig))  # type: ignore[arg-type]
    area = (frame.x0, frame.y0, frame.x1, frame.y1)
    markers = [(x - r, y - r, x + r, y + r) for x, y in pts]
    fixed: list[Box] = [(b.x0, b.y0, b.x1, b.y1) for b in avoid]
    places = _places()[: 1 if len(pts) > MOST_SEARCHED else None]
    # each label as one line, and (for a name with separators, at a small cost) as two
    variants = [[n] + ([_two_lines(n)] if _two_lines(n) != n else []) for n in names]
    sizes = [[_size(ax, text, fontsize) for text in v] for v in variants]
    chosen: dict[int, tuple[float, Place, int, Box]] = {}

    def best(i: int) -> tuple[float, Place, int, Box]:
        others = fixed + [c[3] for j, c in chosen.items() if j != i]
        options = []
        for v, (w, h) in enumerate(sizes[i]):
            for n, place in enumerate(places):
                box = _box(pts[i], place, scale, w, h)
                cost = _cost(pts, i, box, r, area, others, markers) + 5 * v
                options.append((cost, n, v, box))
        cost, n, v, box = min(options)
        return cost, places[n], v, box

    order = sorted(range(len(pts)), key=lambda i: _crowding(pts, i))
    for i in order:
        chosen[i] = best(i)
    for _ in range(2 if len(places) > 1 else 0):  # move a label where a better place is left
        for i in order:
            again = best(i)
            if again[0] < chosen[i][0]:
                chosen[i] = again
    return [
        _annotate(ax, xy[i], variants[i][chosen[i][2]], chosen[i][1], fontsize)
        for i in range(len(pts))
    ]


def _size(ax: Axes, text: str, fontsize: float) -> tuple[float, float]:
    probe = ax.text(0, 0, text, fontsize=fontsize, transform=None)
    box = probe.get_window_extent(renderer(ax.figure))  # type: ignore[arg-type]
    probe.remove()
    return box.width, box.height


def _crowding(pts: Sequence[tuple[float, float]], i: int) -> tuple[float, int]:
    """Sort key: the most crowded points are labelled first (they have the fewest places)."""
    near = min((math.dist(pts[i], p) for j, p in enumerate(pts) if j != i), default=math.inf)
    return near, i


def _box(pt: tuple[float, float], place: Place, scale: float, w: float, h: float) -> Box:
    dx, dy, ha, va = place
    x = pt[0] + dx * scale - {"left": 0.0, "center": w / 2, "right": w}[ha]
    y = pt[1] + dy * scale - {"bottom": 0.0, "center": h / 2, "top": h}[va]
    return (x, y, x + w, y + h)


def _meets(a: Box, b: Box, gap: float) -> bool:
    return not (
        a[2] + gap <= b[0] or b[2] + gap <= a[0] or a[3] + gap <= b[1] or b[3] + gap <= a[1]
    )


def _distance(pt: tuple[float, float], box: Box) -> float:
    dx = max(box[0] - pt[0], 0.0, pt[0] - box[2])
    dy = max(box[1] - pt[1], 0.0, pt[1] - box[3])
    return math.hypot(dx, dy)


def _cost(
    pts: Sequence[tuple[float, float]],
    i: int,
    box: Box,
    r: float,
    area: Box,
    placed: list[Box],
    markers: list[Box],
) -> float:
    """How bad a label box is: outside the axes, over other labels or markers, nearer another
    point than its own (each weighed), and how far from its point."""
    cost = 0.0
    if box[0] < area[0] or box[2] > area[2] or box[1] < area[1] or box[3] > area[3]:
        cost += 1000
    cost += 100 * sum(_meets(box, b, 2) for b in placed)
    own = _distance(pts[i], box)
    for j, marker in enumerate(markers):
        if j != i:
            cost += 100 * _meets(box, marker, 1)
            cost += 50 * (_distance(pts[j], box) < own - r)  # nearer another point
    return cost + own / 100


def _annotate(ax: Axes, at: tuple[float, float], name: str, place: Place, size: float) -> Text:
    dx, dy, ha, va = place
    far = math.hypot(dx, dy) > 10
    leader: dict[str, Any] | None = {"arrowstyle": "-", "color": "0.5", "lw": 0.6}
    return ax.annotate(
        name,
        at,
        xytext=(dx, dy),
        textcoords="offset points",
        ha=ha,
        va=va,
        fontsize=size,
        arrowprops=leader if far else None,
    )


def log_locator(base: int = 10) -> Any:
    """A tick locator that asks :func:`log_ticks` for the axis' range when it is drawn."""
    from matplotlib.ticker import Locator

    class RoundLog(Locator):
        def __call__(self) -> Any:
            low, high = sorted(self.axis.get_view_interval())  # type: ignore[union-attr]
            return self.tick_values(low, high)

        def tick_values(self, vmin: float, vmax: float) -> Any:
            return log_ticks(vmin, vmax, base)

    return RoundLog()


def log_ticks(low: float, high: float, base: int = 10) -> list[float]:
    """Tick values for a log axis from ``low`` to ``high``: round numbers (powers of two on a
    base-2 axis), four to nine where round numbers allow, at least three, one near each end
    of the range; evenly spaced ones where the range is too narrow for that."""
    if not (0 < low < high) or not math.isfinite(high):
        return []
    span = math.log(high / low)
    candidates: list[tuple[float, ...]] = [(1.0,), (1.0, 2.0, 5.0), (1.0, 2.0, 3.0, 5.0)]
    candidates.append((1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0, 8.0))
    if base == 2:
        exponents = range(math.floor(math.log2(low)), 1 + math.ceil(math.log2(high)))
        mine = [2.0**k for k in exponents if low <= 2.0**k <= high]
        if len(mine) >= 3:
            return _thin(mine)
        base, candidates = 10, candidates[1:]
    first = math.floor(math.log10(low))
    last = math.ceil(math.log10(high))
    fewer: list[float] = []
    for subs in candidates:
        ticks = [
            float(f"{m * 10.0**k:.6g}")
            for k in range(first, last + 1)
            for m in subs
            if low <= m * 10.0**k <= high
        ]
        if len(ticks) >= 3 and _covers(ticks, low, high, span):
            if len(ticks) >= 4:
                return _thin(ticks)
            fewer = fewer or ticks
    if fewer:
        return fewer
    from matplotlib.ticker import MaxNLocator

    linear = MaxNLocator(nbins=4, steps=[1, 2, 2.5, 5, 10]).tick_values(low, high)
    return [float(f"{v:.6g}") for v in linear if low <= v <= high and v > 0]


def _covers(ticks: list[float], low: float, high: float, span: float) -> bool:
    """One tick in the lowest and one in the highest third of the range (log scale)."""
    return math.log(ticks[0] / low) <= span / 3 and math.log(high / ticks[-1]) <= span / 3


def _thin(ticks: list[float], most: int = 9) -> list[float]:
    step = math.ceil(len(ticks) / most)
    return ticks[::step]
