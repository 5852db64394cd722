"""Every referenced chunk; find a hash; evict by hand (dry run, confirm, force confirm)."""

from __future__ import annotations

from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Input, Label

from ramakv_console.messages import Chunks
from ramakv_console.screens.confirm import ConfirmDialog
from ramakv_console.widgets.connection_banner import ConnectionBanner
from ramakv_console.widgets.refcount_table import RefcountTable
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
    """The global refcount table."""

    BINDINGS = [
        Binding("slash", "focus_find", "Find hash"),
        Binding("space", "mark", "Mark"),
        Binding("d", "evict", "Evict…"),
        Binding("escape", "focus_table", "Table", show=False),
    ]

    def compose(self) -> ComposeResult:
        yield StatsHeader(id="stats")
        yield ConnectionBanner(id="banner")
        yield Input(placeholder="/ find a chunk hash", id="hash-find")
        yield Label("", id="refcount-status")
        yield RefcountTable(id="refcounts")
        yield Footer()

    @property
    def table(self) -> RefcountTable:
        """The refcount table."""
        return self.query_one(RefcountTable)

    def on_mount(self) -> None:
        self.sub_title = "Refcounts"
        self.watch(self.app, "revision", self._on_revision, init=False)
        self._status()
        self.table.focus()

    def _on_revision(self, _revision: int) -> None:
        self.table.apply(self.app.last_changes)  # type: ignore[attr-defined]
        self._status()

    def _status(self) -> None:
        t = self.table
        total = len(self.app.state.refcounts)  # type: ignore[attr-defined]
        text = f"showing {t.row_count} of {total} chunks · marked {len(t.marked)}"
        if t.find_text:
            text += f" · find: '{t.find_text}'"
        self.query_one("#refcount-status", Label).update(text)

    def on_input_changed(self, event: Input.Changed) -> None:
        self.table.find_text = event.value.strip()
        self.table.rebuild()
        self._status()

    def on_input_submitted(self, _event: Input.Submitted) -> None:
        self.table.focus()

    def action_focus_find(self) -> None:
        self.query_one("#hash-find", Input).focus()

    def action_focus_table(self) -> None:
        self.table.focus()

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
        send = self.app.send_event  # type: ignore[attr-defined]
        dry = await send({"type": "chunk_evict", "chunk_hashes": hashes, "dry_run": True})
        if not dry.get("ok"):
            self.notify(f"chunk_evict dry run failed: {dry.get('error')}", severity="error")
            return
        evicted, refused = evict_plan(dry.get("data") or {})
        buttons = [("cancel", "Cancel", "default")]
        if evicted:
            buttons.insert(0, ("evict", f"Evict {len(evicted)}", "warning"))
        if refused:
            buttons.insert(0, ("force", "Force all…", "error"))
        choice = await self.app.push_screen_wait(
            ConfirmDialog("Evict chunks? (dry run result)", plan_lines(evicted, refused), buttons))
        force = False
        if choice == "force":
            holders = sorted({w for who in refused.values() for w in who})
            again = await self.app.push_screen_wait(ConfirmDialog(
                "Really FORCE eviction?",
                [f"{len(refused)} chunks are still referenced by: {', '.join(holders)}.",
                 "Forcing releases those sessions' references and deletes the chunks;",
                 "the sessions will have to recompute them."],
                [("force", "Yes, force evict", "error"), ("cancel", "Cancel", "default")]))
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
            self.table.rebuild()
            self._status()
        else:
            self.notify(f"chunk_evict failed: {real.get('error')}", severity="error")
