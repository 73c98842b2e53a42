"""ExperimentSpec: what an experiment is, loaded from flags, a YAML file and `--set` overrides.

Precedence, lowest first: the algorithm's tuned preset for the environment, the YAML file, command-line
flags, `--set KEY=VALUE`. Everything is validated here, before anything is created or started, and every
problem is reported as a `SpecError` whose message names the offending key or value.

The environment is resolved once, by `build_spec` at create: what the algorithms derive from it is
the spec file's `resolved` section, which `load_spec_file` (every component, at start) trusts.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import reprlib
import stat
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import yaml

from surreal.algorithms.api import OffPolicy
from surreal.algorithms.registry import ALGORITHMS, get_algorithm
from surreal.provisioner import NodePool, pools_from_data
from surreal.runtime.envs.ref import EnvRef, ResolvedEnv
from surreal.runtime.scale import MAX_SCALE_AGENTS

# Experiment names become Kubernetes object names with suffixes such as "-evaluator" and a StatefulSet
# pod ordinal, so they are DNS-1123 labels kept short enough for every derived name to stay within 63.
NAME_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
MAX_NAME_LENGTH = 40
BACKENDS = ("local", "containers", "kube")
# Learner ranks average gradients every update: past a few dozen the all-reduce, not the update,
# is what they spend their time on (benchmarks/learner_ceiling.py), and each rank is a port.
MAX_LEARNERS = 64
MAX_REPLAY_SHARDS = 64  # replay shards of one experiment (each a process or a pod)
# One bound for create and scale (and the learner's scale.json): past a million agents the hand-outs
# and the actors' Job are absurd, and every count below fits the protocol's and numpy's integers.
MAX_AGENTS = MAX_SCALE_AGENTS
# numpy's legacy seeding, gymnasium's and torch's all take an unsigned 32-bit seed; components derive
# theirs from it through SeedSequence-style arithmetic, which any Python int survives.
MAX_SEED = 2**32 - 1
MAX_STEPS = 10**13  # about 300 years at a million steps a second
MAX_GPU = MAX_LEARNERS  # a GPU per learner rank at most
# A pod asks for what its replay shard holds (requests = limits); one past this fits no common node
# (64 GiB machines: n2-standard-16, m5.4xlarge) and would stay Pending. Far above every preset's need
# (SAC's largest, 100k image rows, is 4.2 GB).
DEFAULT_MAX_POD_MEMORY_MB = 32 * 1024
MAX_POD_MEMORY_MB = 2**30  # a pebibyte: the one bound is that it is a memory size
# Every integer a spec holds is stored by numpy, torch or the protocol as a signed 64-bit number.
MAX_INT = 2**63 - 1
# A container image reference as registries parse it (the distribution project's grammar): an
# optional registry host[:port], lower-case path components, an optional :tag and @digest.
_HOST = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
_PATH = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE_RE = re.compile(
    rf"^(?:{_HOST}(?:\.{_HOST})*(?::[0-9]+)?/)?{_PATH}(?:/{_PATH})*(?::[\w][\w.-]{{0,127}})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?$"
)
MAX_IMAGE_LENGTH = 255 + 1 + 128 + 1 + 71 + 64  # name, :tag, @sha512:digest
NAMESPACE_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")  # a DNS-1123 label, at most 63 long
TOP_LEVEL_KEYS = (
    "algo",
    "env",
    "agents",
    "learners",
    "learner_pods",
    "replay_shards",
    "steps",
    "seed",
    "backend",
    "agents_per_pod",
    "namespace",
    "image",
    "gpu",
    "queue",
    "max_pod_memory_mb",
    "env_kwargs",
)
ENV_KWARGS = "env_kwargs"
# An environment registered without a time limit gets this one (gym.make's max_episode_steps, an
# env_kwargs key; `--set max_episode_steps=N` for another): an episode that never ends (CliffWalking
# under a deterministic policy) would hold its actor's returns and the final evaluation forever.
MAX_EPISODE_STEPS, DEFAULT_MAX_EPISODE_STEPS = "max_episode_steps", 10_000
RESOLVED = "resolved"  # the spec file's section of ExperimentSpec.resolved
SIZING = "sizing"  # and of ExperimentSpec.sizing
# What a spec file holds besides settings: a --config that is one (a dry run's) has them too.
DERIVED_KEYS = ("name", RESOLVED, SIZING)


class SpecError(ValueError):
    """An experiment description that cannot be run; the message names the problem."""


@dataclass(frozen=True)
class ExperimentSpec:
    name: str
    """Experiment name: a DNS-1123 label of at most 40 characters."""
    algo: str
    """Algorithm: "ppo", "es", or a user's as "module:Name" (registry.get_algorithm); its
    settings are the spec's section of that name."""
    env: str
    """Gymnasium environment: a registered id ("CartPole-v1", "ALE/Breakout-v5"), or a module of
    the user's as "module:EnvId" (the module registers EnvId on import) or "module:Class"."""
    agents: int = 2
    """Logical agents. PPO: each steps `envs_per_agent` environments."""
    learners: int = 1
    """Learner ranks (data parallel): each serves its share of the actors (worker index modulo
    `learners`) and the ranks average gradients at every update (runtime/ranks.py)."""
    learner_pods: int = 1
    """Pods the learner ranks run in (containers, kube): each runs learners / learner_pods ranks and
    they form one group across pods (ranks.py); 1: every rank in one pod."""
    replay_shards: int = 1
    """Replay shards of an off-policy algorithm (SAC): each its own process or pod, holding its share
    of the transitions; actor worker i inserts into shard i modulo replay_shards."""
    steps: int = 100_000
    """Environment steps to train for; the experiment succeeds when they are done. When not given,
    the algorithm's default for `env` and `agents` (build_spec)."""
    seed: int = 0
    """Base random seed; every component derives its own from it."""
    backend: str = "local"
    """Where components run: "local" processes or "kube" (Kubernetes)."""
    agents_per_pod: int = 1
    """Containers and Kubernetes: logical agents packed into one actor pod (`--agents-per-pod`)."""
    namespace: str = "default"
    """Kubernetes only: namespace of the experiment's objects."""
    image: str = ""
    """Kubernetes only: container image of every component."""
    gpu: int = 0
    """GPUs for the learner (placed on the GPU node pool when > 0)."""
    queue: str = ""
    """Kubernetes only: the Kueue LocalQueue that admits the experiment's Jobs ("" for none)."""
    max_pod_memory_mb: int = DEFAULT_MAX_POD_MEMORY_MB
    """Kubernetes only: the most memory (MiB) a replay shard's pod may ask for; a shard that needs
    more is refused at create (docs/kubernetes.md). Raise it to what your nodes can give a pod."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the environment's constructor (`--set env_kwargs.KEY=VALUE`, or a
    mapping in the YAML file); values are YAML scalars, lists or mappings."""
    config: Any = field(default=None)
    """The algorithm's frozen config dataclass (e.g. PPOConfig), preset for `env` then overridden."""
    resolved: ResolvedEnv | None = field(default=None)
    """What resolving `env` with `env_kwargs` found at create (its spaces, Atari or images): the
    spec file's `resolved` section, so that components neither resolve nor build it to learn
    that. build_spec always fills it; None only in a spec built by hand."""
    sizing: dict[str, Any] | None = field(default=None)
    """How the agents are packed into actor workers and why (orchestrator/sizing.py fills it at
    create): {"by": "you"} alone when the user set agents_per_pod and nothing was sized yet."""

    @property
    def env_ref(self) -> EnvRef:
        """The environment with its kwargs, as components build it."""
        return EnvRef(self.env, self.env_kwargs)

    def to_dict(self) -> dict[str, Any]:
        data = {k: getattr(self, k) for k in ("name", *TOP_LEVEL_KEYS)}
        if not self.env_kwargs:  # spec files of environments without kwargs stay as they were
            del data[ENV_KWARGS]
        if self.learner_pods == 1:  # and those of one learner pod
            del data["learner_pods"]
        if self.max_pod_memory_mb == DEFAULT_MAX_POD_MEMORY_MB:  # and those of the default ceiling
            del data["max_pod_memory_mb"]
        if "replay" not in get_algorithm(self.algo).roles:  # and those of an algorithm without replay
            del data["replay_shards"]
        data[self.algo] = _plain(dataclasses.asdict(self.config))
        if self.resolved is not None:
            data[RESOLVED] = _plain(dataclasses.asdict(self.resolved))
            if not self.resolved.env_kwargs:
                del data[RESOLVED][ENV_KWARGS]
            for leaves in ("obs_leaves", "act_leaves"):  # one Box, plain actions: as they were
                if not getattr(self.resolved, leaves):
                    del data[RESOLVED][leaves]
        if self.sizing is not None:
            data[SIZING] = _plain(self.sizing)
        return data

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value


