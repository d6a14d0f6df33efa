"""durablebeat: a Celery beat scheduler whose "when next" lives in the database.

See README.md, docs/ and the behaviour contract (docs/CONTRACT.md) for the rules (R1...) the
code follows.
"""

__version__ = "0.1.0"
