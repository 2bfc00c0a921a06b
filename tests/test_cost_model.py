import pytest

from verl.tools.cost_model import (
    PRESETS,
    ModelDims,
    delethink_cost,
    longcot_cost,
    main,
    new_tokens_per_chunk,
    sequence_cost,
)

TINY = ModelDims(num_layers=2, hidden_size=4, matmul_params=100, num_kv_heads=1, head_dim=2)


def simulate_flops(
    dims: ModelDims,
    question: int,
    thinking: int,
    chunk: int | None = None,
    keep_head: int = 0,
    keep_tail: int = 0,
) -> tuple[int, int]:
    """Token by token: each token fed to the model attends to every token in its context, itself included.

    Returns (total forward FLOPs, largest context). chunk=None is LongCoT (one context, never reset).
    """
    flops, peak = 0, 0
    thoughts: list[str] = []
    context: list[str] = []

    def feed(token: str) -> None:
        nonlocal flops, peak
        context.append(token)
        flops += 2 * dims.matmul_params + dims.num_layers * 2 * len(context) * dims.hidden_size * 2
        peak = max(peak, len(context))

    question_tokens = [f"q{i}" for i in range(question)]
    for token in question_tokens:
        feed(token)
    while len(thoughts) < thinking:
        if chunk is not None and len(context) - question == chunk:
            # chunk full: restart from question + head + tail of the thinking so far (re-prefilled)
            carried = thoughts[:keep_head] + thoughts[len(thoughts) - keep_tail :]
            context.clear()
            for token in question_tokens + carried:
                feed(token)
        thoughts.append(f"t{len(thoughts)}")
        feed(thoughts[-1])
    return flops, peak


def test_tiny_longcot_matches_hand_count():
    # positions 0..5 (q=2, L=4), each 2*100 + 4*2*4*(p+1): 6*200 + 32*(1+2+...+6) = 1200 + 672
    cost = longcot_cost(TINY, question=2, thinking=4)
    assert cost.gen_flops == 1872
    assert cost.prefill_flops == 400 + 32 * (1 + 2)
    assert cost.train_flops == 3 * 1872
    assert cost.total_flops == 4 * 1872
    # K and V x 2 layers x 1 head x 2 dims x 2 bytes = 16 bytes per token, 6 tokens
    assert cost.peak_kv_bytes == 16 * 6
    assert cost.decode_kv_read_bytes == 16 * (3 + 4 + 5 + 6)
    assert simulate_flops(TINY, 2, 4) == (1872, 6)


def test_tiny_delethink_matches_hand_count():
    # C=3, m=1: chunk 1 = q + 3 new (5 positions); chunk 2 = q + 1 carried + 1 new (4 positions)
    # 9*200 + 32*((1+...+5) + (1+...+4)) = 1800 + 32*25
    cost = delethink_cost(TINY, question=2, thinking=4, chunk=3, carry=1)
    assert cost.num_sequences == 2
    assert cost.gen_flops == 2600
    assert cost.prefill_flops == (400 + 32 * 3) + (600 + 32 * 6)
    assert cost.peak_kv_bytes == 16 * 5
    assert cost.decode_kv_read_bytes == 16 * ((3 + 4 + 5) + 4)
    assert simulate_flops(TINY, 2, 4, chunk=3, keep_tail=1) == (2600, 5)


@pytest.mark.parametrize(
    "question,thinking,chunk,keep_head,keep_tail",
    [(5, 37, 10, 1, 3), (0, 20, 6, 0, 0), (3, 19, 7, 2, 2), (4, 7, 7, 3, 0)],
)
def test_closed_form_matches_token_simulation(question, thinking, chunk, keep_head, keep_tail):
    dims = PRESETS["tiny"]
    carry = keep_head + keep_tail
    expected_flops, expected_peak = simulate_flops(dims, question, thinking, chunk, keep_head, keep_tail)
    cost = delethink_cost(dims, question, thinking, chunk, carry)
    assert cost.gen_flops == expected_flops
    assert cost.peak_kv_bytes == dims.kv_bytes_per_token * expected_peak
    assert longcot_cost(dims, question, thinking).gen_flops == simulate_flops(dims, question, thinking)[0]


