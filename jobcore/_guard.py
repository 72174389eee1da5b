"""The guard server of a worker, and the guard of each command it runs (stdlib only).

`jobcore.subprocesses` starts one server per worker process: `python -I -S
_guard.py FD`. For each command the worker sends it, over the control socket FD,
the command's socket and stdin/stdout/stderr (SCM_RIGHTS); the server forks a
guard for it (cheap: no interpreter start per command). The guard leads a new
session, makes itself a child subreaper (Linux), so every descendant of the
command, even one that left its process group with `setsid`, stays below it;
starts the command, which leads a session of its own as a directly started one
would (so `kill 0` or `kill -- -$$` in a script reaches its own processes, never
the guard); and ends the whole tree when the command exits, when the worker asks
(`term`, then `kill`), or when the worker is gone: the worker's end of the
command's socket closes when the worker process dies in any way (SIGKILL, the
OOM killer), whichever thread started the command. Then the tree gets SIGTERM
and, after the grace period, SIGKILL; everything is reaped. The server is a
subreaper too: when a guard itself is killed, what it held comes to the server,
which kills it; a stopped guard is resumed. The server ends when the worker
does; a guard outlives a dead server and carries on.

Protocol on a command's socket. Worker to guard: `LENGTH\n` then LENGTH bytes of
NUL-separated fields (grace, cwd or empty, the argument count, the arguments,
then `NAME=value` environment entries, or a single `-` for the server's
environment); later `term\n` or `kill\n`. Guard to worker: `guard` once it holds
the instructions (no word before it: the request died with the server, nothing
was started), then `pid COMMAND GUARD` or `error ERRNO HEX-FILENAME`; at the end
`exit CODE` (or `exit -`).
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
HANDLED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)  # the guard ends the tree on these
HAVE_PROC = sys.platform.startswith("linux") and os.path.isdir("/proc/self")


def _prctl() -> object | None:
    """libc's prctl, loaded once in the server (so each forked guard has it at once)."""
    if not HAVE_PROC:
        return None
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError, ImportError):
        return None  # then only the process group is reliably reached


PRCTL = _prctl()


def make_subreaper() -> None:
    """Orphaned descendants reparent to this process instead of init (Linux)."""
    if PRCTL is not None:
        PRCTL(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # type: ignore[operator]


def process_children() -> dict[int, list[int]]:
    """Each process's children, read from /proc (a scan of every process)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat[stat.rindex(b")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(name))
    return children


def descendants() -> list[int]:
    """Every process below this one (children first), found through /proc."""
    children = process_children()
    found: list[int] = []
    todo = [os.getpid()]
    while todo:
        for child in children.get(todo.pop(), ()):
            found.append(child)
            todo.append(child)
    return found


def signal_tree(sig: int, group: int) -> bool:
    """Send `sig` to every descendant (without /proc: to the command's `group`, and False);
    False: none left."""
    if not HAVE_PROC:
        if group > 0:  # 0 would be the guard's own group
            with contextlib.suppress(OSError):
                os.killpg(group, sig)
        return False
    found = descendants()
    for pid in found:
        with contextlib.suppress(OSError):
            os.kill(pid, sig)
    return bool(found)


def start(args: list[str], cwd: str | None, env: dict[str, str] | None) -> int:
    """Start the command (posix_spawn: no copy of this process); its pid, or the OSError
    the chdir or the exec raised (naming the folder or the program)."""
    if cwd is not None:
        os.chdir(cwd)  # the guard's own folder: the command inherits it
    if env is not None:  # the program is looked up in the command's PATH, as Popen does
        os.environ["PATH"] = env.get("PATH", os.defpath)
    try:
        return os.posix_spawnp(
            args[0],
            args,
            os.environ if env is None else env,
            setsid=True,  # its own session and group: its `kill 0` never reaches the guard
            setsigdef=(signal.SIGPIPE, signal.SIGXFSZ, *HANDLED),  # as a fresh program has them
        )
    except OSError as exc:
        if exc.filename is None:
            exc.filename = args[0]
        raise


class Guard:
    def __init__(self, channel: int, grace: float) -> None:
        self.channel = channel
        self.grace = grace
        self.main: int | None = None
        self.exit_code: int | None = None
        self.terminating = False
        self.kill_at: float | None = None

    def send(self, line: bytes) -> None:
        with contextlib.suppress(OSError):
            os.write(self.channel, line + b"\n")

    def reap(self) -> bool:
        """Collect ended children; False when none is left (and so no descendant either:
        orphans come to this subreaper), which spares a scan of every process."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return False
            if pid == 0:
                return True
            if pid == self.main:
                self.exit_code = os.waitstatus_to_exitcode(status)

    def terminate(self) -> None:
        """SIGTERM to the whole tree once; SIGKILL after the grace period."""
        if not self.terminating:
            self.terminating = True
            self.kill_at = time.monotonic() + self.grace
            signal_tree(signal.SIGTERM, self.main or 0)

    def report_exit(self) -> None:
        self.send(b"exit -" if self.exit_code is None else b"exit %d" % self.exit_code)

    def finish(self) -> None:
        """SIGKILL until nothing is left below, report the command's exit code, exit."""
        for _ in range(1000):
            if not self.reap() or not signal_tree(signal.SIGKILL, self.main or 0):
                break
            time.sleep(0.005)
        if not HAVE_PROC and self.exit_code is None and self.main is not None:  # group killed
            with contextlib.suppress(ChildProcessError):
                self.exit_code = os.waitstatus_to_exitcode(os.waitpid(self.main, 0)[1])
        self.reap()
        self.report_exit()
        os._exit(0)

    def run(self, args: list[str], cwd: str | None, env: dict[str, str] | None) -> None:
        make_subreaper()
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        for sig in HANDLED:
            signal.signal(sig, lambda *_: self.terminate())
        try:
            self.main = start(args, cwd, env)
        except OSError as exc:
            name = os.fsencode(exc.filename) if exc.filename is not None else b""
            self.send(b"error %d %s" % (exc.errno or 0, name.hex().encode()))
            os._exit(0)
        self.send(b"pid %d %d" % (self.main, os.getpid()))
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):  # the command's pipes close when the command's tree closes them
            os.dup2(null, fd)
        watched = [self.channel, wake_r]
        while True:
            ready, _, _ = select.select(watched, [], [], 0.25)
            if wake_r in ready:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_r, 4096)
            self.reap()
            if self.exit_code is not None:
                self.finish()
            if self.channel in ready:
                try:
                    data = os.read(self.channel, 4096)
                except OSError:
                    data = b""
                if not data:  # the worker died or let go of the command
                    watched.remove(self.channel)
                    self.terminate()
                elif b"kill" in data:
                    self.finish()
                elif b"term" in data:
                    self.terminate()
            if self.kill_at is not None and time.monotonic() >= self.kill_at:
                self.finish()


