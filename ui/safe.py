"""Values from the database or the URL on screen as the text they are, never as markup (issue 24 part 4).

Streamlit renders Markdown (GitHub-flavoured, plus its own `:color[...]` directives, `:icons:` and `$math$`) in
st.markdown, captions, alerts, toasts, titles, widget labels, radio options, expander, status and tab labels and
in a metric's label, value and delta; plotly reads `<a href>`, `<b>`, `<br>`... in a chart's labels. Every value
a page did not write itself (ids, keys, document values, thread ids, operators, error texts, ...) goes through
`md` or `md_code` before it reaches Markdown, and every frame with such text through `plot_frame` before a chart.
Dataframes, st.text, st.code and selectbox options show plain text already.
"""

from __future__ import annotations

import html
import re
from typing import Any

import pandas as pd

# Every ASCII punctuation character: CommonMark lets each be backslash-escaped, and escaped it starts no
# construct (link, image, emphasis, code, HTML, heading, list, table, directive, math).
_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")
# remark-gfm also links bare URLs, `www.` names and e-mail addresses found in the text *after* escapes are
# resolved; an invisible word joiner inside `://`, `www.` and after `@` keeps its patterns from matching.
_AUTOLINK = re.compile(r"(?<=:)(?=//)|(?<=www)(?=\.)|(?<=@)", re.IGNORECASE)
WORD_JOINER = "\u2060"
_BACKTICKS = re.compile(r"`+")


def md(value: Any) -> str:
    """`value` as Markdown that shows exactly its text (plus invisible word joiners that stop auto-links)."""
    return _PUNCTUATION.sub(r"\\\1", _AUTOLINK.sub(WORD_JOINER, str(value)))


def md_code(value: Any) -> str:
    """`value` as an inline code span (monospace, nothing inside interpreted, no auto-link), whatever backticks
    it holds; line breaks become spaces (a code span cannot hold one: the next line would be parsed)."""
    # Streamlit rewrites `:material/` to `:material_` in the whole source, code spans included (its icon syntax)
    text = " ".join(str(value).splitlines()).replace(":material/", f":{WORD_JOINER}material/")
    if not text:
        return ""
    fence = "`" * (max(map(len, _BACKTICKS.findall(text)), default=0) + 1)
    pad = " " if text[0] in "` " or text[-1] in "` " else ""  # CommonMark strips one space from each side
    return f"{fence}{pad}{text}{pad}{fence}"


def plot_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy of `frame` whose text cells a plotly chart shows as text (HTML-escaped), not as its tags."""
    out = frame.copy()
    for column in out.columns:
        if out[column].dtype == object or pd.api.types.is_string_dtype(out[column]):
            out[column] = out[column].map(lambda v: html.escape(v, quote=False) if isinstance(v, str) else v)
    return out
