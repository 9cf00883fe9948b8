"""Where a ``ShardWriter`` puts its files, and how a new dataset replaces an old one (W2, W5).

A dataset folder holds ``manifest.json`` and the shards it names. What else a writer may leave
behind — temp files, shards of a killed writer, a staging folder — is a *leftover*; ``Output``
removes leftovers before writing and after a failure, so a folder never keeps files that no
manifest names.

- Fresh output (no manifest): shards are written under their final names.
- Replacing a dataset (``overwrite``): the old manifest and its shards are not touched while
  the new shards are written into a staging folder (``_shardkit-pack-a/``, or ``-b/`` when the
  published manifest names files in ``-a/``: names a lister can find). ``publish``:

  1. publishes a manifest naming the staged shards — the commit point: before it the old
     dataset is whole and readable, after it the new one is;
  2. deletes the old shards and links (or copies) each staged shard to its final name;
  3. publishes the final manifest (the names a fresh write gives, so the bytes and the
     fingerprint do not depend on whether a dataset was replaced, W1);
  4. deletes the staged names.

  A failure before 1 leaves the old dataset and removes the staging folder; a failure after 1
  leaves the new dataset (by its staged names until 3) and removes what no manifest names.
  After a SIGKILL the next writer into the folder removes the leftovers.

Not thread-safe; one ``Output`` per writer.
"""

from __future__ import annotations

import logging
import posixpath
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace

from shardkit.errors import ManifestError
from shardkit.format import MANIFEST_NAME, ShardInfo, decode_manifest
from shardkit.format.length_index import LENGTHS_FILE, LengthsInfo
from shardkit.format.manifest_companion import COMPANION_MIN_BYTES, COMPANION_NAME, encode_companion
from shardkit.storage import Store
from shardkit.storage.atomic import TEMP_PREFIX, remove_quietly, temp_files

log = logging.getLogger(__name__)

STAGING_PREFIX = "_shardkit-pack-"
STAGING_FOLDERS = (f"{STAGING_PREFIX}a", f"{STAGING_PREFIX}b")

#: ``build(shards, lengths)`` → the manifest bytes naming ``shards`` and length indexes (M10).
BuildManifest = Callable[[tuple[ShardInfo, ...], tuple[LengthsInfo, ...]], bytes]


def _names(entries: Sequence[ShardInfo] | Sequence[LengthsInfo]) -> list[str]:
    return [entry.name for entry in entries]


