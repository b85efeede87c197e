"""ui.safe (issue 24 part 4): values from the database or the URL reach Markdown escaped and plotly HTML-escaped,
and still read as the same text; AppTest of the two reproduced holes (Checkpoints `?thread=`, the Erasure page's
residue term). The browser test (tests/test_browser_hostile_values.py) shows what a person sees."""

from __future__ import annotations

import re

import pandas as pd
import pytest
from apptools import resolve_escapes, shown
from streamlit.testing.v1 import AppTest

from core.db import reset_pool
from tests.hostile_data import ID, LINKS, write_hostile
from ui.safe import WORD_JOINER, md, md_code, plot_frame

SHORT = "![x](https://attacker.example/p.png) [Verify your SSO session](https://attacker.example)"
# ids that must keep working: LIKE metacharacters, quotes, a backslash, a NUL, a dot, a line break
ODD = [
    "C9",
    "clientes.C_9",
    "C%",
    'it\'s "quoted"',
    "back\\slash",
    "nul\x00byte",
    "two\nlines",
    "a`b``c",
    " `x` ",
    SHORT,
    LINKS,
    ID,
    "",
]


PUNCTUATION = re.compile(r"[!-/:-@\[-`{-~]")  # ASCII punctuation: what CommonMark lets a backslash escape


def unescaped_punctuation(markdown: str) -> list[str]:
    """The punctuation characters of `markdown` no backslash escapes (each could start a construct)."""
    found, i = [], 0
    while i < len(markdown):
        if markdown[i] == "\\" and i + 1 < len(markdown) and PUNCTUATION.match(markdown[i + 1]):
            i += 2
            continue
        if PUNCTUATION.match(markdown[i]):
            found.append(markdown[i])
        i += 1
    return found


@pytest.mark.parametrize("value", ODD)
def test_md_shows_the_text_itself(value):
    escaped = md(value)
    assert unescaped_punctuation(escaped) == []
    assert shown(escaped) == value


def test_md_breaks_the_autolinks_remark_gfm_finds_after_escapes():
    text = resolve_escapes(md(LINKS))  # what remark-gfm searches for autolinks
    # remark-gfm's literal autolinks (mdast-util-gfm-autolink-literal): a protocol, `www.`, an e-mail's domain
    for pattern in (r"https?://", r"www(?=\.)", r"@[-\w]"):
        assert re.search(pattern, LINKS, re.IGNORECASE)
        assert re.search(pattern, text, re.IGNORECASE) is None, pattern
    assert md("dpo@example.es") == "dpo\\@" + WORD_JOINER + "example\\.es"


@pytest.mark.parametrize("value", [v for v in ODD if v])
def test_md_code_is_one_code_span_holding_the_text(value):
    span = md_code(value)
    fence = re.match(r"`+", span).group()
    inner = span[len(fence) : -len(fence)]
    assert span.endswith(fence)
    assert fence not in re.findall(r"`+", inner)  # no run of the fence's length inside: the span cannot end early
    assert "\n" not in span
    text = inner[1:-1] if inner.startswith(" ") and inner.endswith(" ") and inner.strip() else inner
    assert text == " ".join(value.splitlines())


def test_md_code_keeps_streamlits_icon_syntax_out():
    assert ":material/" not in md_code("a :material/home: b")
    assert md_code("a :material/home: b").replace(WORD_JOINER, "") == "`a :material/home: b`"


def test_md_code_of_nothing_is_nothing():
    assert md_code("") == ""  # "``" would show two backticks


def test_plot_frame_escapes_text_cells_only():
    frame = pd.DataFrame({"thread_id": [LINKS, "t-1"], "bytes": [1, 2], "root": ["clientes", None]})
    shown = plot_frame(frame)
    assert "<" not in shown["thread_id"].iloc[0] and "&lt;a href=" in shown["thread_id"].iloc[0]
    assert shown["thread_id"].iloc[1] == "t-1" and shown["bytes"].tolist() == [1, 2]
    assert shown["root"].iloc[0] == "clientes" and pd.isna(shown["root"].iloc[1])
    assert frame["thread_id"].iloc[0] == LINKS  # the caller's frame is untouched


@pytest.fixture(scope="module")
def hostile(create_database):
    written = write_hostile(create_database(migrated=False, prefix="hostile"))
    yield written
    reset_pool(written.dsn)


def open_page(page: str, **params: str) -> AppTest:
    at = AppTest.from_file("../dashboard.py", default_timeout=60)
    for key, value in params.items():
        at.query_params[key] = value
    at.run()
    at.switch_page(page).run()
    assert not at.exception, at.exception
    return at


def test_checkpoints_thread_parameter_is_shown_escaped(hostile, app_env):
    app_env(hostile.dsn)
    at = open_page("app_pages/checkpoints.py", thread=SHORT)
    (info,) = [i.value for i in at.info if "Ningún hilo" in i.value]
    assert md(SHORT) in info and "](" not in info


def test_erasure_residue_term_and_thread_are_shown_escaped(hostile, app_env):
    app_env(hostile.dsn, LOCAL_ROLES="dpo")
    at = open_page("app_pages/erasure.py", cliente=ID)
    at.button(key="erasure.preview").click().run()
    assert not at.exception, at.exception
    (line,) = [m.value for m in at.markdown if m.value.startswith("Hilo ")]
    assert (
        line == f"Hilo {md_code(hostile.thread_residue)} — término «{md('a ' + LINKS)}» (valor de sus documentos)"
    )  # the kind in words, not the key
    (title,) = [s.value for s in at.subheader if s.value.startswith("Qué se borraría")]
    assert title == f"Qué se borraría de {md_code('clientes.' + ID)}"
