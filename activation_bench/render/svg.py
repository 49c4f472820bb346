"""Figures inline in an HTML page: a matplotlib figure, or an SVG file's text, as an <svg> element
whose ids are prefixed so several figures can share one page (the report and the study page)."""

from __future__ import annotations

import io
import re
from typing import Any


def inline(text: str, prefix: str) -> str:
    """SVG text without its XML prolog or DOCTYPE, every id (and every reference to one) prefixed."""
    text = text[text.index("<svg"):]
    text = re.sub(r'\bid="', f'id="{prefix}-', text)
    return text.replace("url(#", f"url(#{prefix}-").replace('xlink:href="#', f'xlink:href="#{prefix}-')


def svg(fig: Any, prefix: str, tight: bool = False) -> str:
    """A matplotlib figure as an inline <svg> element (`inline`), drawn without metadata and labelled
    for screen readers."""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "actbench"}):
        # curves and shapes use the constrained layout: no bbox_inches="tight" there (a second full draw)
        fig.savefig(buf, format="svg", bbox_inches="tight" if tight else None,
                    metadata={"Date": None, "Creator": None, "Format": None, "Type": None})
    text = inline(buf.getvalue(), prefix)
    return text.replace('<svg xmlns:xlink', f'<svg role="img" aria-label="{prefix}" xmlns:xlink', 1)
