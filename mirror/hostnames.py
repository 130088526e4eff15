"""Documentation domains: the one check of what may name a domain, wherever one comes in
(settings, command arguments, transfer manifests).

A domain becomes a directory in the store and a key prefix in the bucket, so only a DNS
hostname passes: letters, digits and hyphens in dot-separated labels, nothing like `..`,
`/` or a space. Promises: `normalize_domain` returns the lower-case hostname or raises
ValueError with one line saying what was expected; `is_domain` checks a value as is (a
signed manifest's domain must already be in that form).
"""

from __future__ import annotations

import re

HOSTNAME = re.compile(
    r"^(?=.{1,253}$)([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*$"
)


def is_domain(value: str) -> bool:
    """Whether `value`, exactly as given, is a lower-case hostname."""
    return HOSTNAME.match(value) is not None


def normalize_domain(value: str) -> str:
    """`value` stripped and lower-cased; ValueError unless that is a hostname."""
    domain = value.strip().lower()
    if not is_domain(domain):
        raise ValueError(f"must be a hostname like docs.example.com, got {value!r}")
    return domain
