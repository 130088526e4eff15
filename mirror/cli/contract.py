"""The command-line contract in one table: per command its example, exit codes and JSON document.

Scripts rely on three things, so they are written down here once and checked:
every `--json` document carries `schema` ("mirror.store.list/1": the command
path and a version raised on any incompatible change), field names are
snake_case, and timestamps are RFC 3339 UTC with `Z` and whole seconds
(mirror.timestamps). `docs/json.md` is generated from this module
(`make docs`; a test keeps it in step); a test walks every command
with `--json` after the command name and validates its document here.

A new command needs an entry in CONTRACTS; `apply_help` adds its example and
exit codes to its `--help`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import click

from mirror.errors import (
    EXIT_AUTH,
    EXIT_FAILED,
    EXIT_INTEGRITY,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_TEMPORARY,
    EXIT_USAGE,
)

EXIT_MEANINGS = {
    EXIT_OK: "ok",
    EXIT_FAILED: "failed",
    EXIT_USAGE: "usage or config error",
    EXIT_NOT_FOUND: "not found",
    EXIT_AUTH: "credentials refused",
    EXIT_INTEGRITY: "integrity check failed",
    EXIT_TEMPORARY: "temporary, run again later",
}
TIMESTAMP_PATTERN = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$"
ERROR_SCHEMA = "mirror.error/1"

Schema = dict[str, Any]

STR: Schema = {"type": "string"}
INT: Schema = {"type": "integer"}
NUM: Schema = {"type": "number"}
BOOL: Schema = {"type": "boolean"}
TIME: Schema = {"type": "string", "pattern": TIMESTAMP_PATTERN}
SHA256: Schema = {"type": "string", "pattern": "^[0-9a-f]{64}$"}
ANY_OBJECT: Schema = {"type": "object"}


def null(schema: Schema) -> Schema:
    """`schema` or null."""
    return {"anyOf": [schema, {"type": "null"}]}


def array(items: Schema) -> Schema:
    return {"type": "array", "items": items}


def obj(properties: dict[str, Schema], *, optional: tuple[str, ...] = ()) -> Schema:
    """An object with exactly these fields (all required but `optional`)."""
    return {
        "type": "object",
        "properties": properties,
        "required": [name for name in properties if name not in optional],
        "additionalProperties": False,
    }


DOMAIN_VERSION = obj({"domain": STR, "version": STR})
SITE = obj(
    {
        "status": {"enum": ["passed", "refused", "accepted"]},
        "pages": INT,
        "page_count": null(INT),
        "tolerance": INT,
        "broken_links": INT,
        "missing_assets": INT,
        "report_sha256": SHA256,
        "refusal": null(STR),
        "reason": null(STR),
    }
)
ITEM: dict[str, Schema] = {"domain": STR, "version": STR, "sha256": SHA256, "size": INT}
DELTA = obj(
    {
        "base_version": STR,
        "base_tree_sha256": SHA256,
        "archive_sha256": null(SHA256),  # null for a spliced delta: learnt at import
        "archive_size": null(INT),
        "file_count": INT,
        "carried_files": INT,
        "compression": null(obj({"library": STR, "version": STR, "level": INT, "chunk_size": INT})),
        "spliced": BOOL,
        # a spliced delta's archive as the pack made it (transferset/delta/_recipe.py)
        "recipe": null(
            obj({"base_sha256": SHA256, "base_size": INT, "sha256": SHA256, "size": INT})
        ),
    },
    optional=("compression", "archive_sha256", "archive_size", "spliced", "recipe"),
)
PACK_VERSION = obj(
    {
        "domain": STR,
        "version": STR,
        "carried": {"enum": ["full", "delta"]},
        "reason": null(STR),
        "base_version": null(STR),
        "full_size": INT,
        "delta_size": null(INT),
        "files_changed": null(INT),
        "files_added": null(INT),
        "files_removed": null(INT),
        "saving": INT,
    }
)
BUNDLE: dict[str, Schema] = {
    **ITEM,
    "format": STR,
    "tree_sha256": null(STR),
    "file_count": null(INT),
}
ERROR_FIELDS: dict[str, Schema] = {"error": STR, "exit_code": INT}
LINK = obj({"job_id": STR, "bundle_url": STR, "size_bytes": null(INT), "expires_at": null(TIME)})
JOB = obj(
    {
        "job_id": STR,
        "status": STR,
        "progress": null(NUM),
        "page_count": null(INT),
        "error": null(STR),
        "bundle": LINK,
    },
    optional=("bundle",),
)
AGENT_JOB = obj(
    {
        "id": STR,
        "status": STR,
        "repository": null(STR),
        "ref": null(STR),
        "model": null(STR),
        "pr_link": null(STR),
        "created_at": null(TIME),
        "archived_at": null(TIME),
    }
)
IMPORT = obj(
    {
        "sequence": INT,
        "site": null(STR),
        "never_seen": array(INT),
        "manifest_sha256": SHA256,
        "source_id": STR,
        "replayed": BOOL,
        "already_imported": BOOL,
        "items": array(
            obj(
                {
                    **ITEM,
                    "object": STR,
                    "manifest": STR,
                    "status": STR,
                    "tree_sha256": SHA256,
                }
            )
        ),
        "notes": array(STR),
        "receipt": null(STR),
        "receipt_signed_by": null(STR),
        "promoted": array(DOMAIN_VERSION),
    }
)
ACK = obj(
    {
        "site": STR,
        "sequence": INT,
        "manifest_sha256": SHA256,
        "marked": array(DOMAIN_VERSION),
        "already": array(DOMAIN_VERSION),
        "signature": STR,
        "complete": BOOL,
    }
)
SET_AT = obj({"sequence": INT, "packed_at": TIME})
SITE_SUMMARY = obj(
    {
        "name": STR,
        "domains": null(array(STR)),
        "last_packed": null(SET_AT),
        "last_acknowledged": null(SET_AT),
        "waiting": INT,
        "oldest_unacknowledged": null(SET_AT),
        "oldest_unacknowledged_age_seconds": null(INT),
        "lost": array(INT),
    }
)
CURRENT = obj({"domain": STR, "current": STR, "previous": null(STR)})
CHECK = obj(
    {
        "file": STR,
        "domain": STR,
        "version": STR,
        "host": STR,
        "status": STR,
        "expected_sha256": null(STR),
        "actual_sha256": null(STR),
        "size": null(INT),
        "expires_at": null(TIME),
        "seconds_left": null(INT),
        "enabled": BOOL,
        "error": null(STR),
        "exit_code": INT,
        "provenance": obj(
            {
                "verified": BOOL,
                "error": STR,
                "key_id": STR,
                "job_id": null(STR),
                "page_count": null(INT),
                "summary": null(STR),
                "accepted_reason": null(STR),
                "inventory_sha256": null(STR),
            },
            optional=(
                "error",
                "key_id",
                "job_id",
                "page_count",
                "summary",
                "accepted_reason",
                "inventory_sha256",
            ),
        ),
        "record": obj(
            {
                "verified": BOOL,
                "error": STR,
                "reason": {"enum": ["none", "no target.receipt_keys"]},
                "key_id": STR,
                "sequence": INT,
                "transfer_key_id": STR,
                "checks": array(STR),
                "verified_at": TIME,
            },
            optional=(
                "error",
                "reason",
                "key_id",
                "sequence",
                "transfer_key_id",
                "checks",
                "verified_at",
            ),
        ),
        "site": obj(
            {
                "pages": INT,
                "references": INT,
                "failing_pages": array(obj({"path": STR, "status": INT})),
                "broken_links": array(obj({"target": STR, "source": STR, "status": INT})),
            }
        ),
    },
    optional=("provenance", "record", "site"),
)
REFRESH_RESULT = obj(
    {
        "domain": STR,
        "path": STR,
        "version": STR,
        "action": {"enum": ["rendered", "fresh"]},
        "reason": STR,
        "expires_at": null(TIME),
        "hook_exit": null(INT),
    }
)


@dataclass(frozen=True)
class Contract:
    """One command's promises. `document` None: the command prints no JSON document."""

    summary: str
    example: str
    exits: tuple[int, ...]
    document: Schema | None
    version: int = 1
    notes: tuple[str, ...] = field(default_factory=tuple)


