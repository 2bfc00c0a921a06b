import json
import re

from recipes.scaling.benchmark import main
from recipes.scaling.setups import QUESTION
from verl.tools.results import load_record, render_entry

# chat template: <|user|> QUESTION <|assistant|> <think>, one token per ASCII byte plus three single tokens
PROMPT_LEN = len(QUESTION) + 3
C, HEAD, TAIL = 48, 4, 12  # carry m = 16, so later chunks think C - m = 32 tokens


def test_quick_benchmark_measures_equal_thinking_lengths(tmp_path, capsys):
    out = tmp_path / "scaling.png"
    argv = ["--quick", "--out", str(out), "--batch", "2", "--chunks", "1", "3"]
    argv += ["--chunk-size", str(C), "--keep-head", str(HEAD), "--keep-tail", str(TAIL)]
    argv += ["--record", str(tmp_path / "cost.yaml"), "--json", str(tmp_path / "timing.json")]
    run = main(argv)

    lines = capsys.readouterr().out.strip().splitlines()
    # the ratio at the longest length is printed last, after Delethink's per-token flatness
    match = re.fullmatch(
        r"LongCoT/Delethink at L=(\d+): rollout (\d+\.\d\d)x, whole step (\d+\.\d\d)x", lines[-1]
    )
    assert match, lines[-1]
    assert int(match[1]) == 48 + 2 * 32  # L = C + (I - 1)(C - m) with I = 3
    assert float(match[2]) > 0 and float(match[3]) > 0
    assert re.fullmatch(
        r"Delethink rollout ms/token L=48 -> 112: \d+\.\d{3} -> \d+\.\d{3} \(\d+\.\d\dx\)", lines[-2]
    )
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    header = next(line.split() for line in lines if line.split()[:2] == ["L", "env"])
    assert header.count("RSS") == 2  # peak resident memory of the rollout and of the training step

    trajectories = run["trajectories"]
    assert sorted(trajectories) == [("delethink", 48), ("delethink", 112), ("longcot", 48), ("longcot", 112)]
    for length, num_chunks in ((48, 1), (112, 3)):
        for traj in trajectories[("longcot", length)]:
            assert traj.num_turns == 1
            assert len(traj.turns[0].prompt_ids) == PROMPT_LEN
            assert len(traj.turns[0].response_ids) == length
        for traj in trajectories[("delethink", length)]:
            assert [len(t.response_ids) for t in traj.turns] == [48] + [32] * (num_chunks - 1)
            assert traj.thinking_tokens == length
            # later chunks restart from the question plus the 16 carried thinking tokens
            later_prompt = PROMPT_LEN + HEAD + TAIL
            assert [len(t.prompt_ids) for t in traj.turns] == [PROMPT_LEN] + [later_prompt] * (num_chunks - 1)
            assert all(t.finish_reason == "length" for t in traj.turns)

    rows = {row["budget"]: row for row in run["result"]["rows"]}
    assert rows[112]["longcot"]["max_context"] == PROMPT_LEN + 112
    assert rows[112]["delethink"]["max_context"] == PROMPT_LEN + 48
    assert rows[112]["longcot"]["thinking_tokens"] == rows[112]["delethink"]["thinking_tokens"] == 2 * 112
    # measured, not computed: at least the resident models, and never below the KV cache of the wave
    for run_ in (row[env] for row in rows.values() for env in ("longcot", "delethink")):
        assert run_["rollout_rss"] > max(run_["peak_kv_bytes"], 2**20) and run_["update_rss"] > 2**20
    # the tiny model has one question, so no distinct-problem pass; the JSON holds what was printed
    assert "distinct" not in rows[112]["delethink"] and run["result"]["distinct_rows"] == 0
    assert json.loads((tmp_path / "timing.json").read_text()) == json.loads(json.dumps(run["result"]))

    # the record holds the printed table's cells, row for row
    record = load_record(tmp_path / "cost.yaml")
    assert record.section == "scaling" and "--quick" in record.command and record.date and record.machine
    (table,) = record.tables
    assert [row[:2] for row in table.rows] == [["48", "LongCoT"], ["48", "Delethink"], ["112", "LongCoT"],
                                               ["112", "Delethink"]]  # fmt: skip
    assert table.rows[2][table.columns.index("max ctx")] == str(PROMPT_LEN + 112)
    assert table.rows[3][table.columns.index("train tok")] == str(rows[112]["delethink"]["train_tokens"])
    assert "| L | env | rollout s |" in "\n".join(render_entry(record))
