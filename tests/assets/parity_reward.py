"""A test reward with groups that cannot teach anything: every sample of a prompt whose ground truth is
even scores 0.5; the others score their share of digits, which differs between samples. Loaded through
custom_reward_function.path by the dynamic-sampling test."""


def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    if int(ground_truth) % 2 == 0:
        return 0.5
    return sum(c.isdigit() for c in solution_str) / max(len(solution_str), 1)
