"""The Delethink carry-over, checked by hand (the thinking budget: tests/test_delethink_params.py)."""

import pytest

from verl.core.trimmers import (
    TRIMMERS,
    get_trimmer,
    progressive_trim,
    register_trimmer,
)


def test_keeps_head_and_tail_of_long_thinking():
    # 20 tokens, head 3, tail 4 -> [0, 1, 2] + [16, 17, 18, 19]
    assert progressive_trim(list(range(20)), 3, 4) == [0, 1, 2, 16, 17, 18, 19]
    # no head: only the last 4
    assert progressive_trim(list(range(20)), 0, 4) == [16, 17, 18, 19]


def test_short_thinking_is_kept_whole_as_a_copy():
    thinking = [5, 6, 7]
    kept = progressive_trim(thinking, 3, 4)
    assert kept == [5, 6, 7]
    kept.append(8)
    assert thinking == [5, 6, 7]
    # exactly keep_head + keep_tail tokens: nothing to drop
    assert progressive_trim(list(range(7)), 3, 4) == list(range(7))


def test_head_is_the_start_of_all_thinking_across_chunks():
    # each chunk writes 5 new tokens after the carry-over; the trimmer always sees ALL thinking so far
    keep_head, keep_tail = 3, 4
    thinking: list[int] = []
    for chunk in range(6):
        thinking += list(range(chunk * 5, chunk * 5 + 5))
        carry = progressive_trim(thinking, keep_head, keep_tail)
        assert len(carry) <= keep_head + keep_tail
        assert carry[:keep_head] == [0, 1, 2]
        assert carry[-keep_tail:] == thinking[-keep_tail:]
    # after 6 chunks (30 tokens): [0, 1, 2] + [26, 27, 28, 29]
    assert carry == [0, 1, 2, 26, 27, 28, 29]


def test_trim_errors():
    with pytest.raises(
        ValueError, match=r"^keep_tail must be >= 1 \(the carry-over needs recent thinking\), got 0$"
    ):
        progressive_trim(list(range(10)), 3, 0)
    with pytest.raises(ValueError, match=r"^keep_head must be >= 0, got -1$"):
        progressive_trim(list(range(10)), -1, 4)
    assert progressive_trim(list(range(10)), 0, 1) == [9]  # the smallest carry-over: the last token
    with pytest.raises(ValueError, match=r"^unknown trimmer 'middle'; registered trimmers: \['progressive'"):
        get_trimmer("middle")


def test_registry():
    assert get_trimmer("progressive") is progressive_trim
    with pytest.raises(ValueError, match="'middle'.*progressive"):
        get_trimmer("middle")
    with pytest.raises(ValueError, match="already registered"):
        register_trimmer("progressive")(progressive_trim)

    @register_trimmer("tail_only_test")
    def tail_only(thinking_ids: list[int], keep_head: int, keep_tail: int) -> list[int]:
        return thinking_ids[-keep_tail:]

    try:
        assert get_trimmer("tail_only_test")([1, 2, 3], 0, 2) == [2, 3]
    finally:
        del TRIMMERS["tail_only_test"]