def test_chunk_schedule():
    # total thinking with I full chunks is C + (I-1)(C-m): 8192 + 22*4096 = 98304
    assert new_tokens_per_chunk(98304, 8192, 4096) == [8192] + [4096] * 22
    assert new_tokens_per_chunk(10, 4, 1) == [4, 3, 3]
    assert new_tokens_per_chunk(11, 4, 1) == [4, 3, 3, 1]
    assert new_tokens_per_chunk(3, 4, 1) == [3]


@pytest.mark.parametrize("thinking", [0, 1, 5, 8])
def test_single_chunk_delethink_equals_longcot(thinking):
    dims = PRESETS["r1d-1.5b"]
    assert delethink_cost(dims, 100, thinking, chunk=8, carry=4) == longcot_cost(dims, 100, thinking)


def test_ratio_grows_and_delethink_memory_is_flat():
    dims = PRESETS["r1d-1.5b"]
    q, c, m = 1024, 8192, 4096
    ratios, longcot_peaks, delethink_peaks = [], [], []
    for multiple in (2, 4, 8, 12):
        lc = longcot_cost(dims, q, multiple * c)
        dt = delethink_cost(dims, q, multiple * c, c, m)
        ratios.append((lc.total_flops / dt.total_flops, lc.decode_flops / dt.decode_flops))
        longcot_peaks.append(lc.peak_kv_bytes)
        delethink_peaks.append(dt.peak_kv_bytes)
    total_ratios, decode_ratios = zip(*ratios, strict=True)
    assert list(total_ratios) == sorted(set(total_ratios))
    assert list(decode_ratios) == sorted(set(decode_ratios))
    assert delethink_peaks == [dims.kv_bytes_per_token * (q + c)] * 4
    assert longcot_peaks == [dims.kv_bytes_per_token * (q + k * c) for k in (2, 4, 8, 12)]
    # R1-Distill-1.5B: 2 (K,V) * 28 layers * 2 KV heads * 128 * 2 bytes = 28 KiB per token
    assert dims.kv_bytes_per_token == 28 * 1024


def test_cli_prints_ratio_line(capsys):
    main(["--model", "tiny", "--question", "2", "--thinking", "4", "--chunk", "3", "--carry", "1", "--sweep"])
    out = capsys.readouterr().out
    # totals are 4x the forward FLOPs: 1872 / 2600 = 0.72
    assert "ratio LongCoT/Delethink total FLOPs: 0.72x" in out
    assert "27/7 H100-months = 3.86x" in out
    first_words = [line.split()[:1] for line in out.splitlines()]
    sweep_rows = [w for w in first_words if w in (["3"], ["6"], ["12"], ["24"], ["36"])]
    assert len(sweep_rows) == 5


@pytest.mark.parametrize(
    "call,name",
    [
        (lambda: delethink_cost(TINY, 2, 10, chunk=4, carry=4), "carry"),
        (lambda: delethink_cost(TINY, 2, 10, chunk=0, carry=0), "chunk"),
        (lambda: delethink_cost(TINY, 2, 10, chunk=4, carry=-1), "carry"),
        (lambda: delethink_cost(TINY, 2, -1, chunk=4, carry=1), "thinking"),
        (lambda: delethink_cost(TINY, -2, 10, chunk=4, carry=1), "question"),
        (lambda: longcot_cost(TINY, 2, -5), "thinking"),
        (lambda: sequence_cost(TINY, -1, 3), "prompt_len"),
        (
            lambda: ModelDims(num_layers=0, hidden_size=4, matmul_params=1, num_kv_heads=1, head_dim=1),
            "num_layers",
        ),
        (lambda: main(["--model", "tiny", "--chunk", "8", "--carry", "9"]), "carry"),
        (lambda: main(["--model", "tiny", "--mfu", "0"]), "mfu"),
    ],
)
def test_bad_input_names_the_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_qwen2_dims_from_an_hf_config():
    from transformers import Qwen2Config

    from verl.tools.cost_model import qwen2_dims

    config = Qwen2Config(
        hidden_size=128,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=100,
    )
    dims = qwen2_dims(config)
    # per layer: q and o 128x128 each, k and v 128x64 each (2 heads of 32), gate/up/down 128x512 each
    per_layer = 2 * 128 * 128 + 2 * 128 * 64 + 3 * 128 * 512
    assert dims.matmul_params == 2 * per_layer + 100 * 128 == 504320
    assert (dims.num_layers, dims.hidden_size, dims.num_kv_heads, dims.head_dim) == (2, 128, 2, 32)
    assert dims.bytes_per_value == 4 and qwen2_dims(config, bytes_per_value=2).bytes_per_value == 2
