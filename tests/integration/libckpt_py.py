"""lib/python/libckpt.py against a scripted spotd (a thread on a real Unix
socket): the same conversation as the C library's unit test, plus inert
mode and bad peers.  Prints PASS:/FAIL: lines."""

import json
import os
import socket
import sys
import tempfile
import threading
import time

import strictjson  # the tests' one strict JSON parser (tests/integration)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "lib", "python"))
import libckpt  # noqa: E402

FAILED = []


def check(name, ok, why=""):
    print(("PASS: libckpt.py: %s" % name) if ok else ("FAIL: libckpt.py: %s: %s" % (name, why)),
          flush=True)
    if not ok:
        FAILED.append(name)


def expect(name, want, got):
    check(name, want == got, "expected %r, got %r" % (want, got))


class Spotd(threading.Thread):
    """Accepts one client and plays script: ("say", line), ("hear", type,
    {key: value}) or ("sleep", seconds).  self.error says what went wrong, None when all went."""

    def __init__(self, path, script):
        super().__init__(daemon=True)
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(path)
        self.srv.listen(1)
        self.script = script
        self.error = "did not finish"
        self.heard = []

    def run(self):
        conn, _ = self.srv.accept()
        f = conn.makefile("rb")
        try:
            for step in self.script:
                if step[0] == "say":
                    conn.sendall(step[1].encode() + b"\n")
                    continue
                if step[0] == "sleep":
                    time.sleep(step[1])
                    continue
                line = f.readline()
                msg = strictjson.loads(line)
                while msg.get("type") == "progress":    # once a second, between any two
                    msg = strictjson.loads(f.readline())
                self.heard.append(msg)
                if msg.get("v") != 1 or msg.get("type") != step[1]:
                    self.error = "expected %s, heard %r" % (step[1], msg)
                    return
                for k, v in step[2].items():
                    if msg.get(k) != v:
                        self.error = "%s: %s is %r, not %r" % (step[1], k, msg.get(k), v)
                        return
            self.error = None
            f.read()                            # until the client closes
        finally:
            conn.close()
            self.srv.close()


def until(ck, step, want, limit=2.0):
    end = time.monotonic() + limit
    while True:
        a = ck.step(step)
        if a == want or time.monotonic() > end:
            return a
        time.sleep(0.001)


