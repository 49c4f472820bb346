"""The repository's markdown holds together: every relative link and image of README.md, docs/**,
examples/** and benchmarks/** points at a file of the checkout, every `#anchor` at a heading of its
page (GitHub's slugs) or an html id, nothing points outside the checkout, and every page under docs/
is reached from the index, docs/README.md, by following links.

Parsed with markdown-it-py (CommonMark and GitHub's tables; the dev extra names it), so
links inside code are not links."""

from __future__ import annotations

import re
import unicodedata
from collections import defaultdict
from functools import cache
from pathlib import Path
from urllib.parse import unquote, urlsplit

from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[1]
INDEX = ROOT / "docs" / "README.md"
PAGES = sorted({ROOT / "README.md", *[p for d in ("docs", "examples", "benchmarks")
                                       for p in (ROOT / d).rglob("*.md")]})
_MD = MarkdownIt("commonmark").enable(["table", "strikethrough"])
_HTML_ATTR = re.compile(r"""\b(href|src|id|name)\s*=\s*["']([^"']*)["']""", re.IGNORECASE)


def slug(text: str) -> str:
    """GitHub's heading anchor (github-slugger): lower case, every character but letters, marks,
    numbers, `_`, `-` and spaces dropped, each space a `-`."""
    kept = (ch for ch in text.lower()
            if ch in "_- " or unicodedata.category(ch)[0] in "LMN" or unicodedata.category(ch) == "Pc")
    return "".join(kept).replace(" ", "-")


def _text(inline) -> str:
    """A heading's rendered text: its words and code spans, without markup."""
    return "".join(t.content for t in inline.children or [] if t.type in ("text", "code_inline"))


_MAY_LINK = re.compile(r"\]\(|\]:|<[A-Za-z/!]")  # an inline link or image, a link definition, html


@cache
def _tokens(page: Path) -> list:
    return _MD.parse(page.read_text(encoding="utf-8"))


@cache
def anchors(page: Path) -> frozenset[str]:
    """The `#anchors` of a page: its headings' slugs (the n-th repeat of a slug gets `-n`, as on
    GitHub) and its html ids and names."""
    found, seen = set(), defaultdict(int)
    tokens = _tokens(page)
    for i, tok in enumerate(tokens):
        if tok.type == "heading_open":
            base = slug(_text(tokens[i + 1]))
            found.add(f"{base}-{seen[base]}" if seen[base] else base)
            seen[base] += 1
    for html in _html(tokens):
        found.update(value for attr, value in _HTML_ATTR.findall(html) if attr.lower() in ("id", "name"))
    return frozenset(found)


def _html(tokens: list) -> list[str]:
    return [t.content for tok in tokens for t in [tok, *(tok.children or [])]
            if t.type in ("html_block", "html_inline")]


@cache
def targets(page: Path) -> tuple[tuple[int, str, str], ...]:
    """(line, kind, target) of each link, image and html href/src of a page. A page without the
    marks of one (the generated tables) is not parsed: the suite reads hundreds of them."""
    text = page.read_text(encoding="utf-8")
    if not _MAY_LINK.search(text):
        return ()
    lines, found = text.splitlines(), []

    def line_of(tok, target: str) -> int:  # the first line of the block that holds the target
        first, end = tok.map or (0, 0)
        return next((i + 1 for i in range(first, end) if target in lines[i]), first + 1)

    for tok in _tokens(page):
        for child in [tok, *(tok.children or [])]:
            kinds = []
            if child.type == "link_open":
                kinds = [("link", str(child.attrs["href"]))]
            elif child.type == "image":
                kinds = [("image", str(child.attrs["src"]))]
            elif child.type in ("html_block", "html_inline"):
                kinds = [(attr.lower(), value) for attr, value in _HTML_ATTR.findall(child.content)
                         if attr.lower() in ("href", "src")]
            found += [(line_of(tok, target), kind, target) for kind, target in kinds]
    return tuple(found)


