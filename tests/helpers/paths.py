"""Where the test data lives."""

from pathlib import Path

TESTS = Path(__file__).resolve().parent.parent
REPO = TESTS.parent
FIXTURES = TESTS / "fixtures"
#: The developers' shared data folder beside the checkout (absent on a user's machine and
#: in a fresh clone: tests that need it skip).
SHARED_DATA = REPO.parent / "shared" / "data"
