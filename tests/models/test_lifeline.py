"""models.lifeline: the child's end of the pipe survives the child's own standard streams."""
import subprocess
import sys

_CLOSED_STREAMS = """
import os, sys
sys.path[:0] = {paths!r}
os.close(0); os.close(2)
from models.lifeline import open_lifeline
read, write = open_lifeline()
print(read, write, os.get_inheritable(read))
"""


def test_the_childs_end_is_never_a_standard_stream():
    """A parent started with stdin and stderr closed gets the lowest free descriptors from
    os.pipe(); a child started with its own stdin would have its lifeline replaced by it (and
    read its job as the parent's death)."""
    out = subprocess.run([sys.executable, "-c", _CLOSED_STREAMS.format(paths=sys.path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    read, write, inheritable = out.stdout.split()
    assert int(read) > 2 and inheritable == "False"