def resolve(page: Path, target: str) -> tuple[Path | None, str]:
    """(the file a relative target names, or None for a URL; its anchor)."""
    parts = urlsplit(target)
    if parts.scheme or parts.netloc:
        return None, ""
    path = (page.parent / unquote(parts.path)).resolve() if parts.path else page
    return path, unquote(parts.fragment)


def problems(page: Path, root: Path = ROOT) -> list[str]:
    """What is wrong with a page's links and images: a file that is not there, an anchor that is
    not on its page, a path that leaves the repository."""
    out = []
    for line, kind, target in targets(page):
        path, anchor = resolve(page, target)
        if path is None:
            continue
        where = f"{page.relative_to(root)}:{line}: {kind} {target}"
        if not path.is_relative_to(root):
            out.append(f"{where}: outside the repository")
        elif not path.exists():
            out.append(f"{where}: no such file")
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            out.append(f"{where}: no heading with this anchor")
    return out


def reached(index: Path) -> set[Path]:
    """The markdown pages reached from index by following links; a link to a folder reaches its
    README.md, the page GitHub shows below the folder's files."""
    seen, todo = {index}, [index]
    while todo:
        page = todo.pop()
        for _, _, target in targets(page):
            path, _ = resolve(page, target)
            if path is not None and path.is_dir():
                path = path / "README.md"
            if path is not None and path.suffix == ".md" and path.is_file() and path not in seen:
                seen.add(path)
                todo.append(path)
    return seen


def test_links_images_and_anchors_resolve():
    found = [problem for page in PAGES for problem in problems(page)]
    assert not found, "\n".join(found)


def test_no_page_under_docs_is_orphaned():
    """A page no link reaches is lost to a reader: link it from the index (docs/README.md), or a
    study's table from its study page's list of tables."""
    docs = {p for p in PAGES if p.is_relative_to(ROOT / "docs")}
    assert sorted(str(p.relative_to(ROOT)) for p in docs - reached(INDEX)) == []


def test_the_check_finds_each_kind_of_breakage(tmp_path):
    (tmp_path / "docs" / "sub").mkdir(parents=True)
    (tmp_path / "docs" / "sub" / "README.md").write_text("# Sub\n\n## Sub part\n\n## Sub part\n")
    (tmp_path / "docs" / "lost.md").write_text("# Nobody links here\n")
    (tmp_path / "docs" / "fig.png").write_bytes(b"")
    index = tmp_path / "docs" / "README.md"
    index.write_text(
        "# Index\n\n## A heading, with `code`\n\n"
        "[ok](sub/README.md#sub-part-1) [ok](#a-heading-with-code) [ok](sub/) ![ok](fig.png)\n"
        "[ok](https://example.com/x.md#nowhere) <img src=\"fig.png\">\n\n"
        "[gone](nothere.md) [bad anchor](sub/README.md#sub-part-2) [up](../../outside.md)\n"
        "![missing](fig.svg) <a href=\"sub/missing.md\">x</a>\n\n"
        "```\n[not a link](inside-code.md)\n```\n")
    assert problems(index, tmp_path) == [
        "docs/README.md:8: link nothere.md: no such file",
        "docs/README.md:8: link sub/README.md#sub-part-2: no heading with this anchor",
        "docs/README.md:8: link ../../outside.md: outside the repository",
        "docs/README.md:9: image fig.svg: no such file",
        "docs/README.md:9: href sub/missing.md: no such file",
    ]
    assert reached(index) == {index, tmp_path / "docs" / "sub" / "README.md"}


def test_slugs_follow_github():
    assert slug("The compiled engine (`engine=`)") == "the-compiled-engine-engine"
    assert slug("Image data (MNIST, Fashion-MNIST, CIFAR-10)") == "image-data-mnist-fashion-mnist-cifar-10"
    assert slug("nanoGPT's CPU result, reproduced") == "nanogpts-cpu-result-reproduced"
    assert slug("At 2,000 steps") == "at-2000-steps"
    assert slug("Speed: 1.6x, Δ pp and ±") == "speed-16x-δ-pp-and-"
