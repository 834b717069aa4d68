"""The garbage-collection hooks of the file blob store (a part of :class:`FileBlobStore`).

A blob's write time is its file's mtime: a put of a blob already stored, and a touch, set it to
now. A deletion renames the file to ``<name>.gc`` (atomically), checks the mtime of what it
renamed, and unlinks it only if that is still before the cutoff (else it links it back): a put
that refreshed the file first is seen; one that comes after the rename finds no file and
stores it again. A read of a blob whose deletion was killed half way puts it back (a hard
link, so a blob stored again meanwhile keeps its own, newer, write time).
"""

from __future__ import annotations

import abc
import contextlib
import errno
import os
import re
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path

from ._blobref import BlobInfo, check_blob_refs, check_written_before, parse_blob_ref
from ._errors import StorageIOError

__all__ = ["ASIDE", "FileBlobCollection"]

_FOLDER = re.compile(r"[0-9a-f]{2}")
_REST = re.compile(r"[0-9a-f]{62}")
_READ_ONLY = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})
ASIDE = ".gc"
"""The suffix of a blob set aside by a deletion."""


class FileBlobCollection(abc.ABC):
    """The collection hooks over blobs stored as ``<root>/<2 hex>/<62 hex>``."""

    _root: Path

    @abc.abstractmethod
    def _path(self, hexdigest: str) -> Path:
        """Where the blob with this hex digest is stored."""

    @staticmethod
    def _aside(path: Path) -> Path:
        return path.with_name(path.name + ASIDE)

    def _put_back(self, path: Path) -> bool:
        """Put back a blob a killed deletion set aside; whether there is one at ``path`` now.
        A link, not a rename: a blob stored again meanwhile keeps its own (newer) write time."""
        aside = self._aside(path)
        try:
            os.link(aside, path)
        except FileExistsError:
            pass
        except FileNotFoundError:
            return path.exists()
        except OSError:  # cannot be put back here (a read-only store)
            return path.exists()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(aside)
        return True

    def _refresh(self, path: Path, ref: str) -> bool:
        """Set the write time of the stored blob at ``path`` to now; whether it is stored."""
        for _ in range(2):
            try:
                os.utime(path)
            except FileNotFoundError:
                if not self._put_back(path):
                    return False
            except OSError as e:
                if e.errno in _READ_ONLY:  # a read-only store: nothing can collect it either
                    return path.exists()
                raise StorageIOError(e.errno, f"cannot store blob {ref}: {e.strerror}") from e
            else:
                return True
        return path.exists()

    def touch(self, refs: Iterable[str]) -> list[str]:
        wanted = [(ref, self._path(parse_blob_ref(ref))) for ref in check_blob_refs(refs)]
        return [ref for ref, path in wanted if not self._refresh(path, ref)]

    def _folders(self) -> list[Path]:
        try:
            names = sorted(os.listdir(self._root))
        except FileNotFoundError:
            return []
        except OSError as e:
            raise StorageIOError(e.errno, f"cannot list the blobs: {e.strerror}") from e
        return [self._root / n for n in names if _FOLDER.fullmatch(n)]

    def _entries(self) -> Iterator[tuple[Path, str, os.stat_result]]:
        """``(path, name, stat)`` of every file in the blob folders (those that still exist)."""
        for folder in self._folders():
            try:
                names = os.listdir(folder)
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError as e:
                raise StorageIOError(e.errno, f"cannot list the blobs: {e.strerror}") from e
            for name in names:
                try:
                    st = os.stat(folder / name)
                except OSError:  # gone meanwhile, or a symlink loop / dangling link: not a blob
                    continue
                yield folder / name, name, st

    def list_blobs(self) -> Iterator[BlobInfo]:
        for path, name, st in self._entries():
            rest = name.removesuffix(ASIDE)
            if _REST.fullmatch(rest) is None or not stat.S_ISREG(st.st_mode):
                continue  # not a blob (a folder named like one is not ours to delete)
            if rest != name and path.with_name(rest).exists():
                continue  # set aside, but stored again meanwhile: listed once
            yield BlobInfo(f"sha256:{path.parent.name}{rest}", st.st_mtime, st.st_size)

    def delete_blobs(self, refs: Iterable[str], *, written_before: float) -> list[str]:
        written_before = check_written_before(written_before)
        wanted = [(ref, self._path(parse_blob_ref(ref))) for ref in check_blob_refs(refs)]
        deleted = []
        for ref, path in wanted:
            aside = self._aside(path)
            try:
                if _not_a_file(path) or _not_a_file(aside):
                    continue  # a folder (or FIFO, ...) named like a blob: not a blob
                try:
                    os.replace(path, aside)
                except FileNotFoundError:
                    if not aside.exists():  # else: set aside by a killed deletion; decide now
                        continue
                if os.stat(aside).st_mtime < written_before:
                    os.unlink(aside)
                    deleted.append(ref)
                else:  # stored or touched again since it was listed: keep it
                    self._put_back(path)
            except FileNotFoundError:
                continue  # a read put it back meanwhile
            except OSError as e:
                raise StorageIOError(e.errno, f"cannot delete blob {ref}: {e.strerror}") from e
        return deleted

    def remove_leftovers(self, *, written_before: float) -> int:
        removed = 0
        for path, name, st in self._entries():
            if not stat.S_ISREG(st.st_mode):
                continue  # not a temp file a put left (a folder, a FIFO, ...): not ours
            if name.startswith(".tmp-") and st.st_mtime < written_before:
                try:
                    path.unlink()
                except FileNotFoundError:
                    continue
                except OSError as e:
                    raise StorageIOError(
                        e.errno, f"cannot remove the leftover {path}: {e.strerror}"
                    ) from e
                removed += 1
        return removed

    def interrupted_deletes(self) -> list[str]:
        return sorted(
            f"sha256:{path.parent.name}{name.removesuffix(ASIDE)}"
            for path, name, st in self._entries()
            if name.endswith(ASIDE)
            and _REST.fullmatch(name.removesuffix(ASIDE))
            and stat.S_ISREG(st.st_mode)
        )

    def restore_interrupted_deletes(self) -> int:
        return sum(self._put_back(self._path(ref[7:])) for ref in self.interrupted_deletes())


def _not_a_file(path: Path) -> bool:
    """Whether something other than a regular file is at ``path`` (nothing there: False)."""
    try:
        return not stat.S_ISREG(os.lstat(path).st_mode)
    except FileNotFoundError:
        return False
