"""A dense test reward (share of digits in the response): an untrained model's responses differ in it,
so GRPO advantages are non-zero from the first step. Loaded through custom_reward_function.path."""


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    return sum(c.isdigit() for c in solution_str) / max(len(solution_str), 1)
