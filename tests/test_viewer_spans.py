"""The rollout viewer's span computation on hand-made traces: chunk ranges, Delethink carry-overs,
cuts inside multi-byte characters, the `</think>` and answer marks, and the tiny tokenizer's bytes."""

import pytest

from verl.core.trimmers import progressive_trim
from verl.models.tiny import build_tokenizer
from verl.tools.viewer.spans import (
    CarryOver,
    Piece,
    TextPiece,
    answer_marks,
    carry_overs,
    char_start,
    chunk_ranges,
    decode_pieces,
    mark_text,
    token_pieces,
    trace_pieces,
)
from verl.tools.viewer.tokens import byte_level_token_bytes
from verl.utils.reward_score.boxed import extract_final_answer


def test_chunk_ranges_follow_token_counts_including_an_empty_chunk():
    assert chunk_ranges([3, 0, 2]) == [(0, 3), (3, 3), (3, 5)]
    assert chunk_ranges([]) == []


def test_carry_overs_are_the_first_head_and_last_tail_tokens_of_all_thinking_so_far():
    # the e2e tiny setting: C = 12, keep_head 2, keep_tail 4, later chunks write 6
    assert carry_overs([12, 6, 6], keep_head=2, keep_tail=4) == [
        CarryOver(1, (0, 2), (8, 12)),
        CarryOver(2, (0, 2), (14, 18)),
    ]
    # thinking no longer than head + tail is carried whole
    assert carry_overs([3, 5], keep_head=2, keep_tail=4) == [CarryOver(1, (0, 2), (2, 3))]
    assert carry_overs([7], keep_head=2, keep_tail=4) == []  # one chunk: nothing carried


@pytest.mark.parametrize("lengths", [[12, 6, 6, 3], [3, 5, 1], [1, 1, 1, 1], [20, 2, 2]])
def test_carry_over_ranges_select_what_the_trimmer_carried(lengths):
    ids = list(range(100, 100 + sum(lengths)))
    for c in carry_overs(lengths, keep_head=2, keep_tail=4):
        written = sum(lengths[: c.into])
        carried = ids[slice(*c.head)] + ids[slice(*c.tail)]
        assert carried == progressive_trim(ids[:written], 2, 4)


def test_token_pieces_cut_at_chunk_and_carry_edges():
    carries = carry_overs([5, 3], keep_head=1, keep_tail=2)  # head (0, 1), tail (3, 5)
    assert token_pieces([5, 3], carries) == [
        Piece(0, 1, 0, head_into=(1,)),
        Piece(1, 3, 0),
        Piece(3, 5, 0, tail_into=(1,)),
        Piece(5, 8, 1),
    ]


def test_token_pieces_name_every_chunk_a_shared_head_is_carried_into():
    carries = carry_overs([4, 2, 2], keep_head=1, keep_tail=1)
    pieces = token_pieces([4, 2, 2], carries)
    assert pieces[0] == Piece(0, 1, 0, head_into=(1, 2))
    assert Piece(3, 4, 0, tail_into=(1,)) in pieces and Piece(5, 6, 1, tail_into=(2,)) in pieces


def test_char_start_moves_back_only_from_inside_a_valid_character():
    e_acute, euro, grin = "é".encode(), "€".encode(), "😀".encode()  # 2, 3 and 4 bytes
    assert char_start(b"a" + e_acute, 2) == 1
    assert [char_start(euro, i) for i in range(4)] == [0, 0, 0, 3]
    assert [char_start(grin, i) for i in range(5)] == [0, 0, 0, 0, 4]
    assert char_start(b"ab", 1) == 1
    assert char_start(b"\x80\x80", 1) == 1  # continuation bytes with no lead: not a character, no move
    assert char_start(b"a\xc3\xa9\xa9", 3) == 3  # a stray continuation after a complete character


def test_a_tail_starting_inside_a_character_shows_it_whole_and_marks_the_split():
    # "aéb" + "c": é is two tokens, and the tail (last 2 tokens before chunk 2) starts at its 2nd byte
    token_bytes = [b"a", b"\xc3", b"\xa9", b"b", b"c"]
    pieces = token_pieces([4, 1], carry_overs([4, 1], keep_head=1, keep_tail=2))
    assert decode_pieces(token_bytes, pieces) == [
        TextPiece("a", 0, head_into=(1,)),
        # the piece holding only é's first byte is empty once the cut moves back, and is dropped
        TextPiece("éb", 0, tail_into=(1,), marks=("split_char",)),
        TextPiece("c", 1),
    ]


