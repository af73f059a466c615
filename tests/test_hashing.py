"""dataplane.hashing: the one chunked file hasher the manifest, the promotion digest and the
weights-changed check share; its digests are hashlib's over the same bytes."""

import hashlib

from dataplane.hashing import CHUNK, sha256_file, sha256_files


def test_a_file_spanning_several_chunks_hashes_as_its_bytes(tmp_path):
    data = bytes(range(256)) * (CHUNK // 256 * 2 + 3)  # two chunks and a partial one
    path = tmp_path / "w.safetensors"
    path.write_bytes(data)
    assert sha256_file(path) == hashlib.sha256(data).hexdigest()
    assert sha256_file(str(path)) == sha256_file(path)


def test_an_empty_file_hashes_as_no_bytes(tmp_path):
    (tmp_path / "empty").write_bytes(b"")
    assert sha256_file(tmp_path / "empty") == hashlib.sha256().hexdigest()


def test_several_files_hash_as_their_bytes_one_after_another(tmp_path):
    (tmp_path / "a").write_bytes(b"ab")
    (tmp_path / "b").write_bytes(b"c")
    assert sha256_files([tmp_path / "a", tmp_path / "b"]) == hashlib.sha256(b"abc").hexdigest()
    assert sha256_files([tmp_path / "b", tmp_path / "a"]) == hashlib.sha256(b"cab").hexdigest()
