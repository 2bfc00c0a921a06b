"""The generated tasks by name (SFT's `task.name`), and the largest problem size each writes (the running
sum: one term per label of the default alphabet; the shift register: what its counter holds). SFT's
config checks its sizes against it before anything heavy loads (verl/trainer/main_sft.py)."""

from verl.data import shift_register
from verl.data.synthetic import LABELS

TASK_MAX_SIZE = {"running_sum": len(LABELS), "shift_register": shift_register.MAX_STEPS}
