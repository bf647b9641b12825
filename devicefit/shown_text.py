"""Names shown to a person, as the characters they are. Model, host and device names and error
texts come from landing files other machines wrote and from backends: a control character (ESC
starts ANSI and OSC sequences) could act on a terminal, and Unicode's directional formatting
characters (embeddings, overrides, isolates, marks) make a terminal or a browser show a name's
characters in another order than they are ("Trojan Source"). Each is shown as its escape."""
from __future__ import annotations

import html
import re
from typing import Any

# C0 but tab and newline, DEL, C1; and U+061C, U+200E/F, U+202A-E, U+2066-9.
_HIDDEN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def visible(text: str) -> str:
    """`text` with each control or directional formatting character as its escape (`\\x1b`,
    `\\u202e`), everything else as it is."""
    return _HIDDEN.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}", text)


def plotly_text(value: Any) -> str:
    """Text for a figure's labels, legend and hover: plotly renders <a href>, <span style>, <b>
    and <br> in them as markup, so a name is HTML-escaped (plotly shows &lt; &gt; &amp; as the
    characters) and made `visible`."""
    return html.escape(visible(str(value)), quote=False)
