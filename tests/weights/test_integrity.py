"""Integrity is measured, not asserted (issue 25 item 10), with the real scan script on this host.

- A source dir's own ``fleet-weights.json`` lends a file's sha256 only while the file keeps the
  size, mtime and stamp (inode, ctime) it had when hashed.  A file written in place with its
  mtime put back keeps size and mtime but not its ctime: it is hashed again, and because its
  content now differs from what the manifest records for that size and mtime, staging refuses
  it, naming it (it used to spread under the old, "valid" hash).  ``--full`` hashes everything.
- A receiver's post-copy scan hashes the files that arrived: a copy that differs from the
  source's hash is a mismatch even with the right size and mtime (it used to pass on size and
  mtime alone)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from launcher.errors import FleetError
from launcher.execute.local import LocalTransport
from launcher.weights.manifest import MANIFEST_NAME, compare, for_host, from_listing, to_json
from launcher.weights.needs import ModelNeed
from launcher.weights.stage import Source, scan, source_manifests


def _source(tmp_path: Path) -> tuple[Path, list[ModelNeed]]:
    d = tmp_path / "org" / "m"
    d.mkdir(parents=True)
    (d / "a.bin").write_bytes(b"A" * 4096)
    (d / "b.bin").write_bytes(b"B" * 4096)
    return d, [ModelNeed(model="org/m", what="weights", rel="org/m", paths=(("h1", "/srv/models/org/m"),))]


def _manifests(tmp_path: Path, needs: list[ModelNeed], **kw: bool) -> str:
    got = source_manifests(needs, Source(kind="dir", root=str(tmp_path)), None, None, None, **kw)  # type: ignore[arg-type]
    return {f.path: f.sha256 for f in got[0].files}["a.bin"]


def _corrupt_in_place(path: Path) -> None:
    st = path.stat()
    with path.open("r+b") as f:
        f.write(b"X")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_a_source_file_corrupted_in_place_is_refused_not_spread(tmp_path: Path) -> None:
    d, needs = _source(tmp_path)
    listing = scan(LocalTransport(), [str(d)], hash_files=True)[str(d)]
    (d / MANIFEST_NAME).write_text(to_json(from_listing("org/m", "rev1", listing)))
    good = _manifests(tmp_path, needs)
    _corrupt_in_place(d / "a.bin")
    with pytest.raises(FleetError) as err:
        _manifests(tmp_path, needs)
    assert str(err.value) == (
        f"source {d}: a.bin: content differs from its {MANIFEST_NAME} under the same size and mtime (changed in "
        "place: corrupted?); nothing was transferred -- restore the file, or remove the manifest if the change "
        "is meant")
    (d / MANIFEST_NAME).unlink()  # the change is meant: a new revision, hashed from the bytes
    assert _manifests(tmp_path, needs) != good


def test_an_unchanged_source_reuses_its_hashes_and_full_reads_every_byte(tmp_path: Path) -> None:
    d, needs = _source(tmp_path)
    listing = scan(LocalTransport(), [str(d)], hash_files=True)[str(d)]
    m = from_listing("org/m", "rev1", listing)
    lent = m.files[0].__class__(path="a.bin", size=4096, sha256="0" * 64, mtime=m.files[0].mtime,
                                stamp=m.files[0].stamp)  # a recorded hash fleet would trust
    (d / MANIFEST_NAME).write_text(to_json(m.__class__(model=m.model, revision="rev1", files=(lent, m.files[1]))))
    assert _manifests(tmp_path, needs) == "0" * 64  # same size, mtime and stamp: not read again
    with pytest.raises(FleetError):
        _manifests(tmp_path, needs, full=True)  # --full reads the bytes: they are not what it says


def test_a_receiver_hashes_what_arrived(tmp_path: Path) -> None:
    d, _ = _source(tmp_path)
    expected = from_listing("org/m", "rev1", scan(LocalTransport(), [str(d)], hash_files=True)[str(d)])
    _corrupt_in_place(d / "b.bin")  # as if it arrived damaged: right size, the source's mtime
    after = scan(LocalTransport(), [str(d)], hash_files=True, hash_only=["b.bin"])[str(d)]
    assert [(x.path, x.problem) for x in compare(expected, after)] == [("b.bin", "sha256")]
    assert scan(LocalTransport(), [str(d)], hash_files=True, hash_only=["b.bin"])[str(d)].sha256 is not None
    assert for_host(expected, after).files[1].stamp == after.stamps["b.bin"]  # type: ignore[index]