class Output:
    """The output folder of one writer: prepare (W5), shard names, publish (W2)."""

    def __init__(self, store: Store, name_format: str, overwrite: bool) -> None:
        self.store = store
        self.name_format = name_format
        self.folder = posixpath.dirname(name_format)
        suffix = posixpath.basename(name_format).rsplit("}", 1)[-1]
        self._shard_file = re.compile(r"[^/]*" + re.escape(suffix)) if suffix else None
        self.named: set[str] = set()  # the shards the published manifest names
        self.removed: list[str] = []  # leftovers removed so far, in order
        self.staging = self._prepare(overwrite)
        self.old_names = set(self.named)
        self.committed = False  # a manifest naming this writer's shards is published

    def shard_name(self, index: int) -> str:
        name = self.name_format.format(index=index)
        if self.staging is None:
            return name
        return posixpath.join(self.staging, posixpath.basename(name))

    def file_name(self, base: str) -> str:
        """Where a file other than a shard goes (a length index, M10): next to the shards."""
        return posixpath.join(self.staging or self.folder, base)

    def publish(self, shards: tuple[ShardInfo, ...], build: BuildManifest,
                lengths: tuple[LengthsInfo, ...] = ()) -> bytes:
        """Publish the manifest of ``shards`` (written under ``shard_name``) and ``lengths``
        (under ``file_name``) as above."""
        data = build(shards, lengths)
        self._publish_manifest(data, shards, lengths)
        self._delete(self.old_names - self.named)
        if self.staging is None:
            return data
        final = tuple(replace(s, name=self._final_name(s.name)) for s in shards)
        final_lengths = tuple(replace(e, name=self._final_name(e.name)) for e in lengths)
        pairs = [*zip(_names(shards), _names(final), strict=True),
                 *zip(_names(lengths), _names(final_lengths), strict=True)]
        for staged, name in pairs:
            self.store.copy(staged, name)
        data = build(final, final_lengths)
        self._publish_manifest(data, final, final_lengths)
        self._delete({staged for staged, _ in pairs})
        return data

    def after_failure(self, written: Iterable[str]) -> None:
        """Clean up after an exception: before the commit point, the shards ``written`` and
        the staging folder; after it, whatever the published manifest does not name."""
        if self.committed:
            self.remove_leftovers(refuse_foreign=False)
            return
        self._delete(set(written))
        if self.staging is not None:
            self._remove_folder(self.staging)  # temp files were discarded: empty now

    def remove_leftovers(self, refuse_foreign: bool = True) -> None:
        """Remove every file a writer may have left that the manifest does not name; refuse
        (``FileExistsError``) files in the shards folder that no writer makes (W5)."""
        remove, foreign = [], []
        for name in self._candidates():
            if name in (MANIFEST_NAME, COMPANION_NAME) or name in self.named:
                continue
            head, base = posixpath.split(name)
            if name.startswith(STAGING_PREFIX) or (not head and base.startswith(TEMP_PREFIX)):
                remove.append(name)  # a staging folder, or the temp file of a manifest
            elif head == self.folder and self._writer_made(base):
                remove.append(name)
            elif head == self.folder and self.folder:
                foreign.append(name)
        for name in remove:
            log.info("removing %s, left by an interrupted writer", self.store.url_of(name))
        self._delete(set(remove))
        self.removed.extend(remove)
        if foreign and refuse_foreign:
            raise FileExistsError(
                f"{self.store.url_of(self.folder)} holds {len(foreign)} file(s) that no manifest "
                f"names and no shardkit writer makes: {', '.join(foreign[:5])}"
                f"{' …' if len(foreign) > 5 else ''}; remove them or write the dataset elsewhere")

    # ---- internals --------------------------------------------------------------------------
    def _prepare(self, overwrite: bool) -> str | None:
        """Refuse to clobber a dataset unless ``overwrite``; remove leftovers; never touch a
        published dataset (its manifest and shards stay until ``publish``). The staging
        folder's name when replacing a dataset."""
        if not self.store.exists(MANIFEST_NAME):
            self.remove_leftovers()
            return None
        where = self.store.url_of(MANIFEST_NAME)
        if not overwrite:
            raise FileExistsError(f"{where} exists; pass overwrite=True (CLI: --overwrite) to replace it")
        try:
            old = decode_manifest(self.store.read(MANIFEST_NAME), where)
            self.named = {*_names(old.shards), *_names(old.lengths)}
        except ManifestError:
            self.named = set()  # unreadable: nothing to keep readable, its shards are leftovers
        self.remove_leftovers()
        in_use = {name.split("/", 1)[0] for name in self.named}
        return next(f for f in STAGING_FOLDERS if f not in in_use)

    def _candidates(self) -> list[str]:
        """Where leftovers can be: the shards folder, the staging folders and temp files at
        the top (a manifest's). Never a walk of the whole tree: the output may be anywhere."""
        names = self.store.list(self.folder) if self.folder else self.store.list("")
        for folder in STAGING_FOLDERS:
            names += self.store.list(folder)
        root = self.store.local_path("")
        if root is not None:  # object stores publish whole objects: no temp files
            names += temp_files(root)
        return sorted(set(names))

    def _writer_made(self, base: str) -> bool:
        if base.startswith(TEMP_PREFIX) or LENGTHS_FILE.fullmatch(base):
            return True
        return self._shard_file is not None and self._shard_file.fullmatch(base) is not None

    def _final_name(self, staged: str) -> str:
        return posixpath.join(self.folder, posixpath.basename(staged))

    def _publish_manifest(self, data: bytes, shards: tuple[ShardInfo, ...],
                          lengths: tuple[LengthsInfo, ...]) -> None:
        if len(data) >= COMPANION_MIN_BYTES:  # before the JSON, which names the commit (M15)
            self.store.write_atomic(COMPANION_NAME, encode_companion(data))
        self.store.write_atomic(MANIFEST_NAME, data)
        self.committed = True
        self.named = {*_names(shards), *_names(lengths)}

    def _delete(self, names: set[str]) -> None:
        """Delete ``names``, then the staging folders they emptied."""
        for name in sorted(names):
            self.store.delete(name)
        for folder in sorted({n.split("/", 1)[0] for n in names if n.startswith(STAGING_PREFIX)}):
            self._remove_folder(folder)

    def _remove_folder(self, folder: str) -> None:
        path = self.store.local_path(folder)
        if path is not None:  # object stores have no folders: deleting the files was enough
            remove_quietly(path)
