"""Render the chart under deploy/helm/retrain-services without a helm binary (these machines have
none), for the small part of Helm's template language the chart uses:

    {{ .Values.a.b }}  {{ .Release.Namespace }}  {{ .Release.Name }}  {{ X | quote }}
    {{- toYaml X | nindent N }}  {{- if X }} ... {{- end }}

with `{{-` / `-}}` trimming whitespace as Helm does. Any other action is an error naming it, so a
template cannot drift into syntax this renderer would silently get wrong.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

_ACTION = re.compile(r"\{\{(-?)\s*(.*?)\s*(-?)\}\}", re.S)


class UnsupportedTemplate(ValueError):
    """A template action outside the subset above."""


def _lookup(path: str, scope: Mapping[str, Any]) -> Any:
    if not path.startswith("."):
        raise UnsupportedTemplate(f"not a value path: {path!r}")
    value: Any = scope
    for part in path[1:].split("."):
        if not isinstance(value, Mapping) or part not in value:
            raise KeyError(f"{path}: no {part!r} in the values")
        value = value[part]
    return value


def _evaluate(expr: str, scope: Mapping[str, Any]) -> str:
    if m := re.fullmatch(r"toYaml (\S+) \| nindent (\d+)", expr):
        dumped = yaml.safe_dump(_lookup(m[1], scope), default_flow_style=False, sort_keys=False).rstrip("\n")
        pad = " " * int(m[2])
        return "\n" + "\n".join(pad + line for line in dumped.splitlines())
    if m := re.fullmatch(r"(\S+) \| quote", expr):
        return json.dumps(str(_lookup(m[1], scope)))
    if re.fullmatch(r"\.[A-Za-z][\w.]*", expr):
        return str(_lookup(expr, scope))
    raise UnsupportedTemplate(f"template action {{{{ {expr} }}}} is outside the subset this renderer knows")


def render(text: str, values: Mapping[str, Any], namespace: str, release: str = "retrain-services") -> str:
    scope = {"Values": values, "Release": {"Namespace": namespace, "Name": release}}
    out: list[str] = []
    keep = [True]  # one entry per open `if`: whether its body is rendered
    position, trim_next = 0, False
    for match in _ACTION.finditer(text):
        chunk = text[position : match.start()]
        if trim_next:
            chunk = chunk.lstrip()
        if match[1]:
            chunk = chunk.rstrip()
        if all(keep):
            out.append(chunk)
        expr, trim_next, position = match[2], bool(match[3]), match.end()
        if m := re.fullmatch(r"if (\S+)", expr):
            keep.append(bool(_lookup(m[1], scope)))
        elif expr == "end":
            if len(keep) == 1:
                raise UnsupportedTemplate("{{ end }} without an open {{ if }}")
            keep.pop()
        elif all(keep):
            out.append(_evaluate(expr, scope))
    if len(keep) != 1:
        raise UnsupportedTemplate("an {{ if }} is never closed")
    tail = text[position:]
    out.append(tail.lstrip() if trim_next else tail)
    return "".join(out)


def render_chart(chart: Path, namespace: str, overrides: Mapping[str, Any] | None = None) -> list[dict]:
    """Every Kubernetes object the chart's templates render to, with its values (and `overrides`)."""
    values = {**yaml.safe_load((chart / "values.yaml").read_text()), **(overrides or {})}
    objects: list[dict] = []
    for template in sorted((chart / "templates").glob("*.yaml")):
        objects.extend(doc for doc in yaml.safe_load_all(render(template.read_text(), values, namespace)) if doc)
    return objects
