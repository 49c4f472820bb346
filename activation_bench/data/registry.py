"""Data sources (data=NAME) as the training loop sees them: each kind of source is one registered
`Source` object (data/feed.py) that the engine asks, never the source's name, as each model family
is one registered `Family` (engine/models/registry.py). Importing this module imports no torch.

Adding a kind: a `Source` subclass that serves its data.name (`Source.serves`), and its instance in
the line of shipped kinds below; a package's or a test's calls `register` before training.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from activation_bench.data.feed import Source, Split, Synthetic
from activation_bench.data.text_feed import Text

if TYPE_CHECKING:
    from activation_bench.cfg import Cfg

__all__ = ["SOURCES", "Source", "of", "register"]

SOURCES: dict[str, Source] = {}


def register(source: Source) -> Source:
    """Make `source` the kind of the data it serves (a later registration of a name replaces it)."""
    SOURCES[source.name] = source
    return source


for shipped in (Synthetic(), Split(), Text()):
    register(shipped)


def of(cfg: Cfg) -> Source:
    """The kind of source of a composed config's data (the last registered that serves it)."""
    for source in reversed(SOURCES.values()):
        if source.serves(cfg.data):
            return source
    raise ValueError(f"no data source serves data={cfg.data.name}")
