"""The outbox pattern: an application row and its job commit (or roll back) together.

Run: `python examples/outbox_app.py [DB_PATH]`. It signs up two users in an
application table of the same SQLite database; the second signup fails after
enqueuing, so neither its user row nor its job exists. Then a worker sends the
welcome note for the first user.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import welcome_plugin

from jobcore import Queue, Worker, make_plugin_manager


def sign_up(queue: Queue, email: str, outbox: Path, *, fail_after_enqueue: bool = False) -> None:
    with queue.transaction() as db:  # the APSW connection the jobs table lives on
        db.execute("INSERT INTO users (email) VALUES (?)", (email,))
        user_id = db.last_insert_rowid()
        queue.enqueue(
            "send_welcome", {"user_id": user_id, "email": email, "outbox_dir": str(outbox)}
        )
        if fail_after_enqueue:
            raise RuntimeError(f"payment check failed for {email}")


def main() -> None:
    workdir = Path(tempfile.mkdtemp(prefix="jobcore-outbox-"))
    db_path = sys.argv[1] if len(sys.argv) > 1 else str(workdir / "app.db")
    outbox = workdir / "outbox"
    outbox.mkdir()

    pm = make_plugin_manager(plugins=[("welcome", welcome_plugin)])
    queue = Queue(db_path, pm=pm)
    with queue.transaction() as db:
        db.execute("CREATE TABLE IF NOT EXISTS users (id INTEGER PRIMARY KEY, email TEXT UNIQUE)")

    sign_up(queue, "ada@example.com", outbox)
    try:
        sign_up(queue, "bob@example.com", outbox, fail_after_enqueue=True)
    except RuntimeError as exc:
        print(f"signup rolled back: {exc}")

    with queue.transaction() as db:
        users = [row[0] for row in db.execute("SELECT email FROM users ORDER BY id")]
    print("users:", users)
    print("jobs:", [(job.type, job.payload["email"], str(job.status)) for job in queue.list_jobs()])

    Worker(queue, until_empty=True).run()
    for note in sorted(outbox.iterdir()):
        print(f"{note.name}: {note.read_text().splitlines()[0]}")
    queue.close()


if __name__ == "__main__":
    main()
