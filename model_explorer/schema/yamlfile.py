"""Reading a YAML file strictly: UTF-8 text only, and no key written twice in one mapping
(PyYAML would keep the last one silently). Every problem of the file comes back at once."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from model_explorer.errors import WorkloadError, first_line


class _StrictLoader(yaml.SafeLoader):
    """A SafeLoader that records keys written twice in a mapping (merge keys `<<` excepted:
    overriding a merged key is what they are for)."""

    def __init__(self, stream: Any) -> None:
        super().__init__(stream)
        self.duplicates: list[tuple[str, int, int]] = []

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                if key in seen:
                    self.duplicates.append((str(key), seen[key], line))
                else:
                    seen[key] = line
            except TypeError:
                continue  # an unhashable key: the constructor below says so
        return super().construct_mapping(node, deep=deep)


def read_yaml(path: str | os.PathLike[str], duplicates: list[str] | None = None) -> Any:
    """The parsed content of a YAML file, or a WorkloadError naming the file, the line and
    what is wrong (one line per key written twice). Given a `duplicates` list, the lines about
    keys written twice are added to it instead, so that a caller can report them together with
    its own checks of the content."""
    path = Path(path)
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        from model_explorer.filekinds import WORKLOAD, kind_of

        kind = kind_of(path)
        if kind not in (None, WORKLOAD):  # a workload not in UTF-8 is told by its byte
            raise WorkloadError(
                f"{path}: this is {kind}, not a YAML file; this command reads YAML, e.g. "
                "workloads/digits_cnn.yaml"
            ) from None
        line = raw[: error.start].count(b"\n") + 1
        raise WorkloadError(
            f"{path} line {line}: not UTF-8 text (byte 0x{raw[error.start]:02x}); save the file "
            "as UTF-8"
        ) from None
    loader = _StrictLoader(text)
    try:
        data = loader.get_single_data()
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise WorkloadError(f"{path}{line}: not valid YAML ({problem})") from None
    finally:
        loader.dispose()
    found = [
        f"{path} line {second}: key '{key}' is written twice in one mapping (also line "
        f"{first}); YAML would keep only the last: remove one"
        for key, first, second in loader.duplicates
    ]
    if duplicates is not None:
        duplicates.extend(found)
    elif found:
        raise WorkloadError("\n".join(found))
    return data


def apply_overrides(body: Any, overrides: Sequence[str]) -> list[str]:
    """Put `KEY=VALUE` settings (`exploration.nsga.pop_size=4`, the value read as YAML) into
    `body`, a workload's mapping under `workload:`, creating the mappings on the way; returns
    one problem line per setting that cannot be applied (the schema then checks the values)."""
    problems = []
    for override in overrides:
        key, sign, text = override.partition("=")
        parts = key.strip().split(".")
        if not sign or not all(parts):
            problems.append(
                f"--set {override}: write KEY=VALUE with the key as under workload:, e.g. "
                "exploration.nsga.pop_size=4"
            )
            continue
        try:
            value = yaml.safe_load(text)
        except yaml.YAMLError as error:
            problems.append(f"--set {override}: the value is not YAML ({first_line(error)})")
            continue
        node = body if isinstance(body, dict) else {}
        for depth, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                where = ".".join(parts[: depth + 1])
                problems.append(f"--set {override}: '{where}' holds a value, not settings")
                break
            node = child
        else:
            node[parts[-1]] = value
    return problems
