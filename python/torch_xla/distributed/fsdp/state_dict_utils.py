"""Full model state dicts from the per-rank checkpoints of ``XlaFullyShardedDataParallel``.

Each rank saves its own shards and the metadata that maps them back:

    ckpt = {"model": model.state_dict(), "shard_metadata": model.get_shard_metadata(),
            "optimizer": optimizer.state_dict()}
    xm.save(ckpt, f"{prefix}_rank-{rank:08d}-of-{world:08d}.pth", master_only=False)

and ``consolidate_sharded_model_checkpoints(prefix, "_rank-*-of-*.pth")`` (on one process, or
offline) writes the unwrapped model's state dict, loadable into the model without FSDP.
"""
import glob
import os

import torch

__all__ = ["consolidate_sharded_state_dicts", "consolidate_sharded_model_checkpoints"]

_ME = "[consolidate_sharded_model_checkpoints]"


def consolidate_sharded_state_dicts(state_dict_list, shard_metadata_list):
    """The unwrapped model's state dict (cpu tensors) from every rank's FSDP state dict and shard
    metadata, given in any order (each names its rank)."""
    if not state_dict_list or len(state_dict_list) != len(shard_metadata_list):
        raise ValueError(f"{_ME} expected one shard metadata per state dict, got {len(state_dict_list)} state dicts "
                         f"and {len(shard_metadata_list)} metadata")
    ranks = sorted(range(len(shard_metadata_list)), key=lambda i: shard_metadata_list[i].get("rank", -1))
    metas = [shard_metadata_list[i] for i in ranks]
    states = [state_dict_list[i] for i in ranks]
    world = metas[0].get("world_size")
    if metas[0].get("format") != "axle-fsdp-v1":
        raise ValueError(f"{_ME} expected shard metadata of axle's XlaFullyShardedDataParallel (format "
                         f"'axle-fsdp-v1'), got format {metas[0].get('format')!r}")
    found = [m.get("rank") for m in metas]
    if len(metas) != world or found != list(range(world)):
        raise ValueError(f"{_ME} expected the checkpoints of ranks 0..{world - 1} (world size {world}), "
                         f"got ranks {found}")
    full = {}
    for pi, info in enumerate(metas[0]["params"]):
        key = info["key"]
        shards = []
        for r, (meta, state) in enumerate(zip(metas, states)):
            if meta["params"][pi]["key"] != key:
                raise ValueError(f"{_ME} rank {r}'s metadata does not match rank 0's (parameter {pi}: "
                                 f"{meta['params'][pi]['key']!r} vs {key!r}): checkpoints of different models")
            if key not in state:
                raise ValueError(f"{_ME} rank {r}'s state dict has no '{key}'")
            shards.append(state[key].detach().cpu())
        whole = torch.cat(shards)
        if whole.shape[0] != info["padded"]:
            raise ValueError(f"{_ME} '{key}': the shards hold {whole.shape[0]} rows, the metadata says "
                             f"{info['padded']}")
        if info["dim0"]:
            full[info["names"][0]] = whole[:info["shapes"][0][0]].clone()
            continue
        off = 0
        for name, shape in zip(info["names"], info["shapes"]):
            n = 1
            for d in shape:
                n *= d
            full[name] = whole[off:off + n].reshape(shape).clone()
            off += n
    for key, name in metas[0]["buffers"].items():
        full[name] = states[0][key].detach().cpu()
    return full


def consolidate_sharded_model_checkpoints(ckpt_prefix, ckpt_suffix="*.pth", save_path="", save_model=True):
    """Reads every rank's checkpoint file ``ckpt_prefix + ckpt_suffix`` (a glob; each a dict with
    "model" and "shard_metadata"), and returns ``(full_state_dict, save_path)``; with
    ``save_model``, also saves ``{"model": full_state_dict}`` to ``save_path`` (default
    ``ckpt_prefix + "consolidated.pth"``)."""
    pattern = ckpt_prefix + ckpt_suffix
    paths = sorted(glob.glob(pattern))
    if not paths:
        raise FileNotFoundError(f"{_ME} no checkpoint file matches {pattern!r}")
    states, metas = [], []
    for p in paths:
        try:
            ckpt = torch.load(p, map_location="cpu", weights_only=False)
        except Exception as e:  # a truncated or foreign file
            raise ValueError(f"{_ME} cannot read {p}: {type(e).__name__}: {e}") from e
        if not isinstance(ckpt, dict) or "model" not in ckpt or "shard_metadata" not in ckpt:
            raise ValueError(f"{_ME} {p}: expected a dict with 'model' and 'shard_metadata' (as FSDP's checkpoints "
                             f"are saved), got {type(ckpt).__name__} with keys "
                             f"{sorted(ckpt) if isinstance(ckpt, dict) else '-'}")
        states.append(ckpt["model"])
        metas.append(ckpt["shard_metadata"])
    full = consolidate_sharded_state_dicts(states, metas)
    if save_model:
        save_path = save_path or ckpt_prefix + "consolidated.pth"
        os.makedirs(os.path.dirname(os.path.abspath(save_path)), exist_ok=True)
        tmp = save_path + ".tmp"
        torch.save({"model": full}, tmp)
        os.replace(tmp, save_path)  # never a half-written file under the final name
    return full, save_path
