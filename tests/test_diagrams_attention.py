"""diagrams.attention: the data flow of the attention-pooling diagram (chapter 1).

The query is scored against every key: it reaches each scoring box a(q, k_i), as each key does, and
nothing flows into a key.
"""

import matplotlib
import pytest
from matplotlib.patches import FancyBboxPatch
from matplotlib.text import Annotation

from course_lib import diagrams


def _boxes(ax):
    """(label, (left, bottom, right, top)) of every box, labelled by the text at its centre."""
    found = []
    for patch in ax.patches:
        if not isinstance(patch, FancyBboxPatch):
            continue
        left, bottom = patch.get_x(), patch.get_y()
        right, top = left + patch.get_width(), bottom + patch.get_height()
        centre = ((left + right) / 2, (bottom + top) / 2)
        label = next(t.get_text() for t in ax.texts
                     if not isinstance(t, Annotation) and t.get_position() == pytest.approx(centre))
        found.append((label, (left, bottom, right, top)))
    return found


def _arrows(ax):
    """(start, end) of every arrow."""
    return [(a.xyann, a.xy) for a in ax.texts if isinstance(a, Annotation)]


def _on_left_edge(point, box, tol=1e-6):
    left, bottom, _, top = box
    return abs(point[0] - left) < tol and bottom <= point[1] <= top


@pytest.mark.parametrize("num_keys", [2, 3, 4])
def test_the_query_and_each_key_flow_into_the_scoring_boxes(num_keys):
    fig = diagrams.attention_pooling_diagram(num_keys)
    try:
        ax = fig.axes[0]
        boxes = _boxes(ax)
        (query,) = [b for label, b in boxes if label.startswith("query")]
        scores = [b for label, b in boxes if label.startswith("$a(")]
        keys = [b for label, b in boxes if label.startswith(r"$\mathbf{k}")]
        assert len(scores) == len(keys) == num_keys
        # The line that leaves the query box (its right edge) and runs past the scoring boxes.
        (line,) = [ln for ln in ax.lines if len(ln.get_xdata()) > 1
                   and ln.get_xdata()[0] == pytest.approx(query[2])]
        xs, ys = line.get_xdata(), line.get_ydata()

        def on_query_line(point):
            return any(min(x0, x1) - 1e-6 <= point[0] <= max(x0, x1) + 1e-6
                       and min(y0, y1) - 1e-6 <= point[1] <= max(y0, y1) + 1e-6
                       for x0, x1, y0, y1 in zip(xs, xs[1:], ys, ys[1:], strict=False))

        arrows = _arrows(ax)
        for score in scores:
            into = [start for start, end in arrows if _on_left_edge(end, score)]
            assert sum(on_query_line(s) for s in into) == 1, f"the query does not reach the scoring box {score}"
            assert sum(any(abs(s[0] - k[2]) < 1e-6 and k[1] <= s[1] <= k[3] for k in keys) for s in into) == 1, \
                f"no key flows into the scoring box {score}"
        into_keys = [end for _, end in arrows if any(k[0] - 1e-6 <= end[0] <= k[2] + 1e-6
                                                     and k[1] - 1e-6 <= end[1] <= k[3] + 1e-6 for k in keys)]
        assert not into_keys, f"arrows end at a key box: {into_keys}"
    finally:
        matplotlib.pyplot.close(fig)


def test_qkv_projections_each_map_the_tokens_to_one_output():
    # X feeds every W box; each W box feeds exactly one output, the one of its own letter.
    fig = diagrams.qkv_projection_diagram()
    try:
        ax = fig.axes[0]
        boxes = dict(_boxes(ax))
        (x_box,) = [b for label, b in boxes.items() if label.startswith("tokens")]
        arrows = _arrows(ax)
        for sub, big in (("q", "Q"), ("k", "K"), ("v", "V")):
            (w_box,) = [b for label, b in boxes.items() if label.startswith(rf"$\mathbf{{W}}_{sub}$")]
            (out_box,) = [b for label, b in boxes.items() if rf"$\mathbf{{{big}}} = " in label]
            assert rf"\mathbf{{W}}_{sub}^\top" in next(lb for lb, b in boxes.items() if b == out_box)
            into_w = [start for start, end in arrows if _on_left_edge(end, w_box)]
            assert len(into_w) == 1 and abs(into_w[0][0] - x_box[2]) < 1e-6, f"X does not feed W_{sub}"
            into_out = [start for start, end in arrows if _on_left_edge(end, out_box)]
            assert len(into_out) == 1 and abs(into_out[0][0] - w_box[2]) < 1e-6
            assert w_box[1] <= into_out[0][1] <= w_box[3], f"{big} is not fed by W_{sub}"
    finally:
        matplotlib.pyplot.close(fig)
