"""The from-scratch tiny model and tokenizer: tokenization, chat template, size, save/load, seeding."""

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

from verl.models import tiny

MATH_PROBLEM = (
    "Let $f(x) = \\frac{3x^2 - 1}{x + 2}$ for all real $x \\neq -2$. Find $f(-1)$.\n"
    "Express your answer as a common fraction — and note π ≈ 3.14159, √2 ∉ ℚ, naïve café."
)


@pytest.fixture(scope="module")
def tokenizer():
    return tiny.build_tokenizer()


def test_ascii_is_one_token_per_character_with_id_equal_to_byte(tokenizer):
    text = "".join(chr(c) for c in range(32, 127)) + "\n\t"
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert ids == [ord(c) for c in text]
    assert tokenizer.decode(ids) == text


def test_real_math_text_round_trips_without_unknowns(tokenizer):
    ids = tokenizer.encode(MATH_PROBLEM, add_special_tokens=False)
    assert tokenizer.decode(ids) == MATH_PROBLEM
    assert tokenizer.unk_token is None
    # non-ASCII characters cost one token per UTF-8 byte
    assert len(ids) == len(MATH_PROBLEM.encode("utf-8"))


def test_think_tags_are_single_tokens_that_survive_skipping_special_tokens(tokenizer):
    start, end = tokenizer.convert_tokens_to_ids([tiny.THINK_START, tiny.THINK_END])
    assert tokenizer.encode("<think>", add_special_tokens=False) == [start]
    assert tokenizer.encode("</think>", add_special_tokens=False) == [end]
    ids = tokenizer.encode("<think>a3=3</think>\\boxed{3}<|end|>", add_special_tokens=False)
    assert ids[-1] == tokenizer.eos_token_id
    assert tokenizer.decode(ids, skip_special_tokens=True) == "<think>a3=3</think>\\boxed{3}"


def test_special_tokens(tokenizer):
    assert tokenizer.eos_token == "<|end|>"
    assert tokenizer.pad_token == "<|pad|>"
    assert tokenizer.bos_token is None
    assert tokenizer.pad_token_id != tokenizer.eos_token_id
    specials = {"<|pad|>", "<|end|>", "<|system|>", "<|user|>", "<|assistant|>"}
    assert specials <= set(tokenizer.all_special_tokens)
    assert not {"<think>", "</think>"} & set(tokenizer.all_special_tokens)
    # 256 bytes + 5 special tokens + 2 think tags
    assert len(tokenizer) == 263


def test_chat_template_generation_prompt_ids(tokenizer):
    user, assistant, think = tokenizer.convert_tokens_to_ids(["<|user|>", "<|assistant|>", "<think>"])
    question = "a3 b5 c2"
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], add_generation_prompt=True, return_dict=False
    )
    assert ids == [user, *map(ord, question), assistant, think]


def test_chat_template_system_and_assistant_messages(tokenizer):
    system, user, assistant = tokenizer.convert_tokens_to_ids(["<|system|>", "<|user|>", "<|assistant|>"])
    messages = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": "A"},
    ]
    ids = tokenizer.apply_chat_template(messages, return_dict=False)
    assert ids == [system, ord("S"), user, ord("Q"), assistant, ord("A"), tokenizer.eos_token_id]
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert text == "<|system|>S<|user|>Q<|assistant|>A<|end|><|assistant|><think>"


def test_chat_template_rejects_unknown_role(tokenizer):
    with pytest.raises(Exception, match="unknown chat role: tool"):
        tokenizer.apply_chat_template([{"role": "tool", "content": "x"}], return_dict=False)


def test_parameter_count_matches_hand_count(tokenizer):
    model = tiny.build_model(tokenizer)
    d, kv, ffn, vocab = 128, 64, 512, 263  # kv: 2 kv heads of dim 32
    attention = (d * d + d) + 2 * (d * kv + kv) + d * d  # q, k, v with biases; o without
    layer = attention + 3 * d * ffn + 2 * d  # + gate/up/down projections + two RMSNorms
    expected = vocab * d + 2 * layer + d  # tied embeddings, final norm
    assert sum(p.numel() for p in model.parameters()) == expected == 526_336


