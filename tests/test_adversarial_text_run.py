"""A run whose model writes the text that broke the viewer, end to end in both environments: it trains,
checkpoints, resumes, is evaluated, and renders in the viewer.

The model is a real transformers Qwen2 whose weights make it a bigram machine: attention and MLP
outputs are zero, so the last hidden state is the current token's one-hot embedding, and the output
layer maps each token to its successor in ADVERSARIAL (every other token to its first). It samples that
sequence at any temperature, however its prompt was cut: U+2028 and U+0085 (where `str.splitlines()`
breaks), NUL, a carriage return, `</script>`, the first half of a 4-byte character, an unclosed
`\\boxed{`, `</think>`. Delethink's chunk boundaries fall inside the 2-byte U+0085."""

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from tests.e2e_utils import ONE_PROCESS, tiny_config
from tests.test_eval import base_overrides, compose
from tests.test_text_properties import embedded_json
from verl.eval.config import load_eval_config
from verl.eval.evaluate import evaluate
from verl.models.tiny import THINK_END, THINK_START, build_tokenizer
from verl.tools.viewer.__main__ import main as viewer
from verl.tools.viewer.runs import read_run
from verl.trainer.launch import run
from verl.utils.fs import read_jsonl

pytestmark = pytest.mark.slow

TOKENIZER = build_tokenizer()
ADVERSARIAL_BYTES = b"\xe2\x80\xa8\x00\r</script>\xf0\x9f\\boxed{\xc2\x85\x1c"
ADVERSARIAL = [*ADVERSARIAL_BYTES, TOKENIZER.convert_tokens_to_ids(THINK_END), TOKENIZER.eos_token_id]
assert len(set(ADVERSARIAL)) == len(ADVERSARIAL)  # a bigram machine needs each token once
# LongCoT reaches the end-of-sequence (28 tokens); Delethink's chunks end at tokens 12, 18, 24, 28:
# U+0085's two bytes (tokens 23, 24) straddle the third boundary.
LONGCOT = ("data.max_response_length=32",)
DELETHINK = (
    "algorithm.delethink.chunk_size=12",
    "algorithm.delethink.keep_head=2",
    "algorithm.delethink.keep_tail=4",
    "algorithm.delethink.max_chunks=4",
)


def save_bigram_model(out_dir) -> None:
    vocab = len(TOKENIZER)
    hidden = vocab + (-vocab) % 8  # room for a one-hot embedding of every token
    config = Qwen2Config(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=8, num_hidden_layers=1,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        tie_word_embeddings=False, bos_token_id=TOKENIZER.eos_token_id,
        eos_token_id=TOKENIZER.eos_token_id, pad_token_id=TOKENIZER.pad_token_id, dtype="float32",
    )  # fmt: skip
    model = Qwen2ForCausalLM(config)
    successor = {token: ADVERSARIAL[0] for token in range(vocab)}
    successor.update(zip(ADVERSARIAL, ADVERSARIAL[1:], strict=False))
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
        model.model.embed_tokens.weight[:, :vocab] = torch.eye(vocab)
        # after the final RMSNorm a one-hot is sqrt(hidden) e_i: the successor's logit is ~49, the rest 0
        for token, nxt in successor.items():
            model.lm_head.weight[nxt, token] = 3.0
    model.save_pretrained(out_dir)
    TOKENIZER.save_pretrained(out_dir)


@pytest.fixture(scope="module")
def bigram_assets(tiny_assets, tmp_path_factory):
    """tiny_assets' data with the bigram model in place of the tiny one."""
    root = tmp_path_factory.mktemp("bigram")
    save_bigram_model(root / "model")
    (root / "data").symlink_to(tiny_assets / "data")
    return root


def test_the_model_writes_the_adversarial_sequence(bigram_assets):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(bigram_assets / "model")
    prompt = TOKENIZER.encode(f"<|user|>1 2{THINK_START}", add_special_tokens=False)
    out = model.generate(torch.tensor([prompt]), max_new_tokens=40, do_sample=True, temperature=1.0)
    assert out[0, len(prompt) :].tolist() == ADVERSARIAL


@pytest.mark.parametrize("name", ["tiny_longcot", "tiny_delethink"])
def test_train_resume_evaluate_and_view(name, bigram_assets, tmp_path):
    mode = LONGCOT if name == "tiny_longcot" else DELETHINK
    run_dir = tmp_path / name
    for steps in (2, 3):  # the second run resumes from the first one's step-2 checkpoint
        keys = [f"trainer.total_training_steps={steps}", "trainer.save_freq=1", "trainer.test_freq=3"]
        keys.append(ONE_PROCESS)
        run(tiny_config(name, bigram_assets, run_dir, *mode, *keys, "trainer.log_val_generations=2"))
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    assert [m["step"] for m in metrics if "actor/pg_loss" in m] == [1, 2, 3]
    expected = TOKENIZER.decode(ADVERSARIAL, skip_special_tokens=True)
    rollouts = read_jsonl(run_dir / "rollouts" / "step_3.jsonl")
    assert rollouts and all(r["response"] == expected for r in rollouts)
    assert "\u2028" in expected and "\x85" in expected and "</script>" in expected
    if name == "tiny_delethink":
        chunks = read_jsonl(run_dir / "rollouts" / "step_3_chunks.jsonl")
        assert max(c["chunk"] for c in chunks) == 3  # four chunks: boundaries inside the text
    assert read_jsonl(run_dir / "val_generations.jsonl")

    eval_dir = tmp_path / f"{name}_eval"
    if name == "tiny_delethink":  # the same C, m and I as in training
        budgets = [
            "mode=delethink",
            *[o.replace("algorithm.", "") for o in DELETHINK[:3]],
            "delethink.max_chunks=[4]",
        ]
    else:
        budgets = ["mode=longcot", "longcot.budgets=[32]"]
    overrides = base_overrides(bigram_assets, eval_dir)
    overrides[0] = f"model_path={run_dir / 'global_step_3'}"
    evaluate(load_eval_config(compose([*overrides, *budgets])))
    samples = read_jsonl(eval_dir / "samples.jsonl")
    assert samples and all(s["trace"] == expected for s in samples)

    for source in (run_dir, eval_dir):
        out = tmp_path / f"{source.name}.html"
        assert viewer([str(source), "--out", str(out), "--tokenizer", str(bigram_assets / "model")]) == 0
        traces = [t for group in read_run(source).values() for t in group]
        assert traces and all("".join(c.response for c in t.chunks).startswith("\u2028") for t in traces)
        shown = [
            v for v in embedded_json(out.read_text(encoding="utf-8")) if isinstance(v, dict) and "segs" in v
        ]
        # each trace's pieces, in order, hold its text, </script> included, as data
        assert shown and all("</script>" in "".join(seg[0] for seg in v["segs"]) for v in shown)
