"""Plumbing shared across the package: randomness every rank draws alike from
a hash of global ids (:mod:`~pyg_dist.utils.hashing`,
:mod:`~pyg_dist.utils.dropout`), atomic files (:mod:`~pyg_dist.utils.files`),
labels as input (:mod:`~pyg_dist.utils.labels`) and the process's memory
(:mod:`~pyg_dist.utils.memory`)."""
