"""Keys shared by the session table and the session detail: suspend, restore, fork, close."""

from __future__ import annotations

from textual.binding import Binding
from textual.screen import Screen

from ramakv_console.messages import Sessions
from ramakv_console.screens.confirm import ConfirmDialog

SESSION_BINDINGS = [
    Binding("s", "act('session_suspend')", "Suspend"),
    Binding("r", "act('snapshot_restore')", "Restore"),
    Binding("k", "act('session_fork')", "Fork"),
    Binding("K", "act('session_fork_end')", "Fork end"),
    Binding("x", "act('session_close')", "Close"),
    Binding("e", "fire_for_session", "Fire…"),
]


class SessionActionsMixin(Screen[None]):
    """A screen that knows which session is selected and can act on it."""

    def selected_session(self) -> str | None:
        """The session the keys act on; each screen overrides it (the base selects none)."""
        return None

    def action_act(self, event_type: str) -> None:
        sid = self.selected_session()
        if sid is None:
            self.notify("No session selected", severity="warning")
            return
        if event_type != "session_close":
            self.post_message(Sessions.Act(event_type, sid))
            return

        def answer(choice: str | None) -> None:
            if choice == "close":
                self.post_message(Sessions.Act(event_type, sid))

        self.app.push_screen(
            ConfirmDialog(
                f"Close session {sid}?",
                [
                    "Its references are released and chunks no other session holds",
                    "are deleted from every tier. The stored row is deleted.",
                ],
                [("close", "Close session", "error"), ("cancel", "Cancel", "default")],
            ),
            answer,
        )

    def action_fire_for_session(self) -> None:
        self.post_message(Sessions.Fire(self.selected_session()))
