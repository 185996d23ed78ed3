"""Manifest round trip and the comparison that names every differing file; disk refusals;
the per-run authorized_keys line."""

from __future__ import annotations

import json

import pytest

from launcher.errors import UsageError
from launcher.weights import auth, disk
from launcher.weights.manifest import (
    Listing, Manifest, Mismatch, compare, content_revision, for_host, from_json, from_listing, parse_scan,
    to_json,
)  # fmt: skip

SRC = Listing(exists=True, files={"a.bin": (10, 100), "b.json": (2, 100)}, sha256={"a.bin": "aa" * 32, "b.json": "bb" * 32})


def _expected() -> Manifest:
    return from_listing("org/m", "r1", SRC)


def test_round_trip_and_revision_from_content() -> None:
    m = _expected()
    assert from_json(json.loads(to_json(m))) == m
    derived = from_listing("org/m", None, SRC)
    assert derived.revision == content_revision(m.files) and derived.revision.startswith("sha256:")
    assert derived.same_content(from_listing("org/m", None, SRC))


@pytest.mark.parametrize(("doc", "error"), [
    ({"format": "other"}, "not a fleet-weights/1 manifest"),
    ({"format": "fleet-weights/1", "model": "m", "revision": "r"}, "malformed manifest: 'files'"),
])  # fmt: skip
def test_bad_manifests_say_what_is_wrong(doc: object, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        from_json(doc)


def test_compare_names_each_differing_file() -> None:
    m = _expected()
    host = Listing(exists=True, files={"a.bin": (10, 999), "c.tmp": (1, 1)})
    assert compare(m, host) == (
        Mismatch(path="a.bin", problem="modified", detail="mtime differs from the manifest's"),
        Mismatch(path="b.json", problem="missing"),
        Mismatch(path="c.tmp", problem="extra", detail="not in the source"),
    )
    hashed = Listing(exists=True, files={"a.bin": (10, 100), "b.json": (3, 100)}, sha256={"a.bin": "cc" * 32, "b.json": "x"})
    assert [(x.path, x.problem) for x in compare(m, hashed)] == [("a.bin", "sha256"), ("b.json", "size")]


def test_a_hosts_own_manifest_vouches_for_its_own_mtimes() -> None:
    """The hub client stamps files with the download time: each host records its own mtimes."""
    m = _expected()
    now = Listing(exists=True, files={"a.bin": (10, 555), "b.json": (2, 556)})
    own = for_host(m, now)
    assert own.same_content(m) and own.by_path()["a.bin"].mtime == 555
    assert compare(m, Listing(exists=True, files=now.files, manifest=own)) == ()


def test_scan_output_is_parsed_with_manifest_errors_kept() -> None:
    raw = {"exists": True, "files": {"a": [1, 2]}, "manifest": "error: Expecting value", "free": 5, "fs": 7}
    lst = parse_scan(raw)
    assert lst.files == {"a": (1, 2)} and lst.manifest is None and lst.manifest_error == "Expecting value"
    assert parse_scan({**raw, "manifest": json.loads(to_json(_expected()))}).manifest == _expected()


def test_disk_refusal_names_host_paths_need_and_have() -> None:
    small = (1, 8 * 1024**2)  # (filesystem, free)
    big = (2, 10**12)
    assert disk.refusals("h3", [("/srv/models/a", *small, 6 * 1024**2), ("/srv/models/b", *small, 3 * 1024**2),
                                ("/data/c", *big, 10**9)]) == [
        "h3: /srv/models/a + /srv/models/b needs 9.0 MiB (9437184 bytes), has 8.0 MiB (8388608 bytes) free"]


def test_authorized_line_forces_the_daemon_and_is_from_the_receivers_only() -> None:
    key = auth.new_key()
    line = auth.authorized_line(key, "/run/fleet-weights-abc/rsyncd 0.conf", ["198.18.0.12", "198.18.0.11"], "abc")
    assert line == ('restrict,from="198.18.0.11,198.18.0.12",command="rsync --server --daemon '
                    f'\'--config=/run/fleet-weights-abc/rsyncd 0.conf\' ." {key.public} fleet-weights-abc')
    assert key.private.startswith(b"-----BEGIN OPENSSH PRIVATE KEY-----")


def test_daemon_config_serves_one_dir_read_only() -> None:
    assert auth.daemon_config("/srv/models/org/my 100% model", "root") == (
        "[weights]\npath = /srv/models/org/my 100%% model\nread only = yes\nuse chroot = no\nuid = root\n"
        "refuse options = copy-links copy-dirlinks keep-dirlinks copy-unsafe-links copy-devices write-devices\n")
    with pytest.raises(UsageError) as info:
        auth.daemon_config("/srv/models/a\nb", "root")
    assert str(info.value) == ("'/srv/models/a\\nb': a model path may not hold a newline, end in a backslash "
                               "or start or end with white space (rsyncd.conf cannot say it)")
