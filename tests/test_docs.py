"""The docs per reader (issue 38), checked on the files themselves, without a database: README.md short with the two
set-up commands verbatim (`.ci/run` runs the README's test command through scripts/test.sh), every relative link in
README.md and docs/*.md resolving to a file and, with a `#fragment`, to a heading of it, and every docs/*.md linked
from the README."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
READERS = ["operator.md", "sre.md", "dpo.md", "store-manager.md", "contributor.md"]

RUN_COMMAND = "```bash\npip install -r requirements.txt && streamlit run dashboard.py\n```"
TEST_COMMAND = "```bash\nbash scripts/test.sh\n```"

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def _prose(text: str) -> str:
    """The text without fenced code blocks and inline code spans, where a `[x](y)` is an example, not a link."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation but `-` and `_` dropped, spaces to `-`, repeats numbered."""
    seen: dict[str, int] = {}
    anchors = set()
    for line in re.sub(r"^```.*?^```", "", path.read_text(), flags=re.S | re.M).splitlines():
        m = re.match(r"#{1,6} (.+)", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


def _links(path: Path) -> list[str]:
    return [t for t in LINK.findall(_prose(path.read_text())) if not re.match(r"[a-z]+:", t)]


def test_readme_is_at_most_150_lines() -> None:
    assert len(README.read_text().splitlines()) <= 150


def test_readme_keeps_both_setup_commands_verbatim() -> None:
    text = README.read_text()
    assert RUN_COMMAND in text
    assert TEST_COMMAND in text
    # .ci/run is "the README's test command, nothing else": it runs scripts/test.sh
    assert "bash scripts/test.sh" in (ROOT / ".ci" / "run").read_text()
    assert "`.ci/run`" in text


def test_every_reader_has_a_doc_with_who_and_contents() -> None:
    assert [p.name for p in DOCS if p.name in READERS] == sorted(READERS)
    for doc in DOCS:
        head = doc.read_text().splitlines()[:12]
        assert head[0].startswith("# "), doc
        assert any(line.startswith("**Who this is for:**") for line in head), doc
        assert "## Contents" in head, doc


def test_every_relative_link_resolves() -> None:
    checked = 0
    for source in [README, *DOCS]:
        for target in _links(source):
            file, _, fragment = target.partition("#")
            dest = (source.parent / file).resolve() if file else source
            assert dest.is_file(), f"{source.name}: {target}"
            if fragment:
                assert fragment in _anchors(dest), f"{source.name}: {target}"
            checked += 1
    assert checked > len(DOCS)


def test_every_doc_is_linked_from_the_readme() -> None:
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in _links(README)}
    for doc in DOCS:
        assert doc.resolve() in linked, doc.name


def test_operator_doc_has_term_hash_key_and_table_export() -> None:
    text = (ROOT / "docs" / "operator.md").read_text()
    for fact in ["`TERM_HASH_KEY`", "0600", "secrets.token_hex(32)", "Rotation", "client.disableDataExport"]:
        assert fact in text, fact
