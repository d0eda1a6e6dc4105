"""Durable run directories: restart a distributed private run without spending privacy twice.

A run directory (``checkpoint_dir=`` of :meth:`dpopt.distributed.admm.PrivateADMM.run`) holds

``run.json``
    Public: the run id, the run's configuration fingerprint (schedules, topology, node sizes, ...),
    the rounds checkpointed and whether the run completed.  A resume with a different
    configuration is refused.
``key``
    **Secret** (mode 0600): the run's noise key.  Every noise draw is a function of (key, node,
    round), so whoever holds the key and the released messages can recompute the noise and
    remove it: keep the directory as private as the data.  It is written (and fsynced) before the
    first noise is drawn, for every ``rng`` (with ``rng="secure"`` or ``None`` the key comes from
    the operating system's CSPRNG and this file is its only copy).
``state.npz``
    The per-node state (primal and dual vectors) and its round, replaced atomically (write to a
    temporary file, fsync, rename, fsync the directory) every ``checkpoint_every`` rounds.
``released.log``
    Append-only log of every released message: one record per round (round number, shape,
    SHA-256 and the float64 bytes of all nodes' primal vectors, or only the SHA-256 with
    ``checkpoint_log="digests"`` for very large networks), fsynced before the next round.

After a crash the run resumes from ``state.npz`` with the stored key, replays the rounds between
the checkpoint and the last logged round (the same noise, hence the same messages, which are
checked against the log; a mismatch stops the run), and continues.  No fresh noise is ever drawn
for a released round.  A torn record at the end of the log (crash while writing) is dropped.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import struct
import uuid
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from dpopt.exceptions import DPOptError, InvalidParameterError

__all__ = ["CheckpointError", "RunStore", "check_run_options", "fingerprint_arrays"]

Array = NDArray[np.float64]

_MAGIC = b"DPRL"
_HEAD = struct.Struct("<4sqqqq32s")  # magic, round, rows, cols, flag (0 full, 1 digest only), sha256
_FORMAT = 1


class CheckpointError(DPOptError, RuntimeError):
    """A run directory cannot be used: another configuration, a corrupt file, or a replay mismatch."""


def fingerprint_arrays(*arrays: Any) -> str:
    """SHA-256 of arrays' shapes and bytes (a public configuration's fingerprint)."""
    h = hashlib.sha256()
    for a in arrays:
        if a is None:
            h.update(b"none")
            continue
        arr = np.ascontiguousarray(a)
        h.update(str(arr.dtype).encode() + str(arr.shape).encode())
        h.update(arr.tobytes())
    return h.hexdigest()


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _atomic_write(path: Path, data: bytes, mode: int = 0o644) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def check_run_options(checkpoint_every: Any, checkpoint_log: Any) -> None:
    """The run-directory options of :meth:`~dpopt.distributed.admm.PrivateADMM.run`, checked by name.

    ``checkpoint_every``: a positive number of rounds, or None for no periodic checkpoint (a failed
    worker then replays from where the run started); 0 or less is refused (it used to switch the
    checkpoints off silently).  ``checkpoint_log``: ``"messages"`` or ``"digests"``.
    """
    if checkpoint_log not in ("messages", "digests"):
        raise InvalidParameterError("checkpoint_log: must be 'messages' or 'digests'")
    if checkpoint_every is not None and (
        isinstance(checkpoint_every, bool) or not isinstance(checkpoint_every, int) or checkpoint_every < 1
    ):
        raise InvalidParameterError(
            "checkpoint_every: must be a positive number of rounds; pass None to disable periodic "
            "checkpoints (a failed worker then replays from where the run started)"
        )


class RunStore:
    """One run directory (see the module docstring).

    Parameters
    ----------
    directory : path
        Created (mode 0700) when missing.
    config : dict
        The run's public configuration (JSON-able); a resumed run must present the same.
    resume : bool
        False: the directory must not hold a run (never overwrite a crashed run's key).  True:
        continue the run stored there, or start one when the directory holds none.
    """

    def __init__(self, directory: str | os.PathLike[str], config: dict[str, Any], *, resume: bool) -> None:
        self.path = Path(directory)
        if self.path.exists() and not self.path.is_dir():
            raise InvalidParameterError(
                f"checkpoint_dir: {str(self.path)!r} is a file, not a directory; pass a directory (created "
                "when missing) or None for no run directory"
            )
        try:
            self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:  # a parent that is a file, no permission, read-only file system
            raise InvalidParameterError(
                f"checkpoint_dir: cannot create the directory {str(self.path)!r} ({exc.strerror or type(exc).__name__})"
            ) from None
        self._meta_path = self.path / "run.json"
        self._key_path = self.path / "key"
        self._state_path = self.path / "state.npz"
        self._log_path = self.path / "released.log"
        config = json.loads(json.dumps(config))  # normalise (tuples -> lists)
        if self._meta_path.exists():
            if not resume:
                raise CheckpointError(
                    f"checkpoint_dir {str(self.path)!r} already holds a run; pass resume=True to continue "
                    "it (a fresh run there would lose the stored key) or use an empty directory"
                )
            meta = self._read_meta()
            stored = meta.get("config", {})
            if stored != config:
                diff = sorted(k for k in set(stored) | set(config) if stored.get(k) != config.get(k))
                raise CheckpointError(
                    f"checkpoint_dir {str(self.path)!r} holds a run with another configuration "
                    f"(differs in: {', '.join(diff)}); resume it with the same settings and data"
                )
            self.meta = meta
            self.resumed = True
        else:
            self.meta = {"format": _FORMAT, "run_id": uuid.uuid4().hex, "config": config, "completed": False}
            self._write_meta()
            self.resumed = False

    # -- metadata ---------------------------------------------------------------------------------

    def _read_meta(self) -> dict[str, Any]:
        try:
            meta = json.loads(self._meta_path.read_text())
        except (OSError, ValueError) as err:
            raise CheckpointError(f"checkpoint_dir: run.json cannot be read ({type(err).__name__})") from None
        if meta.get("format") != _FORMAT:
            raise CheckpointError("checkpoint_dir: run.json has an unknown format version")
        return dict(meta)

    def _write_meta(self) -> None:
        _atomic_write(self._meta_path, json.dumps(self.meta, indent=1, sort_keys=True).encode())

    @property
    def run_id(self) -> str:
        """Public identifier of the run (stable across resumes)."""
        return str(self.meta["run_id"])

    @property
    def completed(self) -> bool:
        return bool(self.meta.get("completed", False))

    def mark(self, **fields: Any) -> None:
        """Record public facts about the run in run.json (atomically)."""
        self.meta.update(fields)
        self._write_meta()

    # -- the secret key ---------------------------------------------------------------------------

    def key(self) -> tuple[int, int] | None:
        """The stored noise key, or None before one was written."""
        if not self._key_path.exists():
            return None
        try:
            data = json.loads(self._key_path.read_text())
            return int(data["key"][0]), int(data["key"][1])
        except (OSError, ValueError, KeyError, IndexError, TypeError):
            raise CheckpointError("checkpoint_dir: the key file is corrupt") from None

    def save_key(self, key: tuple[int, int]) -> None:
        """Write the key (mode 0600, fsynced) before any noise is drawn with it."""
        _atomic_write(self._key_path, json.dumps({"key": [int(key[0]), int(key[1])]}).encode(), mode=0o600)

    # -- state ------------------------------------------------------------------------------------

    def save_state(self, round_: int, arrays: dict[str, Array]) -> None:
        """Replace the checkpoint by the state after ``round_`` rounds (atomically)."""
        import io

        buf = io.BytesIO()
        payload: dict[str, Any] = {"round": np.array(round_, dtype=np.int64), **arrays}
        np.savez(buf, **payload)
        _atomic_write(self._state_path, buf.getvalue(), mode=0o600)
        self.mark(checkpoint_round=int(round_))

    def load_state(self) -> tuple[int, dict[str, Array]] | None:
        """``(round, arrays)`` of the last checkpoint, or None."""
        if not self._state_path.exists():
            return None
        try:
            with np.load(self._state_path, allow_pickle=False) as z:
                arrays = {k: np.array(z[k]) for k in z.files if k != "round"}
                return int(z["round"]), arrays
        except (OSError, ValueError, KeyError) as err:
            raise CheckpointError(
                f"checkpoint_dir: state.npz cannot be read ({type(err).__name__})"
            ) from None

    # -- the released-message log -----------------------------------------------------------------

    def append_release(self, round_: int, models: Array, *, full: bool = True) -> bytes:
        """Append round ``round_``'s released vectors (or only their digest) to the log; fsync; return the digest."""
        arr = np.ascontiguousarray(models, dtype="<f8")
        data = arr.tobytes()
        digest = hashlib.sha256(data).digest()
        flag = 0 if full else 1  # 1: the record holds the digest only
        head = _HEAD.pack(_MAGIC, int(round_), arr.shape[0], arr.shape[1], flag, digest)
        fd = os.open(self._log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, head + (data if full else b""))
            os.fsync(fd)
        finally:
            os.close(fd)
        return digest

    def released(self) -> dict[int, tuple[bytes, Array | None]]:
        """Every logged round: ``(sha256 of its vectors, the vectors or None for digest-only records)``.

        A torn last record (crash while writing) is cut off.
        """
        out: dict[int, tuple[bytes, Array | None]] = {}
        if not self._log_path.exists():
            return out
        data = self._log_path.read_bytes()
        pos = 0
        good = 0
        while pos + _HEAD.size <= len(data):
            magic, rnd, rows, cols, flag, digest = _HEAD.unpack_from(data, pos)
            if magic != _MAGIC or rows < 0 or cols < 0 or flag not in (0, 1):
                raise CheckpointError("checkpoint_dir: released.log is corrupt")
            end = pos + _HEAD.size + (8 * rows * cols if flag == 0 else 0)
            if end > len(data):
                break  # torn record
            arr = None
            if flag == 0:
                payload = data[pos + _HEAD.size : end]
                if hashlib.sha256(payload).digest() != digest:
                    if end == len(data):
                        break  # torn last record
                    raise CheckpointError("checkpoint_dir: released.log is corrupt (a record's hash fails)")
                arr = np.frombuffer(payload, dtype="<f8").reshape(rows, cols).astype(np.float64)
            out[int(rnd)] = (bytes(digest), arr)
            pos = good = end
        if good < len(data):
            with open(self._log_path, "r+b") as fh:
                fh.truncate(good)
                fh.flush()
                os.fsync(fh.fileno())
        return out

    def __repr__(self) -> str:
        return f"RunStore({str(self.path)!r}, run_id={self.run_id}, resumed={self.resumed})"
