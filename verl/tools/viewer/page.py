"""One self-contained HTML page from grouped trajectories (runs.py): data, script and style inline.

The page must stay usable for a step of 1024 traces of 24K tokens, so nothing is parsed or drawn
before it is asked for: each group's list (the fields filters and sorting need) is its own JSON
<script> element, parsed when the group is picked, and each trace's text is another, parsed when the
trace is opened. The list itself is drawn a page of rows at a time as it scrolls into view. The traces
come after the script in the file, so the list is on screen while the browser still reads them (nearly
all of the file: ~100 MB for that step; benchmarks/viewer_scale.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from verl.tools.viewer.runs import Trace
from verl.tools.viewer.spans import TextPiece, answer_marks, mark_text, trace_pieces
from verl.tools.viewer.tokens import TokenBytes
from verl.utils.fs import utf8_json

ASSETS = Path(__file__).resolve().parent


def chunk_text_pieces(trace: Trace) -> list[TextPiece]:
    """Without token ids (older files) a chunk's decoded text is all there is: boundaries are drawn,
    carry-overs cannot be placed."""
    pieces = [TextPiece(c.response, k) for k, c in enumerate(trace.chunks) if c.response]
    return mark_text(pieces, answer_marks("".join(p.text for p in pieces)))


def pieces_of(trace: Trace, token_bytes: TokenBytes | None) -> list[TextPiece]:
    ids = [c.response_ids for c in trace.chunks]
    if token_bytes is None or any(i is None for i in ids):
        return chunk_text_pieces(trace)
    chunk_ids = [i for i in ids if i is not None]  # all of them; the narrowing is for the type checker
    return trace_pieces(
        chunk_ids, token_bytes([t for i in chunk_ids for t in i]), trace.keep_head, trace.keep_tail
    )


def summary(trace: Trace) -> dict[str, Any]:
    """What the list, its filters and its sorting read."""
    return {
        "i": trace.index, "key": trace.pair_key, "q": trace.question[-300:], "src": trace.data_source,
        "score": trace.score, "eos": trace.has_eos, "n": len(trace.chunks), "tok": trace.thinking_tokens,
        "fin": trace.chunks[-1].finish_reason, "ans": trace.answer, "gt": trace.ground_truth,
    }  # fmt: skip


def detail(trace: Trace, token_bytes: TokenBytes | None) -> dict[str, Any]:
    """Everything the opened trace shows; `segs` are [text, chunk, head_into, tail_into, marks]."""
    pieces = pieces_of(trace, token_bytes)
    return {
        "question": trace.question,
        "carry": trace.keep_head is not None and all(c.response_ids is not None for c in trace.chunks),
        "keep": [trace.keep_head, trace.keep_tail],
        "chunks": [
            {
                "tok": len(c.response_ids) if c.response_ids is not None else None,
                "ptok": c.prompt_tokens,
                "fin": c.finish_reason,
            }
            for c in trace.chunks
        ],  # fmt: skip
        "segs": [[p.text, p.chunk, list(p.head_into), list(p.tail_into), list(p.marks)] for p in pieces],
    }


def script_json(element_id: str, value: Any) -> str:
    # "<" escaped so that no text in a trace can close the <script> element or open a comment
    text = utf8_json(value, separators=(",", ":")).replace("<", "\\u003c")
    return f'<script type="application/json" id="{element_id}">{text}</script>\n'


def build_page(sources: Sequence[tuple[str, dict[str, list[Trace]], TokenBytes | None]], title: str) -> str:
    """`sources`: one (name, groups, token_bytes) per run; a second run turns on side-by-side."""
    lists, texts = [], []
    manifest = []
    for s, (name, groups, token_bytes) in enumerate(sources):
        listed = []
        for g, (group, traces) in enumerate(groups.items()):
            listed.append({"name": group, "id": f"s{s}g{g}", "count": len(traces)})
            lists.append(script_json(f"s{s}g{g}", [summary(t) for t in traces]))
            texts += [script_json(f"s{s}g{g}t{t.index}", detail(t, token_bytes)) for t in traces]
        manifest.append({"name": name, "groups": listed})
    template = (ASSETS / "page.html").read_text()
    return (
        template.replace("__TITLE__", title.replace("<", "&lt;"))
        .replace("/*__STYLE__*/", (ASSETS / "viewer.css").read_text())
        .replace("/*__SCRIPT__*/", (ASSETS / "viewer.js").read_text())
        .replace("<!--__LISTS__-->", script_json("manifest", manifest) + "".join(lists))
        .replace("<!--__TRACES__-->", "".join(texts))
    )
