"""What this session's own look found: each test failed before its fix.

A module-scoped fixture is made before the per-test fixture that points a test's checkpoints, history and caches at a
temporary home, so a session such a fixture trained autosaved into the repository's own checkpoints/
(tests/test_report.py's left ./checkpoints/autosave after every run of the suite): the same dirs are now set once for
the whole run too, before any shared fixture.
"""

from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def shared_session():
    from minitf_repl.session import Session

    return Session(data_spec="sort:4")


def test_a_session_made_by_a_shared_fixture_saves_outside_the_repository(shared_session):
    where = shared_session.checkpoint_dir.resolve()
    assert not where.is_relative_to(REPOSITORY), where
    assert not where.is_relative_to(Path.cwd().resolve()), where
