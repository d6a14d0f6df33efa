"""``benchmarks.deep_ledger``'s settings: the benchmark's, with a year of runs kept.

The retention (R32, ``DURABLEBEAT_RETENTION``, a month by default) is set past the oldest
run the benchmark writes (357 days before the last week): beat's pruning runs as it does in
production, finds nothing old enough, and the history stays as deep as it was filled.
"""

import datetime as dt

from benchmarks.settings import *  # noqa: F403

DURABLEBEAT_RETENTION = dt.timedelta(days=400)