_ANY = tuple(EXIT_MEANINGS)
_READ = (EXIT_OK, EXIT_USAGE, EXIT_NOT_FOUND)
_VENDOR = (EXIT_OK, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_AUTH, EXIT_TEMPORARY)
_PROBE = (EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_AUTH, EXIT_TEMPORARY)
_BUCKET = (*_PROBE[:5], EXIT_INTEGRITY, EXIT_TEMPORARY)  # 5: a damaged index.json, current.json
_SIGNS = (EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_AUTH, EXIT_INTEGRITY)
"""A command that signs: 4 when a token refuses the PIN, 5 when a token's signature does
not verify with its key (mirror.transferset.token)."""
ALWAYS = {EXIT_FAILED: "something unexpected failed", EXIT_TEMPORARY: "interrupted"}
"""What any command may end with besides its own codes (said once in every --help)."""

CONTRACTS: dict[str, Contract] = {
    "config check": Contract(
        "The settings, validated, secrets redacted.",
        "mirror --config /etc/mirror/config.toml config check --for daemon --json",
        (EXIT_OK, EXIT_USAGE, EXIT_AUTH),
        obj({"source": STR, "valid": BOOL, "settings": ANY_OBJECT}),
    ),
    "db upgrade": Contract(
        "The index schema revision before and after.",
        "mirror db upgrade --json",
        (EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_TEMPORARY),
        obj({"database": STR, "from": null(STR), "to": STR}),
    ),
    "agent-job get": Contract(
        "One agent job.",
        "mirror agent-job get job_123 --json",
        _VENDOR,
        AGENT_JOB,
    ),
    "agent-job watch": Contract(
        "The agent job once it is completed or archived.",
        "mirror agent-job watch job_123 --timeout 1h --json",
        (EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_AUTH, EXIT_TEMPORARY),
        AGENT_JOB,
    ),
    "export run": Contract(
        "The run's outcome: a new version stored, or unchanged content.",
        "mirror export run docs.example.com --json",
        _ANY,
        obj(
            {
                **BUNDLE,
                "state": {"enum": ["stored", "unchanged"]},
                "job_id": STR,
                "run_id": INT,
                "path": STR,
                "resumed": BOOL,
                "site": null(STR),
            }
        ),
        notes=("A domain not in [[exports]] needs --adhoc (exit 2 otherwise).",),
    ),
    "export start": Contract(
        "The vendor export job just started.",
        "mirror export start docs.example.com --vendor-version 2 --json",
        _VENDOR,
        JOB,
    ),
    "export status": Contract(
        "A vendor export job's state (with its bundle link once completed).",
        "mirror export status job_123 --json",
        _VENDOR,
        JOB,
    ),
    "export bundle": Contract(
        "A fresh presigned link to a completed job's bundle.",
        "mirror export bundle job_123 --json",
        _VENDOR,
        LINK,
    ),
    "store list": Contract(
        "Every stored version with its completeness check, and the bundles the check refused.",
        "mirror store list --domain docs.example.com --json",
        _READ,
        obj(
            {
                "versions": array(
                    obj(
                        {
                            **BUNDLE,
                            "created_at": TIME,
                            "delivered_at": null(TIME),
                            "path": STR,
                            "site": null(SITE),
                        }
                    )
                ),
                "refused": array(
                    obj(
                        {
                            "domain": STR,
                            "version": STR,
                            "sha256": SHA256,
                            "created_at": TIME,
                            "site": SITE,
                        }
                    )
                ),
            }
        ),
    ),
    "store accept": Contract(
        "A bundle the completeness check refused, stored as a version with the reason (the "
        "newest version, `new` false, when it holds the same site).",
        "mirror store accept docs.example.com refused-2026-11-24 --reason 'counts redirects'",
        _READ,
        obj({"domain": STR, "refused": STR, "version": STR, "new": BOOL, "reason": STR}),
    ),
    "store verify": Contract(
        "Every blob re-hashed against the index.",
        "mirror store verify --repair --json",
        (*_READ, EXIT_INTEGRITY),
        obj(
            {
                "ok": BOOL,
                "checked": INT,
                "problems": array(obj({"kind": STR, "sha256": STR, "detail": STR})),
                "stray_temp_files": array(STR),
                "repairs": array(obj({"sha256": STR, "repaired": BOOL, "detail": STR})),
                "adopted": array(STR),
                "removed": array(STR),
            },
            optional=("repairs", "adopted", "removed"),
        ),
    ),
    "store gc": Contract(
        "What retention removed (or would remove with --dry-run).",
        "mirror store gc --keep 3 --dry-run --json",
        (EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NOT_FOUND),
        obj(
            {
                "keep": INT,
                "dry_run": BOOL,
                "versions_removed": array(obj({"domain": STR, "version": STR, "sha256": SHA256})),
                "blobs_removed": array(STR),
                "bytes_freed": INT,
                "kept_undelivered": INT,
            }
        ),
    ),
    "status": Contract(
        "Per configured domain: last run, latest version, next due time.",
        "mirror status --json",
        _READ,
        obj(
            {
                "generated_at": TIME,
                "domains": array(
                    obj(
                        {
                            "domain": STR,
                            "every_seconds": NUM,
                            "last_run": null(
                                obj(
                                    {
                                        "id": INT,
                                        "state": STR,
                                        "active": BOOL,
                                        "job_id": null(STR),
                                        "started_at": null(TIME),
                                        "finished_at": null(TIME),
                                        "bytes_done": null(INT),
                                        "version": null(STR),
                                        "error": null(STR),
                                    }
                                )
                            ),
                            "latest_version": null(
                                obj(
                                    {
                                        "version": STR,
                                        "sha256": SHA256,
                                        "created_at": TIME,
                                        "delivered_at": null(TIME),
                                        "site": null(STR),
                                    }
                                )
                            ),
                            "running": BOOL,
                            "next_due_at": null(TIME),
                            "deferred_until": null(TIME),
                            "error": null(STR),
                            "owner": null(STR),
                            "lease_expires_at": null(TIME),
                            "lease_live": BOOL,
                            "heartbeat_age_seconds": null(NUM),
                        }
                    )
                ),
                "sites": array(SITE_SUMMARY),
            }
        ),
        notes=("`sites` is what `mirror sites --json` prints under the same name.",),
    ),
    "sites": Contract(
        "Per air-gapped site: the last set packed and acknowledged, the versions waiting, "
        "the oldest unacknowledged set and its age, the sets marked lost (and not acknowledged "
        "since).",
        "mirror sites --json",
        _READ,
        obj({"generated_at": TIME, "sites": array(SITE_SUMMARY)}),
        notes=(
            "With no `[[sites]]` in the config there is one site, `default` (domains null: "
            "every domain).",
            "`waiting`: versions the site takes that no set for it carries (lost sets do not "
            "count) and that it has not acknowledged: what the next `transfer pack --site` "
            "carries. `oldest_unacknowledged`: the oldest set neither acknowledged nor lost.",
        ),
    ),
    "transfer lost": Contract(
        "A set marked lost for its site: the versions that wait again (the next pack for "
        "the site carries them, and nothing uses them as a delta base there).",
        "mirror transfer lost --site staging 7 --json",
        (EXIT_OK, EXIT_USAGE, EXIT_NOT_FOUND),
        obj(
            {
                "site": STR,
                "sequence": INT,
                "lost_at": TIME,
                "already_lost": BOOL,
                "waiting_again": array(DOMAIN_VERSION),
            }
        ),
        notes=("Exit 2 for a set whose receipt acknowledged it whole: it is not lost.",),
    ),
    "transfer resend": Contract(
        "An identical copy (same sequence, same bytes) of a set packed for a site, for a "
        "disk that was damaged; source and copy checked against the signed manifest.",
        "mirror transfer resend --site staging 7 /media/usb2/set-7 --json",
        (*_SIGNS, EXIT_TEMPORARY),
        obj(
            {
                "site": STR,
                "sequence": INT,
                "source": STR,
                "path": STR,
                "manifest_sha256": SHA256,
                "total_bytes": INT,
            }
        ),
        notes=(
            "Exit 3 when the packed copy is gone and 5 when it is damaged: both name the "
            "remedy, `transfer lost` then `transfer pack`.",
        ),
    ),
    "keys generate": Contract(
        "The new key pair's id and files (`private_key`: a pkcs11: URI's token and object "
        "for a key made in a token).",
        "mirror keys generate --out /etc/mirror/transfer --json",
        (EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_AUTH),
        obj({"key_id": STR, "private_key": STR, "public_key": STR}),
        notes=("Exit 4 when the token refuses the PIN of the URI's pin-source.",),
    ),
    "keys show": Contract(
        "A key file's kind and id, or a key in a token's (kind `token`); never the key. "
        "`public_key`: the file --public wrote, else null.",
        "mirror keys show /etc/mirror/transfer.pub --json",
        (EXIT_OK, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_AUTH),
        obj(
            {
                "path": STR,
                "kind": {"enum": ["public", "private", "token"]},
                "key_id": STR,
                "public_key": null(STR),
            }
        ),
        notes=("Exit 4 when the token refuses the PIN of the URI's pin-source.",),
    ),
    "transfer pack": Contract(
        "The signed set written (nothing true: nothing to pack), or with --dry-run what "
        "would be written; per version whether it goes whole or as a delta, and why.",
        "mirror transfer pack /media/usb/set --json",
        (*_SIGNS, EXIT_TEMPORARY),
        obj(
            {
                "nothing": BOOL,
                "dry_run": BOOL,
                "site": STR,
                "path": null(STR),
                "sequence": null(INT),
                "manifest_sha256": null(SHA256),
                "key_id": null(STR),
                "total_bytes": INT,
                "part_count": INT,
                "tool": null(STR),
                "items": array(obj({**ITEM, "parts": INT, "delta": null(DELTA)})),
                "versions": array(PACK_VERSION),
            }
        ),
        notes=(
            "`mirror transfer pack --dry-run --json` prints the same document with `dry_run` "
            "true and `path`, `manifest_sha256`, `key_id` null; `sequence` is the one the set "
            "would take.",
            "`versions[].carried` is `full` or `delta`; `reason` says why a version goes whole: "
            "`no base`, `base blob missing`, `not smaller` (than transfer.delta_max_ratio of "
            "the bundle) or `--full`. `delta_size` and the `files_*` counts are null when no "
            "delta was built; `saving` is bytes not carried.",
        ),
    ),
    "transfer verify": Contract(
        "A verified set's manifest.",
        "mirror transfer verify /media/usb/set --trusted-key transfer.pub --json",
        (EXIT_OK, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_INTEGRITY),
        obj(
            {
                "path": STR,
                "valid": BOOL,
                "sequence": INT,
                "site": null(STR),
                "previous_sequence": null(INT),
                "manifest_sha256": SHA256,
                "key_id": STR,
                "source_id": STR,
                "created_at": TIME,
                "total_bytes": INT,
                "tool": null(obj({"name": STR, "size": INT, "sha256": SHA256})),
                "items": array(obj(ITEM)),
            }
        ),
    ),
    "bundle-self": Contract(
        "The offline installer written: where, what it holds, who signed it.",
        "mirror bundle-self --signing-key /etc/mirror/transfer.key /srv/dist --json",
        _SIGNS,
        obj(
            {
                "path": STR,
                "version": STR,
                "sha256": SHA256,
                "size": INT,
                "key_id": STR,
                "targets": array(STR),
                "wheels": array(STR),
            }
        ),
    ),
    "transfer import": Contract(
        "What was published into the bucket, and where the receipt is.",
        "mirror transfer import /media/usb/set --promote --json",
        _ANY,
        IMPORT,
        notes=(
            "With --skip-imported, the very set this bucket already imported exits 0 with "
            "`already_imported` true, `items` and `promoted` empty, and `receipt` the one its "
            "first import wrote (null when it is no longer there); without it, exit 5.",
        ),
    ),
    "transfer ack": Contract(
        "The versions a receipt marked delivered. `signature`: `verified (key ID)`, or, "
        "with --accept-unsigned, how the unproven receipt was signed and that it was "
        "accepted anyway.",
        "mirror transfer ack /media/usb/set/receipt.json --json",
        (EXIT_OK, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_INTEGRITY),
        ACK,
    ),
    "transfer send": Contract(
        "Sends a set over a one-way link (UDP, FEC, passes); prints what went on the wire.",
        "mirror transfer send /srv/sets/set-42 --to 10.9.0.2:7400 --rate 40MiB --passes 2",
        (EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NOT_FOUND, EXIT_TEMPORARY),
        None,
        notes=(
            "Nothing comes back: success means sent, not delivered (`transfer ack`).",
            "Exit 75 when the resolver cannot look up --to's name now; 2 when it has none.",
        ),
    ),
    "transfer receive": Contract(
        "Lands sets from a one-way link into DIR; never sends a packet. Runs until stopped, "
        "or with --once until one set ends.",
        "mirror transfer receive /srv/spool --listen 0.0.0.0:7400 --once",
        _ANY,  # with --import, the import's codes too
        None,
        notes=(
            "With --once, exit 75 when the set is incomplete (the error names the command "
            "to resend what is missing) and 5 when it arrived whole but does not verify.",
            "Without --once (a service) it logs at INFO, JSON lines on stderr when not at a "
            "terminal: when it starts receiving, each set that ends (`set`, `outcome`) and "
            "when it stops; with --json the log alone says how each set ended.",
        ),
    ),
    "transfer push": Contract(
        "Pack, import and acknowledge in one step; `receipt` is the receipt's content "
        "(its temporary file is gone), `import.receipt` is null.",
        "mirror transfer push --promote --json",
        _ANY,
        obj(
            {
                "nothing": BOOL,
                "import": null(IMPORT),
                "ack": null(ACK),
                "receipt": null(ANY_OBJECT),
            }
        ),
    ),
    "target check": Contract(
        "One row per probe of the object store; `ok` false and `error` set when one failed.",
        "mirror target check --json",
        _PROBE,
        obj(
            {
                "target": STR,
                "ok": BOOL,
                "checks": array(
                    obj({"name": STR, "status": STR, "detail": STR, "exit_code": null(INT)})
                ),
            }
        ),
    ),
    "chart values": Contract(
        "The values for a version; `values` (the YAML text) unless --out wrote them to `out`.",
        "mirror chart values docs.example.com --pin 2026-11-21 --json",
        _BUCKET,
        obj(
            {
                "domain": STR,
                "version": STR,
                "key": STR,
                "sha256": SHA256,
                "url_mode": {"enum": ["presigned", "plain", "serve"]},
                "bundle_url": STR,
                "expires_at": null(TIME),
                "moving": BOOL,
                "values": STR,
                "out": STR,
            },
            optional=("values", "out"),
        ),
        notes=(
            "`url_mode` `serve`: `bundle_url` is mirror serve's link (serve.public_url), the "
            "version's own (immutable), or with --moving the domain's current one (`moving` "
            "true; `version` is the one current when rendered, the values say "
            "`version: current`). Neither expires: `expires_at` is null.",
        ),
    ),
    "chart promote": Contract(
        "The domain's current version now, and before.",
        "mirror chart promote docs.example.com 2026-11-21 --json",
        _BUCKET,
        CURRENT,
    ),
    "chart rollback": Contract(
        "The domain's current version now, and before.",
        "mirror chart rollback docs.example.com --json",
        _BUCKET,
        CURRENT,
    ),
    "chart history": Contract(
        "Promotions and rollbacks, newest first.",
        "mirror chart history docs.example.com --json",
        _BUCKET,
        obj(
            {
                "domain": STR,
                "current": null(STR),
                "history": array(
                    obj(
                        {
                            "version": STR,
                            "action": STR,
                            "at": TIME,
                            "current": BOOL,
                            "site": null(STR),
                        }
                    )
                ),
            }
        ),
    ),
    "chart check": Contract(
        "The values file's link fetched as the chart would; on failure `error` is set too, "
        "and `status` is `ok` only when every check asked for passed (`provenance-failed`, "
        "`site-broken` when those fail).",
        "mirror chart check values.yaml --warn 2d --json",
        _ANY,
        CHECK,
        notes=(
            "Through a mirror serve link (`url_mode` `serve`) `expires_at` and `seconds_left` "
            "are null; for its link to the current version (`.../current/bundle.EXT`), "
            "`version` is the one it served (its `Mirror-Version`). mirror serve's refusal of "
            "an object that does not match its manifest is `status` `mismatch`, exit 5.",
        ),
    ),
    "chart refresh": Contract(
        "Per domain: values rendered again or kept; on failure `error` and `exit_code` too.",
        "mirror chart refresh --domain docs.example.com --json",
        _BUCKET,
        obj({"results": array(REFRESH_RESULT)}),
    ),
    "chart gc": Contract(
        "Per domain: the versions removed (or, with --dry-run, to remove), those kept and why.",
        "mirror chart gc --domain docs.example.com --keep 5 --dry-run --json",
        (
            EXIT_OK,
            EXIT_FAILED,
            EXIT_USAGE,
            EXIT_NOT_FOUND,
            EXIT_AUTH,
            EXIT_INTEGRITY,
            EXIT_TEMPORARY,
        ),
        obj(
            {
                "keep": INT,
                "dry_run": BOOL,
                "domains": array(
                    obj(
                        {
                            "domain": STR,
                            "removed": array(
                                obj(
                                    {
                                        "version": STR,
                                        "sha256": SHA256,
                                        "object": STR,
                                        "manifest": STR,
                                        "size": INT,
                                    }
                                )
                            ),
                            "kept": array(obj({"version": STR, "reasons": array(STR)})),
                            "finished": array(STR),
                            "restored": array(STR),
                            "bytes_freed": INT,
                        }
                    )
                ),
                "bytes_freed": INT,
            }
        ),
        notes=(
            "Never removes the current version, the rollback target or the newest version "
            "(`reasons`: `current`, `rollback target`, `delta base`, `newest N`). `finished`: "
            "versions of an interrupted gc completed first (with --dry-run: to complete); "
            "`restored`: versions promoted while gc ran, put back. `size` counts the bundle "
            "and manifest objects.",
        ),
    ),
    "evidence": Contract(
        "One version's evidence, verified, written to --out: the files and what they say.",
        "mirror evidence docs.example.com 2026-11-24 --out /media/usb/evidence --json",
        _BUCKET,
        obj(
            {
                "domain": STR,
                "version": STR,
                "object": STR,
                "sha256": SHA256,
                "size": INT,
                "transfer_key_id": STR,
                "receipt_key_id": STR,
                "set_sequence": INT,
                "checks": array(STR),
                "out": STR,
                "files": array(STR),
            }
        ),
        notes=(
            "Exit 5 when the provenance or the verification record does not verify with "
            "target.transfer_keys and target.receipt_keys (nothing written); 3 when the "
            "version, its provenance or its record is not there; 2 when --out is not a new "
            "or empty directory or no receipt key is trusted. VERIFY.md's commands check the "
            "files with openssl, coreutils and python3 only.",
        ),
    ),
    "daemon": Contract(
        "Runs until stopped; logs are JSON lines on stderr when not at a terminal.",
        "mirror --config /etc/mirror/config.toml daemon",
        (EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NOT_FOUND),
        None,
        notes=(
            "Refuses to start (exit 2) on settings `config check --for daemon` refuses: no "
            "domain in [[exports]], no usable admin API key.",
        ),
    ),
    "serve": Contract(
        "Runs until stopped; prints the address it listens on, then one log line per response "
        "(JSON lines on stderr when not at a terminal).",
        "mirror --config /etc/mirror/config.toml serve",
        (EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_AUTH),
        None,
        notes=(
            "Refuses to start (exit 2) when the bucket is unset, serve.listen cannot be bound, "
            "serve.cache_dir is in use by another mirror serve, or serve.require_provenance "
            "is set without target.transfer_keys. Exits 4 when the object store refuses the "
            "credentials at the first read; a store that does not answer is served through "
            "from the cache. SIGTERM drains (serve.drain_timeout), then exit 0; SIGHUP reads "
            "the bucket's pointers at once and goes on (the config file is not re-read).",
        ),
    ),
    "sim serve": Contract(
        "Runs until stopped; prints its URL and key.",
        "mirror sim serve --port 0",
        (EXIT_OK, EXIT_USAGE),
        None,
    ),
    "demo": Contract(
        "Runs the whole pipeline and narrates it.",
        "mirror demo --dir /tmp/mirror-demo",
        (EXIT_OK, EXIT_FAILED, EXIT_USAGE),
        None,
    ),
}

