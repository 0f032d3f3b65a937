"""Fixtures every test module may use.

`transformers` is the test-only reference implementation: a test that
compares against it takes this fixture and is skipped, with the reason, where
transformers is not installed. The rest of its module still runs.
"""

import pytest


@pytest.fixture(scope="session")
def transformers():
    return pytest.importorskip("transformers", reason="transformers is the test-only reference implementation")
