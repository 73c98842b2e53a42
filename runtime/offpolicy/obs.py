"""Observations in the off-policy runtime, of every kind surreal takes: one Box, one image, or
leaves (obs_leaves.py: Dict and Tuple of vectors, images, Discrete, MultiBinary).

A replay row keeps each leaf as it travels, in its own dtype (images uint8, discrete entries
int64): an image costs a byte a pixel in a shard, not four. `fields` names them: "obs" and
"next_obs" for one Box or image, "obs.<path>" and "next_obs.<path>" for leaves. Networks take
packed float32 rows (obs_leaves.pack: discrete entries one-hot, an image's raw 0-255 values
flattened where encoder.py's CNN finds them): the actor packs before its policy, the learner
packs each sampled batch, so an algorithm's `update` sees `obs` and `next_obs` as float rows
whatever the environment. No torch here (actors of vector environments never import it).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from surreal.runtime.envs import obs_leaves
from surreal.runtime.envs.make import EnvSpaces, Obs
from surreal.runtime.envs.obs_leaves import ObsLeaf

OBS, NEXT = "obs", "next_obs"


def leaves(sp: EnvSpaces) -> tuple[ObsLeaf, ...]:
    """The observation's leaves; one Box or one image is a single leaf named "obs"."""
    if sp.structured:
        return sp.obs_leaves
    if sp.image_shape is not None:  # EnvBatch gives images channels-first
        return (ObsLeaf("", "image", sp.image_shape, layout="chw"),)
    return (ObsLeaf("", "vector", (sp.obs_dim,)),)


def next_name(leaf: ObsLeaf) -> str:
    """The leaf's field of the next observation: "next_obs" or "next_obs.<path>"."""
    return NEXT + leaf.name[len(OBS) :]


def fields(sp: EnvSpaces) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
    """The observation's fields of a replay row, this one's and the next one's: name -> (dtype, shape)."""
    out: dict[str, tuple[np.dtype, tuple[int, ...]]] = {}
    for leaf in leaves(sp):
        out[leaf.name] = out[next_name(leaf)] = (np.dtype(leaf.dtype), leaf.shape)
    return out


def transition_fields(sp: EnvSpaces) -> dict[str, tuple[np.dtype, tuple[int, ...]]]:
    """A replay row's fields: name -> (dtype, row shape): the observation's as `fields` keeps them,
    the action (a Box's float32 row in [-1, 1], a Discrete's int64 index), reward, terminated."""
    f32 = np.dtype(np.float32)
    action = (np.dtype(np.int64), ()) if sp.discrete else (f32, (sp.action_dim,))
    return {**fields(sp), "actions": action, "rewards": (f32, ()), "terminated": (np.dtype(bool), ())}


def as_fields(sp: EnvSpaces, obs: Obs, prefix: str = OBS) -> dict[str, np.ndarray]:
    """A batch of observations (an EnvBatch's) as this prefix's fields."""
    if isinstance(obs, dict):
        return {prefix + name[len(OBS) :]: array for name, array in obs.items()}
    return {prefix: obs}


def pack(sp: EnvSpaces, rows: Mapping[str, np.ndarray], prefix: str = OBS) -> np.ndarray:
    """This prefix's fields of `rows` (a batch or a replay sample) as the networks' float32 rows."""
    found = leaves(sp)
    if not sp.structured and sp.image_shape is None:  # one Box: already the rows (a copy: writable)
        return np.array(rows[prefix], np.float32)
    by_leaf = {leaf.name: rows[prefix + leaf.name[len(OBS) :]] for leaf in found}
    return obs_leaves.pack(found, by_leaf)


def batch(sp: EnvSpaces, rows: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A replay sample as an algorithm's `update` takes it: obs and next_obs packed, the other
    fields float32 (terminated as 0.0/1.0; a Discrete's actions int64 indices); new arrays,
    writable (torch.from_numpy takes them)."""
    out = {OBS: pack(sp, rows, OBS), NEXT: pack(sp, rows, NEXT)}
    for name in ("actions", "rewards", "terminated"):
        out[name] = np.array(rows[name], np.int64 if name == "actions" and sp.discrete else np.float32)
    return out


def policy_rows(sp: EnvSpaces, obs: Obs) -> np.ndarray:
    """A batch of raw observations (an EnvBatch's) as the policy takes them."""
    return pack(sp, as_fields(sp, obs))


def problem(sp: EnvSpaces, tensors: Mapping[str, np.ndarray]) -> str | None:
    """Why the observation fields of a fragment (the schema's shapes) are not ones an honest actor
    sends, or None: a non-finite vector, a discrete entry outside its range, a binary not 0 or 1."""
    for leaf in leaves(sp):
        for name in (leaf.name, next_name(leaf)):
            found = obs_leaves.value_problem(leaf, name, tensors[name], None)
            if found is not None:
                return found[1]
    return None


def copy_row(sp: EnvSpaces, out: dict[str, np.ndarray], at: tuple[int, int], final: object) -> None:
    """Write one raw final observation (a truncated episode's; EnvBatch's trunc_obs: a row, or
    leaf rows by name) into row `at` of the next observation's fields."""
    if isinstance(final, Mapping):
        for name, value in final.items():
            out[NEXT + name[len(OBS) :]][at] = value
    else:
        out[NEXT][at] = final
