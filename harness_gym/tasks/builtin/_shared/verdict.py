"""Signed verdicts, for graders that run code of the workspace (standard library only).

The host writes a fresh key to ``GRADER/.harness-gym-key/.verdict-key`` (the one writable
subfolder of the grader's read-only folder) for a task with ``signed_verdict: true``
and accepts only a stdout line signed with it. A grader calls :func:`take_key` first, before
anything of the workspace runs: it makes this process non-dumpable (no process of the same user
may read its memory or open its descriptors through /proc) and removes the key file, so the
workspace's code can neither read the key nor sign a verdict of its own.
"""

import hashlib
import hmac
import json
import os

KEY_DIR = ".harness-gym-key"  # GRADER_KEY_DIR of sandboxes/base.py: keep the two identical
KEY_FILE = ".verdict-key"


def not_dumpable():
    """PR_SET_DUMPABLE 0 (a no-op where prctl or ctypes is unavailable, e.g. an image without libffi;
    there the grader stays dumpable and relies on the sandbox's ptrace filter)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)
    except (ImportError, OSError, AttributeError):
        pass


def take_key(folder):
    """The key (None when the host gave none, e.g. a grader run by hand), removed from ``folder``."""
    not_dumpable()
    path = os.path.join(folder, KEY_DIR, KEY_FILE)
    if not os.path.exists(path):
        return None
    with open(path, "rb") as handle:
        key = handle.read().strip()
    os.remove(path)  # an error here ends the grading: never run workspace code beside the key
    return key


def sign(key, reward, breakdown):
    """HMAC-SHA256 of the canonical verdict (the host computes the same)."""
    body = json.dumps({"reward": reward, "breakdown": breakdown}, sort_keys=True, separators=(",", ":"))
    return hmac.new(key, body.encode(), hashlib.sha256).hexdigest()


def print_verdict(key, reward, breakdown):
    verdict = {"reward": reward, "breakdown": breakdown}
    if key is not None:
        verdict["signature"] = sign(key, reward, breakdown)
    print(json.dumps(verdict), flush=True)
