"""The key list, per screen."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Markdown

HELP = """\
# ram-a-kv console

Everything is live: the tables follow the daemon's `/trace` websocket, not polling.
If the daemon goes away a red banner says why and the console reconnects by itself:
after a "too slow" drop it resumes from the last event it saw; after any other drop
(the daemon may have restarted) it rebuilds from a fresh snapshot.

## Anywhere
| key | does |
|---|---|
| `1` | Sessions (home) |
| `2` | Refcounts |
| `3` | Trace |
| `4` | Fire an event |
| `5` | Config editor |
| `?` / `f1` | this help |
| `ctrl+p` | command palette (every action, and themes) |
| `escape` | back / close a dialog |
| `q` | quit |

## Sessions
| key | does |
|---|---|
| `/` | filter by session id (enter returns to the table, escape clears it) |
| `v` | show / hide suspended sessions |
| `o` | cycle the sort: id, state, turns, chunks, last event |
| `enter` | open the session's detail |
| `s` | suspend (releases its references, orders its chunks cold) |
| `r` | restore (snapshot_restore: references + prefetch again) |
| `k` | fork (hold its current chunks) |
| `K` | fork end (release the newest fork hold) |
| `x` | close (asks first; deletes the session) |
| `e` | fire an event with this session id prefilled |

## Session detail
The ordered chunk map (read from the daemon) with each chunk's global refcount; chunks
other sessions also hold are highlighted with how many references they hold. Below: this
session's recent events.
Same action keys as the table (`s r k K x e`).

## Refcounts
| key | does |
|---|---|
| `/` | find hashes by prefix (escape clears) |
| `n` / `b` | next / previous page (200 chunks, by refcount) |
| `space` | mark / unmark the chunk |
| `d` | evict the marked chunks (or the one under the cursor) |

Eviction always starts with a dry run: the dialog lists what would be evicted and what
is refused because live sessions hold it. *Force* evicts refused chunks too, releasing
those sessions' references; it asks a second time.

## Trace
| key | does |
|---|---|
| `p` | pause / resume (events keep arriving and are shown on resume) |
| `/` | filter by event type or session id (escape clears) |
| `f` | failed events only |
| `c` | clear the log |

## Fire an event
Pick the type (from the daemon's `list_events`; enter or space opens the list); the focus
then goes to the first field, and `escape` leaves a field. Required fields are marked `*`.
Chunk hashes go one per line; JSON fields are checked before sending.
`ctrl+s` sends; the daemon's answer is shown as it came back.

## Config
Edits the daemon's config file (`--config`, else `$RAM_A_KV_CONFIG`, else
`/etc/ram-a-kv/config.toml`) and the SDK's (`~/.config/ram-a-kv/config.toml`).
`ctrl+s` validates, shows the diff and writes atomically (a `.bak` is kept).
Unknown keys are kept; comments are **not** kept (the file is rewritten with tomli-w).
Every daemon key is read at start-up, so daemon changes need a daemon restart.
"""


class HelpScreen(ModalScreen[None]):
    """Markdown help; escape or q closes it."""

    BINDINGS = [Binding("escape,q,question_mark,f1", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help"):
            yield Markdown(HELP)
