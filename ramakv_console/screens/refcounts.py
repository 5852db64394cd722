"""Every referenced chunk; find a hash; evict by hand (dry run, confirm, force confirm)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Input, Label
from textual.widgets.button import ButtonVariant

from ramakv_console.context import ConsoleContext
from ramakv_console.messages import Chunks
from ramakv_console.screens.confirm import ConfirmDialog
from ramakv_console.state import Changes
from ramakv_console.widgets.connection_banner import ConnectionBanner
from ramakv_console.widgets.key_bar import KeyBar
from ramakv_console.widgets.refcount_table import PAGE, RefcountTable
from ramakv_console.widgets.stats_header import StatsHeader


def evict_plan(data: dict[str, Any]) -> tuple[list[str], dict[str, list[str]]]:
    """(would evict, refused hash -> holders) from a chunk_evict answer's data."""
    refused = {str(h): [str(x) for x in v] for h, v in (data.get("refused") or {}).items()}
    return [str(h) for h in data.get("evicted") or []], refused


def plan_lines(evicted: list[str], refused: dict[str, list[str]]) -> list[str]:
    """The dialog's body."""
    if evicted:
        lines = [f"Will evict ({len(evicted)}):"] + [f"  {h}" for h in evicted]
    else:
        lines = ["Nothing can be evicted without force."]
    if refused:
        lines.append("")
        lines.append(f"Refused, still held ({len(refused)}):")
        lines += [f"  {h}  held by {', '.join(who) or '?'}" for h, who in refused.items()]
    return lines


