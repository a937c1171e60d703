"""Implementation of :mod:`export`: ``base`` (the interface), ``common``
(a plan read as integers, pools as nodes, shared refusals), one module per
framework, ``registry`` and ``planfile``."""
