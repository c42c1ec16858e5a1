"""pytest's configuration for axle's Python tests (python/tests).

`make test` runs each test_*.py file as a ctest entry (`python.test_device`, ...) with the
venv's python, the venv `make python` makes (scripts/python-env.sh); by hand:

    make python
    ~/.cache/axle/venv-torch-2.15.0/bin/python -m pytest python/tests -q

Nothing is skipped here: a test that cannot run fails.
"""
import pathlib
import sys

import pytest


@pytest.fixture(scope="session")
def V():
    """The virtual environment running the tests (make python's, $AXLE_VENV): its root."""
    return pathlib.Path(sys.prefix)
