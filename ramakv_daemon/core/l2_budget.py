"""The disk (L2) budget, purely: which dead chunks to delete, oldest first, to fit it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

#: Whether a chunk hash is still named (a live or suspended session's map, an open fork,
#: or whatever retention evidence the daemon keeps): such a chunk is never deleted here.
Referenced = Callable[[str], bool]
#: When the daemon last saw a chunk referenced (None: unknown): orders dead chunks.
LastUsed = Callable[[str], "float | None"]


@dataclass(frozen=True, slots=True)
class L2File:
    """One object of the fs L2 tier.

    Attributes:
        name: the file name (under the tier's base path).
        model_name: the key's model (vLLM's ``--model``), ``/`` restored.
        kv_rank: the key's packed rank (``(world<<24)|(rank<<16)|(local world<<8)|local``).
        object_group_id: the key's object group.
        chunk_hash: the chunk hash in lower-case hex (the daemon's chunk hash).
        cache_salt: the key's salt ("" when unsalted).
        size: bytes on disk.
        mtime: when it was written (seconds since the epoch; files are never rewritten).
    """

    name: str
    model_name: str
    kv_rank: int
    object_group_id: int
    chunk_hash: str
    cache_salt: str
    size: int
    mtime: float


def by_chunk(files: Iterable[L2File]) -> dict[str, list[L2File]]:
    """Files grouped by chunk hash (one per rank and object group)."""
    out: dict[str, list[L2File]] = {}
    for f in files:
        out.setdefault(f.chunk_hash, []).append(f)
    return out


@dataclass(frozen=True, slots=True)
class L2Chunk:
    """One chunk on disk: its files (a rank and object group each) and what they weigh."""

    chunk_hash: str
    files: tuple[L2File, ...]
    size: int
    age_ts: float  # the later of its newest file's mtime and its last known reference
    referenced: bool
    written_ts: float = 0.0  # its newest file's mtime


@dataclass(slots=True)
class L2Plan:
    """What one look at the tier found, and what to delete.

    Attributes:
        budget: bytes allowed (0 = no budget).
        files, bytes: the deployment's data files and their size.
        chunks: distinct chunk hashes among them.
        dead_chunks, dead_bytes: chunks no session, fork or retention evidence names.
        referenced_chunks, referenced_bytes: the others (never deleted here).
        delete: the dead chunks to delete, oldest first.
        bytes_after: the deployment's bytes once they are gone.
    """

    budget: int = 0
    files: int = 0
    bytes: int = 0
    chunks: int = 0
    dead_chunks: int = 0
    dead_bytes: int = 0
    referenced_chunks: int = 0
    referenced_bytes: int = 0
    delete: list[L2Chunk] = field(default_factory=list)
    bytes_after: int = 0

    @property
    def over(self) -> bool:
        """Over the budget before deleting anything."""
        return self.budget > 0 and self.bytes > self.budget

    @property
    def still_over(self) -> bool:
        """Over the budget even after the plan: the rest is referenced."""
        return self.budget > 0 and self.bytes_after > self.budget

    @property
    def delete_bytes(self) -> int:
        return sum(c.size for c in self.delete)

    def as_dict(self) -> dict[str, object]:
        """JSON-ready (the chunks to delete as a count and bytes)."""
        return {
            "budget_bytes": self.budget,
            "files": self.files,
            "bytes": self.bytes,
            "chunks": self.chunks,
            "dead_chunks": self.dead_chunks,
            "dead_bytes": self.dead_bytes,
            "referenced_chunks": self.referenced_chunks,
            "referenced_bytes": self.referenced_bytes,
            "over_budget": self.over,
            "delete_chunks": len(self.delete),
            "delete_bytes": self.delete_bytes,
            "bytes_after": self.bytes_after,
            "still_over_budget": self.still_over,
        }


def chunks_of(
    files: Iterable[L2File], referenced: Referenced, last_used: LastUsed | None = None
) -> list[L2Chunk]:
    """The files grouped into chunks, in retention order: oldest first (the later of the
    newest file's mtime and the last known reference), then hash (a total order)."""
    out = []
    for h, group in by_chunk(files).items():
        seen = last_used(h) if last_used is not None else None
        written = max(f.mtime for f in group)
        age = max(written, seen or 0.0)
        size = sum(f.size for f in group)
        out.append(L2Chunk(h, tuple(group), size, age, referenced(h), written))
    out.sort(key=lambda c: (c.age_ts, c.chunk_hash))
    return out


def plan_l2(
    files: Iterable[L2File],
    referenced: Referenced,
    budget: int,
    *,
    last_used: LastUsed | None = None,
    all_dead: bool = False,
    before: float | None = None,
    written_before: float | None = None,
    classify: bool = True,
) -> L2Plan:
    """Dead chunks to delete, oldest first: just enough to fit ``budget`` (nothing when
    within it or ``budget <= 0``), or every dead one with ``all_dead`` (an explicit clean-up).
    ``before``: only chunks older than this time (written and last referenced);
    ``written_before``: only chunks whose files were written before it (a fresh chunk may
    be a turn's whose turn_end has not named it yet). A referenced chunk is never listed, so
    the tier can stay over budget: :attr:`L2Plan.still_over` says so. ``classify=False``:
    within budget, only the files and bytes are counted (the daemon's cheap pass)."""
    plan = L2Plan(budget=max(0, budget))
    files = list(files)
    if not classify and not all_dead and (plan.budget == 0 or _size(files) <= plan.budget):
        plan.files, plan.bytes = len(files), _size(files)
        plan.chunks = len({f.chunk_hash for f in files})
        plan.bytes_after = plan.bytes
        return plan
    chunks = chunks_of(files, referenced, last_used)
    for c in chunks:
        plan.files += len(c.files)
        plan.bytes += c.size
        if c.referenced:
            plan.referenced_chunks += 1
            plan.referenced_bytes += c.size
        else:
            plan.dead_chunks += 1
            plan.dead_bytes += c.size
    plan.chunks = len(chunks)
    left = plan.bytes
    for c in chunks:
        if not all_dead and (plan.budget == 0 or left <= plan.budget):
            break
        if c.referenced or (before is not None and c.age_ts >= before):
            continue
        if written_before is not None and c.written_ts >= written_before:
            continue
        plan.delete.append(c)
        left -= c.size
    plan.bytes_after = left
    return plan


def _size(files: list[L2File]) -> int:
    return sum(f.size for f in files)
