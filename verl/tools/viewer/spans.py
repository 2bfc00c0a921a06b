"""Where a trace's chunks and carry-overs lie, and its text cut into labelled pieces.

Positions are token indices into the whole thinking trace (every chunk's sampled tokens, in order).
Delethink's chunk k >= 1 is prompted with the question plus a carry-over cut from all thinking before
it: the first keep_head and the last keep_tail tokens (the `progressive` trimmer). The viewer colours
those tokens where they were written, so a reader sees what survived each reset.

Token ranges become text through each token's bytes. A cut between two tokens can fall inside one
UTF-8 character (byte-level tokenizers split rare characters over several tokens); such a cut is moved
to the start of that character, and the piece after it is marked `split_char`, so every character is
shown whole, once, and the reader still sees that the model's carry-over began or ended mid-character.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import accumulate

THINK_END = "</think>"
BOXED = "\\boxed{"


@dataclass(frozen=True)
class CarryOver:
    """What chunk `into` was prompted with after the question: two token ranges [start, end)."""

    into: int
    head: tuple[int, int]
    tail: tuple[int, int]


@dataclass(frozen=True)
class Piece:
    """A run of the trace that shares one chunk and one set of labels (token or character range)."""

    start: int
    end: int
    chunk: int
    head_into: tuple[int, ...] = ()  # chunks whose carry-over head holds this run
    tail_into: tuple[int, ...] = ()  # chunks whose carry-over tail holds this run


@dataclass(frozen=True)
class TextPiece:
    text: str
    chunk: int
    head_into: tuple[int, ...] = ()
    tail_into: tuple[int, ...] = ()
    marks: tuple[str, ...] = ()  # split_char | think_end | answer


def chunk_ranges(lengths: Sequence[int]) -> list[tuple[int, int]]:
    """Token range of each chunk in the trace, from the chunks' token counts."""
    ends = list(accumulate(lengths))
    return [(end - n, end) for n, end in zip(lengths, ends, strict=True)]


def carry_overs(lengths: Sequence[int], keep_head: int, keep_tail: int) -> list[CarryOver]:
    """The carry-over of every chunk after the first, as the progressive trimmer cut it: thinking no
    longer than keep_head + keep_tail is carried whole (reported as head, then the rest as tail)."""
    out = []
    for into, (_, written) in enumerate(chunk_ranges(lengths)[:-1], start=1):
        if written <= keep_head + keep_tail:
            head_end = min(keep_head, written)
            out.append(CarryOver(into, (0, head_end), (head_end, written)))
        else:
            out.append(CarryOver(into, (0, keep_head), (written - keep_tail, written)))
    return out


def token_pieces(lengths: Sequence[int], carries: Sequence[CarryOver]) -> list[Piece]:
    """The trace cut at every chunk boundary and carry-over edge; empty chunks give no piece."""
    ranges = chunk_ranges(lengths)
    cuts = {p for r in ranges for p in r}
    cuts |= {p for c in carries for p in (*c.head, *c.tail)}
    points = sorted(cuts)
    pieces = []
    chunk = 0
    for start, end in zip(points, points[1:], strict=False):
        while ranges[chunk][1] <= start:
            chunk += 1
        heads = tuple(c.into for c in carries if c.head[0] <= start and end <= c.head[1])
        tails = tuple(c.into for c in carries if c.tail[0] <= start and end <= c.tail[1])
        pieces.append(Piece(start, end, chunk, heads, tails))
    return pieces


def char_start(data: bytes, offset: int) -> int:
    """`offset` moved back to the first byte of the UTF-8 character it falls inside; unchanged at a
    character start, and for bytes that are not valid UTF-8 (those decode as U+FFFD where they are)."""
    start = offset
    while start > 0 and offset - start < 3 and start < len(data) and data[start] & 0xC0 == 0x80:
        start -= 1
    if start == offset or start >= len(data):
        return offset
    lead = data[start]
    width = 2 if lead >> 5 == 0b110 else 3 if lead >> 4 == 0b1110 else 4 if lead >> 3 == 0b11110 else 0
    return start if start + width > offset else offset


def decode_pieces(token_bytes: Sequence[bytes], pieces: Sequence[Piece]) -> list[TextPiece]:
    """Each token piece as text. A cut inside a character moves to its start (see the module notes);
    a piece left empty by that (all of it inside one character) is dropped."""
    offsets = [0, *accumulate(len(b) for b in token_bytes)]
    data = b"".join(token_bytes)
    out = []
    for p in pieces:
        start, end = char_start(data, offsets[p.start]), char_start(data, offsets[p.end])
        if start == end:
            continue
        marks = ("split_char",) if start != offsets[p.start] else ()
        text = data[start:end].decode("utf-8", errors="replace")
        out.append(TextPiece(text, p.chunk, p.head_into, p.tail_into, marks))
    return out


def answer_marks(text: str) -> list[tuple[int, int, str]]:
    """Character spans of the first `</think>` and of the answer the scorer reads (the content of the
    last balanced \\boxed{} after it, as verl.utils.reward_score.boxed.extract_final_answer)."""
    think = text.find(THINK_END)
    if think < 0:
        return []
    marks = [(think, think + len(THINK_END), "think_end")]
    after = think + len(THINK_END)
    box = text.rfind(BOXED, after)
    if box < 0:
        return marks
    depth, first = 1, box + len(BOXED)
    for j in range(first, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            marks.append((first, j, "answer"))
            break
    return marks


def mark_text(pieces: Sequence[TextPiece], marks: Sequence[tuple[int, int, str]]) -> list[TextPiece]:
    """Cut the pieces further at the edges of `marks` (character spans of the joined text) and add each
    mark's name to the pieces inside it."""
    out = []
    pos = 0
    for p in pieces:
        end = pos + len(p.text)
        cuts = sorted({pos, end} | {c for s, e, _ in marks for c in (s, e) if pos < c < end})
        for a, b in zip(cuts, cuts[1:], strict=False):
            names = tuple(name for s, e, name in marks if s <= a and b <= e and s < e)
            kept = p.marks if a == pos else tuple(m for m in p.marks if m != "split_char")
            out.append(replace(p, text=p.text[a - pos : b - pos], marks=kept + names))
        pos = end
    return out


def trace_pieces(
    chunk_ids: Sequence[Sequence[int]],
    token_bytes: Sequence[bytes],
    keep_head: int | None,
    keep_tail: int | None,
) -> list[TextPiece]:
    """Everything the viewer shows of one trace: chunks, carry-overs (when keep_head/keep_tail are
    given: Delethink), the `</think>` and the answer. `token_bytes` holds the bytes of every token of
    the trace in order."""
    lengths = [len(ids) for ids in chunk_ids]
    if sum(lengths) != len(token_bytes):
        raise ValueError(f"{len(token_bytes)} token byte strings for a trace of {sum(lengths)} tokens")
    carries = [] if keep_head is None or keep_tail is None else carry_overs(lengths, keep_head, keep_tail)
    pieces = decode_pieces(token_bytes, token_pieces(lengths, carries))
    return mark_text(pieces, answer_marks("".join(p.text for p in pieces)))