def read_spec(channel: int) -> tuple[float, list[str], str | None, dict[str, str] | None]:
    data = b""
    while b"\n" not in data:
        chunk = os.read(channel, 65536)
        if not chunk:
            os._exit(1)
        data += chunk
    head, _, data = data.partition(b"\n")
    length = int(head)
    while len(data) < length:  # nothing follows the spec before our reply
        chunk = os.read(channel, 65536)
        if not chunk:
            os._exit(1)
        data += chunk
    fields = [os.fsdecode(field) for field in data.split(b"\0")]
    grace, cwd, count = float(fields[0]), fields[1] or None, int(fields[2])
    args = fields[3 : 3 + count]
    rest = fields[3 + count :]
    env = None if rest == ["-"] else dict(entry.split("=", 1) for entry in rest if entry)
    return grace, args, cwd, env


def guard(channel: int, streams: list[int]) -> None:
    """In the forked child: become the guard of one command and never return."""
    try:
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.setsid()
        for target, fd in enumerate(streams):
            os.dup2(fd, target)
        for fd in {channel, *streams} - {0, 1, 2}:
            if fd != channel:
                os.close(fd)
        os.set_inheritable(channel, False)
        grace, args, cwd, env = read_spec(channel)
        os.write(channel, b"guard\n")  # from here on, the command may have been started
        Guard(channel, grace).run(args, cwd, env)
    finally:
        os._exit(1)


def reap_guards(guards: set[int]) -> None:
    """Collect ended guards, and resume a stopped one (stopped, it could end nothing). A
    guard that did not end its own way (killed) left its command's tree to this
    subreaper: whatever child is not a guard is killed."""
    strays = False
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG | os.WUNTRACED)
        except ChildProcessError:
            break
        if pid == 0:
            break
        if os.WIFSTOPPED(status):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGCONT if pid in guards else signal.SIGKILL)
            continue
        strays |= pid not in guards or status != 0
        guards.discard(pid)
    if strays and HAVE_PROC:  # their children come here as they die: each death wakes us
        for pid in set(process_children().get(os.getpid(), ())) - guards:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def serve(control: socket.socket) -> None:
    """Fork a guard for each request until the worker closes the control socket."""
    make_subreaper()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    guards: set[int] = set()
    while True:
        ready, _, _ = select.select([control.fileno(), wake_r], [], [])
        if wake_r in ready:
            with contextlib.suppress(BlockingIOError):
                os.read(wake_r, 4096)
            reap_guards(guards)
        if control.fileno() not in ready:
            continue
        try:
            message, fds, _, _ = socket.recv_fds(control, 16, 4)
        except OSError:
            os._exit(0)
        if not message:
            os._exit(0)  # the worker is gone; each guard carries on with its command
        if len(fds) != 4:
            for fd in fds:
                os.close(fd)
            continue
        pid = os.fork()
        if pid == 0:
            signal.set_wakeup_fd(-1)
            control.close()
            os.close(wake_r)
            os.close(wake_w)
            guard(fds[0], fds[1:])
        guards.add(pid)
        for fd in fds:
            os.close(fd)


def main() -> None:
    control = socket.socket(fileno=int(sys.argv[1]))
    control.set_inheritable(False)
    serve(control)


if __name__ == "__main__":
    main()