ERROR_DOCUMENT = obj({"schema": {"const": ERROR_SCHEMA}, **ERROR_FIELDS})


def key_of(command_path: str) -> str:
    """ "mirror store list" -> "store list" (the program name may differ when run as a module)."""
    return command_path.split(" ", 1)[1] if " " in command_path else ""


def schema_name(command_path: str) -> str:
    """The `schema` of the document printed by the command at `command_path`."""
    key = key_of(command_path)
    contract = CONTRACTS.get(key)
    version = contract.version if contract is not None else 1
    return f"mirror.{key.replace(' ', '.')}/{version}"


def document_schema(key: str) -> Schema | None:
    """The full JSON Schema (with `schema`) of `key`'s document; None when it prints none."""
    contract = CONTRACTS[key]
    if contract.document is None:
        return None
    properties = {"schema": {"const": f"mirror.{key.replace(' ', '.')}/{contract.version}"}}
    properties.update(contract.document["properties"])
    for name, field_schema in ERROR_FIELDS.items():  # a failure may add them (CliContext.fail_with)
        properties.setdefault(name, field_schema)
    return {
        **contract.document,
        "properties": properties,
        "required": ["schema", *contract.document["required"]],
    }


def help_epilog(key: str) -> str:
    contract = CONTRACTS[key]
    codes = ", ".join(f"{code} {EXIT_MEANINGS[code]}" for code in contract.exits)
    always = ", ".join(
        f"{code} {meaning}" for code, meaning in ALWAYS.items() if code not in contract.exits
    )
    lines = ["\b", "Example:", f"  {contract.example}", "", "\b", f"Exit codes: {codes}."]
    if always:
        lines.append(f"Any command also: {always}.")
    lines += [
        "",
        "Global options (--json, --config, --defaults, -v, -q) may also follow the command.",
    ]
    if contract.document is not None:
        lines += ["", f"With --json: one document, schema {schema_name('mirror ' + key)}."]
    return "\n".join(lines)