def validate_name(name: str) -> None:
    """The rule every command applies to the NAME it is given, before anything touches the disk or
    a cluster: a name that passes is one path component under the experiments folder (no '/', no
    '.' or '..') and a valid Kubernetes name."""
    if not isinstance(name, str) or not name:
        raise SpecError("an experiment name is required (a DNS-1123 label such as exp1)")
    if len(name) > MAX_NAME_LENGTH:
        raise SpecError(f"invalid experiment name {short(name)}: longer than {MAX_NAME_LENGTH} characters")
    if not NAME_RE.fullmatch(name):
        raise SpecError(
            f"invalid experiment name {short(name)}: use lower-case letters, digits and '-', "
            "starting with a letter and ending with a letter or digit (a DNS-1123 label)"
        )


# A spec or config file is a few KiB; one far larger is not one (and is not read whole): at 256 KiB
# the worst file (a flat list of 130,000 numbers) parses in about a second with libyaml.
MAX_YAML_BYTES = 256 << 10
LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml's, 10x faster, where PyYAML has it
# What a config may expand to: YAML aliases let a 1 KiB file name a value of billions of items
# (the "billion laughs"), which loads in milliseconds, as shared references, and hangs whatever
# walks or prints it. A spec is a few dozen values; an environment's kwargs may hold a map or a
# layout of thousands.
MAX_YAML_VALUES = 100_000
# What `surreal create --dry-run -o yaml|json` prints is a valid --config: the spec itself (local,
# containers), or the Kubernetes objects (kube), whose spec is the one in their spec ConfigMap.
SPEC_LABEL, SPEC_DATA_KEY = ("surreal.io/component", "spec"), "spec.yaml"