class RefcountsScreen(Screen[None]):
    """The daemon's chunks by refcount, a page at a time."""

    BINDINGS = [
        Binding("slash", "focus_find", "Find hash"),
        Binding("space", "mark", "Mark"),
        Binding("d", "evict", "Evict…"),
        Binding("n", "page(1)", "Next page"),
        Binding("b", "page(-1)", "Prev page"),
        Binding("escape", "clear_find", "Clear find", show=False),
    ]
    REFRESH_S = 3.0  # while showing, the page is fetched again this often (at least)

    def __init__(self, ctx: ConsoleContext) -> None:
        super().__init__()
        self.ctx = ctx
        self._fetching = False
        self._fetched_at = 0.0
        self._took = 0.0

    def compose(self) -> ComposeResult:
        yield StatsHeader(self.ctx, id="stats")
        yield ConnectionBanner(self.ctx, id="banner")
        yield Input(placeholder="/ find a chunk hash (prefix)", id="hash-find")
        yield Label("", id="refcount-status")
        yield RefcountTable(self.ctx.send, id="refcounts")
        yield KeyBar()

    @property
    def table(self) -> RefcountTable:
        """The refcount table."""
        return self.query_one(RefcountTable)

    def on_mount(self) -> None:
        self.sub_title = "Refcounts"
        self.ctx.updated.subscribe(self, self._state_updated, immediate=True)
        self.set_interval(1.0, self._tick)
        self._status()
        self.table.focus()
        self.fetch()

    def on_screen_resume(self) -> None:
        self.table.focus()
        self.fetch()

    def _tick(self) -> None:
        """Refresh while showing, but never back to back: the daemon's chunk_top scan
        takes seconds on a large store, so wait at least 4x its last duration."""
        if not self.is_current or self._fetching:
            return
        if time.monotonic() - self._fetched_at >= max(self.REFRESH_S, 4 * self._took):
            self.fetch()

    @work(exclusive=True, group="refcounts-page")
    async def fetch(self, delay: float = 0.0) -> None:
        """Load the page from the daemon (``delay`` debounces typing in the find box)."""
        if delay:
            await asyncio.sleep(delay)
        self._fetching = True
        t0 = time.monotonic()
        try:
            await self.table.load()
        finally:
            self._fetching = False
            self._fetched_at = time.monotonic()
            self._took = self._fetched_at - t0
        self._status()

    def _state_updated(self, changes: Changes) -> None:
        if self.is_current:
            self.table.apply_refcounts(changes.chunks)

    def _status(self) -> None:
        t = self.table
        if not t.loaded:
            text = "loading…"
        elif t.error:
            text = f"[red]chunk_top failed: {t.error}[/red]"
        else:
            total = f"{t.total}" if t.total_exact else f"more than {t.total}"
            last = min(t.page_offset + t.row_count, t.total)
            text = (
                f"chunks {t.page_offset + 1 if t.row_count else 0}-{last} of {total} "
                f"(by refcount) · marked {len(t.marked)}"
            )
            if t.find_text:
                text += f" · find: '{t.find_text}' (esc clears)"
        self.query_one("#refcount-status", Label).update(text)

    def on_input_changed(self, event: Input.Changed) -> None:
        self.table.find_text = event.value.strip()
        self.table.page_offset = 0
        self.fetch(0.25)

    def on_input_submitted(self, _event: Input.Submitted) -> None:
        self.table.focus()

    def action_focus_find(self) -> None:
        self.query_one("#hash-find", Input).focus()

    def action_clear_find(self) -> None:
        box = self.query_one("#hash-find", Input)
        if box.value:
            box.value = ""
        self.table.focus()

    def action_page(self, step: int) -> None:
        t = self.table
        new = max(0, t.page_offset + step * PAGE)
        if new != t.page_offset and (step < 0 or new < t.total):
            t.page_offset = new
            self.fetch()

    def action_mark(self) -> None:
        self.table.toggle_mark()
        self._status()

    def action_evict(self) -> None:
        hashes = self.table.targets()
        if not hashes:
            self.notify("No chunk selected", severity="warning")
            return
        self.post_message(Chunks.EvictRequested(hashes))
        self.evict_flow(hashes)

    @work(exclusive=True, group="evict")
    async def evict_flow(self, hashes: list[str]) -> None:
        """Dry run, show the plan, confirm; force needs a second confirmation."""
        send = self.ctx.send
        dry = await send({"type": "chunk_evict", "chunk_hashes": hashes, "dry_run": True})
        if not dry.get("ok"):
            self.notify(f"chunk_evict dry run failed: {dry.get('error')}", severity="error")
            return
        evicted, refused = evict_plan(dry.get("data") or {})
        buttons: list[tuple[str, str, ButtonVariant]] = [("cancel", "Cancel", "default")]
        if evicted:
            buttons.insert(0, ("evict", f"Evict {len(evicted)}", "warning"))
        if refused:
            buttons.insert(0, ("force", "Force all…", "error"))
        choice = await self.app.push_screen_wait(
            ConfirmDialog("Evict chunks? (dry run result)", plan_lines(evicted, refused), buttons)
        )
        force = False
        if choice == "force":
            holders = sorted({w for who in refused.values() for w in who})
            again = await self.app.push_screen_wait(
                ConfirmDialog(
                    "Really FORCE eviction?",
                    [
                        f"{len(refused)} chunks are still referenced by: {', '.join(holders)}.",
                        "Forcing releases those sessions' references and deletes the chunks;",
                        "the sessions will have to recompute them.",
                    ],
                    [("force", "Yes, force evict", "error"), ("cancel", "Cancel", "default")],
                )
            )
            if again != "force":
                return
            force = True
        elif choice != "evict":
            return
        real = await send({"type": "chunk_evict", "chunk_hashes": hashes, "force": force})
        self.post_message(Chunks.Evicted(hashes, force, real))
        if real.get("ok"):
            done = (real.get("data") or {}).get("evicted") or []
            self.notify(f"Evicted {len(done)} chunk(s){' (forced)' if force else ''}")
            self.table.marked.clear()
            self.fetch()
        else:
            self.notify(f"chunk_evict failed: {real.get('error')}", severity="error")