def apply_help(command: click.Command, key: str) -> None:
    """Give `command` and the commands under it their example and exit codes in `--help`."""
    if key in CONTRACTS and command.epilog is None:
        command.epilog = help_epilog(key)
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            apply_help(sub, f"{key} {name}")


def _shape(schema: Schema) -> str:
    if "const" in schema:
        return json.dumps(schema["const"])
    if "enum" in schema:
        return " or ".join(json.dumps(v) for v in schema["enum"])
    if "anyOf" in schema:
        return " or ".join(_shape(s) for s in schema["anyOf"])
    kind = schema.get("type", "any")
    if kind == "array":
        return f"array of {_shape(schema['items'])}"
    if kind == "string" and schema.get("pattern") == TIMESTAMP_PATTERN:
        return "timestamp"
    if kind == "string" and schema.get("pattern") == SHA256["pattern"]:
        return "sha256"
    return str(kind)


def _fields(schema: Schema, prefix: str = "") -> list[str]:
    rows: list[str] = []
    required = set(schema.get("required", []))
    for name, sub in schema.get("properties", {}).items():
        path = f"{prefix}{name}"
        optional = "" if name in required else " (optional)"
        rows.append(f"| `{path}` | {_shape(sub)}{optional} |")
        nested = [s for s in sub.get("anyOf", [sub]) if s.get("type") in ("object", "array")]
        for inner in nested:
            target = inner["items"] if inner.get("type") == "array" else inner
            if target.get("properties"):
                suffix = "[]." if inner.get("type") == "array" else "."
                rows.extend(_fields(target, f"{path}{suffix}"))
    return rows