def main():
    os.environ.pop("SPOT_SOCKET", None)
    ck = libckpt.open()
    check("without SPOT_SOCKET the handle is inert", ck.inert and ck.fileno() == -1)
    expect("inert: every step continues", {libckpt.CONTINUE},
           {ck.step(s) for s in range(1000)})
    expect("inert: no resume", (None, -1), (ck.resume_dir, ck.resume_step))
    ck.request_save()
    ck.file_done("state.bin")
    try:
        ck.saved(3)
        check("inert: saved without a save is a state error", False, "no error")
    except libckpt.CkptError as e:
        expect("inert: saved without a save is a state error", libckpt.E_STATE, e.code)

    tmp = tempfile.mkdtemp(prefix="spotd-ckpt-py.")
    path = os.path.join(tmp, "ctl.sock")
    script = [
        ("hear", "hello", {"local_rank": 3, "pid": os.getpid()}),
        ("say", '{"v":1,"type":"welcome","resume_dir":"/ck/g7","resume_step":700,"gen":7}\n'
                '{"v":1,"type":"query","id":1}'),
        ("hear", "step", {"id": 1, "step": 701}),
        ("say", '{"v":1,"type":"checkpoint","id":2,"gen":8,"step":705,"dir":"/ck/g8/w3",'
                '"deadline":null,"future":"ignored"}'),
        ("hear", "file_done", {"path": 'sub/"\u00e9".bin'}),
        ("hear", "saved", {"id": 2, "step": 705}),
        ("hear", "request", {"step": 710}),
        ("say", '{"v":1,"type":"checkpoint","id":3,"gen":9,"step":null,"dir":"/ck/\\u00e9",'
                '"deadline":"2026-11-30T10:00:00Z"}'),
        ("hear", "failed", {"id": 3, "reason": 'disk "full"\n'}),
        ("say", '{"v":1,"type":"stop","reason":"notice"}'),
    ]
    spotd = Spotd(path, script)
    spotd.start()
    os.environ["LOCAL_RANK"] = "3"
    os.environ["SPOT_SOCKET"] = path
    ck = libckpt.open()
    del os.environ["SPOT_SOCKET"], os.environ["LOCAL_RANK"]
    expect("the welcome's resume point", ("/ck/g7", 700), (ck.resume_dir, ck.resume_step))
    expect("the query is answered at the next step", libckpt.CONTINUE, ck.step(701))
    expect("steps before the checkpoint's continue", libckpt.CONTINUE, until(ck, 704, None, 0.3))
    expect("the checkpoint's step saves", libckpt.SAVE, ck.step(705))
    expect("into the directory spotd gave", "/ck/g8/w3", ck.save_dir)
    try:
        ck.step(706)
        check("a step with a save open is a state error", False, "no error")
    except libckpt.CkptError as e:
        expect("a step with a save open is a state error", libckpt.E_STATE, e.code)
    ck.file_done(b'sub/"\xc3\xa9".bin')
    for bad in (b"bad\xff", "", None, "\udcff"):
        try:
            ck.file_done(bad)
            check("file_done(%r) is refused" % (bad,), False, "no error")
        except libckpt.CkptError as e:
            expect("file_done(%r) is refused" % (bad,), libckpt.E_INVAL, e.code)
    ck.saved(705)
    expect("no save open after saved", None, ck.save_dir)
    expect("training goes on", libckpt.CONTINUE, ck.step(710))
    ck.request_save()
    expect("a checkpoint with no step saves at once", libckpt.SAVE, until(ck, 711, libckpt.SAVE))
    expect("... into its directory (UTF-8)", "/ck/\u00e9", ck.save_dir)
    ck.failed('disk "full"\n')
    expect("stop", libckpt.STOP, until(ck, 712, libckpt.STOP))
    ck.close()
    spotd.join(5)
    expect("the scripted spotd heard what it expected", None, spotd.error)
    os.unlink(path) if os.path.exists(path) else None

    # A terminating notice's query: held at the answered step until the
    # checkpoint names it; after a hold that ran out, the trainer says it
    # trains on and waits at its next step.
    spotd = Spotd(path, [
        ("hear", "hello", {}),
        ("say", '{"v":1,"type":"welcome","resume_dir":null,"resume_step":null,"gen":null}\n'
                '{"v":1,"type":"query","id":1,"hold_ms":20000}'),
        ("hear", "step", {"id": 1, "step": 10, "hold_ms": 20000}),
        ("sleep", 0.2),
        ("say", '{"v":1,"type":"checkpoint","id":1,"gen":1,"step":10,"dir":"/ck/g1/w0",'
                '"deadline":null}'),
        ("hear", "saved", {"id": 1, "step": 10}),
        ("say", '{"v":1,"type":"query","id":2,"hold_ms":300}'),
        ("hear", "step", {"id": 2, "step": 11, "hold_ms": 300}),
        ("hear", "released", {"id": 2, "step": 11}),
        ("say", '{"v":1,"type":"checkpoint","id":2,"gen":2,"step":12,"dir":"/ck/g2/w0",'
                '"deadline":null}'),
        ("hear", "saved", {"id": 2, "step": 12}),
        ("say", '{"v":1,"type":"stop","reason":"notice"}'),
    ])
    spotd.start()
    ck = libckpt.open(path)
    expect("held at the answered step: it saves that step", libckpt.SAVE, ck.step(10))
    ck.saved(10)
    expect("a hold that runs out: training goes on", libckpt.CONTINUE,
           until(ck, 11, None, 1.0))
    expect("... and the next step waits for its checkpoint", libckpt.SAVE, ck.step(12))
    expect("... into its directory", "/ck/g2/w0", ck.save_dir)
    ck.saved(12)
    expect("stop after the hold", libckpt.STOP, until(ck, 13, libckpt.STOP))
    ck.close()
    spotd.join(5)
    expect("the holding spotd heard what it expected", None, spotd.error)
    os.unlink(path) if os.path.exists(path) else None

    # --early-start: the welcome says the folder is being restored; the
    # trainer waits in resume_wait() until "restored" (verified, then failed).
    spotd = Spotd(path, [
        ("hear", "hello", {"resume_wait": True}),
        ("say", '{"v":1,"type":"welcome","resume_dir":"/ck/g3/w0","resume_step":30,"gen":3,'
                '"restoring":true}'),
        ("hear", "request", {}),
        ("say", '{"v":1,"type":"restored","error":null}'),
    ])
    spotd.start()
    ck = libckpt.open(path)
    expect("early start: where it will resume", ("/ck/g3/w0", 30), (ck.resume_dir, ck.resume_step))
    try:
        ck.resume_wait(0.05)
        check("early start: nothing restored yet, the wait times out", False, "returned")
    except libckpt.CkptError as e:
        expect("early start: nothing restored yet, the wait times out", libckpt.E_TIMEOUT, e.code)
    ck.request_save()
    ck.resume_wait(10)
    check("... and returns once it is restored", True)
    ck.resume_wait(0)
    ck.close()
    spotd.join(5)
    expect("the restoring spotd heard what it expected", None, spotd.error)
    os.unlink(path) if os.path.exists(path) else None
    spotd = Spotd(path, [
        ("hear", "hello", {}),
        ("say", '{"v":1,"type":"welcome","resume_dir":"/ck/g3/w0","resume_step":30,"gen":3,'
                '"restoring":true}\n{"v":1,"type":"restored","error":"chunk 5 is corrupt"}'),
    ])
    spotd.start()
    ck = libckpt.open(path)
    try:
        ck.resume_wait()
        check("early start: a failed restore raises E_RESTORE", False, "returned")
    except libckpt.CkptError as e:
        expect("early start: a failed restore raises E_RESTORE", libckpt.E_RESTORE, e.code)
    ck.close()
    spotd.join(5)
    os.unlink(path) if os.path.exists(path) else None
    ck = libckpt.open()
    ck.resume_wait(0)
    check("inert: resume_wait returns at once", True)

    for name, answer, code in (
            ("another protocol version", '{"v":2,"type":"welcome"}', libckpt.E_VERSION),
            ("garbage", "not json", libckpt.E_PROTOCOL),
            ("a nested object", '{"v":1,"type":"welcome","resume_dir":{}}', libckpt.E_PROTOCOL),
            ("a message before the welcome", '{"v":1,"type":"stop","reason":"x"}',
             libckpt.E_PROTOCOL)):
        spotd = Spotd(path, [("hear", "hello", {}), ("say", answer)])
        spotd.start()
        try:
            libckpt.open(path)
            check("a peer sending %s is refused" % name, False, "accepted")
        except libckpt.CkptError as e:
            expect("a peer sending %s is refused" % name, code, e.code)
        spotd.join(5)
        os.unlink(path)
    try:
        libckpt.open(os.path.join(tmp, "none.sock"))
        check("no socket: a connect error", False, "connected")
    except libckpt.CkptError as e:
        expect("no socket: a connect error", libckpt.E_CONNECT, e.code)
    os.rmdir(tmp)
    return 1 if FAILED else 0


if __name__ == "__main__":
    sys.exit(main())
