"""The test command's scheduling: pytest-xdist keeps each group on one worker.

The README's test command runs pytest-xdist with ``--dist loadgroup``
(pyproject), and tests/conftest.py puts each module that defines a
module-scoped fixture (a search, the validation cases, an enumeration) in a
group of its own, so one worker builds that fixture once. pytest-xdist sends a
group by the ``@group`` suffix it writes into each grouped test's node id;
pytest 9.2 keeps node ids where pytest-xdist 3.8 does not write, and then every
test goes out alone and every worker builds the fixtures again (on 2 cores,
three workers: 828-850 s against 808 s, 1,580 s of CPU against 1,470 s). The
test extra pins ``pytest<9.2``.
"""

import pytest


@pytest.mark.xdist_group("scheduling")
def test_grouped_tests_carry_their_group_to_the_scheduler(request):
  if not getattr(request.config.option, "loadgroup", False):
    pytest.skip("checks a pytest-xdist --dist loadgroup run (the README's test command)")
  assert request.node.nodeid.endswith("@scheduling"), request.node.nodeid
  grouped = [item for item in request.session.items
             if item.get_closest_marker("xdist_group") is not None]
  lost = [item.nodeid for item in grouped if "@" not in item.nodeid.rpartition("]")[2]]
  assert not lost, (f"{len(lost)} grouped tests are scheduled alone (first: {lost[0]}); "
                    f"pytest {pytest.__version__} with this pytest-xdist does not group")