def render_markdown() -> str:
    """docs/json.md."""
    out = _preamble()
    for key, contract in CONTRACTS.items():
        out += _section(key, contract)
    return "\n".join(out).rstrip() + "\n"


def _preamble() -> list[str]:
    """docs/json.md's rules for every document, before the sections."""
    return [
        "# JSON documents",
        "",
        "<!-- generated from mirror/cli/contract.py by `make docs`; do not edit -->",
        "",
        "Every command takes `--json` before or after the command name",
        "(`mirror --json store list` = `mirror store list --json`) and then prints one JSON",
        "document on stdout. The rules for all of them:",
        "",
        '- `schema` names the document and its version, e.g. `"mirror.store.list/1"`; the',
        "  version is raised on any incompatible change (a new field is compatible).",
        "- Field names are snake_case.",
        "- Timestamps are RFC 3339 in UTC with `Z` and whole seconds: `2026-11-29T02:00:00Z`.",
        "- Sizes are bytes, durations seconds.",
        "- On failure the exit code is not 0, stderr has one `mirror: error: ...` line, and",
        f"  stdout has the error document `{ERROR_SCHEMA}` (usage errors included):",
        "",
        "```json",
        json.dumps({"schema": ERROR_SCHEMA, "error": "...", "exit_code": 2}),
        "```",
        "",
        "  A command that has details to give (`chart check`, `chart refresh`, `store verify`)",
        "  prints its own document instead, with `error` and `exit_code` added.",
        "",
        "Exit codes: "
        + ", ".join(f"{code} {meaning}" for code, meaning in EXIT_MEANINGS.items())
        + ".",
        "",
        "The JSON Schemas themselves (draft 2020-12) are `all_schemas()` in",
        "`mirror/cli/contract.py`. Below, `A or B` is a union and `x[].y` a field of each",
        "element of the array `x`.",
        "",
    ]


def _section(key: str, contract: Contract) -> list[str]:
    """docs/json.md's section on one command: what it prints, an example, its fields."""
    out = [f"## `mirror {key}`", "", contract.summary, "", f"Example: `{contract.example}`", ""]
    out += [f"{note}" for note in contract.notes] + ([""] if contract.notes else [])
    schema = document_schema(key)
    if schema is None:
        return [*out, "Prints no JSON document.", ""]
    return [*out, "| field | type |", "| --- | --- |", *_fields(schema), ""]


def all_schemas() -> dict[str, Schema]:
    """{schema name: JSON Schema} for every document, the error document included."""
    schemas = {ERROR_SCHEMA: ERROR_DOCUMENT}
    for key in CONTRACTS:
        schema = document_schema(key)
        if schema is not None:
            schemas[schema_name("mirror " + key)] = schema
    return schemas
