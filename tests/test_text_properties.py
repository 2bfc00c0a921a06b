"""Whatever text a model writes, every stage that stores, scores or shows it survives it.

Property-based (hypothesis) over the text a byte-level model produces: any Unicode, the separators
`str.splitlines()` also breaks on (U+2028, U+2029, U+0085, \\x1c-\\x1e, \\x0b, \\x0c), NUL and other
controls, U+FFFD from invalid UTF-8, lone surrogates, `</think>`, `\\boxed{`, `</script>` and HTML.
Each writer/reader pair must give back exactly what was written; the reward must never raise and stay
in [0, 1]; Delethink must carry token ids, not text."""

import asyncio
import json
import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from verl.agent_loop.delethink import DelethinkAgentLoop
from verl.core.delethink import DelethinkParams
from verl.core.engine import GenerateOutput, RolloutEngine
from verl.core.engine import SamplingParams as Sampling
from verl.core.trajectory import PromptItem, Trajectory, Turn
from verl.core.trimmers import progressive_trim
from verl.models.tiny import build_tokenizer
from verl.tools.viewer.page import build_page, script_json
from verl.tools.viewer.runs import read_run
from verl.trainer.ppo.rollout_records import chunk_records, trajectory_record
from verl.trainer.sft.files import read_rows as read_sft_rows
from verl.utils.fs import append_jsonl, atomic_write_jsonl, iter_jsonl, read_jsonl
from verl.utils.reward_score import default_compute_score
from verl.utils.reward_score.boxed import extract_final_answer, last_boxed, strip_thinking
from verl.utils.tracking import Tracking, generation_table
from verl.workers.reward_manager import DelethinkRewardManager

TOKENIZER = build_tokenizer()
ODD = [
    "\u2028", "\u2029", "\x85", "\x1c", "\x1d", "\x1e", "\x0b", "\x0c", "\x00", "\r", "\r\n", "\n", "\t",
    "\ufffd", "\ufeff", "\U0001f600", "</think>", "<think>", "\\boxed{", "}", "\\boxed{\\frac{1}{2}}",
    "</script>", "<!--", "<img src=x onerror=alert(1)>", '"', "\\", "<|end|>",
]  # fmt: skip
# what a byte-level model's text is made of: any character, the odd ones above much more often
pieces = st.one_of(st.sampled_from(ODD), st.text(max_size=8))
model_text = st.lists(pieces, max_size=12).map("".join)
# decoding a byte-level model's ids: any bytes, invalid UTF-8 included
decoded_bytes = st.binary(max_size=40).map(lambda b: b.decode("utf-8", errors="replace"))
any_text = st.one_of(model_text, decoded_bytes)
# a lone surrogate comes from text cut between the halves of a pair; a high-low pair is not lone
lone_surrogates = (
    st.lists(st.one_of(pieces, st.integers(0xD800, 0xDFFF).map(chr)), max_size=8)
    .map("".join)
    .filter(lambda s: not re.search("[\ud800-\udbff][\udc00-\udfff]", s))
)
records = st.lists(
    st.fixed_dictionaries({"step": st.integers(0, 9), "text": st.one_of(any_text, lone_surrogates)})
)
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(records, records)
def test_jsonl_written_atomically_or_appended_reads_back_the_same(first, second):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "log.jsonl"
        atomic_write_jsonl(path, first)
        append_jsonl(path, second)
        raw = path.read_bytes()
        raw.decode("utf-8")  # strict: a file any reader can open
        assert raw.count(b"\n") == len(first) + len(second)  # one line per record, whatever the text
        assert read_jsonl(path) == first + second


def test_a_cut_or_undecodable_line_is_named_by_file_and_line(tmp_path):
    path = tmp_path / "cut.jsonl"
    atomic_write_jsonl(path, [{"a": "x\u2028y"}, {"a": 2}, {"a": 3}])
    path.write_bytes(path.read_bytes()[:-4])  # the last line cut mid-record
    with pytest.raises(ValueError, match=rf"{re.escape(str(path))} line 3: not JSON"):
        read_jsonl(path)
    path.write_bytes(b'{"a": 1}\n{"a": "\xff"}\n')
    with pytest.raises(ValueError, match=r"line 2: not UTF-8"):
        list(iter_jsonl(path))


