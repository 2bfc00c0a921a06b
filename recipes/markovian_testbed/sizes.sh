# The testbed's sizes and its main_eval runs, sourced by run.sh and lora_vs_full.sh so that both read the
# same B, Delethink shape and RL batch (README.md next to this file says why each number is what it is).
# Needs SIZE (full, demo or smoke) and PYTHON; sets the variables below and defines testbed_eval.
# SIZE_SETTINGS holds the size's NAME=VALUE words: run.sh records them in each output directory's
# run_config.json, so a directory started before one of them changed is refused, not silently reused.

# B: LongCoT's budget. C = B/4, keep_head = one step (9 tokens), keep_tail = C/2 - 9, so m = C/2, and I
# is the chunk count that gives Delethink the same budget B (7; delethink_chunks asks DelethinkParams).
# TIMING_TO: the timing stage's largest budget, in B; TIMING_THREADS: its torch threads (smoke: B and 2B on
# one thread, to stay cheap in CI: two threads on a busy machine spin while they wait for each other).
# SFT_TARGET: the warm start's held-out T = 1 accuracy at which SFT stops (checked every SFT_CHECK_EVERY
# steps, at most SFT_STEPS); a warm start that never gets there stops the recipe (warm_start.py).
# CONT_PROB: the share of SFT examples that are Delethink continuation chunks. The demo's warm start stops
# early, to leave RL room, and at that point its resumes after a chunk cut lag its whole traces unless a
# larger share of its examples are chunks (README).
# ZERO_PROB: each digit of a warm-start problem's starting register is 0 with this probability (then
# uniform; task.zero_prob). Zeros get SFT off its plateau (README), but a step that adds 0 is answered by
# copying one digit, and at 0.5 the demo's whole traces (then the only examples that trained a trace's
# first sum) learn that shortcut: 3 of 10 warm starts miss their target, two on the first sum, one on the
# counter (step_errors.py); at 0.25, 10 of 10 reach it (docs/results/testbed.md#demo). The full setting's too:
# steps 1-3 sum the question's digits, and at 0.5 only a fifth of those sums add two non-zero digits (0.81
# at RL): seed 6 still had them at 0.84-0.88 at step 750, every later step at 1.00 (step_errors.py).
# LONG_START: the share of SFT examples that are long starts (task.long_start.prob), the only examples
# besides whole traces that train a trace's first steps (copying n into the first counter, the first
# sums): at 0.1 one full-setting seed in three never learns that copy and another is slow (1 of 3 reach
# the target); at 0.3, 3 of 3 (docs/results/testbed.md#full_setting). The demo's 0.1, taken from its chunks:
# with whole traces alone (15%) training them, one demo seed in ten learned its first sum last, at
# step 1400 (docs/results/testbed.md#full_warm_start).
# ANSWER_CUTS: the share of continuation chunks cut after `</think>` (task.continuation.answer_prob).
# CHECK_BOTH: 1 checks the warm start with Delethink inference too (I chunks) and stops it on the lower
# of the two accuracies. The demo sets both (the smoke size too, so CI runs them): at B = 256 a third of
# the Delethink samples are cut inside the answer, and a warm start stopped on LongCoT inference alone
# can resume those badly (one demo seed: probe 0.51x, (a) 0.53x); with ANSWER_CUTS=0.05 seed 2 resumes
# worse than with 0.2.
# HELDOUT x HELDOUT_N: held-out problems of the trained sizes x samples each, at B, for the gains over the
# warm start and claim (a); PER_GROUP x EVAL_N: problems per group x samples of the budget sweeps (claim
# (b)), which SWEEPS=0 leaves out: the demo's warm start never saw a whole trace past B (of such problems
# only chunks, and long starts: their first three steps), and (b) would measure that, not the method.
# RL_LR: both RL runs' learning rate. Adam steps each weight by about the learning rate whatever the
# gradient's signal (README): at 1e-4 both environments lost accuracy within 30 steps, and at 1e-5 the
# full setting's 100 steps moved its warm starts (0.82-0.89 held-out) by a KL of ~1e-6 per update, gains
# under two standard errors in 7 of 10 (README); at 3e-5, 1 of 10 over seeds 1..5
# (docs/results/testbed.md#full_setting). The demo's 20 steps from a warm start at 0.5 gain at 1e-5 in 9 or 10
# seeds of 10.
# SWEEP_TO, VAL_SIZE: smoke's alone (the other sizes: 4 and 32): the sweeps' largest budget in B, and the RL
# runs' validation problems. Smoke sweeps B..2B, what claim (b) reads, and validates on 4 problems: the
# budgets past 2B and the 32 problems are most of a smoke seed's time.
case $SIZE in
  full) SIZE_SETTINGS="B=512 SFT_STEPS=1500 SFT_TARGET=0.8 SFT_CHECK_EVERY=250 CONT_PROB=0.5 ZERO_PROB=0.25 ANSWER_CUTS=0 CHECK_BOTH=0 LONG_START=0.3 SWEEPS=1 SFT_MICRO=1 SFT_EVAL=64 STEPS_DEFAULT=100 RL_LR=3e-5 PROMPTS=16 SAMPLES=8 HELDOUT=192 HELDOUT_N=4 EVAL_N=4 PER_GROUP=48 TIMING=16 TIMING_REPEATS=3 TIMING_TO=8 TIMING_THREADS=2" ;;
  demo) SIZE_SETTINGS="B=256 SFT_STEPS=1500 SFT_TARGET=0.5 SFT_CHECK_EVERY=50 CONT_PROB=0.75 ZERO_PROB=0.25 ANSWER_CUTS=0.2 CHECK_BOTH=1 LONG_START=0.1 SWEEPS=0 SFT_MICRO=2 SFT_EVAL=32 STEPS_DEFAULT=20 RL_LR=1e-5 PROMPTS=8 SAMPLES=8 HELDOUT=192 HELDOUT_N=4 EVAL_N=2 PER_GROUP=24 TIMING=8 TIMING_REPEATS=3 TIMING_TO=8 TIMING_THREADS=2" ;;
  smoke) SIZE_SETTINGS="B=128 SFT_STEPS=4 SFT_TARGET=0.0 SFT_CHECK_EVERY=2 CONT_PROB=0.5 ZERO_PROB=0.5 ANSWER_CUTS=0.2 CHECK_BOTH=1 LONG_START=0.1 SWEEPS=1 SFT_MICRO=1 SFT_EVAL=4 STEPS_DEFAULT=1 RL_LR=1e-5 PROMPTS=2 SAMPLES=2 HELDOUT=4 HELDOUT_N=2 EVAL_N=1 PER_GROUP=2 TIMING=2 TIMING_REPEATS=1 TIMING_TO=2 TIMING_THREADS=1 SWEEP_TO=2 VAL_SIZE=4" ;;
  *) echo "SIZE must be full, demo or smoke, got '$SIZE'" >&2; exit 2 ;;
