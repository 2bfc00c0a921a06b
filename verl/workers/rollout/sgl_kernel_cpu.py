"""Pure-torch stand-ins for the sgl-kernel CPU operators that SGLang 0.5.23 imports on its CPU path.

No wheel on the package index carries sgl-kernel's CPU build (the sgl-kernel and sglang-kernel wheels
are CUDA builds that fail to load without libcuda). With SGLANG_USE_CPU_ENGINE=1, SGLang 0.5.23 imports
eight names from `sgl_kernel` at module level; `verl.workers.rollout.sglang_cpu` registers this module
under that name when no real sgl_kernel is installed. Two have a meaning outside speculative decoding
and are implemented here with SGLang's semantics (those of its Triton kernels for the GPU); the six
speculative-decoding ones, which our engine never enables, raise a clear error if ever called.

The attention, norms, activations and sampling run SGLang's own torch-native code on a CPU without
AMX; nothing here is on the token path.
"""

from __future__ import annotations

import ctypes

import torch

SGLANG_VERSION = "0.5.23"  # the SGLang release whose imports and semantics this module serves


def assign_req_to_token_pool_cpu(
    req_pool_indices: torch.Tensor,
    req_to_token: torch.Tensor,
    start_offset: torch.Tensor,
    end_offset: torch.Tensor,
    out_cache_loc: torch.Tensor,
    pool_len: int,
) -> None:
    """Write each request's new KV slots into its row of the request-to-token table.

    Request i owns row `req_pool_indices[i]` of `req_to_token` (`pool_len` columns); its positions
    `start_offset[i]:end_offset[i]` take the next `end_offset[i] - start_offset[i]` entries of
    `out_cache_loc`, which holds the requests' slots back to back in batch order.
    """
    if req_to_token.shape[1] != pool_len:
        raise ValueError(f"pool_len={pool_len}, but req_to_token has {req_to_token.shape[1]} columns")
    taken = 0
    for row, start, end in zip(
        req_pool_indices.tolist(), start_offset.tolist(), end_offset.tolist(), strict=True
    ):
        if not 0 <= start <= end <= pool_len:
            raise ValueError(f"request row {row}: positions {start}:{end} outside 0:{pool_len}")
        count = end - start
        req_to_token[row, start:end] = out_cache_loc[taken : taken + count].to(req_to_token.dtype)
        taken += count
    if taken > out_cache_loc.numel():
        raise ValueError(f"the requests take {taken} slots, out_cache_loc holds {out_cache_loc.numel()}")


def copy_all_layer_kv_cache_cpu(
    data_ptrs: torch.Tensor, strides: torch.Tensor, tgt_loc: torch.Tensor, src_loc: torch.Tensor
) -> None:
    """Copy KV-cache rows `src_loc[j]` to `tgt_loc[j]` in every buffer of the pool.

    Buffer b starts at address `data_ptrs[b]` and one row (one token slot) is `strides[b]` bytes, as
    SGLang's memory pool describes its per-layer K and V buffers. All source rows are read before any
    target is written, so a move whose sources and targets overlap (a swap) is safe, as on the GPU.
    """
    if tgt_loc.numel() != src_loc.numel():
        raise ValueError(f"{tgt_loc.numel()} target rows but {src_loc.numel()} source rows")
    targets, sources = tgt_loc.tolist(), src_loc.tolist()
    for base, stride in zip(data_ptrs.tolist(), strides.tolist(), strict=True):
        rows = [ctypes.string_at(base + src * stride, stride) for src in sources]
        for tgt, row in zip(targets, rows, strict=True):
            ctypes.memmove(base + tgt * stride, row, stride)


def _speculative_only(name: str):
    def refuse(*args, **kwargs):
        raise NotImplementedError(
            f"sgl_kernel.{name} serves SGLang's speculative decoding, which verl's CPU engine does not "
            "enable; it has no CPU stand-in here"
        )

    refuse.__name__ = name
    return refuse


assign_draft_cache_locs_contiguous_cpu = _speculative_only("assign_draft_cache_locs_contiguous_cpu")
assign_extend_cache_locs_cpu = _speculative_only("assign_extend_cache_locs_cpu")
build_tree_kernel_efficient_cpu = _speculative_only("build_tree_kernel_efficient_cpu")
fill_accept_out_cache_loc_cpu = _speculative_only("fill_accept_out_cache_loc_cpu")
fill_bonus_tokens_cpu = _speculative_only("fill_bonus_tokens_cpu")
verify_tree_greedy_cpu = _speculative_only("verify_tree_greedy_cpu")