@FAST
@given(st.lists(any_text, min_size=1, max_size=4), st.integers(0, 3))
def test_metrics_and_generations_logs_read_back_and_survive_a_resume(texts, resume_step):
    rows = [
        {"step": step, "index": 0, "data_source": "d", "prompt": t, "answer": t, "score": 0.0,
         "chunks": [{"chunk": 0, "response": t}, {"chunk": 1, "response": t[::-1]}]}
        for step, t in enumerate(texts, start=1)
    ]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        tracking = Tracking(["jsonl"], tmp, "p", "e", "g", config={})
        for row in rows:
            tracking.log({"note": row["prompt"]}, step=row["step"])
            tracking.log_generations([row], step=row["step"])
        assert [m["note"] for m in read_jsonl(Path(tmp) / "metrics.jsonl")] == texts
        assert read_jsonl(Path(tmp) / "val_generations.jsonl") == rows
        Tracking(["jsonl"], tmp, "p", "e", "g", config={}, resume_step=resume_step)  # drops later steps
        assert read_jsonl(Path(tmp) / "val_generations.jsonl") == rows[:resume_step]
    # the wandb table's chunk cell holds every chunk's text unchanged
    _, data = generation_table(rows)
    for row, cells in zip(rows, data, strict=True):
        assert all(c["response"] in cells[4] for c in row["chunks"])


def write_run(run_dir: Path, texts: list[str]) -> list[Trajectory]:
    """A training step's rollout files and the validation log for Delethink traces whose two chunks are
    `text` and its reverse (the rows the trainer writes: verl/trainer/ppo/rollout_records.py)."""
    enc = lambda text: TOKENIZER.encode(text, add_special_tokens=False)  # noqa: E731
    records, chunks, generations, trajectories = [], [], [], []
    for i, text in enumerate(texts):
        prompt = enc("<|user|>q<|assistant|><think>")
        first, second = enc(text) or [65], enc(text[::-1]) + [TOKENIZER.eos_token_id]
        traj = Trajectory([Turn(prompt, first, [0.0] * len(first), "length"),
                           Turn(prompt + first[-1:], second, [0.0] * len(second), "stop")])  # fmt: skip
        item = PromptItem(prompt, "synthetic/x", text)
        solution = TOKENIZER.decode(traj.response_ids)
        keep = {"keep_head": 0, "keep_tail": 1}
        records.append(trajectory_record(1, i, item, traj, solution, 0.0, TOKENIZER.decode, keep))
        chunks += chunk_records(1, i, traj, TOKENIZER.decode)
        generations.append(
            {**trajectory_record(0, i, item, traj, solution, 0.0, TOKENIZER.decode, keep),
             "chunks": chunk_records(0, i, traj, TOKENIZER.decode)}
        )  # fmt: skip
        trajectories.append(traj)
    atomic_write_jsonl(run_dir / "rollouts" / "step_1.jsonl", records)
    atomic_write_jsonl(run_dir / "rollouts" / "step_1_chunks.jsonl", chunks)
    atomic_write_jsonl(run_dir / "val_generations.jsonl", generations)
    return trajectories


def embedded_json(html: str) -> list:
    """Every <script type="application/json"> element's value: the text in between must be JSON whole,
    so no trace text closed the element early."""
    found = re.findall(r'<script type="application/json" id="[^"]*">(.*?)</script>', html, re.S)
    return [json.loads(text) for text in found]


@settings(max_examples=25, deadline=None)
@given(st.lists(model_text, min_size=1, max_size=3))
def test_the_viewer_reads_any_trace_text_and_shows_it_only_as_text(texts):
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        trajectories = write_run(run_dir, texts)
        groups = read_run(run_dir)
        html = build_page([("run", groups, None)], "run")
    for group in groups.values():
        for trace, traj in zip(group, trajectories, strict=True):
            assert [c.response_ids for c in trace.chunks] == [t.response_ids for t in traj.turns]
            assert [c.response for c in trace.chunks] == [
                TOKENIZER.decode(t.response_ids) for t in traj.turns
            ]
    # each chunk's text reaches the page whole, as data: the page splits a trace into segments (text,
    # chunk, marks), and a chunk's segments put together are its decoded response
    traces = [value for value in embedded_json(html) if isinstance(value, dict) and "segs" in value]
    chunk_texts = {
        "".join(seg[0] for seg in trace["segs"] if seg[1] == k)
        for trace in traces
        for k in range(len(trace["chunks"]))
    }
    for traj in trajectories:
        assert all(TOKENIZER.decode(turn.response_ids) in chunk_texts for turn in traj.turns)
    outside_data = re.sub(r'<script type="application/json".*?</script>', "", html, flags=re.S)
    assert "onerror=alert" not in outside_data and "<img" not in outside_data


