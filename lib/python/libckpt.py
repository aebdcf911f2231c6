"""libckpt for Python: the trainer's side of spotd, in pure Python.

The same calls as the C library (include/ckpt.h), over the same control
protocol (docs/protocols.md); the standard library only, nothing to build.

    import libckpt

    ck = libckpt.open()                  # inert when not run under spotd
    step = 0
    if ck.resume_dir:
        load(ck.resume_dir)
        step = ck.resume_step + 1
    while True:
        a = ck.step(step)                # no system call is made per step
        if a == libckpt.SAVE:            # except one non-blocking recv()
            try:
                save(ck.save_dir, step)
                ck.saved(step)
            except OSError as e:
                ck.failed(str(e))
        elif a == libckpt.STOP:
            break
        train_one_step()
        step += 1
    ck.close()

Errors raise CkptError, whose .code is the C library's (negative) error.
"""

import json
import os
import select
import socket
import time

__all__ = ["CONTINUE", "SAVE", "STOP", "CkptError", "Ckpt", "open", "version"]

CONTINUE, SAVE, STOP = 0, 1, 2

E_INVAL, E_NOMEM, E_CONNECT, E_PROTOCOL, E_VERSION = -1, -2, -3, -4, -5
E_STATE, E_CLOSED, E_IO, E_TIMEOUT, E_RESTORE = -6, -7, -8, -9, -10

_MESSAGES = {
    E_INVAL: "invalid argument",
    E_NOMEM: "out of memory",
    E_CONNECT: "cannot connect to spotd's control socket",
    E_PROTOCOL: "protocol error: unexpected message from spotd",
    E_VERSION: "spotd speaks an unsupported protocol version",
    E_STATE: "call not valid in the current state",
    E_CLOSED: "spotd closed the connection",
    E_IO: "system call failed (see errno)",
    E_TIMEOUT: "spotd did not answer in time",
    E_RESTORE: "the checkpoint to resume from could not be restored",
}

LINE_MAX = 65536
WELCOME_TIMEOUT = 10.0
PROGRESS_S = 1.0                       # between two progress reports of step()
AWAIT_S = 10.0                         # after a query's answer: wait for its checkpoint
HOLD_MAX_MS = 60000                    # the longest hold a query may ask for
_VERSION = "0.2.0"


def version():
    return _VERSION


class CkptError(Exception):
    def __init__(self, code, detail=None):
        self.code = code
        msg = _MESSAGES.get(code, "unknown error")
        super().__init__(msg + (": " + detail if detail else ""))


def _env_int(name):
    v = os.environ.get(name, "")
    if v.isdigit() and int(v) <= 1 << 20:
        return int(v)
    return -1


def _int(msg, key, nullable=False):
    v = msg.get(key)
    if v is None and nullable:
        return -1
    if type(v) is not int or abs(v) >= 1 << 53:
        raise CkptError(E_PROTOCOL, "%s is not an integer" % key)
    return v


