"""A provisioning plan: the files a provider's tool reads and the commands that create the cluster."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from typing import Any

import yaml

from surreal.provisioner.placement import Placement


@dataclass(frozen=True)
class Plan:
    """Everything `apply` needs, and everything `surreal provision plan` shows."""

    provider: str  # one of PROVIDERS
    cluster: str  # the cluster name
    files: dict[str, str]  # file name (relative to the work dir) -> text
    commands: list[list[str]]  # argv lists, run in order in the work dir
    notes: list[str] = field(default_factory=list)  # what a person should know before applying
    placement: dict[str, Placement] = field(default_factory=dict)  # role -> placement shown

    @property
    def tools(self) -> list[str]:
        """The executables the commands need, in first-use order."""
        seen: list[str] = []
        for argv in self.commands:
            if argv[0] not in seen:
                seen.append(argv[0])
        return seen

    def to_data(self) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "cluster": self.cluster,
            "files": dict(self.files),
            "commands": [list(argv) for argv in self.commands],
            "notes": list(self.notes),
            "placement": {role: p.to_dict() for role, p in self.placement.items()},
        }


def dump_yaml(data: Any) -> str:
    """Block-style YAML in the given key order; multi-line strings as literal blocks."""

    class _Dumper(yaml.SafeDumper):
        pass

    def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    _Dumper.add_representer(str, _str)
    return yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=False, width=100)


def format_plan(plan: Plan, output: str | None = None) -> str:
    """The plan as `yaml` or `json` (a mapping: provider, cluster, files, commands, notes,
    placement), or, by default, as text a person can read and copy commands from."""
    if output == "json":
        return json.dumps(plan.to_data(), indent=2) + "\n"
    if output == "yaml":
        return dump_yaml(plan.to_data())
    if output is not None:
        raise ValueError(f"output {output!r} must be yaml or json")
    lines = [f"# surreal provision plan: {plan.provider} cluster {plan.cluster!r}", ""]
    for name, text in plan.files.items():
        lines += [f"# --- file {name} ---", text.rstrip("\n"), ""]
    where = " (run in the directory holding the files above)" if plan.files else ""
    lines.append(f"# --- commands{where} ---")
    lines += [shlex.join(argv) for argv in plan.commands]
    if plan.notes:
        lines += ["", "# --- notes ---"] + [f"# - {note}" for note in plan.notes]
    return "\n".join(lines) + "\n"