@FAST
@given(st.one_of(any_text, lone_surrogates))
def test_script_json_cannot_close_its_element_and_reads_back(text):
    html = script_json("x", {"t": text})
    body = html[len('<script type="application/json" id="x">') : -len("</script>\n")]
    assert "<" not in body  # no </script>, no <!--: the HTML parser sees one text node
    html.encode("utf-8")  # writable whatever the text
    assert json.loads(body) == {"t": text}


@settings(max_examples=15, deadline=None)
@given(
    st.lists(st.tuples(model_text.filter(str.strip), model_text.filter(str.strip)), min_size=1, max_size=3)
)
def test_sft_rows_read_back_through_datasets(pairs):
    rows = [{"prompt": p, "response": r} for p, r in pairs]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "rows.jsonl"
        atomic_write_jsonl(path, rows)
        assert read_sft_rows(str(path)) == rows


@settings(max_examples=40, deadline=None)
@given(any_text, st.sampled_from(["1/2", "3", "\\frac{1}{2}", "x^2", "", "\u2028"]))
def test_the_reward_never_raises_and_scores_in_0_1(text, ground_truth):
    for extract in (strip_thinking, last_boxed, extract_final_answer):
        result = extract(text)
        assert result is None or isinstance(result, str)
    for source in ("math", "synthetic/x"):
        assert 0.0 <= default_compute_score(source, text, ground_truth) <= 1.0


class ScriptedEngine(RolloutEngine):
    """Emits the next `max_new_tokens` ids of a fixed sequence; EOS once it is exhausted."""

    def __init__(self, ids: list[int]) -> None:
        self.ids, self.prompts = list(ids), []

    async def generate(self, prompt_ids, sampling_params):
        self.prompts.append(list(prompt_ids))
        out, self.ids = self.ids[: sampling_params.max_new_tokens], self.ids[sampling_params.max_new_tokens :]
        if not self.ids and len(out) < sampling_params.max_new_tokens:
            return GenerateOutput(out + [TOKENIZER.eos_token_id], [0.0] * (len(out) + 1), "stop")
        return GenerateOutput(out, [0.0] * len(out), "length")

    def update_weights(self, named_tensors):
        raise NotImplementedError


@FAST
@given(st.lists(st.integers(0, 255), min_size=1, max_size=60), st.integers(5, 9), st.integers(0, 2))
def test_delethink_carries_token_ids_even_inside_a_multibyte_character(byte_ids, chunk_size, keep_head):
    """Byte tokens cut mid-character at a chunk boundary: the next prompt carries exactly the trimmed
    ids (never re-encoded text), and the reward reads all chunks decoded as one."""
    params = DelethinkParams(chunk_size=chunk_size, keep_head=keep_head, keep_tail=2, max_chunks=20)
    question = TOKENIZER.encode("<|user|>q<|assistant|><think>", add_special_tokens=False)
    engine = ScriptedEngine(byte_ids)
    loop = DelethinkAgentLoop(engine, params)
    traj = asyncio.run(loop.run(PromptItem(question, "math", "1"), Sampling(max_new_tokens=chunk_size)))
    thinking: list[int] = []
    for k, turn in enumerate(traj.turns):
        expected = question if k == 0 else question + progressive_trim(thinking, keep_head, 2)
        assert turn.prompt_ids == expected
        thinking += turn.response_ids
    # every byte is generated, up to the budget (chunk_size 5 and m = 4 leave one new token per chunk)
    kept = byte_ids[: params.thinking_budget]
    assert thinking[: len(kept)] == kept and len(thinking) <= params.thinking_budget
    scored = DelethinkRewardManager(TOKENIZER)([traj], ["math"], ["1"])[0]
    assert scored.solution_str == TOKENIZER.decode(traj.response_ids, skip_special_tokens=True)


def test_the_wandb_generations_table_keeps_the_text(tmp_path):
    """wandb offline (real) writes the table's JSON: every cell reads back exactly."""
    text = "".join(ODD[:16])
    row = {"step": 1, "index": 0, "data_source": "d", "prompt": text, "answer": text, "score": 0.0,
           "chunks": [{"chunk": 0, "response": text}]}  # fmt: skip
    tracking = Tracking(["wandb"], tmp_path, "p", "e", "g", config={})
    tracking.log_generations([row], step=1)
    tracking.finish()
    (table,) = tmp_path.glob("wandb/offline-run-*/files/media/table/val/generations_*.table.json")
    assert json.loads(table.read_text(encoding="utf-8"))["data"] == generation_table([row])[1]
    assert text in generation_table([row])[1][0][4]