def test_an_untied_model_has_an_output_layer_of_its_own_from_the_same_seed(tokenizer, tmp_path):
    tied, untied = tiny.build_model(tokenizer, seed=3), tiny.build_model(tokenizer, seed=3, untied=True)
    assert not untied.config.tie_word_embeddings
    assert untied.lm_head.weight.data_ptr() != untied.model.embed_tokens.weight.data_ptr()
    assert sum(p.numel() for p in untied.parameters()) == 526_336 + 263 * 128  # the head's vocab x hidden
    # the rest is drawn as the tied model's, so the head is the one difference
    assert torch.equal(untied.model.embed_tokens.weight, tied.model.embed_tokens.weight)
    assert not torch.equal(untied.lm_head.weight, untied.model.embed_tokens.weight)
    tiny.main(["--out", str(tmp_path / "untied"), "--untied", "--seed", "3"])
    saved = AutoModelForCausalLM.from_pretrained(tmp_path / "untied")
    assert torch.equal(saved.lm_head.weight, untied.lm_head.weight)


def test_model_config(tokenizer):
    model = tiny.build_model(tokenizer)
    assert model.config.vocab_size == len(tokenizer)
    assert model.config.eos_token_id == model.generation_config.eos_token_id == tokenizer.eos_token_id
    assert model.config.pad_token_id == model.generation_config.pad_token_id == tokenizer.pad_token_id
    assert model.config.tie_word_embeddings
    assert model.config._attn_implementation == "sdpa"
    assert model.dtype == torch.float32


def test_build_model_rejects_unknown_dims(tokenizer):
    with pytest.raises(ValueError, match="hidden"):
        tiny.build_model(tokenizer, hiden_size=64)


def test_same_seed_same_weights_different_seed_different(tokenizer):
    a, b, c = (tiny.build_model(tokenizer, seed=s).state_dict() for s in (0, 0, 1))
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not torch.equal(
        a["model.layers.0.self_attn.q_proj.weight"], c["model.layers.0.self_attn.q_proj.weight"]
    )


def test_building_a_model_leaves_the_global_rng_alone(tokenizer):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    tiny.build_model(tokenizer, seed=5)
    assert torch.equal(torch.rand(3), expected)


def test_save_and_load_give_identical_tokenizer_and_logits(tmp_path, tokenizer):
    tiny.save_tiny(tmp_path / "init", seed=3)
    loaded_tok = AutoTokenizer.from_pretrained(tmp_path / "init")
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "init")
    assert len(loaded_tok) == len(tokenizer) == loaded.config.vocab_size
    for text in (MATH_PROBLEM, "a3 b5</think>\\boxed{8}<|end|>"):
        assert loaded_tok.encode(text) == tokenizer.encode(text)
    message = [{"role": "user", "content": "a1 b2"}]
    assert loaded_tok.apply_chat_template(
        message, add_generation_prompt=True, return_dict=False
    ) == tokenizer.apply_chat_template(message, add_generation_prompt=True, return_dict=False)

    fresh = tiny.build_model(tokenizer, seed=3)
    ids = torch.tensor([tokenizer.encode("a3 b5 c2 d7 e1")])
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, fresh(ids).logits)
    generation = GenerationConfig.from_pretrained(tmp_path / "init")
    assert generation.eos_token_id == tokenizer.eos_token_id


def test_cli_refuses_a_non_empty_dir_unless_forced(tmp_path, capsys):
    out = tmp_path / "init"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(SystemExit) as exit_info:
        tiny.main(["--out", str(out)])
    assert "--force" in str(exit_info.value.code) and str(out) in str(exit_info.value.code)
    assert (out / "keep.txt").read_text() == "mine"

    tiny.main(["--out", str(out), "--force", "--seed", "1"])
    assert not (out / "keep.txt").exists()
    assert (out / "config.json").is_file() and (out / "tokenizer.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["init"]  # no temp dirs left behind


def test_the_cli_sizes_the_model_and_refuses_bad_dims(tmp_path, capsys):
    tiny.main(["--out", str(tmp_path / "wide"), "--dims", "hidden_size=64", "max_position_embeddings=4096"])
    config = AutoModelForCausalLM.from_pretrained(tmp_path / "wide").config
    assert (config.hidden_size, config.max_position_embeddings) == (64, 4096)
    assert config.num_hidden_layers == tiny.DEFAULT_DIMS["num_hidden_layers"]
    for bad in (["hidden=64"], ["hidden_size=-1"], ["hidden_size"]):
        with pytest.raises(SystemExit):
            tiny.main(["--out", str(tmp_path / "bad"), "--dims", *bad])
        assert "dims" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()
