"""A run killed while torch's extension builder held its lock must not hang every later run.

DeepSpeed's CPU backend used to JIT-build its shared-memory comm op at every process start, under
``TORCH_EXTENSIONS_DIR/<py>_cpu/deepspeed_shm_comm/lock``; a SIGKILL in that window (the kill chains
hit it) left the lock file, and every later training process waited on it forever.
"""
import os
import subprocess
import sys

INIT = "from prl.training.distributed import init_distributed; print('RANKS', *init_distributed())"


def test_training_starts_beside_a_stale_extension_build_lock(tmp_path):
    from torch.utils.cpp_extension import _get_build_directory

    env = {k: v for k, v in os.environ.items() if k not in {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT"}}
    env.update(TORCH_EXTENSIONS_DIR=str(tmp_path), DS_ACCELERATOR="cpu")
    os.environ["TORCH_EXTENSIONS_DIR"], saved = str(tmp_path), os.environ.get("TORCH_EXTENSIONS_DIR")
    try:
        build_dir = _get_build_directory("deepspeed_shm_comm", verbose=False)
    finally:
        if saved is None:
            del os.environ["TORCH_EXTENSIONS_DIR"]
        else:
            os.environ["TORCH_EXTENSIONS_DIR"] = saved
    lock = os.path.join(build_dir, "lock")
    open(lock, "w").close()  # what a process killed mid-build leaves behind

    r = subprocess.run([sys.executable, "-c", INIT], env=env, capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "RANKS 0 1" in r.stdout
    assert os.path.exists(lock)  # left alone: nothing waited on it
