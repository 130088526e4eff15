"""The cheap checksums the S3 server verifies bytes by, and what it reports back about them.

These are not the integrity of a bundle (that is sha256, mirror.integrity): they catch a
part or a document damaged on the wire between this host and the server, in either
direction. Each body written carries a checksum the server verifies (CRC32 or MD5,
`target.part_checksum`; Content-MD5 on a small object), and what the server reports
back (a part's echoed checksum, a document's MD5 ETag, a completed object's composite
checksum or multipart ETag) is compared with what was sent.

Promises: every function here is pure (no request); a disagreement is IntegrityError
(exit 5) naming the key, or a one-line description for the caller's message.
"""

from __future__ import annotations

import base64
import hashlib
import zlib
from typing import Any, Literal

from mirror.errors import IntegrityError

PartChecksum = Literal["crc32", "md5"]

DAMAGED_HINT = "run again; if it recurs, the S3 server is damaging what it stores"


def algorithm_args(kind: PartChecksum) -> dict[str, Any]:
    """CreateMultipartUpload's argument that makes every part carry a CRC32."""
    return {"ChecksumAlgorithm": "CRC32"} if kind == "crc32" else {}


def part_checksum(kind: PartChecksum, part: bytes | bytearray) -> dict[str, str]:
    """The UploadPart/PutObject argument the server verifies the bytes by."""
    if kind == "crc32":
        return {"ChecksumCRC32": crc32_base64(part)}
    return {"ContentMD5": md5_base64(part)}


def crc32_base64(data: bytes | bytearray) -> str:
    return base64.b64encode(zlib.crc32(data).to_bytes(4, "big")).decode()


def md5_base64(data: bytes | bytearray) -> str:
    return base64.b64encode(bytes.fromhex(md5_hex(data))).decode()


def md5_hex(data: bytes | bytearray) -> str:
    """The MD5 S3 reports as an ETag and verifies as Content-MD5 (a checksum, not security)."""
    return hashlib.md5(data, usedforsecurity=False).hexdigest()


def is_plain_md5(etag: str) -> bool:
    return len(etag) == 32 and all(c in "0123456789abcdef" for c in etag.lower())


def read_back_intact(data: bytes, answer: dict[str, Any]) -> bool:
    """False when a document read back is not the bytes the server reports storing: written
    in one PutObject, its ETag is the MD5 of its bytes (unless encrypted or not an MD5)."""
    etag = str(answer.get("ETag", "")).strip('"')
    if not is_plain_md5(etag) or answer.get("ServerSideEncryption"):
        return True
    return md5_hex(data) == etag


def check_part_answer(key: str, number: int, sent: dict[str, str], answer: dict[str, Any]) -> None:
    """Refuse a part the server reports back with another checksum than the one sent."""
    if "ChecksumCRC32" in sent:
        echoed = answer.get("ChecksumCRC32")
        if echoed is None or echoed == sent["ChecksumCRC32"]:
            return
        what = f"CRC32 {echoed}, sent {sent['ChecksumCRC32']}"
    else:
        etag = str(answer.get("ETag", "")).strip('"')
        md5 = base64.b64decode(sent["ContentMD5"]).hex()
        if not is_plain_md5(etag) or answer.get("ServerSideEncryption") or etag == md5:
            return
        what = f"ETag {etag}, sent MD5 {md5}"
    raise IntegrityError(
        f"{key}: the server reports part {number} stored with {what}; nothing was published",
        hint=DAMAGED_HINT,
    )


def stored_object_problem(
    answer: dict[str, Any], *, size: int, sent: list[dict[str, Any]]
) -> str | None:
    """What differs between a completed object (its HEAD) and the parts sent, or None."""
    stored = int(answer.get("ContentLength", -1))
    if stored != size:
        return f"{stored} bytes, not the {size} sent"
    etag = str(answer.get("ETag", "")).strip('"')
    if "-" in etag and etag.rsplit("-", 1)[1] != str(len(sent)):
        return f"an object of {etag.rsplit('-', 1)[1]} parts, not the {len(sent)} sent"
    reported = str(answer.get("ChecksumCRC32") or "")
    if (
        sent
        and "ChecksumCRC32" in sent[0]
        and reported
        and answer.get("ChecksumType") != "FULL_OBJECT"
    ):
        joined = b"".join(base64.b64decode(part["ChecksumCRC32"]) for part in sent)
        if reported.split("-")[0] != crc32_base64(joined):
            return f"an object whose CRC32 of parts is {reported}, not the one sent"
    if sent and "ContentMD5" in sent[0] and "-" in etag and not answer.get("ServerSideEncryption"):
        expected = md5_hex(b"".join(base64.b64decode(part["ContentMD5"]) for part in sent))
        if etag.split("-")[0] != expected:
            return f"an object whose ETag is {etag}, not the {expected}-{len(sent)} sent"
    return None
