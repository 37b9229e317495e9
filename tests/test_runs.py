"""The run folder layer: atomic writes, checkpoints whose sha256 is checked on load, the lock."""

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from fedstream.errors import ConfigError
from fedstream.runs.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from fedstream.runs.files import atomic_write
from fedstream.runs.folder import RunFolder
from fedstream.runs.torch_checkpoint import load_torch, save_torch


def test_atomic_write_replaces_and_leaves_no_temporary_file(tmp_path):
    path = atomic_write(tmp_path / "a.json", "one")
    atomic_write(path, b"two")
    assert path.read_bytes() == b"two" and os.listdir(tmp_path) == ["a.json"]


def test_npz_checkpoint_round_trip_and_a_damaged_one_is_refused_naming_the_file(tmp_path):
    path = tmp_path / "checkpoint.npz"
    state = {"w": np.arange(6, dtype=np.float32).reshape(2, 3)}
    save_checkpoint(path, state, {"round": 3})
    loaded, meta = load_checkpoint(path)
    assert meta == {"round": 3} and np.array_equal(loaded["w"], state["w"])
    np.savez(path, w=state["w"] + 1, __meta__=np.frombuffer(b'{"round": 3}', dtype=np.uint8),
             __sha256__=np.load(path)["__sha256__"])  # content changed, hash kept
    with pytest.raises(CheckpointError, match=r"checkpoint.npz: checkpoint is damaged: its content does not"):
        load_checkpoint(path)
    np.savez(path, w=state["w"], __meta__=np.frombuffer(b'{"round": 3}', dtype=np.uint8))  # before hashes
    with pytest.raises(CheckpointError, match="holds no integrity hash"):
        load_checkpoint(path)
    path.write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(ConfigError, match="checkpoint.npz: checkpoint is damaged or not a fedstream"):
        load_checkpoint(path)


def test_torch_checkpoint_round_trip_and_a_damaged_one_is_refused(tmp_path):
    path = tmp_path / "checkpoint.pt"
    payload = {"format": 1, "rows": [{"a": 1.0}], "w": torch.arange(1000, dtype=torch.float32)}
    save_torch(path, payload)
    loaded = load_torch(path)
    assert loaded["rows"] == payload["rows"] and torch.equal(loaded["w"], payload["w"])
    wrapped = torch.load(path, weights_only=True)
    body = wrapped["body"].clone()
    body[-100] ^= 1  # one bit of the payload
    torch.save(wrapped | {"body": body}, path)
    with pytest.raises(CheckpointError, match=r"checkpoint.pt: checkpoint is damaged"):
        load_torch(path)
    torch.save(payload, path)  # a checkpoint of before the hash
    with pytest.raises(CheckpointError, match="holds no integrity hash"):
        load_torch(path)


def test_torch_checkpoint_of_a_gpu_run_loads_on_the_cpu(tmp_path, monkeypatch):
    """Tensors saved from another device (here: every storage tagged "cuda:0", as a CUDA run's are)
    load onto the CPU; the parties then move them to the run's device."""
    path = tmp_path / "checkpoint.pt"
    with monkeypatch.context() as m:
        m.setattr(torch.serialization, "location_tag", lambda storage: "cuda:0")
        save_torch(path, {"w": torch.arange(4.0)})
    loaded = load_torch(path)
    assert loaded["w"].device == torch.device("cpu") and loaded["w"].tolist() == [0.0, 1.0, 2.0, 3.0]


def test_a_second_process_cannot_take_the_lock_and_is_told_the_holders_pid(tmp_path):
    folder = RunFolder(tmp_path / "run")
    with folder:
        code = ("import sys; from fedstream.runs.folder import RunFolder\n"
                "try:\n    RunFolder(sys.argv[1]).lock()\nexcept Exception as e:\n    print(e)")
        out = subprocess.run([sys.executable, "-c", code, str(folder.path)], capture_output=True, text=True,
                             env=os.environ | {"PYTHONPATH": os.pathsep.join(sys.path)}).stdout
        assert f"in use by another run (process {os.getpid()})" in out
    RunFolder(tmp_path / "run").lock()  # released: free again
