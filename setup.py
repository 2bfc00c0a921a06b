"""Package metadata. Exact CPU pins live in requirements.txt; ranges here let the [gpu] extra
bring the torch build that sglang needs."""

from setuptools import find_packages, setup

setup(
    name="verl-delethink",
    version="0.1.0",
    description="RL for reasoning LLMs in two thinking environments: LongCoT and Delethink",
    python_requires=">=3.10",
    packages=find_packages(include=["verl", "verl.*"]),
    package_data={
        "verl": [
            "trainer/config/*.yaml",
            "trainer/config/**/*.yaml",
            "tools/viewer/*.html",
            "tools/viewer/*.js",
            "tools/viewer/*.css",
            # the math problem sets stored with the package (verl/utils/math_data.py finds them here)
            "data/math/*.json",
            "data/math/*.jsonl",
            "data/math/SOURCES.md",
        ]
    },
    install_requires=[
        "torch>=2.13",
        "transformers>=5.19,<6",  # 5.19: what sglang pins (model, engine, actor, e2e tests pass on it)
        "tokenizers>=0.23",
        "accelerate>=1.15",
        "hydra-core>=1.3.8,<1.4",
        "omegaconf>=2.3.1,<2.4",
        "ray>=2.60",
        "math-verify>=0.9.0",
        "wandb>=0.31",
        "datasets>=5.2",
        "matplotlib>=3.11",
        "tqdm>=4.70",
        "peft>=0.21",
    ],
    entry_points={"torch.backends": ["verl_sglang_cpu = verl.workers.rollout.sglang_cpu:torch_autoload"]},
    extras_require={
        "dev": ["pytest==9.2.0", "ruff==0.17.6", "hypothesis==6.170.15", "import-linter==2.16"],
        # GPU rollout (sglang pins torch 2.14.1, CUDA 13 kernels, transformers 5.19.0) and packed
        # attention (flash-attn builds from source with nvcc against that torch: install it with
        # --no-build-isolation). Install order and version notes: docs/GPU.md.
        "gpu": ["sglang==0.5.23", "flash-attn==2.8.3"],
    },
)
