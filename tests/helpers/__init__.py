"""What the tests (and bench/) share: ports, binaries, waits, manifests, the emulator's ground truth.

Import it as `tests.support.<module>` (the repository root is on sys.path: the
root conftest.py lives there, and bench/ scripts put it there). Each module is
small and imports no fixture; a layer's own helpers stay in its folder
(wf_support.py, obs_support.py, ...), which re-export the names they used to define.
"""
