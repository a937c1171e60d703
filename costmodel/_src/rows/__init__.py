"""Batches of plans scored row by row: each stage costed once per distinct input
(row grouping by hash or by labels, found by walking the traced program).
Internal: the search reads it through :mod:`costmodel.internal`."""