class Ckpt:
    """One connection to spotd (or an inert handle).  One thread at a time."""

    def __init__(self, socket_path=None):
        self._sock = None
        self._buf = b""
        self._err = None
        self._step = 0
        self._stop = False
        self._query = None
        self._awaiting = False          # answered a query: its checkpoint is coming
        self._progress = float("-inf")  # when the last progress went
        self._pending = None          # (id, step or -1, dir)
        self._saving = False
        self.resume_dir = None
        self.resume_step = -1
        self._restoring = False         # resume_dir is not there yet (--early-start)
        self._restore_failed = False
        if not socket_path:
            return
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.connect(socket_path)
        except OSError as e:
            raise CkptError(E_CONNECT, "%s: %s" % (socket_path, e.strerror)) from None
        self._sock = s
        try:
            self._send(type="hello", pid=os.getpid(), local_rank=_env_int("LOCAL_RANK"),
                       local_world_size=_env_int("LOCAL_WORLD_SIZE"),
                       lib="libckpt-py " + _VERSION, resume_wait=True)
            deadline = time.monotonic() + WELCOME_TIMEOUT
            while True:
                msg = self._next()
                if msg is not None:
                    break
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([s], [], [], left)[0]:
                    raise CkptError(E_TIMEOUT)
                self._fill()
            if msg["type"] != "welcome":
                raise CkptError(E_PROTOCOL, "expected a welcome")
            rd = msg.get("resume_dir")
            if rd is not None and (type(rd) is not str or not rd):
                raise CkptError(E_PROTOCOL, "resume_dir")
            self.resume_dir = rd
            self.resume_step = _int(msg, "resume_step", True) if rd else -1
            restoring = msg.get("restoring", False)
            if type(restoring) is not bool:
                raise CkptError(E_PROTOCOL, "restoring")
            self._restoring = restoring and rd is not None
            self._handle_all()
        except BaseException:
            self.close()
            raise

    # ---- the wire ----

    def _send(self, **members):
        line = json.dumps(dict(v=1, **members), separators=(",", ":"),
                          ensure_ascii=False).encode() + b"\n"
        try:
            self._sock.sendall(line)
        except (BrokenPipeError, ConnectionResetError):
            self._err = E_CLOSED
            raise CkptError(E_CLOSED) from None
        except OSError as e:
            self._err = E_IO
            raise CkptError(E_IO, e.strerror) from None

    def _fill(self):
        if len(self._buf) >= LINE_MAX:
            raise CkptError(E_PROTOCOL, "line over %d bytes" % LINE_MAX)
        try:
            data = self._sock.recv(LINE_MAX - len(self._buf), socket.MSG_DONTWAIT)
        except (BlockingIOError, InterruptedError):
            return
        except ConnectionResetError:
            raise CkptError(E_CLOSED) from None
        except OSError as e:
            raise CkptError(E_IO, e.strerror) from None
        if not data:
            raise CkptError(E_CLOSED)
        self._buf += data

    def _next(self):
        nl = self._buf.find(b"\n")
        if nl < 0:
            if len(self._buf) >= LINE_MAX:
                raise CkptError(E_PROTOCOL, "line over %d bytes" % LINE_MAX)
            return None
        line, self._buf = self._buf[:nl], self._buf[nl + 1:]
        try:
            msg = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise CkptError(E_PROTOCOL, "not JSON") from None
        if type(msg) is not dict or type(msg.get("type")) is not str:
            raise CkptError(E_PROTOCOL, "not a message")
        if any(type(v) in (dict, list, float) for v in msg.values()):
            raise CkptError(E_PROTOCOL, "not a flat message")
        if msg.get("v") != 1 or type(msg.get("v")) is not int:
            raise CkptError(E_VERSION if type(msg.get("v")) is int else E_PROTOCOL)
        return msg

    def _handle_all(self):
        while True:
            msg = self._next()
            if msg is None:
                return
            t = msg["type"]
            if t == "query":
                hold = _int(msg, "hold_ms", True)
                self._query = (_int(msg, "id"), min(max(hold, 0), HOLD_MAX_MS))
            elif t == "checkpoint":
                d = msg.get("dir")
                if type(d) is not str or not d or self._saving:
                    raise CkptError(E_PROTOCOL, "checkpoint")
                self._pending = (_int(msg, "id"), _int(msg, "step", True), d)
                self._awaiting = False
            elif t == "cancel":
                if self._pending and self._pending[0] == _int(msg, "id") and not self._saving:
                    self._pending = None
                self._awaiting = False
            elif t == "stop":
                self._stop = True
                self._awaiting = False
            elif t == "restored":
                e = msg.get("error", 0)
                if not self._restoring or (e is not None and type(e) is not str):
                    raise CkptError(E_PROTOCOL, "restored")
                self._restoring = False
                self._restore_failed = e is not None
            else:
                raise CkptError(E_PROTOCOL, "unknown message %r" % t)

    def resume_wait(self, timeout=None):
        """Wait until resume_dir is there to load (ckpt_resume_wait()): under
        spotd's --early-start the command starts while its checkpoint is
        still being restored, and the folder appears whole, verified, once
        the restore ends.  Returns at once without an early start.  Raises
        CkptError(E_RESTORE) when the restore failed (exit: spotd starts
        the command again from a checkpoint that restores), E_TIMEOUT after
        timeout seconds (None: as long as it takes)."""
        until = None if timeout is None else time.monotonic() + timeout
        while self._restoring:
            if self._err:
                raise CkptError(self._err)
            left = 1.0 if until is None else until - time.monotonic()
            if left <= 0:
                raise CkptError(E_TIMEOUT)
            if select.select([self._sock], [], [], left)[0]:
                try:
                    self._fill()
                    self._handle_all()
                except CkptError as e:
                    self._err = e.code
                    raise
        if self._restore_failed:
            raise CkptError(E_RESTORE)

    def _await_checkpoint(self, seconds):
        """The step was answered: spotd announces the step to save at once
        every worker has answered.  A fast trainer would run past it: wait,
        up to seconds, for the checkpoint, a cancel or a stop.  _awaiting
        is still set when none came."""
        until = time.monotonic() + seconds
        while self._awaiting:
            left = until - time.monotonic()
            ready, _, _ = select.select([self._sock], [], [], max(left, 0))
            if ready:
                self._fill()
                self._handle_all()
            if not ready or left <= 0:
                break

    def _answer(self, step):
        """Answer the query at step.  A terminating notice's query holds the
        trainer here, so that the step it saves is this one: the hold ends
        with the checkpoint, or after hold_ms, when the trainer says it
        trains on ("released": another worker may need its next step, a
        collective) and waits again at the next step, as without a hold."""
        (q, hold), self._query = self._query, None
        if hold > 0:
            self._send(type="step", id=q, step=step, hold_ms=hold)
        else:
            self._send(type="step", id=q, step=step)
        self._awaiting = True
        if hold > 0:
            self._await_checkpoint(hold / 1000.0)
            if self._awaiting:
                self._send(type="released", id=q, step=step)

    # ---- the calls ----

    @property
    def inert(self):
        return self._sock is None

    @property
    def save_dir(self):
        return self._pending[2] if self._saving else None

    def fileno(self):
        return self._sock.fileno() if self._sock else -1

    def step(self, step):
        if type(step) is not int or step < 0:
            raise CkptError(E_INVAL)
        if self._sock is None:
            return CONTINUE
        if self._err:
            raise CkptError(self._err)
        if self._saving:
            raise CkptError(E_STATE, "report the open save first")
        self._step = step
        try:
            self._fill()
            self._handle_all()
            if self._awaiting:
                self._await_checkpoint(AWAIT_S)
                self._awaiting = False
            if self._query is not None:
                self._answer(step)
            now = time.monotonic()
            if now - self._progress >= PROGRESS_S:
                self._progress = now
                self._send(type="progress", step=step)
        except CkptError as e:
            self._err = e.code
            raise
        p = self._pending
        if p and (p[1] < 0 or step >= p[1]):
            self._saving = True
            return SAVE
        return STOP if self._stop else CONTINUE

    def _report(self, **members):
        if not self._saving:
            raise CkptError(E_STATE, "no save is open")
        ck_id = self._pending[0]
        self._saving = False
        self._pending = None
        if self._err:
            raise CkptError(self._err)
        self._send(id=ck_id, **members)

    def saved(self, step):
        """Report the open save; under the signal method (no save open,
        connected), report that SPOT_CKPT_DIR holds step (id 0)."""
        if type(step) is not int or step < 0:
            raise CkptError(E_INVAL)
        if not self._saving and self._sock is not None and not self._err:
            self._send(type="saved", id=0, step=step)
            return
        self._report(type="saved", step=step)

    def failed(self, reason="unspecified"):
        self._report(type="failed", reason=str(reason))

    def file_done(self, path):
        """Say that path, a file of the save being written, is finished:
        spotd uploads the rest of it now, while the trainer writes the
        others.  Optional; nothing happens on an inert handle."""
        try:
            if isinstance(path, bytes):
                path = path.decode("utf-8")
            ok = isinstance(path, str) and 0 < len(path.encode("utf-8")) < 4096
        except UnicodeError:
            ok = False              # not UTF-8: the protocol cannot say it
        if not ok:
            raise CkptError(E_INVAL)
        if self._sock is None:
            return
        if self._err:
            raise CkptError(self._err)
        self._send(type="file_done", path=path)

    def request_save(self):
        if self._sock is None:
            return
        if self._err:
            raise CkptError(self._err)
        self._send(type="request", step=self._step)

    def close(self):
        if self._sock is not None:
            self._sock.close()
            self._sock = None
            self._err = E_CLOSED

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def open(socket_path=None):
    """Connect through socket_path or SPOT_SOCKET; inert without either."""
    return Ckpt(socket_path or os.environ.get("SPOT_SOCKET"))
