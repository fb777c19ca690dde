"""atomic.py — every file oomlab's Python code writes is written whole or not at all: a
temporary file in the destination's folder, flushed and fsynced, then renamed over the
destination (os.replace is atomic on one file system). A special file (/dev/stdout, a
FIFO) is written in place. Permissions follow the umask, as open() would.
"""
import json
import os
import stat
import tempfile
from pathlib import Path


def _umask_mode():
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def write_bytes_atomic(path, data: bytes):
    path = Path(path)
    if path.exists() and not stat.S_ISREG(path.stat().st_mode):   # /dev/stdout, a FIFO: in place
        with open(path, "wb") as f:
            f.write(data)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.resolve().parent, prefix="." + path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, _umask_mode())   # mkstemp creates 0600
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def write_text_atomic(path, text: str):
    write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path, doc, indent=1):
    """Strict JSON (a NaN or an infinity is an error, never a token), with a final newline."""
    write_text_atomic(path, json.dumps(doc, indent=indent, allow_nan=False) + "\n")


def save_fig_atomic(fig, path):
    """A matplotlib figure as a PNG without timestamp metadata (deterministic), then closed."""
    import matplotlib.pyplot as plt
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix="." + path.name + ".", suffix=".tmp")
    os.close(fd)
    try:
        fig.savefig(tmp, format="png", dpi=110, metadata={"Software": None})
        os.chmod(tmp, _umask_mode())
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    finally:
        plt.close(fig)
