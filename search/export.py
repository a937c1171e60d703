"""The exports, under their former name: an alias of the :mod:`export` package.

>>> from search import export
>>> export.get("verl") is __import__("export").get("verl")
True
"""

from export import *  # noqa: F403
from export import __all__ as __all__
