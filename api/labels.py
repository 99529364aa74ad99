"""Kubernetes label syntax: keys, values, `k=v` pairs and selectors that match them.

Both a BrowserPool's `nodeSelector` and a node worker's `--node-label` are checked by the
Kubernetes rules (`IsQualifiedName`, `IsValidLabelValue`), so a selector that could never match
is refused where it is written; node names are DNS-1123 labels (`check_node_name`). Every rule
raises a `ValueError` whose text is the rule alone: the caller says where."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import AfterValidator, BeforeValidator

from devicepool.api.problems import show_value

__all__ = [
    "MAX_LABEL_NAME",
    "MAX_LABEL_PREFIX",
    "MAX_LABEL_VALUE",
    "LabelKey",
    "LabelValue",
    "check_dns_label",
    "check_label_key",
    "check_label_value",
    "check_node_name",
    "parse_label",
    "selector_matches",
]

MAX_LABEL_NAME = 63
MAX_LABEL_VALUE = 63
MAX_LABEL_PREFIX = 253

_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_ALPHABET = "letters, digits, '-', '_' or '.', starting and ending with a letter or digit"


def check_label_key(key: str) -> str:
    """`key` if it is a Kubernetes label key, else ValueError naming the rule it breaks."""
    prefix, slash, name = key.rpartition("/")
    if not key:
        raise ValueError("label key must not be empty")
    if slash:
        if not prefix:
            raise ValueError(
                f"label key prefix before '/' must not be empty, got {show_value(key)}"
            )
        if len(prefix) > MAX_LABEL_PREFIX:
            raise ValueError(
                f"label key prefix must be at most {MAX_LABEL_PREFIX} characters, got {len(prefix)}"
            )
        if not _DNS_SUBDOMAIN.match(prefix):
            raise ValueError(
                "label key prefix must be a DNS subdomain (lowercase letters, digits, '-' and"
                f" '.', such as 'example.com'), got {show_value(prefix)}"
            )
        if not name:
            raise ValueError(f"label key name after '/' must not be empty, got {show_value(key)}")
    if len(name) > MAX_LABEL_NAME:
        raise ValueError(
            f"label key name must be at most {MAX_LABEL_NAME} characters, got {len(name)}"
        )
    if not _NAME.match(name):
        raise ValueError(f"label key must be {_ALPHABET}, got {show_value(name)}")
    return key


def check_label_value(value: str) -> str:
    """`value` if it is a Kubernetes label value (empty is one), else ValueError."""
    if len(value) > MAX_LABEL_VALUE:
        raise ValueError(
            f"label value must be at most {MAX_LABEL_VALUE} characters, got {len(value)}"
        )
    if value and not _NAME.match(value):
        raise ValueError(f"label value must be empty or {_ALPHABET}, got {show_value(value)}")
    return value


def _string_value(value: Any) -> Any:
    # YAML reads `zone: 1` as a number and `gpu: yes` as a boolean; a label value
    # is a string (as in Kubernetes), and a quoted one says what was meant.
    if isinstance(value, bool):
        shown = "true" if value else "false"
        raise ValueError(
            f"must be a string, got {shown} (quote it: YAML reads yes/no/on/off as booleans)"
        )
    if isinstance(value, int | float):
        raise ValueError(f"must be a string, got {show_value(value)} (quote it: labels are text)")
    return value


LabelKey = Annotated[str, AfterValidator(check_label_key)]
LabelValue = Annotated[str, BeforeValidator(_string_value), AfterValidator(check_label_value)]


def check_node_name(name: str) -> str:
    """`name` if it can name a node worker (`--node NAME`), else ValueError.

    A DNS-1123 label, as a pool's name: it is the value of the node's `node=<name>`
    label (`devicepool dev`), a key of a BrowserPool's `byNode`, and part of its
    task queue (`names.node_task_queue`).
    """
    if not name:
        raise ValueError("must not be empty")
    return check_dns_label(name)


def check_dns_label(name: str) -> str:
    """`name` if it is a DNS-1123 label (a pool's `metadata.name`), else ValueError."""
    if len(name) > MAX_LABEL_VALUE:
        raise ValueError(f"must be at most {MAX_LABEL_VALUE} characters, got {len(name)}")
    if not _DNS_LABEL.match(name):
        raise ValueError(
            "must be a DNS-1123 label (lowercase letters, digits and '-', starting and ending"
            f" with a letter or digit), got {show_value(name)}"
        )
    return name


def parse_label(text: str) -> tuple[str, str]:
    """`k=v` (a `--node-label` argument) as `(k, v)`; ValueError naming the rule it breaks."""
    key, equals, value = text.partition("=")
    if not equals:
        raise ValueError(f"must be key=value, got {show_value(text)}")
    return check_label_key(key), check_label_value(value)


def selector_matches(selector: Mapping[str, str], labels: Mapping[str, str]) -> bool:
    """Whether `labels` hold every pair of `selector` (an empty selector matches everything)."""
    return all(labels.get(key) == value for key, value in selector.items())