def load_yaml_file(path: Path, what: str = "config file") -> dict[str, Any]:
    """The mapping in YAML file `path`, or one SpecError naming `what` and the path: not a regular
    file (a FIFO or a device is refused unread, never waited on), unreadable, not UTF-8 text (a
    binary file), malformed YAML, too large, or not a mapping. A dry run's Kubernetes objects
    give the spec their ConfigMap holds."""
    where = f"{what} {str(path)!r}"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise SpecError(f"cannot read {where}: {exc.strerror or exc}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise SpecError(f"{where} is not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as f:
            raw = f.read(MAX_YAML_BYTES + 1)
    except OSError as exc:
        raise SpecError(f"cannot read {where}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(raw) > MAX_YAML_BYTES:
        raise SpecError(f"{where} is larger than {MAX_YAML_BYTES >> 10} KiB: not a spec")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(f"{where} is not UTF-8 text (byte {exc.start} is 0x{raw[exc.start]:02x})") from None
    return parse_yaml(text, where)


def load_pools_file(path: Path) -> tuple[NodePool, ...]:
    """The node pools of a `--pools` file (provisioner.pools_from_data), read as a config file is."""
    try:
        return pools_from_data(load_yaml_file(path, "pools file"), source=str(path))
    except ValueError as exc:
        raise SpecError(str(exc)) from None


def parse_yaml(text: str, where: str) -> dict[str, Any]:
    """The mapping in YAML `text` (or the spec of the Kubernetes objects in it), or one SpecError
    naming `where` it came from: malformed, nested too deeply, expanding to more than
    MAX_YAML_VALUES values, or not a mapping."""
    try:
        docs = [d for d in yaml.load_all(text, Loader=LOADER) if d is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise SpecError(f"malformed YAML in {where}{at}") from None
    except RecursionError:  # a hostile file of deeply nested brackets
        raise SpecError(f"{where} nests too deeply to be a spec") from None
    except ValueError as exc:  # an integer of more digits than Python converts (sys.int_info)
        raise SpecError(f"malformed YAML in {where}: {short(str(exc))}") from None
    check_size(docs, where)
    if not docs:
        return {}
    if not all(isinstance(d, dict) for d in docs):
        raise SpecError(f"{where} must hold a mapping of keys to values")
    if len(docs) == 1 and not _objects(docs[0]):
        return docs[0]
    return _objects_spec([o for d in docs for o in _objects(d) or [d]], where)


def _objects(data: dict[str, Any]) -> list[Any]:
    """The Kubernetes objects `data` is (one, or a List's items), or [] when it is none."""
    if data.get("kind") == "List" and isinstance(data.get("items"), list):
        return list(data["items"])
    return [data] if "apiVersion" in data and "kind" in data else []


def _objects_spec(objects: list[Any], where: str) -> dict[str, Any]:
    """The spec an experiment's Kubernetes objects hold: their spec ConfigMap's."""
    for item in objects:
        meta = item.get("metadata") if isinstance(item, dict) else None
        labels = meta.get("labels") if isinstance(meta, dict) else None
        data = item.get("data") if isinstance(item, dict) and item.get("kind") == "ConfigMap" else None
        text = data.get(SPEC_DATA_KEY) if isinstance(data, dict) else None
        if isinstance(labels, dict) and labels.get(SPEC_LABEL[0]) == SPEC_LABEL[1] and isinstance(text, str):
            return parse_yaml(text, f"the spec ConfigMap in {where}")
    raise SpecError(f"{where} holds no experiment spec: neither a spec's keys nor the spec ConfigMap "
                    "of the objects `surreal create --backend kube --dry-run` prints")  # fmt: skip


def check_size(value: Any, where: str) -> None:
    """Refuse a value that expands to more than MAX_YAML_VALUES values, counting every place an
    alias repeats (and so stopping on one that contains itself), before anything walks it whole."""
    seen, todo = 0, [value]
    while todo:
        item = todo.pop()
        seen += 1
        if seen > MAX_YAML_VALUES:
            raise SpecError(f"{where} expands to more than {MAX_YAML_VALUES:,} values (YAML aliases "
                            "repeated?): not a spec")  # fmt: skip
        if isinstance(item, dict):
            todo.extend(item.keys())
            todo.extend(item.values())
        elif isinstance(item, list | tuple):
            todo.extend(item)


def parse_set(items: Iterable[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SpecError(f"--set {short(item)}: expected KEY=VALUE")
        out[key.strip()] = value
    return out


def notes(spec: ExperimentSpec) -> list[str]:
    """What a user should know of what create chose for them (one line each)."""
    resolved, steps = spec.resolved, spec.env_kwargs.get(MAX_EPISODE_STEPS)
    if resolved is None or resolved.time_limit is not None or steps is None:
        return []
    return [f"{short(spec.env)} has no time limit of its own: its episodes end after {steps:,} steps "
            f"(--set {MAX_EPISODE_STEPS}=N for another)"]  # fmt: skip


def build_spec(
    name: str,
    *,
    flags: Mapping[str, Any],
    config_file: Path | None = None,
    overrides: Mapping[str, str] | None = None,
) -> ExperimentSpec:
    """Merge preset < YAML file < flags < --set overrides into a validated ExperimentSpec, with
    the environment resolved (one throwaway instance built) into its `resolved` section.

    `flags` holds only the flags the user gave (None values are ignored).
    """
    _refuse_empty(flags, overrides or {})
    spec = _build_spec(name, flags=flags, config_file=config_file, overrides=overrides, resolved=None)
    check_replay_memory(spec)
    return spec


def check_replay_memory(spec: ExperimentSpec, available: int | None = None) -> None:
    """Refuse, at create, replay shards that could not hold their rows: numpy allocates a shard's
    ring whole at start, so an oversized buffer_size would only crash-loop its shards. Locally and
    in containers they share this machine (`available` bytes; psutil's by default); on Kubernetes
    each shard is a pod of at most max_pod_memory_mb. The sizes are the ones the pods ask for."""
    algorithm = get_algorithm(spec.algo)
    if not isinstance(algorithm, OffPolicy) or spec.resolved is None:
        return
    shard_mb = algorithm.shard_memory_mb(spec.config, spec.resolved, spec.replay_shards)
    rows = f"{spec.algo}.buffer_size {spec.config.buffer_size:,}"
    if spec.backend == "kube":
        if shard_mb > spec.max_pod_memory_mb:
            n = spec.replay_shards
            pods = "the replay shard's pod" if n == 1 else f"each of the {n} replay shard pods"
            raise SpecError(
                f"{rows}: {pods} would ask for {shard_mb:,} MiB, "
                f"over max_pod_memory_mb ({spec.max_pod_memory_mb:,} MiB; docs/kubernetes.md): lower "
                "buffer_size, raise --replay-shards, or raise max_pod_memory_mb to what a node can give"
            )
        return
    need = spec.replay_shards * shard_mb * 2**20
    if available is None:
        available = psutil.virtual_memory().available
    if need > available:
        raise SpecError(f"{rows}: the replay needs {need / 2**30:,.1f} GiB of memory and this machine has "
                        f"{available / 2**30:,.1f} GiB available: lower buffer_size")  # fmt: skip


# Settings whose empty value would silently become a default: a user who gives one empty meant
# something else (an unset shell variable, most often).
NOT_EMPTY = ("algo", "env", "backend", "namespace", "image")


def _refuse_empty(flags: Mapping[str, Any], overrides: Mapping[str, str]) -> None:
    for key in NOT_EMPTY:
        for source, value in ((f"--{key}", flags.get(key)), (f"--set {key}", overrides.get(key))):
            if isinstance(value, str) and not value.strip():
                raise SpecError(f"{source} is empty: give a value, or leave it out for the default")


def _build_spec(
    name: str,
    *,
    flags: Mapping[str, Any],
    config_file: Path | None = None,
    overrides: Mapping[str, str] | None = None,
    resolved: ResolvedEnv | None,
) -> ExperimentSpec:
    """build_spec, trusting `resolved` (a spec file's) instead of resolving the environment when
    it is given."""
    validate_name(name)
    file_data = load_yaml_file(config_file) if config_file is not None else {}
    top: dict[str, Any] = {}
    sections: dict[str, Any] = {}  # an algorithm's settings, by the name of their section
    for key, value in file_data.items():
        if key in NOT_EMPTY and key != "image" and isinstance(value, str) and not value.strip():
            raise SpecError(
                f"{key} is empty in config file {str(config_file)!r}: give a value or leave it out"
            )
        if key in TOP_LEVEL_KEYS:
            top[key] = value
        elif key in DERIVED_KEYS:  # a spec a dry run printed: NAME names it, create resolves again
            continue
        elif isinstance(value, dict) or (value is None and key in ALGORITHMS):
            sections[key] = value or {}
        else:
            raise SpecError(f"unknown key {short(key)} in config file {str(config_file)!r}")
    top.update({k: v for k, v in flags.items() if v is not None})

    overrides = dict(overrides or {})
    by_user = _packed_by_user(file_data, flags, overrides)
    for key in [k for k in (MAX_EPISODE_STEPS,) if k in overrides]:  # gym.make's: an env_kwargs key
        overrides[f"{ENV_KWARGS}.{key}"] = overrides.pop(key)
    for key in list(overrides):
        if key in TOP_LEVEL_KEYS:
            top[key] = overrides.pop(key)
        elif key.startswith(f"{ENV_KWARGS}."):
            top[ENV_KWARGS] = {**_env_kwargs(top.get(ENV_KWARGS)), **_env_kwarg(key, overrides.pop(key))}

    algo_name = _coerce("algo", str, top.get("algo") or "")
    if not algo_name:
        raise SpecError(f"no algorithm given: use --algo ({', '.join(ALGORITHMS)} or MODULE:NAME)")
    try:
        algorithm = get_algorithm(algo_name)
    except ValueError as exc:
        raise SpecError(str(exc)) from None
    env_id = _coerce("env", str, top.get("env") or algorithm.default_env)
    # Presets and the default step budget follow the number of agents (docs/algorithms/<algo>.md).
    agents = _coerce("agents", int, top.get("agents", ExperimentSpec.agents))
    if agents < 1:
        raise SpecError(f"agents must be a positive integer, got {agents}")
    env = EnvRef(env_id, _env_kwargs(top.get(ENV_KWARGS)))
    try:
        if resolved is None:
            resolved = algorithm.resolve_env(env)  # the one throwaway instance
            if resolved.time_limit is None and not resolved.atari and MAX_EPISODE_STEPS not in env.kwargs:
                env = EnvRef(env.name, {**env.kwargs, MAX_EPISODE_STEPS: DEFAULT_MAX_EPISODE_STEPS})
                resolved = dataclasses.replace(resolved, env_kwargs=dict(env.kwargs))  # the same spaces
        else:
            _check_resolved_matches(resolved, env)
            algorithm.check_env(env, resolved)
        base_config = algorithm.preset(env, agents, resolved)
        if top.get("steps") is None:
            top["steps"] = algorithm.default_steps(env, agents, resolved)
    except ValueError as exc:
        raise SpecError(str(exc)) from None

    # A section is named whole: an algorithm of one's own is "module.path:Name", dots and all.
    for section in sections:
        if section != algo_name:
            raise SpecError(f"config file section {short(section)} does not match algorithm {algo_name!r}")
    algo_values: dict[str, Any] = dict(sections.get(algo_name, {}))
    for key, value in overrides.items():
        sub = key[len(algo_name) + 1 :] if key.startswith(f"{algo_name}.") else key
        algo_values[sub] = value
    config = _apply(base_config, algo_values, prefix=algo_name)

    top[ENV_KWARGS] = dict(env.kwargs)
    hints = typing.get_type_hints(ExperimentSpec)
    spec_values = {k: _coerce(k, hints[k], v) for k, v in top.items()}
    if spec_values.get("gpu", 0) > 0 and getattr(config, "device", None) == "auto":
        # A learner given GPUs trains on one, or fails saying why: never silently on the CPU.
        config = dataclasses.replace(config, device="cuda")
    spec = ExperimentSpec(
        name=name,
        config=config,
        resolved=resolved,
        **{**spec_values, "algo": algo_name, "env": env_id},
        sizing={"by": "you"} if by_user else None,  # what the user set wins (sizing.py)
    )
    _validate(spec)
    try:
        algorithm.check_config(spec.config, spec.env_ref, resolved)
    except ValueError as exc:
        raise SpecError(str(exc)) from None
    needed, setting = algorithm.first_update(spec.config)
    if spec.steps < needed:  # Succeeded means it trained: refuse a run that could not
        raise SpecError(f"--steps {spec.steps:,} is too few to train: {algo_name} applies its first update "
                        f"after {needed:,} env steps ({setting}); give more steps or lower it")  # fmt: skip
    if spec.backend == "local":
        try:
            algorithm.check_local(spec.config)
        except ValueError as exc:
            raise SpecError(str(exc)) from None
    return spec


def _packed_by_user(
    file_data: Mapping[str, Any], flags: Mapping[str, Any], overrides: Mapping[str, Any]
) -> bool:
    """Whether the user set agents_per_pod: a flag, --set, or a file's, unless the file is a spec
    that create packed itself (its sizing section says by whom)."""
    if flags.get("agents_per_pod") is not None or "agents_per_pod" in overrides:
        return True
    sizing = file_data.get(SIZING)
    return "agents_per_pod" in file_data and (
        not isinstance(sizing, dict) or sizing.get("by", "you") == "you"
    )


def _env_kwargs(value: Any) -> dict[str, Any]:
    """env_kwargs as given in a YAML file or a spec file: a mapping of names to plain values."""
    if value is None:
        return {}
    if isinstance(value, str) and not value.strip():
        return {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and k.isidentifier() for k in value):
        raise SpecError(f"env_kwargs must be a mapping of keyword names to values, got {short(value)}")
    if value.get("render_mode") not in (None, "rgb_array"):  # a window (or sound) in every component
        raise SpecError(f"env_kwargs.render_mode {short(value['render_mode'])}: components run without a "
                        "display; leave it out (surreal record renders rgb_array frames itself)")  # fmt: skip
    return dict(value)


def _env_kwarg(key: str, text: Any) -> dict[str, Any]:
    """`--set env_kwargs.NAME=VALUE`: VALUE read as YAML (10 -> int, 0.5 -> float, true -> bool,
    [1, 2] -> list, anything else a string)."""
    name = key.partition(".")[2]
    if not name.isidentifier():
        raise SpecError(f"--set {key}: {short(name)} is not a keyword argument name")
    if not isinstance(text, str):
        return {name: text}
    try:
        value = yaml.load(text, Loader=LOADER) if text.strip() else ""
    except (yaml.YAMLError, ValueError, RecursionError):
        value = text
    check_size(value, f"--set {key}")
    return {name: value}


def _apply(config: Any, values: Mapping[str, Any], prefix: str) -> Any:
    known = {f.name: f for f in dataclasses.fields(config)}
    # An algorithm of one's own has no page of its own: its settings are its Config's fields.
    page = f"docs/algorithms/{prefix}.md" if prefix in ALGORITHMS else "docs/algorithms/writing.md"
    changes: dict[str, Any] = {}
    for key, value in values.items():
        if key not in known:
            raise SpecError(
                f"unknown setting {short(key)} (not an experiment key nor a field of the {prefix} config, "
                f"{type(config).__name__}; see `surreal create --help` and {page})"
            )
        # Named as the config's own checks name it (bounds.Settings.section: "a2c.ent_coef").
        where = f"{getattr(config, 'section', prefix)}.{key}"
        changes[key] = _coerce(where, typing.get_type_hints(type(config))[key], value)
    new = dataclasses.replace(config, **changes)
    try:
        new.validate()
    except ValueError as exc:
        raise SpecError(str(exc)) from None
    return new


def _coerce(key: str, target: Any, value: Any) -> Any:
    """Convert a YAML or command-line value to the field's declared type, or raise SpecError."""
    origin = typing.get_origin(target)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(target) if a is not type(None)]
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null", "")):
            return None
        return _coerce(key, options[0], value)
    if origin is dict:
        try:
            return _env_kwargs(value)
        except SpecError as exc:
            raise SpecError(str(exc) if key == ENV_KWARGS else f"{key}: {exc}") from None
    if origin is tuple:
        item_type = typing.get_args(target)[0]
        if isinstance(value, str):
            parts = [p for p in value.strip("[]() ").split(",") if p.strip()]
        elif isinstance(value, list | tuple):
            parts = list(value)
        else:
            raise SpecError(f"{key}: expected a list, got {short(value)}")
        return tuple(_coerce(key, item_type, p) for p in parts)
    try:
        if target is bool:
            return _to_bool(value)
        if target is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            whole = _whole(value) if isinstance(value, str) else int(value)
            if abs(whole) > MAX_INT:
                raise SpecError(f"{key}: {short(value)} does not fit a 64-bit integer")
            return whole
        if target is float:
            if isinstance(value, bool):
                raise ValueError
            number = float(value)
            if not math.isfinite(number):
                raise SpecError(f"{key}: expected a finite number, got {short(value)}")
            return number
        if target is str:
            if not isinstance(value, str | int | float):
                raise ValueError
            return str(value)
    except SpecError:
        raise
    except (ValueError, TypeError, OverflowError):  # TypeError: a list or mapping for a scalar
        names = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
        raise SpecError(f"{key}: expected {names.get(target, target)}, got {short(value)}") from None
    return value


_REPR = reprlib.Repr()
_REPR.maxlevel, _REPR.maxstring, _REPR.maxother, _REPR.maxlong = 3, 50, 50, 40
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = 5
MAX_SHORT = 80


def short(value: Any) -> str:
    """A value for an error line: its repr, cut to a readable length without ever formatting the
    whole value (a list of millions, a string of megabytes, an integer of thousands of digits)."""
    try:
        text = _REPR.repr(value)
    except ValueError:  # an int too long to print (sys.int_info.str_digits_check_threshold)
        text = f"<an integer of about {int(value.bit_length() * 0.30103):,} digits>"
    return text if len(text) <= MAX_SHORT else f"{text[: MAX_SHORT - 3]}..."


def _whole(text: str) -> int:
    """An integer as a user writes one: 1_000_000, or 1e6 (sizes are written so), exact or refused."""
    try:
        return int(text.replace("_", ""))
    except ValueError:
        number = float(text)  # ValueError: not a number at all
        if not number.is_integer() or abs(number) >= 2**53:  # past 2**53 a float skips integers
            raise ValueError from None
        return int(number)


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "yes", "on", "1"):
        return True
    if text in ("false", "no", "off", "0"):
        return False
    raise ValueError


def check_agents(agents: int, what: str = "agents") -> None:
    """The agent counts an experiment may have: the same bound at create and at scale."""
    if isinstance(agents, bool) or not isinstance(agents, int) or not 1 <= agents <= MAX_AGENTS:
        raise SpecError(f"{what} must be an integer from 1 to {MAX_AGENTS:,}, got {short(agents)}")


def _check_range(name: str, value: int, low: int, high: int) -> None:
    if not low <= value <= high:
        raise SpecError(f"{name} must be an integer from {low:,} to {high:,}, got {value:,}")


def _validate(spec: ExperimentSpec) -> None:
    check_agents(spec.agents)
    _check_range("steps", spec.steps, 1, MAX_STEPS)
    _check_range("learners", spec.learners, 1, MAX_LEARNERS)
    if spec.learners > 1:
        reason = get_algorithm(spec.algo).one_learner
        if reason:
            raise SpecError(f"learners {spec.learners}: {spec.algo} trains with one learner ({reason})")
        if spec.agents < spec.learners:
            raise SpecError(
                f"learners {spec.learners}: every learner rank needs an agent of its "
                f"own, and there are {spec.agents} (raise --agents)"
            )
    if not 1 <= spec.learner_pods <= spec.learners or spec.learners % spec.learner_pods:
        raise SpecError(f"learner_pods {spec.learner_pods}: the {spec.learners} learner ranks must spread "
                        "evenly over the learner pods (learner_pods must divide learners)")  # fmt: skip
    _check_range("replay_shards", spec.replay_shards, 1, MAX_REPLAY_SHARDS)
    replay = "replay" in get_algorithm(spec.algo).roles
    if spec.replay_shards > 1 and not replay:
        keep = ", ".join(n for n, a in ALGORITHMS.items() if "replay" in a.roles)
        raise SpecError(f"replay_shards {spec.replay_shards}: {spec.algo} learns on-policy and keeps "
                        f"no replay (an off-policy algorithm does: {keep})")  # fmt: skip
    _check_range("seed", spec.seed, 0, MAX_SEED)
    if spec.backend not in BACKENDS:
        raise SpecError(f"unknown backend {short(spec.backend)} (known: {', '.join(BACKENDS)})")
    check_agents(spec.agents_per_pod, "agents_per_pod")
    _check_range("gpu", spec.gpu, 0, MAX_GPU)
    _check_range("max_pod_memory_mb", spec.max_pod_memory_mb, 1, MAX_POD_MEMORY_MB)
    if len(spec.namespace) > 63 or not NAMESPACE_RE.fullmatch(spec.namespace):
        raise SpecError(
            f"invalid namespace {short(spec.namespace)}: a DNS-1123 label of at most 63 characters "
            "(lower-case letters, digits and '-', starting and ending with one of the first two)"
        )
    if spec.image and (len(spec.image) > MAX_IMAGE_LENGTH or not IMAGE_RE.fullmatch(spec.image)):
        raise SpecError(f"invalid image {short(spec.image)}: an image reference is [HOST[:PORT]/]PATH[:TAG]"
                        "[@DIGEST], its path in lower-case letters, digits and separators")  # fmt: skip
    if spec.queue and (len(spec.queue) > 63 or not NAME_RE.fullmatch(spec.queue)):
        raise SpecError(
            f"invalid queue {short(spec.queue)}: a Kueue LocalQueue's name, a DNS-1123 label of at most 63 "
            "characters (lower-case letters, digits and '-')"
        )
    if spec.learner_pods > 1 and spec.backend == "local":
        raise SpecError(f"learner_pods {spec.learner_pods}: learner pods are containers' or a "
                        "cluster's (--backend containers or kube); locally every rank runs on this "
                        "machine")  # fmt: skip
    if spec.queue and spec.backend == "local":
        raise SpecError(f"queue {short(spec.queue)}: queues admit an experiment as one unit of pods "
                        "(--backend kube: Kueue; containers: a stand-in that admits at once); the local "
                        "backend runs processes")  # fmt: skip


def _check_resolved_matches(resolved: ResolvedEnv, env: EnvRef) -> None:
    if resolved.env != env.name or resolved.env_kwargs != dict(env.kwargs):
        found = f"{short(resolved.env)}" + (
            f" with env_kwargs {short(resolved.env_kwargs)}" if resolved.env_kwargs else ""
        )
        named = f"{short(env.name)}" + (f" with env_kwargs {short(dict(env.kwargs))}" if env.kwargs else "")
        raise ValueError(
            f"{RESOLVED}: found for environment {found}, but the spec names {named} (remove the "
            f"{RESOLVED!r} section to have it resolved again)"
        )


def _resolved_section(value: Any) -> ResolvedEnv:
    """A spec file's `resolved` section as a validated ResolvedEnv, or SpecError naming the key."""
    if not isinstance(value, dict):
        raise SpecError(f"{RESOLVED} must be a mapping (what `surreal create` wrote), got {short(value)}")
    fields = dataclasses.fields(ResolvedEnv)
    names = [f.name for f in fields]
    for key in value:
        if key not in names:
            raise SpecError(f"{RESOLVED}: unknown key {short(key)} (known: {', '.join(names)})")
    for f in fields:
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if f.name not in value and required:
            raise SpecError(f"{RESOLVED}: {f.name} is missing")
    hints = typing.get_type_hints(ResolvedEnv)
    values = {k: _coerce(f"{RESOLVED}.{k}", hints[k], v) for k, v in value.items()}
    resolved = ResolvedEnv(**values)
    try:
        resolved.validate()
    except ValueError as exc:
        raise SpecError(f"{RESOLVED}: {exc}") from None
    return resolved


def load_spec_file(path: Path) -> ExperimentSpec:
    """Load a spec written by `ExperimentSpec.to_yaml` (what every component reads at start),
    checked as at create (a SpecError names the file). A spec without a `resolved` section (Helm's
    chart writes none: it cannot resolve an environment) is resolved here, once, as create does."""
    try:
        return spec_from_dict(load_yaml_file(path, "spec file"))
    except SpecError as exc:
        message = str(exc)
        raise SpecError(message if str(path) in message else f"spec file {str(path)!r}: {message}") from None


def spec_from_dict(data: dict[str, Any]) -> ExperimentSpec:
    """A spec file's mapping (load_spec_file; the kube launcher reads it from the ConfigMap) as the
    ExperimentSpec it describes, checked as at create."""
    data = dict(data)
    name = data.pop("name", None)
    if not isinstance(name, str):
        raise SpecError(f"name must be the experiment name, got {short(name)}")
    algo = data.get("algo")
    if not isinstance(algo, str) or not algo:
        raise SpecError(f"algo must name the algorithm, got {short(algo)}")
    try:
        get_algorithm(algo)
    except ValueError as exc:
        raise SpecError(str(exc)) from None
    section = data.pop(algo, None) or {}
    if not isinstance(section, dict):
        raise SpecError(f"{algo} must be a mapping of {algo} settings, got {short(section)}")
    raw_resolved = data.pop(RESOLVED, None)
    sizing = data.pop(SIZING, None)
    if sizing is not None and not isinstance(sizing, dict):
        raise SpecError(f"{SIZING} must be a mapping (what `surreal create` wrote), got {short(sizing)}")
    for key in data:
        if key not in TOP_LEVEL_KEYS:
            raise SpecError(f"unknown key {short(key)}")
    resolved = _resolved_section(raw_resolved) if raw_resolved is not None else None
    spec = _build_spec(
        name,
        flags=data,
        overrides={f"{algo}.{k}": v for k, v in section.items()},
        resolved=resolved,
    )
    return dataclasses.replace(spec, sizing=sizing)