def test_a_chunk_boundary_inside_a_character_puts_it_in_the_later_chunk():
    token_bytes = [b"a", b"\xe2", b"\x82\xac", b"b"]  # "a€b", € split 1 + 2 bytes over the boundary
    pieces = token_pieces([2, 2], [])
    assert decode_pieces(token_bytes, pieces) == [
        TextPiece("a", 0),
        TextPiece("€b", 1, marks=("split_char",)),
    ]


def test_answer_marks_find_the_first_think_end_and_the_last_box_after_it():
    assert answer_marks("ab</think>\\boxed{7}") == [(2, 10, "think_end"), (17, 18, "answer")]
    assert answer_marks("no end \\boxed{7}") == []
    assert answer_marks("\\boxed{1}</think>\\boxed{2") == [(9, 17, "think_end")]  # unclosed: no answer


@pytest.mark.parametrize(
    "text",
    [
        "x</think>a \\boxed{1} b \\boxed{1{2}}",
        "\\boxed{9}</think>done \\boxed{\\frac{1}{2}} </think> \\boxed{3}",
        "</think>\\boxed{}",
    ],
)
def test_the_answer_mark_is_what_the_scorer_extracts(text):
    spans = [(s, e) for s, e, name in answer_marks(text) if name == "answer"]
    assert [text[s:e] for s, e in spans] == [extract_final_answer(text)]


def test_mark_text_cuts_pieces_at_mark_edges_and_keeps_labels():
    pieces = [TextPiece("ab</th", 0), TextPiece("ink>\\boxed{7}", 1, tail_into=(2,), marks=("split_char",))]
    marked = mark_text(pieces, answer_marks("ab</think>\\boxed{7}"))
    assert marked == [
        TextPiece("ab", 0),
        TextPiece("</th", 0, marks=("think_end",)),
        TextPiece("ink>", 1, tail_into=(2,), marks=("split_char", "think_end")),
        TextPiece("\\boxed{", 1, tail_into=(2,)),
        TextPiece("7", 1, tail_into=(2,), marks=("answer",)),
        TextPiece("}", 1, tail_into=(2,)),
    ]


def test_trace_pieces_with_the_tiny_byte_tokenizer():
    tokenizer = build_tokenizer()
    token_bytes = byte_level_token_bytes(tokenizer)
    ids = tokenizer.encode("ééé</think>\\boxed{5}", add_special_tokens=False)
    assert len(ids) == 6 + 1 + 9  # é is two byte tokens, </think> one added token, the box 9 ASCII bytes
    chunks = [ids[:5], ids[5:]]  # the boundary cuts the third é
    pieces = trace_pieces(chunks, token_bytes(ids), keep_head=1, keep_tail=2)
    assert "".join(p.text for p in pieces) == "ééé</think>\\boxed{5}"
    # the head (token 0) is the first é's first byte alone: empty once cuts move to character starts,
    # so it is dropped and the next piece starts by taking back that byte. The tail (tokens 3-4: é #2's
    # second byte, é #3's first) moves back one byte and shows é #2; é #3 is shown in chunk 2.
    assert pieces == [
        TextPiece("é", 0, marks=("split_char",)),
        TextPiece("é", 0, tail_into=(1,), marks=("split_char",)),
        TextPiece("é", 1, marks=("split_char",)),
        TextPiece("</think>", 1, marks=("think_end",)),
        TextPiece("\\boxed{", 1),
        TextPiece("5", 1, marks=("answer",)),
        TextPiece("}", 1),
    ]


def test_trace_pieces_refuses_bytes_that_do_not_match_the_trace():
    with pytest.raises(ValueError, match="3 token byte strings for a trace of 4 tokens"):
        trace_pieces([[1, 2], [3, 4]], [b"a", b"b", b"c"], None, None)


def test_token_bytes_of_added_and_byte_tokens():
    tokenizer = build_tokenizer()
    token_bytes = byte_level_token_bytes(tokenizer)
    ids = tokenizer.encode("€</think>", add_special_tokens=False)
    assert token_bytes(ids) == [b"\xe2", b"\x82", b"\xac", b"</think>"]
    with pytest.raises(ValueError, match="token id 99999 is not in the tokenizer's vocabulary"):
        token_bytes([99999])