esac
# shellcheck disable=SC2086  # one NAME=VALUE word each
declare -g $SIZE_SETTINGS
C=$((B / 4)) HEAD=9
TAIL=$((C / 2 - HEAD)) M=$((HEAD + TAIL))
# delethink_chunks BUDGET...: for each budget the I that fills it with these C, keep_head and keep_tail
# (DelethinkParams.for_budget), comma-separated; a budget no I fills stops the script
delethink_chunks() {
  "$PYTHON" -c "import sys; from verl.core.delethink import DelethinkParams as P
print(','.join(str(P.for_budget(int(b), $C, $HEAD, $TAIL).max_chunks) for b in sys.argv[1:]))" "$@"
}
I=$(delethink_chunks "$B")
MIN_STEPS=$("$PYTHON" -c "from verl.data.shift_register import steps_for_thinking_tokens as s; print(max(1, s($B) // 4))")
MAX_STEPS=$("$PYTHON" -c "from verl.data.shift_register import steps_for_thinking_tokens as s; print(s($B))")
CONT_MAX_STEPS=$("$PYTHON" -c "from verl.data.shift_register import steps_for_thinking_tokens as s; print(s(4 * $B))")

testbed_eval() {  # testbed_eval RUN [-- RUN ...]: main_eval runs at T = 1 in one process (eval_runs.py),
  # each RUN being OUT_DIR MODEL MODE DATA SAMPLES [overrides...]
  local runs=() run=()
  while (($#)); do
    run=()
    while (($#)) && [[ $1 != -- ]]; do run+=("$1"); shift; done
    (($#)) && shift
    runs+=(-- model_path="${run[1]}" mode="${run[2]}" data_files=["${run[3]}"] output_dir="${run[0]}"
      sampling.n="${run[4]}" sampling.temperature=1.0 pass_k=[1] max_prompt_length=$((C + 32))
      delethink.chunk_size=$C delethink.keep_head=$HEAD delethink.keep_tail=$TAIL "${run[@]:5}")
  done
  "$PYTHON" recipes/markovian_testbed/eval_runs.py "${runs[@]}"
}
