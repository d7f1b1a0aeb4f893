"""CPU per Raft message: pysyncobj's TCP wire (pickle + zlib level 3 + Fernet, as its
TcpConnection sends and receives) against gnomon's (node/raft/wire.py codec in frames over TLS
1.3 between two in-memory `ssl` endpoints, as node/raft/transport.py does).

    python -m gnomon.bench transport [--quick]

Both sides of each message are measured (the leader encodes, every follower decodes) on
append_entries messages holding real command batches (CompleteTask commands encoded by
node/codec.py): an empty heartbeat, and entries of 1, 100 and 1,000 commands. Process CPU
time, in one process, so other load on the machine stretches wall time but not these figures
much. No peers: the comparison is the two wires.
"""

from __future__ import annotations

import ssl
import struct
import tempfile
import time
import zlib
from pathlib import Path

from gnomon.bench import Options
from gnomon.bench.report import Report, log
from gnomon.node import codec
from gnomon.node.core import commands as c
from gnomon.node.raft import wire
from gnomon.node.security.certificates import ensure_cluster_files

SIZES = (0, 1, 100, 1000)


def _message(n_commands: int, index: int) -> dict:
    message = {"type": "append_entries", "term": 7, "commit_index": index, "prevLogIdx": index,
               "prevLogTerm": 7}
    if n_commands:
        batch = c.Batch(now_ms=1_790_000_000_000 + index, commands=tuple(
            c.CompleteTask(run_id=f"job-{i % 97}@1790000000000", task_name="main",
                           fencing_token=10_000 + i, result=b'{"ok": true}',
                           output_tail="done\n", exit_code=0, duration_ms=12)
            for i in range(n_commands)))
        from pysyncobj import pickle as pysyncobj_pickle

        data = b"\x00" + pysyncobj_pickle.dumps((0, (codec.batch_to_bytes(batch),), {}))
        message["entries"] = [(data, index + 1, 7)]
    return message


class _OldWire:
    """pysyncobj 0.3's TcpConnection.send / __processParseMessage with a password set."""

    def __init__(self) -> None:
        import pickle

        from pysyncobj.encryptor import getEncryptor

        self._pickle = pickle
        self._fernet = getEncryptor("bench-cluster-secret")

    def roundtrip(self, message: dict) -> tuple[int, float, float]:
        t0 = time.process_time()
        data = zlib.compress(self._pickle.dumps(message, 2), 3)
        data = self._fernet.encrypt_at_time(data, int(time.monotonic()))
        frame = struct.pack("i", len(data)) + data
        t1 = time.process_time()
        got = self._pickle.loads(zlib.decompress(self._fernet.decrypt(frame[4:])))
        t2 = time.process_time()
        assert got["commit_index"] == message["commit_index"]
        return len(frame), t1 - t0, t2 - t1


class _NewWire:
    """Two TLS endpoints over memory BIOs, handshaken once, then frames of node/raft/wire.py."""

    def __init__(self, tls_dir: Path) -> None:
        files = ensure_cluster_files(tls_dir, {"n1": ["127.0.0.1"], "n2": ["127.0.0.1"]})

        def ctx(server: bool, f) -> ssl.SSLContext:
            x = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER if server else ssl.PROTOCOL_TLS_CLIENT)
            x.check_hostname = False
            x.verify_mode = ssl.CERT_REQUIRED
            x.load_cert_chain(str(f.cert), str(f.key))
            x.load_verify_locations(cafile=str(f.ca))
            return x

        self._a_in, self._a_out, self._b_in, self._b_out = (ssl.MemoryBIO() for _ in range(4))
        self.a = ctx(False, files["n2"]).wrap_bio(self._a_in, self._a_out, server_side=False)
        self.b = ctx(True, files["n1"]).wrap_bio(self._b_in, self._b_out, server_side=True)
        for _ in range(10):
            for obj in (self.a, self.b):
                try:
                    obj.do_handshake()
                except ssl.SSLWantReadError:
                    pass
            self._b_in.write(self._a_out.read())
            self._a_in.write(self._b_out.read())
        self.reader = wire.FrameReader(64 << 20)

    def roundtrip(self, message: dict) -> tuple[int, float, float]:
        t0 = time.process_time()
        self.a.write(wire.encode_frame(message))
        cipher = self._a_out.read()
        t1 = time.process_time()
        self._b_in.write(cipher)
        got = None
        while True:
            try:
                chunk = self.b.read(256 << 10)
            except ssl.SSLWantReadError:
                break
            for payload in self.reader.feed(chunk):
                got = wire.check_message(wire.decode(payload))
        t2 = time.process_time()
        assert got is not None and got["commit_index"] == message["commit_index"]
        return len(cipher), t1 - t0, t2 - t1


def _measure(wire_impl, n_commands: int, repeats: int) -> dict:
    sizes, send, recv = 0, 0.0, 0.0
    messages = [_message(n_commands, i) for i in range(repeats)]
    for m in messages:
        size, s, r = wire_impl.roundtrip(m)
        sizes, send, recv = sizes + size, send + s, recv + r
    return {"bytes": sizes // repeats, "send_us": send / repeats * 1e6,
            "recv_us": recv / repeats * 1e6}


def run(opts: Options) -> Report:
    report = Report("transport", opts.quick, title="CPU per Raft message, old wire vs new")
    repeats = {0: 2000, 1: 2000, 100: 200, 1000: 40}
    if opts.quick:
        repeats = {k: max(5, v // 20) for k, v in repeats.items()}
    with tempfile.TemporaryDirectory() as tmp:
        old, new = _OldWire(), _NewWire(Path(tmp) / "tls")
        for n in SIZES:
            log(f"append_entries with {n} commands: {repeats[n]} messages per wire")
            o, w = _measure(old, n, repeats[n]), _measure(new, n, repeats[n])
            report.data[f"commands_{n}"] = {"pickle_zlib_fernet": o, "codec_tls": w}
            label = "heartbeat (no entries)" if n == 0 else f"entry of {n} commands"
            report.add(f"{label}: send+receive CPU per message (us)",
                       round(w["send_us"] + w["recv_us"], 1), peer="pickle+zlib+Fernet",
                       peer_value=round(o["send_us"] + o["recv_us"], 1))
            report.add(f"{label}: bytes on the wire", w["bytes"], peer="pickle+zlib+Fernet",
                       peer_value=o["bytes"])
    report.setup.append("One process; time.process_time around each side; TLS 1.3 "
                        "(AES-256-GCM) after one handshake; Fernet key from pysyncobj's "
                        "getEncryptor.")
    report.notes.append("gnomon/peer below 1 means the new wire costs less CPU per message.")
    return report
