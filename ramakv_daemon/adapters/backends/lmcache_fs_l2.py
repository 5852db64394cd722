"""The stock LMCache server's ``fs`` L2 tier on disk: its file names, a scan, a removal.

lmcache 0.5.6's fs L2 adapter (``lmcache/v1/distributed/l2_adapters/fs_l2_adapter.py``)
writes one file per object key, flat under its ``base_path``:
``<model>@0x<kv_rank:08x>@<object_group_id:x>@<chunk_hash_hex>[@<cache_salt>].data``, where
``<model>`` is the model name with ``/`` written ``-SEP-`` (``@`` is forbidden in model
names and salts, so the split is unambiguous). A write goes to ``<name>.tmp`` (or under a
``relative_tmp_dir``) and is renamed into place; a file is never rewritten (a store of a
key on disk is skipped), so its mtime is when the chunk first reached disk. The adapter
keeps no index (lookups stat the file), so a file removed here is an ordinary miss.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ramakv_daemon.core.l2_budget import L2File

KEY_SEP = "@"
SLASH = "-SEP-"
EXT = ".data"
TMP_EXT = ".tmp"


def file_name(
    model_name: str, kv_rank: int, chunk_hash: str, cache_salt: str = "", object_group_id: int = 0
) -> str:
    """The name lmcache's fs adapter gives this key's file (its ``_object_key_to_filename``)."""
    base = (
        f"{model_name.replace('/', SLASH)}{KEY_SEP}{kv_rank:#010x}"
        f"{KEY_SEP}{object_group_id:x}{KEY_SEP}{chunk_hash.lower()}"
    )
    return f"{base}{KEY_SEP}{cache_salt}{EXT}" if cache_salt else f"{base}{EXT}"


def parse_name(name: str) -> tuple[str, int, int, str, str] | None:
    """``(model_name, kv_rank, object_group_id, chunk_hash, cache_salt)`` of a data file's
    name, or None for anything else (temporary files, other tools' files)."""
    if not name.endswith(EXT):
        return None
    parts = name[: -len(EXT)].split(KEY_SEP)
    if len(parts) == 4:
        model, rank, group, chunk = parts
        salt = ""
    elif len(parts) == 5:
        model, rank, group, chunk, salt = parts
    else:
        return None
    if not model or not chunk or len(chunk) % 2:
        return None
    try:
        bytes.fromhex(chunk)
        return model.replace(SLASH, "/"), int(rank, 16), int(group, 16), chunk.lower(), salt
    except ValueError:
        return None


@dataclass(slots=True)
class Scan:
    """What one pass over the tier's folder found.

    Attributes:
        files: every data file lmcache could read back.
        temporary: writes in progress (``.tmp``): neither counted nor removed.
        other: entries that are not the adapter's (left alone, counted).
        other_bytes: their size.
    """

    files: list[L2File]
    temporary: int = 0
    other: int = 0
    other_bytes: int = 0

    @property
    def bytes(self) -> int:
        """Bytes of the data files."""
        return sum(f.size for f in self.files)


def scan(base_path: str | Path) -> Scan:
    """The tier's files (raises OSError when the folder cannot be listed). A file that
    goes away during the scan (deleted by the server meanwhile) is skipped."""
    out = Scan(files=[])
    with os.scandir(base_path) as entries:
        for entry in entries:
            name = entry.name
            try:
                if not entry.is_file(follow_symlinks=False):
                    out.other += 1
                    continue
                st = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            key = parse_name(name)
            if key is None:
                if name.endswith(TMP_EXT):
                    out.temporary += 1
                else:
                    out.other += 1
                    out.other_bytes += st.st_size
                continue
            model, rank, group, chunk, salt = key
            out.files.append(L2File(name, model, rank, group, chunk, salt, st.st_size, st.st_mtime))
    return out


def remove(base_path: str | Path, files: Iterable[L2File]) -> Iterator[tuple[L2File, bool]]:
    """Unlink each file; yields it and whether this call removed it (False: already gone).
    Any other error (permissions, I/O) raises OSError naming the file."""
    base = Path(base_path)
    for f in files:
        try:
            (base / f.name).unlink()
        except FileNotFoundError:
            yield f, False
            continue
        yield f, True
