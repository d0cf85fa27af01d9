"""Plumbing shared across the package: randomness every rank draws alike from
a hash of global ids (:mod:`~pyg_dist.utils.hashing`,
:mod:`~pyg_dist.utils.dropout`), option records
(:mod:`~pyg_dist.utils.options`) and the import paths of earlier releases
(:mod:`~pyg_dist.utils.moved`)."""
